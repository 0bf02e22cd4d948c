import fc from 'fast-check'
import type { ClusterView, NodeView, PodView } from '../../../src/sched/index.ts'

export function node(name: string, o: Partial<NodeView> = {}): NodeView {
  return { name, state: 'alive', capacity: { cpu: '4', memory: '8Gi' }, ...o }
}

export function pod(name: string, o: Partial<PodView> = {}): PodView {
  return { namespace: 'default', name, requests: { cpu: '100m', memory: '128Mi' }, ...o }
}

export function view(nodes: NodeView[], pods: PodView[], now = 1_000_000): ClusterView {
  return { nodes, pods, now }
}

/** Deterministic shuffle (seeded), for "any input order" checks outside fast-check. */
export function shuffled<T>(xs: readonly T[], seed: number): T[] {
  const out = [...xs]
  let a = seed >>> 0
  for (let i = out.length - 1; i > 0; i--) {
    a = (Math.imul(a ^ (a >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0
    const j = a % (i + 1)
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}

const SITES = ['eu', 'us', 'ap']

/** A random but valid cluster view: nodes with sites, taints, states; pods bound or pending. */
export const arbView: fc.Arbitrary<ClusterView> = fc
  .record({
    nodes: fc.array(
      fc.record({
        cpu: fc.integer({ min: 0, max: 8000 }),
        memMi: fc.integer({ min: 0, max: 8192 }),
        site: fc.constantFrom(...SITES),
        ssd: fc.boolean(),
        taint: fc.constantFrom(undefined, 'NoSchedule', 'PreferNoSchedule', 'NoExecute'),
        state: fc.constantFrom('alive', 'alive', 'alive', 'suspect', 'dead'),
        downFor: fc.integer({ min: 0, max: 10 * 24 * 3600 }),
        unschedulable: fc.boolean(),
        forgotten: fc.boolean(),
      }),
      { minLength: 0, maxLength: 12 },
    ),
    pods: fc.array(
      fc.record({
        cpu: fc.integer({ min: 0, max: 3000 }),
        memMi: fc.integer({ min: 0, max: 3000 }),
        app: fc.constantFrom('web', 'db', 'cache'),
        bindTo: fc.option(fc.integer({ min: 0, max: 15 }), { nil: undefined }),
        ha: fc.boolean(),
        ssd: fc.boolean(),
        tolerate: fc.boolean(),
        anti: fc.constantFrom(undefined, 'node', 'site'),
        affinity: fc.boolean(),
        pin: fc.option(fc.integer({ min: 0, max: 15 }), { nil: undefined }),
        priority: fc.integer({ min: 0, max: 2 }),
      }),
      { minLength: 0, maxLength: 30 },
    ),
  })
  .map(({ nodes, pods }) => {
    const now = 30 * 24 * 3600 * 1000
    const ns: NodeView[] = nodes.map((n, i) => ({
      name: `n${i}`,
      labels: { site: n.site, ...(n.ssd ? { disk: 'ssd' } : {}) },
      capacity: { cpu: `${n.cpu}m`, memory: `${n.memMi}Mi` },
      taints: n.taint ? [{ key: 'dedicated', value: 'x', effect: n.taint as 'NoSchedule' }] : [],
      unschedulable: n.unschedulable && i % 3 === 0,
      forgotten: n.forgotten && i % 4 === 0,
      state: n.state as NodeView['state'],
      since: now - n.downFor * 1000,
    }))
    const ps: PodView[] = pods.map((p, i) => ({
      namespace: 'default',
      name: `p${i}`,
      labels: { app: p.app },
      group: p.app,
      requests: { cpu: `${p.cpu}m`, memory: `${p.memMi}Mi` },
      node: p.bindTo === undefined ? undefined : `n${p.bindTo}`,
      policy: p.ha ? 'ha' : 'best-effort',
      nodeSelector: p.ssd ? { disk: 'ssd' } : undefined,
      tolerations: p.tolerate ? [{ key: 'dedicated', operator: 'Exists' }] : undefined,
      affinity: {
        ...(p.anti ? { podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: p.app } }, topologyKey: p.anti }] } } : {}),
        ...(p.affinity ? { podAffinity: { preferred: [{ weight: 10, term: { labelSelector: { matchLabels: { app: 'db' } }, topologyKey: 'site' } }] } } : {}),
      },
      pin: p.pin === undefined || i % 5 !== 0 ? undefined : `n${p.pin}`,
      priority: p.priority,
    }))
    return { nodes: ns, pods: ps, now }
  })
