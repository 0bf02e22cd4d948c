import assert from 'node:assert/strict'
import { test } from 'node:test'
import { MemoryLevel } from 'memory-level'
import { OrcError } from '../../../src/model/index.ts'
import { decodeUpdateMessage } from '../../../src/store/codec.ts'
import { openStore, type Store } from '../../../src/store/store.ts'
import { seededBytes } from '../../helpers/random.ts'
import { pod } from '../../helpers/store.ts'
import { nodeObject, Rng, type TestNode, testNode, verifierOf } from './trust-helpers.ts'

// Honest replicas only, many writers at once, messages dropped, reordered, relayed and repaired by
// anti-entropy, tombstones pruned, replicas restarted: no replica may ever refuse an honest message
// as anything but lagging ('unresolved'), and once every pair has synced all replicas are equal.
// A refusal of an honest message that is not lagging (unbound, unauthorized, schema) is a
// replica's wrong judgement, and a sync it refuses keeps it from converging for good (the chaos
// test's "no convergence"). Replay with ORC_FUZZ_SEED=<seed> (ORC_FUZZ_RUNS=1; the pods workload
// runs seeds from ORC_FUZZ_SEED + 1000, the Node one from + 2000: subtract that), print the last N
// steps of a failing run with ORC_FUZZ_TRACE=N, turn parts off with ORC_FUZZ_OFF=prune,restart,relay.
const SEED = Number(process.env.ORC_FUZZ_SEED ?? 20261205)
const RUNS = Number(process.env.ORC_FUZZ_RUNS ?? 12)
const STEPS = Number(process.env.ORC_FUZZ_STEPS ?? 400)
const OFF = new Set((process.env.ORC_FUZZ_OFF ?? '').split(','))

const NS = 'fuzz'
// Writes change a field, add or remove one (labels.x), and add or remove a whole nested map
// (annotations): concurrent writes then replace each other's values and maps.
function policy(name: string, n: number, shape = 0): any {
  return {
    apiVersion: 'orc/v1',
    kind: 'SecurityPolicy',
    metadata: {
      name,
      namespace: NS,
      labels: shape & 1 ? { w: String(n), x: String(n % 3) } : { w: String(n) },
      ...(shape & 2 ? { annotations: { a: String(n % 2), ...(shape & 4 ? { b: 'y' } : {}) } } : {}),
    },
    spec: { allow: ['hostPath'], description: `w${n}`, selector: { names: ['none'], matchLabels: { chaos: 'none' } } },
  }
}

interface Replica {
  node: TestNode
  db: MemoryLevel<string, Uint8Array>
  store: Store
}

async function open(r: Omit<Replica, 'store'>, members: readonly TestNode[], refusals: string[], seed: number): Promise<Store> {
  const s = await openStore({
    dir: `mem-${r.node.name}`,
    db: r.db as never,
    randomBytes: seededBytes(seed),
    sync: false,
    signer: r.node.signer,
    verifier: verifierOf(members),
    snapshotEvery: 7,
  } as never)
  s.onRefused((reason, detail) => {
    if (reason !== 'unresolved') refusals.push(`${r.node.name}: ${reason}: ${detail}`)
  })
  return s
}

type Workload = (store: Store, node: string, rng: Rng, n: number, now: number) => Promise<unknown>

/** Users' policies: a new object, or one of a few hot ones replaced (fields and maps come and go) or deleted. */
const policies: Workload = async (store, _node, rng, n, now) => {
  const hot = `hot-${rng.int(3)}`
  const k = rng.int(10)
  if (k < 2) return store.apply(policy(`u-${n}`, n), { author: 'user:admin', now })
  if (k < 3) return store.delete({ kind: 'SecurityPolicy', namespace: NS, name: hot }, { author: 'user:admin', now })
  return store.apply(policy(hot, n, rng.int(8)), { author: 'user:admin', now })
}

/**
 * Pods as a cluster writes them: users apply and delete; each node's scheduler binds an unbound pod
 * to its own node (two at once bind one pod to two nodes: Yjs keeps one); the lifecycle of the node
 * a pod is bound to (as that node sees it) writes its phase.
 */
