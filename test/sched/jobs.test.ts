// Jobs and CronJobs across three in-process nodes (real signed stores that check every revision on
// receipt, real controllers, no mesh: updates are carried by hand, so partitions and heals are exact).
// What a user would notice: a Job gets exactly `completions` successes however writers change, the
// controllers' writes are accepted by every replica, and a CronJob runs once per tick when connected,
// at most once per side when partitioned, and its runs merge into one Job after the heal.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import pino from 'pino'
import { JobController } from '../../src/agent/jobs/index.ts'
import type { NodeMember } from '../../src/agent/sched/index.ts'
import type { Store } from '../../src/store/store.ts'
import { memStore, nodeObject, type TestNode, testNode } from '../unit/store/trust-helpers.ts'

const log = pino({ level: 'silent' })

interface Sim {
  names: string[]
  stores: Map<string, Store>
  alive: Map<string, Set<string>>
  now: number
  refused: string[]
}

async function cluster(names: string[], seed: number): Promise<Sim> {
  const nodes: TestNode[] = names.map(testNode)
  const sim: Sim = { names, stores: new Map(), alive: new Map(names.map((n) => [n, new Set(names)])), now: Date.parse('2026-06-01T10:00:30Z'), refused: [] }
  let i = 0
  for (const n of nodes) {
    const s = await memStore(n, nodes, { seed: seed + i++ })
    s.onRefused((reason, detail) => sim.refused.push(`${n.name}: ${reason}: ${detail}`))
    sim.stores.set(n.name, s)
    await s.apply(nodeObject(n.name), { author: 'controller:node', now: sim.now })
  }
  await sync(sim)
  return sim
}

/** Anti-entropy between every pair that can see each other. */
async function sync(sim: Sim, groups: string[][] = [sim.names]): Promise<void> {
  for (let round = 0; round < 3; round++)
    for (const g of groups)
      for (const a of g)
        for (const b of g) {
          if (a === b) continue
          const A = sim.stores.get(a)!
          const B = sim.stores.get(b)!
          await B.applyRemote(await A.encodeMissing(B.encodeSyncState()))
        }
}

function members(sim: Sim, me: string): NodeMember[] {
  return sim.names.map((n) => ({
    name: n,
    state: n === me || sim.alive.get(me)!.has(n) ? ('alive' as const) : ('dead' as const),
    ...(n === me ? { self: true } : {}),
    lastSeen: sim.now - 60_000,
  }))
}

function controller(sim: Sim, me: string): JobController {
  return new JobController({
    store: sim.stores.get(me)!,
    nodeName: me,
    members: () => members(sim, me),
    now: () => sim.now,
    setTimeout: () => 0,
    clearTimeout: () => {},
    log,
  })
}

async function passAll(sim: Sim, who: string[] = sim.names): Promise<void> {
  for (const n of who) await controller(sim, n).pass()
}

function partition(sim: Sim, groups: string[][]): void {
  for (const g of groups) for (const n of g) sim.alive.set(n, new Set(g))
}

const podSpec = { containers: [{ name: 'main', image: 'busybox', command: ['true'] }] }

/** What a node's lifecycle would write when a pod ends. */
async function finish(sim: Sim, on: string, pod: string, phase: 'Succeeded' | 'Failed'): Promise<void> {
  // The node runs the pod once its scheduler bound it there; only then does its lifecycle report
  // (a report from a node the pod was never bound to is refused on receipt).
  const store = sim.stores.get(on)!
  const ref = { kind: 'Pod', namespace: 'default', name: pod }
  if (store.get(ref)?.status?.node !== on) await store.patch(ref, [{ path: ['status', 'node'], value: on }], { author: 'controller:scheduler', now: sim.now })
  await store.patch(
    { kind: 'Pod', namespace: 'default', name: pod },
    [
      { path: ['status', 'phase'], value: phase },
      {
        path: ['status', 'containers'],
        value: [{ name: 'main', state: 'exited', restarts: 0, exitCode: phase === 'Succeeded' ? 0 : 1, finishedAt: new Date(sim.now).toISOString() }],
      },
    ],
    { author: 'controller:lifecycle', now: sim.now },
  )
}

const jobPods = (s: Store, job: string) =>
  s
    .list('Pod')
    .filter((p) => p.metadata.labels?.['orc/job'] === job)
    .map((p) => p.metadata.name)
    .sort()

