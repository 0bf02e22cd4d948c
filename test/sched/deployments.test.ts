// PinnedDeployments and bindings across several in-process nodes (real stores, real controllers, no
// mesh: updates are carried by hand, so partitions and heals are exact). What a user would notice:
// concurrent creation from several nodes never duplicates a pod, a rollout keeps the requested split,
// everyNode runs one copy per eligible node, and conflicting bindings end with one node running a pod.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import pino from 'pino'
import { DeploymentController, deploymentWriter } from '../../src/agent/deployments/index.ts'
import { Binder } from '../../src/agent/pods/binder.ts'
import { assignedTo } from '../../src/agent/pods/spec.ts'
import type { NodeMember } from '../../src/agent/sched/index.ts'
import type { Store } from '../../src/store/store.ts'
import { seededBytes, tempStore } from '../helpers/store.ts'

const log = pino({ level: 'silent' })

interface Sim {
  names: string[]
  stores: Map<string, Store>
  /** Who each node sees alive (itself always). */
  alive: Map<string, Set<string>>
  now: number
  cleanup(): Promise<void>
}

async function cluster(names: string[], seed: number, nodeExtra: Record<string, { labels?: Record<string, string>; taints?: unknown[] }> = {}): Promise<Sim> {
  const stores = new Map<string, Store>()
  const cleanups: (() => Promise<void>)[] = []
  let i = 0
  for (const n of names) {
    const t = await tempStore({ randomBytes: seededBytes(seed + i++) })
    stores.set(n, t.store)
    cleanups.push(t.cleanup)
  }
  const sim: Sim = {
    names,
    stores,
    alive: new Map(names.map((n) => [n, new Set(names)])),
    now: Date.parse('2026-06-01T00:00:00Z'),
    cleanup: async () => void (await Promise.all(cleanups.map((c) => c()))),
  }
  for (const n of names) {
    const s = stores.get(n)!
    const x = nodeExtra[n] ?? {}
    await s.apply(
      { apiVersion: 'orc/v1', kind: 'Node', metadata: { name: n, ...(x.labels ? { labels: x.labels } : {}) }, spec: x.taints ? { taints: x.taints } : {} },
      { author: 'controller:node', now: sim.now },
    )
    await s.patch({ kind: 'Node', namespace: '', name: n }, [{ path: ['status', 'capacity'], value: { cpu: '4', memory: '8Gi' } }], {
      author: 'controller:node',
      now: sim.now,
    })
  }
  await sync(sim)
  return sim
}