const podWrites = new Map<string, number>()
const pods: Workload = async (store, node, rng, n, now) => {
  const res = await podWrite(store, node, rng, n, now)
  const a = (res as { revision?: { author?: string } } | undefined)?.revision?.author
  if (a !== undefined) podWrites.set(a, (podWrites.get(a) ?? 0) + 1)
  return res
}
const podWrite: Workload = async (store, node, rng, n, now) => {
  const name = `p${rng.int(4)}`
  const ref = { kind: 'Pod', namespace: 'default', name }
  const cur = store.get(ref) as any
  const k = rng.int(10)
  if (cur === undefined || k < 2) return store.apply(pod(name, `/images/i${n % 3}`), { author: 'user:admin', now })
  if (k < 3) return store.delete(ref, { author: 'user:admin', now })
  if (cur.status?.node === undefined) return store.patch(ref, [{ path: ['status', 'node'], value: node }], { author: 'controller:scheduler', now })
  if (cur.status.node === node)
    return store.patch(ref, [{ path: ['status', 'phase'], value: rng.pick(['Pending', 'Running', 'Failed']) }], { author: 'controller:lifecycle', now })
  return undefined
}

/**
 * Node objects as a cluster writes them: each node its own status (and creates its Node when it has
 * none here), users label nodes, and a node marks another forgotten or back (what `orc node forget`
 * writes on another node's Node).
 */
const nodes: Workload = async (store, node, rng, n, now) => {
  const own = { kind: 'Node', namespace: '', name: node }
  const k = rng.int(10)
  if (store.get(own) === undefined || k === 0) return store.apply(nodeObject(node), { author: 'controller:node', now })
  const other = rng.pick(['a', 'b', 'c', 'd'])
  const ref = { kind: 'Node', namespace: '', name: other }
  if (store.get(ref) === undefined) return undefined
  if (k < 6) return store.patch(own, [{ path: ['status', 'state'], value: rng.pick(['Ready', 'NotReady']) }], { author: 'controller:node', now })
  if (k < 8) return store.patch(ref, [{ path: ['metadata', 'labels', 'zone'], value: `z${n % 3}` }], { author: 'user:admin', now })
  if (other === node) return undefined
  return store.patch(ref, [{ path: ['status', 'forgotten'], value: { at: new Date(now).toISOString(), by: `user:admin`, reason: `r${n % 2}` } }], {
    author: 'controller:node',
    now,
  })
}

