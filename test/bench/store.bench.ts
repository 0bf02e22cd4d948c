// Store benchmarks (issue "Foundation"). Prints one figure per line.
//   node --import tsx test/bench/store.bench.ts [writes|coldstart|bytes|converge|all]
// `coldstart` builds a 10k objects × 50 revisions database (≈1 min), then measures a fresh
// process (bundled like the agent, plain node) opening it.
import '../../src/polyfill.ts'
import { spawnSync } from 'node:child_process'
import { sign as cryptoSign, verify as cryptoVerify, generateKeyPairSync } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { NODE_FLAGS } from '../../src/agent/ops/node-flags.ts'
import type { StoreOptions } from '../../src/store/options.ts'
import { openStore } from '../../src/store/store.ts'
import { pod, seededBytes } from '../helpers/store.ts'
import { etcdWrites } from './etcd.ts'

const which = process.argv[2] ?? 'all'
const tmp = () => mkdtempSync(join(tmpdir(), 'orc-bench-'))
const dirSize = (d: string) => readdirSync(d).reduce((n, f) => n + statSync(join(d, f)).size, 0)

/** etcd in the same run (test/bench/etcd.ts), puts of a value the size of orc's pod manifest. */
async function etcdWritesLogged(inflights: number[]): Promise<Map<number, number>> {
  const r = await etcdWrites(inflights, JSON.stringify(pod('p0')))
  if (!r) return new Map()
  for (const [inflight, rate] of r.rates)
    console.log(`${r.version} durable writes/s (${inflight === 1 ? 2000 : 10000} puts, ${inflight} in flight, same machine): ${rate}`)
  return r.rates
}

// ORC_BENCH_SIGNED=1: stores sign their records and check peers' (docs/security.md), as in a cluster.
const benchKeys = new Map(['a', 'b', 'w'].map((n) => [`peer-${n}`, generateKeyPairSync('ed25519')]))
function trust(name: string): Partial<StoreOptions> {
  if (!process.env.ORC_BENCH_SIGNED) return {}
  const own = benchKeys.get(`peer-${name}`)!
  return {
    signer: { id: `peer-${name}`, sign: (data) => cryptoSign(null, data, own.privateKey) },
    verifier: {
      member: (id) => (benchKeys.has(id) ? { node: id.slice(5) } : undefined),
      verify: (id, data, sig) => cryptoVerify(null, data, benchKeys.get(id)!.publicKey, sig),
    },
  }
}

async function writes(inflight: number, n = 10000): Promise<number> {
  const d = tmp()
  const s = await openStore({ dir: d, ...trust('w') })
  let next = 0
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: inflight }, async () => {
      while (next < n) {
        const i = next++
        await s.apply(pod(`p${i}`), { author: 'user:bench', now: i })
      }
    }),
  )
  const sec = (performance.now() - t0) / 1000
  await s.close()
  rmSync(d, { recursive: true, force: true })
  console.log(`store durable writes/s (${n} pods, ${inflight} in flight, fsync per batch): ${Math.round(n / sec)}`)
  return Math.round(n / sec)
}

async function coldstart() {
  const d = tmp()
  // ORC_BENCH_COLD_DB=<dir>: open that database (built by an earlier run, kept) instead of building one.
  const reuse = process.env.ORC_BENCH_COLD_DB
  const dir = reuse ?? join(d, 'db')
  if (reuse === undefined || !existsSync(reuse)) await buildColdDb(dir)
  await measureColdOpen(dir)
  rmSync(d, { recursive: true, force: true })
}

async function buildColdDb(dir: string) {
  // A single-node store, as `orc up` runs one: it is the document's only replica, so it prunes the
  // tombstones of overwritten fields at every snapshot (docs/architecture.md, "Tombstone pruning").
  // ORC_BENCH_NO_PRUNE=1 measures the same database built without pruning.
  const stability = process.env.ORC_BENCH_NO_PRUNE ? undefined : () => []
  const s = await openStore({ dir, sync: false, randomBytes: seededBytes(1), ...(stability ? { stability } : {}) })
  const objects = 10000
  const revs = 50
  let t = 0
  for (let r = 0; r < revs; r++) {
    const batch: Promise<unknown>[] = []
    for (let i = 0; i < objects; i++) {
      const p = pod(`p${i}`, `/images/app`)
      p.metadata.labels.rev = String(r)
      batch.push(s.apply(p, { author: r % 5 === 0 ? 'user:alice' : 'user:bob', now: ++t }))
      if (batch.length >= 500) await Promise.all(batch.splice(0))
    }
    await Promise.all(batch)
  }
  await s.close()
}

/** The node flags the agent runs with (bin/orc.mjs, install.sh); ORC_BENCH_NODE_FLAGS='' measures plain node. */
function benchNodeFlags(): string[] {
  const env = process.env.ORC_BENCH_NODE_FLAGS
  return env === undefined ? [...NODE_FLAGS] : env.split(' ').filter(Boolean)
}