/** Anti-entropy between every pair that can see each other, until nothing moves. */
async function sync(sim: Sim, groups: string[][] = [sim.names]): Promise<void> {
  for (let round = 0; round < 3; round++) {
    for (const g of groups) {
      for (const a of g) {
        for (const b of g) {
          if (a === b) continue
          const A = sim.stores.get(a)!
          const B = sim.stores.get(b)!
          await B.applyRemote(await A.encodeMissing(B.encodeSyncState()))
        }
      }
    }
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

function controller(sim: Sim, me: string): DeploymentController {
  return new DeploymentController({
    store: sim.stores.get(me)!,
    nodeName: me,
    members: () => members(sim, me),
    now: () => sim.now,
    setTimeout: () => 0,
    clearTimeout: () => {},
    log,
  })
}

function binder(sim: Sim, me: string): Binder {
  return new Binder({
    store: sim.stores.get(me)!,
    nodeName: me,
    members: () => members(sim, me),
    now: () => sim.now,
    setTimeout: () => 0,
    clearTimeout: () => {},
    log,
  })
}

function partition(sim: Sim, groups: string[][]): void {
  for (const g of groups) for (const n of g) sim.alive.set(n, new Set(g))
}

function heal(sim: Sim): void {
  for (const n of sim.names) sim.alive.set(n, new Set(sim.names))
}

const template = (marker: string, extra: Record<string, unknown> = {}) => ({
  metadata: { labels: { app: 'web' } },
  spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', marker] }], ...extra },
})

function deployment(spec: Record<string, unknown>, name = 'web'): any {
  return { apiVersion: 'orc/v1', kind: 'PinnedDeployment', metadata: { name }, spec }
}

function podsOf(s: Store, d = 'web') {
  return s.list('Pod').filter((p) => p.metadata.labels?.['orc/deployment'] === d)
}

function names(s: Store, d = 'web'): string[] {
  return podsOf(s, d)
    .map((p) => p.metadata.name)
    .sort()
}

test('concurrent creation on both sides of a partition converges to one set of pods, never duplicates', async () => {
  const sim = await cluster(['a', 'b', 'c'], 101)
  try {
    await sim.stores.get('a')!.apply(deployment({ replicas: 4, previous: template('1') }), { author: 'user:alice', now: sim.now })
    await sync(sim)
    // A partition: every node sees only itself, so every node believes it is the writer.
    partition(sim, [['a'], ['b'], ['c']])
    for (const n of sim.names)
      assert.equal(
        deploymentWriter(n, members(sim, n), sim.stores.get(n)!.list('Node'), () => false),
        n,
      )
    for (const n of sim.names) await controller(sim, n).pass()
    for (const n of sim.names) assert.equal(names(sim.stores.get(n)!).length, 4, `${n} created the 4 pods on its own`)
    // Meanwhile a user on b starts a rollout.
    sim.now += 1000
    const b = sim.stores.get('b')!
    await b.apply(deployment({ replicas: 4, previous: template('1'), next: template('2'), nextReplicas: 1 }), { author: 'user:bob', now: sim.now })
    await controller(sim, 'b').pass()
    heal(sim)
    await sync(sim)
    const digest = sim.stores.get('a')!.stateDigest()
    for (const n of sim.names) assert.equal(sim.stores.get(n)!.stateDigest(), digest, `${n} converged`)
    // One writer again (a); a pass makes the merged state exactly the desired set.
    for (const n of sim.names)
      assert.equal(
        deploymentWriter(n, members(sim, n), sim.stores.get(n)!.list('Node'), () => false),
        'a',
      )
    for (const n of sim.names) await controller(sim, n).pass()
    await sync(sim)
    const a = sim.stores.get('a')!
    const pods = podsOf(a)
    assert.equal(pods.length, 4, `exactly the 4 replicas exist: ${names(a).join(', ')}`)
    const byTemplate = new Map<string, number>()
    for (const p of pods) byTemplate.set(p.metadata.labels!['orc/template']!, (byTemplate.get(p.metadata.labels!['orc/template']!) ?? 0) + 1)
    assert.deepEqual([...byTemplate.values()].sort(), [1, 3], 'split 3 previous + 1 next')
    // The status says so, per version.
    const st = a.get({ kind: 'PinnedDeployment', namespace: 'default', name: 'web' })!.status as any
    assert.equal(st.previous.desired, 3)
    assert.equal(st.next.desired, 1)
    assert.equal(st.previous.created + st.next.created, 4)
    // Pods carry the replica group, so the scheduler spreads them: 4 replicas over 3 nodes.
    for (const n of sim.names) await binder(sim, n).pass()
    await sync(sim)
    const perNode = new Map<string, number>()
    for (const p of podsOf(a)) perNode.set(p.status!.node as string, (perNode.get(p.status!.node as string) ?? 0) + 1)
    assert.equal(perNode.size, 3, `spread over every node: ${JSON.stringify([...perNode])}`)
    // A second pass anywhere writes nothing (no revision churn).
    const before = (await a.allRevisions()).length
    for (const n of sim.names) await controller(sim, n).pass()
    assert.equal((await a.allRevisions()).length, before)
  } finally {
    await sim.cleanup()
  }
})

test('promote keeps the next pods and removes the previous ones; deleting the deployment deletes its pods', async () => {
  const sim = await cluster(['a', 'b'], 202)
  try {
    const a = sim.stores.get('a')!
    await a.apply(deployment({ replicas: 3, previous: template('1'), next: template('2'), nextPercent: 50 }), { author: 'user:alice', now: sim.now })
    await controller(sim, 'a').pass()
    const nextPods = podsOf(a)
      .filter((p) => (p.spec as any).containers[0].command[1] === '2')
      .map((p) => p.metadata.name)
    assert.equal(nextPods.length, 2, '50 % of 3 rounds up to 2')
    await a.apply(deployment({ replicas: 3, previous: template('2') }), { author: 'user:alice', now: sim.now })
    await controller(sim, 'a').pass()
    const after = names(a)
    assert.equal(after.length, 3)
    for (const n of nextPods) assert.ok(after.includes(n), `${n} kept through promote`)
    await a.delete({ kind: 'PinnedDeployment', namespace: 'default', name: 'web' }, { author: 'user:alice', now: sim.now })
    await controller(sim, 'a').pass()
    assert.deepEqual(names(a), [])
    // b is not the writer while it sees a: it writes nothing.
    await sim.stores.get('b')!.apply(deployment({ replicas: 2, previous: template('1') }, 'api'), { author: 'user:bob', now: sim.now })
    await controller(sim, 'b').pass()
    assert.deepEqual(names(sim.stores.get('b')!, 'api'), [])
  } finally {
    await sim.cleanup()
  }
})

test('everyNode: one pinned copy per eligible node; a rollout switches copies in place', async () => {
  const sim = await cluster(['a', 'b', 'c', 'd'], 303, {
    c: { taints: [{ key: 'gpu', effect: 'NoSchedule' }] },
    d: { labels: { role: 'edge' } },
  })
  try {
    const a = sim.stores.get('a')!
    await a.apply(deployment({ placement: { everyNode: true }, previous: template('1') }, 'logs'), { author: 'user:alice', now: sim.now })
    await controller(sim, 'a').pass()
    assert.deepEqual(names(a, 'logs'), ['logs-a', 'logs-b', 'logs-d'], 'c is tainted and the template does not tolerate it')
    for (const p of podsOf(a, 'logs')) assert.equal((p.spec as any).placement.node, p.metadata.name.slice(5))
    // Tolerate the taint, roll out next on one node.
    const tol = { tolerations: [{ key: 'gpu', operator: 'Exists' }] }
    await a.apply(deployment({ placement: { everyNode: true }, previous: template('1', tol), next: template('2', tol), nextReplicas: 1 }, 'logs'), {
      author: 'user:alice',
      now: sim.now,
    })
    await controller(sim, 'a').pass()
    assert.deepEqual(names(a, 'logs'), ['logs-a', 'logs-b', 'logs-c', 'logs-d'])
    const onNext = podsOf(a, 'logs')
      .filter((p) => (p.spec as any).containers[0].command[1] === '2')
      .map((p) => p.metadata.name)
    assert.deepEqual(onNext, ['logs-a'], 'the first node by name runs next')
    const h = await a.history({ kind: 'Pod', namespace: 'default', name: 'logs-a' })
    assert.ok(
      h.some((r) => r.author === 'controller:deployment' && /update next copy for node a/.test(r.reason ?? '')),
      'the switch is a revision of the same pod',
    )
    // Forgetting a node removes its copy.
    await a.patch(
      { kind: 'Node', namespace: '', name: 'd' },
      [{ path: ['status', 'forgotten'], value: { at: new Date(sim.now).toISOString(), by: 'user:alice' } }],
      { author: 'controller:node', now: sim.now },
    )
    await controller(sim, 'a').pass()
    assert.deepEqual(names(a, 'logs'), ['logs-a', 'logs-b', 'logs-c'])
  } finally {
    await sim.cleanup()
  }
})

test('conflicting bindings from a partition converge: after the heal exactly one node runs each pod', async () => {
  const sim = await cluster(['a', 'b', 'c'], 404)
  try {
    // Pods applied on a and replicated everywhere, then a three-way partition before anyone binds.
    const a = sim.stores.get('a')!
    for (let i = 0; i < 6; i++) {
      await a.apply(
        {
          apiVersion: 'orc/v1',
          kind: 'Pod',
          metadata: { name: `p${i}` },
          spec: { policy: i % 2 ? 'ha' : 'best-effort', containers: [{ name: 'main', image: 'busybox' }] },
        },
        { author: 'user:alice', now: sim.now },
      )
    }
    await sync(sim)
    partition(sim, [['a'], ['b'], ['c']])
    sim.now += 120_000 // beyond haAfter: each side sees the others lost
    for (const n of sim.names) await binder(sim, n).pass()
    for (const n of sim.names) {
      const s = sim.stores.get(n)!
      for (const p of s.list('Pod')) assert.equal(p.status?.node, n, `${n} bound ${p.metadata.name} to itself (its only live node)`)
    }
    heal(sim)
    await sync(sim)
    for (const n of sim.names) assert.equal(sim.stores.get(n)!.stateDigest(), a.stateDigest(), `${n} converged`)
    for (const p of a.list('Pod')) {
      const runners = sim.names.filter((n) => assignedTo(sim.stores.get(n)!.get({ kind: 'Pod', namespace: 'default', name: p.metadata.name })!, n))
      assert.equal(runners.length, 1, `pod ${p.metadata.name} runs on exactly one node, got ${runners.join(',')}`)
      assert.equal((p.status as any).scheduling.node, p.status!.node, 'the binding record and the binding agree')
    }
    // A pass after the heal keeps the winners (nobody rebinds to itself).
    const digest = a.stateDigest()
    for (const n of sim.names) await binder(sim, n).pass()
    await sync(sim)
    assert.equal(a.stateDigest(), digest)
  } finally {
    await sim.cleanup()
  }
})

test('a NoExecute taint evicts at once without a toleration, after tolerationSeconds with one', async () => {
  const sim = await cluster(['a', 'b'], 505)
  try {
    const a = sim.stores.get('a')!
    // Two pods bound to a: one tolerates the coming taint for 10 s, one not at all.
    for (const [name, tol] of [
      ['patient', [{ key: 'maint', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 10 }]],
      ['plain', undefined],
    ] as const) {
      await a.apply(
        {
          apiVersion: 'orc/v1',
          kind: 'Pod',
          metadata: { name },
          spec: { containers: [{ name: 'main', image: 'busybox' }], ...(tol ? { tolerations: tol } : {}) },
        },
        { author: 'user:alice', now: sim.now },
      )
      await a.patch({ kind: 'Pod', namespace: 'default', name }, [{ path: ['status', 'node'], value: 'a' }], { author: 'controller:scheduler', now: sim.now })
    }
    const node = a.get({ kind: 'Node', namespace: '', name: 'a' })!
    await a.apply(
      { apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'a' }, spec: { ...node.spec, taints: [{ key: 'maint', effect: 'NoExecute' }] } },
      { author: 'user:alice', now: sim.now },
    )
    const bA = binder(sim, 'a')
    await bA.pass()
    const at = (n: string) => a.get({ kind: 'Pod', namespace: 'default', name: n })!.status?.node
    assert.equal(at('plain'), undefined, 'evicted at once')
    assert.equal(at('patient'), 'a', 'tolerated for now')
    sim.now += 5000
    await bA.pass()
    assert.equal(at('patient'), 'a', 'still within tolerationSeconds')
    sim.now += 6000
    await bA.pass()
    assert.equal(at('patient'), undefined, 'evicted after 10 s')
    assert.match(String((a.get({ kind: 'Pod', namespace: 'default', name: 'patient' })!.status as any).scheduling.reason), /tolerated for 10s only/)
  } finally {
    await sim.cleanup()
  }
})

// A small chaos run on real stores and binders: concurrent applies on different nodes, random
// partitions, kills and heals, on a seeded schedule. Invariants at every step: no node runs more
// than its capacity (by its own store: only it binds pods to itself), no best-effort pod ever
// moves (no forget, goneAfter far away). At the end, with everything healed: every pod runs on
// exactly one node and every store agrees.
test('chaos: partitions, kills and heals keep capacity and policies; converged views run each pod once', async () => {
  const seed = Number(process.env.ORC_CHAOS_SEED ?? 7)
  const names5 = ['a', 'b', 'c', 'd', 'e']
  const sim = await cluster(names5, 600 + seed)
  let x = seed >>> 0 || 1
  const rand = () => {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    return x / 4294967296
  }
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!
  const heard = new Map(names5.map((n) => [n, new Map(names5.map((m) => [m, sim.now]))]))
  const up = new Set(names5)
  const binders = new Map(
    names5.map((n) => [
      n,
      new Binder({
        store: sim.stores.get(n)!,
        nodeName: n,
        members: () =>
          names5.map((m) => ({
            name: m,
            state: m === n || sim.alive.get(n)!.has(m) ? ('alive' as const) : ('dead' as const),
            lastSeen: heard.get(n)!.get(m)!,
            ...(m === n ? { self: true } : {}),
          })),
        now: () => sim.now,
        setTimeout: () => 0,
        clearTimeout: () => {},
        log,
      }),
    ]),
  )
  try {
    for (const n of names5) {
      await sim.stores.get(n)!.patch({ kind: 'Node', namespace: '', name: n }, [{ path: ['status', 'capacity'], value: { cpu: '1', memory: '8Gi' } }], {
        author: 'controller:node',
        now: sim.now,
      })
    }
    // 12 pods of 200m (5 fit a node), applied concurrently on different nodes.
    for (let i = 0; i < 12; i++) {
      const via = sim.stores.get(names5[i % 5]!)!
      await via.apply(
        {
          apiVersion: 'orc/v1',
          kind: 'Pod',
          metadata: { name: `p${i}` },
          spec: {
            policy: i % 3 === 0 ? 'best-effort' : 'ha',
            haAfterSeconds: 10,
            containers: [{ name: 'main', image: 'busybox', resources: { requests: { cpu: '200m' } } }],
          },
        },
        { author: 'user:alice', now: sim.now },
      )
    }
    // And one PinnedDeployment, applied concurrently on two nodes with different replica counts.
    const svc = (replicas: number) =>
      deployment(
        {
          replicas,
          previous: template('9', {
            policy: 'ha',
            haAfterSeconds: 10,
            containers: [{ name: 'main', image: 'busybox', resources: { requests: { cpu: '200m' } } }],
          }),
        },
        'svc',
      )
    await sim.stores.get('a')!.apply(svc(3), { author: 'user:alice', now: sim.now })
    await sim.stores.get('c')!.apply(svc(2), { author: 'user:carol', now: sim.now })
    const controllers = new Map(names5.map((n) => [n, controller(sim, n)]))
    let groups: string[][] = [names5]
    const live = (g: string[]) => g.filter((n) => up.has(n))
    const apply = () => {
      for (const n of names5) sim.alive.set(n, new Set())
      for (const g of groups) for (const n of live(g)) sim.alive.set(n, new Set(live(g)))
    }
    const check = (when: string) => {
      for (const n of names5) {
        if (!up.has(n)) continue
        const s = sim.stores.get(n)!
        const mine = s.list('Pod').filter((p) => assignedTo(p, n))
        assert.ok(mine.length <= 5, `seed ${seed} ${when}: ${n} runs ${mine.length} pods of 200m on 1 cpu`)
        for (const p of s.list('Pod')) {
          if ((p.spec as any).policy !== 'best-effort') continue
          assert.equal(
            (p.status as any)?.scheduling?.from,
            undefined,
            `seed ${seed} ${when}: best-effort ${p.metadata.name} moved (${JSON.stringify(p.status)})`,
          )
        }
      }
    }
    for (let step = 0; step < 40; step++) {
      const r = rand()
      if (r < 0.25) {
        const shuffled = [...names5].sort(() => rand() - 0.5)
        const cut = 1 + Math.floor(rand() * 4)
        groups = [shuffled.slice(0, cut), shuffled.slice(cut)]
      } else if (r < 0.45) groups = [names5]
      else if (r < 0.6 && up.size > 2) up.delete(pick([...up]))
      else if (r < 0.75) up.add(pick(names5))
      apply()
      sim.now += 2000 + Math.floor(rand() * 10_000)
      for (const n of up) for (const m of sim.alive.get(n)!) heard.get(n)!.set(m, sim.now)
      for (const n of [...up].sort(() => rand() - 0.5)) {
        await controllers.get(n)!.pass()
        await binders.get(n)!.pass()
      }
      await sync(sim, groups.map(live))
      check(`step ${step}`)
    }
    // Finally a sure failover: heal, then kill the node running p1 (ha) for longer than haAfter.
    for (const n of names5) up.add(n)
    groups = [names5]
    apply()
    for (let round = 0; round < 2; round++) {
      sim.now += 2000
      for (const n of names5) for (const m of names5) heard.get(n)!.set(m, sim.now)
      for (const n of names5) await binders.get(n)!.pass()
      await sync(sim)
    }
    const victim = sim.stores.get('a')!.get({ kind: 'Pod', namespace: 'default', name: 'p1' })!.status!.node as string
    up.delete(victim)
    apply()
    sim.now += 15_000
    for (const n of up) for (const m of sim.alive.get(n)!) heard.get(n)!.set(m, sim.now)
    for (const n of up) await binders.get(n)!.pass()
    await sync(sim, [live(names5)])
    check('after the failover')
    // Heal everything; views converge.
    for (const n of names5) up.add(n)
    groups = [names5]
    apply()
    for (let round = 0; round < 4; round++) {
      sim.now += 2000
      for (const n of names5) for (const m of names5) heard.get(n)!.set(m, sim.now)
      for (const n of names5) {
        await controllers.get(n)!.pass()
        await binders.get(n)!.pass()
      }
      await sync(sim)
    }
    check('after the heal')
    const merged = sim.stores.get('a')!.get({ kind: 'PinnedDeployment', namespace: 'default', name: 'svc' })!.spec!.replicas as number
    assert.equal(podsOf(sim.stores.get('a')!, 'svc').length, merged, `seed ${seed}: svc has exactly its ${merged} replicas after the concurrent applies merged`)
    const moves = (await sim.stores.get('a')!.allRevisions()).filter((r) => r.author === 'controller:scheduler' && /\(from /.test(r.reason ?? '')).length
    assert.ok(moves > 0, `seed ${seed}: the run moved no ha pod; it tested nothing`)
    const a = sim.stores.get('a')!
    for (const n of names5) assert.equal(sim.stores.get(n)!.stateDigest(), a.stateDigest(), `seed ${seed}: ${n} converged`)
    for (const p of a.list('Pod')) {
      const runners = names5.filter((n) => assignedTo(p, n))
      assert.equal(runners.length, 1, `seed ${seed}: ${p.metadata.name} runs on ${runners.join(',') || 'no node'}`)
    }
  } finally {
    await sim.cleanup()
  }
})