test('a Job reaches exactly its completions while its writer is lost, with every write accepted on receipt', async () => {
  const sim = await cluster(['a', 'b', 'c'], 301)
  const [a, b, c] = ['a', 'b', 'c'].map((n) => sim.stores.get(n)!) as [Store, Store, Store]
  await b.apply(
    { apiVersion: 'orc/v1', kind: 'Job', metadata: { name: 'batch' }, spec: { completions: 3, parallelism: 2, template: { spec: podSpec } } },
    { author: 'user:bob', now: sim.now },
  )
  await sync(sim)
  await passAll(sim)
  await sync(sim)
  // Only the writer (a, first by name) wrote; every replica took its pods and the Job's status.
  for (const s of [a, b, c]) assert.deepEqual(jobPods(s, 'batch'), ['batch-0', 'batch-1'])
  const h0 = await b.history({ kind: 'Pod', namespace: 'default', name: 'batch-0' })
  assert.deepEqual(
    h0.map((r) => [r.op, r.author]),
    [['create', 'controller:job']],
  )
  assert.equal((c.get({ kind: 'Job', namespace: 'default', name: 'batch' })!.status as any).active, 2)
  // batch-0 succeeds; then the writer a is lost (b and c see it dead) before it saw that.
  sim.now += 5000
  await finish(sim, 'c', 'batch-0', 'Succeeded')
  partition(sim, [['a'], ['b', 'c']])
  await sync(sim, [['b', 'c']])
  await passAll(sim, ['b', 'c'])
  await sync(sim, [['b', 'c']])
  assert.deepEqual(jobPods(c, 'batch'), ['batch-0', 'batch-1', 'batch-2'], 'b took over and added one pod, with the next index')
  // batch-1 fails, batch-2 succeeds: one retry, then the last success.
  sim.now += 5000
  await finish(sim, 'b', 'batch-1', 'Failed')
  await finish(sim, 'c', 'batch-2', 'Succeeded')
  await sync(sim, [['b', 'c']])
  await passAll(sim, ['b', 'c'])
  await sync(sim, [['b', 'c']])
  assert.deepEqual(jobPods(b, 'batch'), ['batch-0', 'batch-1', 'batch-2'], 'no retry within the back-off')
  sim.now += 10_000
  await passAll(sim, ['b', 'c'])
  await sync(sim, [['b', 'c']])
  assert.deepEqual(jobPods(b, 'batch'), ['batch-0', 'batch-1', 'batch-2', 'batch-3'])
  sim.now += 5000
  await finish(sim, 'b', 'batch-3', 'Succeeded')
  // a comes back: its stale view merges; one writer (a) again.
  partition(sim, [['a', 'b', 'c']])
  await sync(sim)
  await passAll(sim)
  await sync(sim)
  const st = a.get({ kind: 'Job', namespace: 'default', name: 'batch' })!.status as any
  assert.deepEqual([st.succeeded, st.failed, st.active], [3, 1, 0])
  assert.deepEqual(
    st.conditions.map((x: any) => x.type),
    ['Complete'],
  )
  assert.deepEqual(jobPods(a, 'batch'), ['batch-0', 'batch-1', 'batch-2', 'batch-3'], 'no pod beyond those needed')
  assert.deepEqual(sim.refused, [], 'every replica accepted every controller write')
  const digest = a.stateDigest()
  for (const s of [b, c]) assert.equal(s.stateDigest(), digest)
  // A further pass writes nothing.
  const before = (await a.allRevisions()).length
  await passAll(sim)
  assert.equal((await a.allRevisions()).length, before)
  // Deleting the Job deletes its pods (they are older than the grace).
  sim.now += 31_000
  await c.delete({ kind: 'Job', namespace: 'default', name: 'batch' }, { author: 'user:carol', now: sim.now })
  await sync(sim)
  await passAll(sim)
  await sync(sim)
  for (const s of [a, b, c]) assert.deepEqual(jobPods(s, 'batch'), [])
  assert.deepEqual(sim.refused, [])
})

test('a CronJob runs once per tick when connected, at most once per side when partitioned, one Job after the heal', async () => {
  const sim = await cluster(['a', 'b', 'c'], 401)
  const [a, b, c] = ['a', 'b', 'c'].map((n) => sim.stores.get(n)!) as [Store, Store, Store]
  await c.apply(
    {
      apiVersion: 'orc/v1',
      kind: 'CronJob',
      metadata: { name: 'tick' },
      spec: { schedule: '* * * * *', successfulJobsHistoryLimit: 10, jobTemplate: { spec: { template: { spec: podSpec } } } },
    },
    { author: 'user:carol', now: sim.now },
  )
  await sync(sim)
  const runs = (s: Store) =>
    s
      .list('Job')
      .filter((j) => j.metadata.labels?.['orc/cronjob'] === 'tick')
      .map((j) => j.metadata.name)
      .sort()
  const m1 = Date.parse('2026-06-01T10:01:00Z') / 1000
  // Connected: every node passes several times within the tick; one Job.
  sim.now = m1 * 1000 + 500
  for (let i = 0; i < 3; i++) {
    await passAll(sim)
    await sync(sim)
    sim.now += 2000
  }
  for (const s of [a, b, c]) assert.deepEqual(runs(s), [`tick-${m1}`])
  assert.deepEqual(jobPods(a, `tick-${m1}`), [`tick-${m1}-0`], 'the run has its pod')
  // Partitioned: {a} and {b, c}; each side has a writer and makes the next tick's run once.
  partition(sim, [['a'], ['b', 'c']])
  sim.now = (m1 + 60) * 1000 + 500
  for (let i = 0; i < 3; i++) {
    await passAll(sim)
    await sync(sim, [['a'], ['b', 'c']])
    sim.now += 2000
  }
  assert.deepEqual(runs(a), [`tick-${m1}`, `tick-${m1 + 60}`])
  assert.deepEqual(runs(b), [`tick-${m1}`, `tick-${m1 + 60}`])
  assert.equal(
    (await a.history({ kind: 'Job', namespace: 'default', name: `tick-${m1 + 60}` })).filter((r) => r.op === 'create').length,
    1,
    'side a created it once',
  )
  // Healed: the two creations of one run are one Job (and one pod) everywhere.
  partition(sim, [['a', 'b', 'c']])
  await sync(sim)
  await passAll(sim)
  await sync(sim)
  for (const s of [a, b, c]) {
    assert.deepEqual(runs(s), [`tick-${m1}`, `tick-${m1 + 60}`])
    assert.deepEqual(jobPods(s, `tick-${m1 + 60}`), [`tick-${m1 + 60}-0`])
  }
  const st = a.get({ kind: 'CronJob', namespace: 'default', name: 'tick' })!.status as any
  assert.equal(st.lastScheduleTime, new Date((m1 + 60) * 1000).toISOString())
  assert.deepEqual(sim.refused, [], 'every replica accepted every controller write')
})
