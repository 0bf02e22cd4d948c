import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { type ClusterView, type NodeView, type PodView, parseCpu, parseMemory, plan } from '../../../src/sched/index.ts'
import { arbView, shuffled } from './helpers.ts'

const json = (v: unknown) => JSON.stringify(v)
/** Default options, and a sampling scheduler (stops after 1 feasible node in 10%) on these small views. */
const arbOpts = fc.constantFrom({}, { minFeasibleNodesToFind: 1, percentageOfNodesToScore: 10 }, { minFeasibleNodesToFind: 2, percentageOfNodesToScore: 30 })

/** The same view with nodes, pods, labels and taints listed in another order. */
function reordered(v: ClusterView, seed: number): ClusterView {
  const reLabel = (l?: Record<string, string>) => (l ? Object.fromEntries(shuffled(Object.entries(l), seed)) : l)
  return {
    now: v.now,
    nodes: shuffled(v.nodes, seed).map((n): NodeView => ({ ...n, labels: reLabel(n.labels), taints: n.taints ? shuffled(n.taints, seed + 1) : n.taints })),
    pods: shuffled(v.pods, seed + 2).map((p): PodView => ({ ...p, labels: reLabel(p.labels) })),
  }
}

test('property: the same view in any order gives identical operations', () => {
  fc.assert(
    fc.property(arbView, fc.integer(), fc.integer({ min: 0, max: 3 }), arbOpts, (v, seed, schedSeed, opts) => {
      const a = plan(v, { ...opts, seed: schedSeed })
      const b = plan(reordered(v, seed), { ...opts, seed: schedSeed })
      assert.equal(json(b), json(a))
      assert.deepEqual(
        b.map((o) => o.format()),
        a.map((o) => o.format()),
      )
    }),
    { seed: 1234, numRuns: 150 },
  )
})

test('property: a plan never puts more on a node than it can hold', () => {
  fc.assert(
    fc.property(arbView, arbOpts, (v, opts) => {
      const ops = plan(v, opts)
      const where = new Map(v.pods.map((p) => [`${p.namespace}/${p.name}`, p.node]))
      const received = new Set<string>()
      for (const o of ops) {
        if (o.type === 'bind') {
          where.set(o.pod, o.node)
          received.add(o.node)
        } else where.set(o.pod, undefined)
      }
      for (const name of received) {
        const n = v.nodes.find((x) => x.name === name)!
        let cpu = 0
        let mem = 0
        for (const p of v.pods) {
          if (where.get(`${p.namespace}/${p.name}`) !== name) continue
          cpu += parseCpu(p.requests?.cpu)
          mem += parseMemory(p.requests?.memory)
        }
        assert.ok(cpu <= parseCpu(n.capacity!.cpu), `${name}: cpu ${cpu} > ${n.capacity!.cpu}`)
        assert.ok(mem <= parseMemory(n.capacity!.memory), `${name}: memory ${mem} > ${n.capacity!.memory}`)
      }
    }),
    { seed: 99, numRuns: 200 },
  )
})

test('property: binds go only to live, schedulable nodes that satisfy the pod', () => {
  fc.assert(
    fc.property(arbView, (v) => {
      const nodes = new Map(v.nodes.map((n) => [n.name, n]))
      const pods = new Map(v.pods.map((p) => [`${p.namespace}/${p.name}`, p]))
      for (const o of plan(v)) {
        if (o.type !== 'bind') continue
        const n = nodes.get(o.node)!
        const p = pods.get(o.pod)!
        assert.equal(n.state, 'alive')
        assert.ok(!n.unschedulable && !n.forgotten)
        if (p.pin) assert.equal(o.node, p.pin)
        for (const [k, val] of Object.entries(p.nodeSelector ?? {})) assert.equal(n.labels?.[k], val)
      }
    }),
    { seed: 5, numRuns: 150 },
  )
})

test('a plan applied is a fixed point: planning again on the result does nothing new', () => {
  fc.assert(
    fc.property(arbView, (v) => {
      const ops = plan(v)
      const next = new Map(v.pods.map((p) => [`${p.namespace}/${p.name}`, p.node]))
      for (const o of ops) next.set(o.pod, o.type === 'bind' ? o.node : undefined)
      const after: ClusterView = { ...v, pods: v.pods.map((p) => ({ ...p, node: next.get(`${p.namespace}/${p.name}`) })) }
      const again = plan(after)
      assert.deepEqual(
        again.map((o) => o.format()),
        [],
      )
    }),
    { seed: 77, numRuns: 150 },
  )
})