async function runOnce(seed: number, write: Workload): Promise<void> {
  const rng = new Rng(seed)
  const nodes = ['a', 'b', 'c', 'd'].map(testNode)
  const refusals: string[] = []
  const trace: string[] = []
  const who = (id: string | undefined) =>
    id === undefined ? '-' : `${reps.find((r) => id.startsWith(r.store.replicaId))?.node.name ?? '?'}${id.split('.')[1]}`
  const recs = (m: Uint8Array) =>
    decodeUpdateMessage(m)
      .records.map((x) => `${who(x.i)}(${x.k.split('/').pop()} s${x.s} p${who(x.p)} ${x.o})`)
      .join(' ')
  const reps: Replica[] = []
  for (const [i, node] of nodes.entries()) {
    const db = new MemoryLevel<string, Uint8Array>({ keyEncoding: 'utf8', valueEncoding: 'view' })
    const base = { node, db }
    reps.push({ ...base, store: await open(base, nodes, refusals, seed * 10 + i) })
  }
  // Messages in flight, per destination: delivered in any order, some never.
  const inbox = new Map<string, Uint8Array[]>(nodes.map((n) => [n.name, []]))
  const listen = (r: Replica) =>
    r.store.onLocalUpdate((m) => {
      for (const o of reps) if (o !== r && !rng.chance(0.15)) inbox.get(o.node.name)!.push(m)
    })
  for (const r of reps) listen(r)
  const apply = async (r: Replica, m: Uint8Array): Promise<boolean> => {
    trace.push(`${r.node.name} <- ${recs(m)}`)
    try {
      await r.store.applyRemote(m)
      return true
    } catch (err) {
      if (err instanceof OrcError && err.code === 'forbidden') return false
      throw err
    }
  }
  const sync = async (x: Replica, y: Replica) => {
    // Both ways, as /orc/sync/1.0.0 does.
    const toX = await y.store.encodeMissing(x.store.encodeSyncState())
    const toY = await x.store.encodeMissing(y.store.encodeSyncState())
    await apply(x, toX)
    await apply(y, toY)
  }
  let n = 0
  const now = () => 1_800_000_000_000 + n * 1000
  for (let step = 0; step < STEPS; step++) {
    const r = rng.pick(reps)
    const what = rng.int(100)
    if (what < 40) {
      n++
      try {
        const res = (await write(r.store, r.node.name, rng, n, now())) as { revision?: { id: string; author: string; key?: string } | null } | undefined
        if (res?.revision) trace.push(`${r.node.name} writes ${who(res.revision.id)} by ${res.revision.author}`)
      } catch (err) {
        if (!(err instanceof OrcError && (err.code === 'not_found' || err.code === 'conflict'))) throw err
      }
    } else if (what < 75) {
      // Deliver (and maybe relay) a message waiting for r.
      const box = inbox.get(r.node.name)!
      if (box.length === 0) continue
      const m = box.splice(rng.int(box.length), 1)[0]!
      if ((await apply(r, m)) && !OFF.has('relay') && rng.chance(0.3)) for (const o of reps) if (o !== r && rng.chance(0.5)) inbox.get(o.node.name)!.push(m)
    } else if (what < 88) {
      await sync(r, rng.pick(reps.filter((x) => x !== r)))
    } else if (what < 94) {
      if (OFF.has('prune')) continue
      // Prune with every other replica's durable state (as the mesh's stability source gives it).
      const reports = reps.filter((o) => o !== r).map((o) => o.store.encodeStabilityReport())
      if (reports.every((x) => x !== null)) r.store.pruneTombstones(reports as Uint8Array[])
    } else if (what < 97) {
      if (OFF.has('restart')) continue
      // A restart: the store reopened on its database (a new Yjs client).
      await r.store.close()
      r.store = await open(r, nodes, refusals, seed * 10 + 100 + step)
      listen(r)
      inbox.get(r.node.name)!.length = 0
    } else {
      inbox.get(r.node.name)!.length = 0
    }
    if (refusals.length > 0) break
  }
  // Heal: every pair syncs until nothing changes.
  for (let round = 0; round < 4 && refusals.length === 0; round++) for (const x of reps) for (const y of reps) if (x !== y) await sync(x, y)
  if (refusals.length > 0 && process.env.ORC_FUZZ_TRACE) console.log(trace.slice(-Number(process.env.ORC_FUZZ_TRACE)).join('\n'))
  assert.deepEqual(refusals, [], `seed ${seed}: an honest message refused`)
  const digests = reps.map((r) => r.store.stateDigest())
  for (const [i, d] of digests.entries()) assert.equal(d, digests[0], `seed ${seed}: replica ${reps[i]!.node.name} differs from a after the heal`)
  for (const r of reps) await r.store.close()
}

test('honest replicas: concurrent writes, lost and reordered messages, pruning and restarts; nothing refused, all converge', async () => {
  for (let i = 0; i < RUNS; i++) await runOnce(SEED + i, policies)
})

// Each node's scheduler and lifecycle follow what that node sees: two bind one pod at once, and
// a lifecycle reports over a binding another replica has not received (refused there as lagging,
// repaired with the binding). It found three false refusals (docs/decisions.md, 2026-12-05).
test('honest replicas writing pods as a cluster does (users, schedulers, lifecycles): nothing refused, all converge', async () => {
  for (let i = 0; i < RUNS; i++) await runOnce(SEED + 1000 + i, pods)
  // Every kind of writer wrote (the rules this exercises are the scheduler's and the lifecycle's).
  for (const a of ['user:admin', 'controller:scheduler', 'controller:lifecycle'])
    assert.ok((podWrites.get(a) ?? 0) > RUNS, `${a} wrote ${podWrites.get(a) ?? 0} times`)
})

// A periodic full copy over a head that merged a concurrent branch carries its author's changes
// beside it (seed 20263228 was refused on another node's Node without them; main refused about one
// seed in fifteen of this workload, 2026-12-05). With them 300 seeds passed, but not all:
test("honest replicas writing Node objects (their own status, users' labels, another node forgotten): nothing refused, all converge", async () => {
  for (let i = 0; i < RUNS; i++) await runOnce(SEED + 2000 + i, nodes)
})

// Known, not fixed (2026-12-05): a 'forgotten' mark by another node's controller, built on a head
// that held only one of two concurrent revisions, is judged at a replica that merged both as
// setting the Node's state ("node c may not set the state of node/b"). Reported, not failed.
test('honest replicas writing Node objects, seed 20263245', { todo: 'a record over one branch of a merge is judged by the merge (see above)' }, async () => {
  await runOnce(20263245, nodes)
})
