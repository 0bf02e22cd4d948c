// Store benchmarks (issue "Foundation"). Prints one figure per line.
//   node --import tsx test/bench/store.bench.ts [writes|coldstart|bytes|converge|all]
// `coldstart` builds a 10k objects × 50 revisions database (≈1 min), then measures a fresh
// process opening it.
import '../../src/polyfill.ts'
import { execFileSync, spawnSync } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openStore } from '../../src/store/store.ts'
import { pod, seededBytes } from '../helpers/store.ts'

const which = process.argv[2] ?? 'all'
const tmp = () => mkdtempSync(join(tmpdir(), 'orc-bench-'))
const dirSize = (d: string) => readdirSync(d).reduce((n, f) => n + statSync(join(d, f)).size, 0)

async function writes(inflight: number, n = 10000) {
  const d = tmp()
  const s = await openStore({ dir: d })
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
}

async function coldstart() {
  const d = tmp()
  const dir = join(d, 'db')
  if (process.argv[3] !== 'open') {
    const s = await openStore({ dir, sync: false, randomBytes: seededBytes(1) })
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
    const res = spawnSync(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname, 'coldstart', 'open', dir], { encoding: 'utf8' })
    process.stdout.write(res.stdout)
    process.stderr.write(res.stderr)
    console.log(`database size for 10k objects x 50 revisions (MB): ${(dirSize(dir) / 1e6).toFixed(1)}`)
    rmSync(d, { recursive: true, force: true })
    return
  }
  const openDir = process.argv[4]!
  const t0 = performance.now()
  const s = await openStore({ dir: openDir })
  const n = s.list('Pod').length
  const ms = performance.now() - t0
  if (global.gc) global.gc()
  console.log(`cold start to serving reads, 10k objects x 50 revisions (ms): ${Math.round(ms)} (${n} objects listed)`)
  console.log(`RSS after cold start (MB): ${Math.round(process.memoryUsage().rss / 1e6)}`)
  await s.close()
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
    batch.push(s.patch({ kind: 'Pod', namespace: 'default', name: `p${i}` }, [{ path: ['status', 'phase'], value: `phase-${r}` }], { author: 'controller:lifecycle', now: ++t }))
    if (batch.length >= 200) await Promise.all(batch.splice(0))
  }
  await Promise.all(batch)
  // default policy: contents of the last 50 revisions per object kept, older folded to metadata
  const res = await s.compact(t + 31 * 86400000)
  const after = dirSize(dir)
  await s.close()
  console.log(`stored bytes per one-field revision after compaction (default policy, ${res.revisionsCompacted} of ${revs} folded): ${Math.round((after - base) / revs)}`)
  // with every revision's content kept (compaction of the document log only)
  const d2 = tmp()
  const s2 = await openStore({ dir: join(d2, 'db'), randomBytes: seededBytes(3) })
  for (let i = 0; i < objects; i++) await s2.apply(pod(`p${i}`), { author: 'user:bench', now: 0 })
  await s2.compact(1)
  const base2 = dirSize(join(d2, 'db'))
  for (let r = 0; r < revs; r++) {
    batch.push(s2.patch({ kind: 'Pod', namespace: 'default', name: `p${r % objects}` }, [{ path: ['status', 'phase'], value: `phase-${r}` }], { author: 'controller:lifecycle', now: ++t }))
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
  const A = await openStore({ dir: dA, randomBytes: seededBytes(4) })
  const B = await openStore({ dir: dB, randomBytes: seededBytes(5) })
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
  await writes(1, 2000)
  await writes(64)
}
if (which === 'coldstart' || which === 'all') await coldstart()
if (which === 'bytes' || which === 'all') await bytes()
if (which === 'converge' || which === 'all') await converge()
void execFileSync