async function measureColdOpen(dir: string) {
  // The open is measured the way the agent runs: bundled, on plain node (no tsx loader).
  // (inside node_modules/.cache so the bundle's external packages resolve from the repo)
  const bundle = new URL('../../node_modules/.cache/orc-bench/coldstart-open.mjs', import.meta.url).pathname
  const { build } = await import('esbuild')
  await build({
    stdin: {
      resolveDir: new URL('.', import.meta.url).pathname,
      contents: `
        import '../../src/polyfill.ts'
        import { openStore } from '../../src/store/store.ts'
        import { compactHeap } from '../../src/agent/heap.ts'
        const t0 = performance.now()
        const s = await openStore({ dir: process.argv[2] })
        compactHeap() // as the agent does after opening its store
        const n = s.list('Pod').length
        const ms = performance.now() - t0
        await new Promise((r) => setTimeout(r, 1000)) // V8 unmaps freed pages from a background thread
        console.log('cold start to serving reads, 10k objects x 50 revisions (ms): ' + Math.round(ms) + ' (' + n + ' objects listed, ' + s.docStats().structs + ' document structs)')
        console.log('RSS after cold start (MB): ' + Math.round(process.memoryUsage().rss / 1e6) + ' (heap ' + Math.round(process.memoryUsage().heapUsed / 1e6) + ' MB; node flags: ' + (process.execArgv.join(' ') || 'none') + ')')
        await s.close()`,
      loader: 'ts',
    },
    outfile: bundle,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    packages: 'external',
    logLevel: 'warning',
  })
  const res = spawnSync(process.execPath, [...benchNodeFlags(), bundle, dir], { encoding: 'utf8', cwd: new URL('../..', import.meta.url).pathname })
  process.stdout.write(res.stdout)
  process.stderr.write(res.stderr)
  console.log(`database size for 10k objects x 50 revisions (MB): ${(dirSize(dir) / 1e6).toFixed(1)}`)
}

async function bytes() {
  const d = tmp()
  const dir = join(d, 'db')
  const s = await openStore({ dir, randomBytes: seededBytes(2) })
  const objects = 100
  for (let i = 0; i < objects; i++) await s.apply(pod(`p${i}`), { author: 'user:bench', now: 0 })
  await s.compact(1)
  const base = dirSize(dir)
  const revs = 20000
  let t = 1
  const batch: Promise<unknown>[] = []
  for (let r = 0; r < revs; r++) {
    const i = r % objects
    batch.push(
      s.patch({ kind: 'Pod', namespace: 'default', name: `p${i}` }, [{ path: ['status', 'phase'], value: `phase-${r}` }], {
        author: 'controller:lifecycle',
        now: ++t,
      }),
    )
    if (batch.length >= 200) await Promise.all(batch.splice(0))
  }
  await Promise.all(batch)
  // default policy: contents of the last 50 revisions per object kept, older folded to metadata
  const res = await s.compact(t + 31 * 86400000)
  const after = dirSize(dir)
  await s.close()
  console.log(
    `stored bytes per one-field revision after compaction (default policy, ${res.revisionsCompacted} of ${revs} folded): ${Math.round((after - base) / revs)}`,
  )
  // with every revision's content kept (compaction of the document log only)
  const d2 = tmp()
  const s2 = await openStore({ dir: join(d2, 'db'), randomBytes: seededBytes(3) })
  for (let i = 0; i < objects; i++) await s2.apply(pod(`p${i}`), { author: 'user:bench', now: 0 })
  await s2.compact(1)
  const base2 = dirSize(join(d2, 'db'))
  for (let r = 0; r < revs; r++) {
    batch.push(
      s2.patch({ kind: 'Pod', namespace: 'default', name: `p${r % objects}` }, [{ path: ['status', 'phase'], value: `phase-${r}` }], {
        author: 'controller:lifecycle',
        now: ++t,
      }),
    )
    if (batch.length >= 200) await Promise.all(batch.splice(0))
  }
  await Promise.all(batch)
  await s2.compact(t, { keepRevisions: 1e9 })
  console.log(`stored bytes per one-field revision with its content kept: ${Math.round((dirSize(join(d2, 'db')) - base2) / revs)}`)
  await s2.close()
  rmSync(d, { recursive: true, force: true })
  rmSync(d2, { recursive: true, force: true })
}

async function converge() {
  const dA = tmp()
  const dB = tmp()
  const A = await openStore({ dir: dA, randomBytes: seededBytes(4), ...trust('a') })
  const B = await openStore({ dir: dB, randomBytes: seededBytes(5), ...trust('b') })
  for (let i = 0; i < 500; i++) await A.apply(pod(`p${i}`), { author: 'user:a', now: i })
  await B.applyRemote(await A.encodeMissing(B.encodeSyncState()))
  const work = async (s: typeof A, who: string) => {
    const batch: Promise<unknown>[] = []
    for (let k = 0; k < 5000; k++) {
      const p = pod(`p${(k * 7) % 1000}`, `/img/${who}/${k}`)
      batch.push(s.apply(p, { author: `user:${who}`, now: 1000 + k }))
      if (batch.length >= 100) await Promise.all(batch.splice(0))
    }
    await Promise.all(batch)
  }
  await work(A, 'a')
  await work(B, 'b')
  const t0 = performance.now()
  const toB = await A.encodeMissing(B.encodeSyncState())
  const toA = await B.encodeMissing(A.encodeSyncState())
  await B.applyRemote(toB)
  await A.applyRemote(toA)
  const ms = performance.now() - t0
  if (A.stateDigest() !== B.stateDigest()) throw new Error('did not converge')
  console.log(`converge two stores with 5k changes each apart (ms): ${Math.round(ms)} (${((toA.byteLength + toB.byteLength) / 1e6).toFixed(2)} MB exchanged)`)
  await A.close()
  await B.close()
  rmSync(dA, { recursive: true, force: true })
  rmSync(dB, { recursive: true, force: true })
}

if (which === 'writes' || which === 'all') {
  const one = await writes(1, 2000)
  const many = await writes(64)
  const etcd = await etcdWritesLogged([1, 64])
  if (etcd.size) {
    console.log(`orc/etcd ratio, 1 in flight: ${(one / etcd.get(1)!).toFixed(2)}`)
    console.log(`orc/etcd ratio, 64 in flight: ${(many / etcd.get(64)!).toFixed(2)}`)
  }
}
if (which === 'coldstart' || which === 'all') await coldstart()
if (which === 'bytes' || which === 'all') await bytes()
if (which === 'converge' || which === 'all') await converge()
