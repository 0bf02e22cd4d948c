// Placement throughput of the pure scheduler (one core: the plan runs on the main thread).
// Usage: node --import tsx test/bench/sched.bench.ts
// Prints one figure per line: placements per second for 10k pending pods over 5k and 1k nodes.
import { type ClusterView, type NodeView, type PodView, planPlacements } from '../../src/sched/index.ts'

function rng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** A mixed cluster: sites, disk types, some gpu-tainted, cordoned and suspect nodes. */
export function benchView(nodeCount: number, podCount: number, seed = 1): ClusterView {
  const r = rng(seed)
  const nodes: NodeView[] = []
  for (let i = 0; i < nodeCount; i++) {
    const x = r()
    nodes.push({
      name: `node-${String(i).padStart(5, '0')}`,
      labels: { site: `site-${i % 12}`, disktype: r() < 0.4 ? 'ssd' : 'hdd', rack: `r${i % 97}` },
      capacity: { cpu: String(8 + Math.floor(r() * 4) * 8), memory: `${32 + Math.floor(r() * 4) * 32}Gi` },
      taints: x < 0.05 ? [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }] : x < 0.08 ? [{ key: 'spot', effect: 'PreferNoSchedule' }] : [],
      unschedulable: r() < 0.02,
      state: r() < 0.01 ? 'suspect' : 'alive',
      since: 0,
    })
  }
  const pods: PodView[] = []
  for (let i = 0; i < podCount; i++) {
    const group = `app-${Math.floor(i / 10)}`
    const y = r()
    const pod: PodView = {
      namespace: 'default',
      name: `${group}-${i % 10}`,
      labels: { app: group },
      group,
      requests: { cpu: `${100 + Math.floor(r() * 20) * 100}m`, memory: `${128 * (1 + Math.floor(r() * 16))}Mi` },
      policy: r() < 0.3 ? 'ha' : 'best-effort',
    }
    if (y < 0.1) pod.nodeSelector = { disktype: 'ssd' }
    else if (y < 0.15) pod.tolerations = [{ key: 'dedicated', operator: 'Equal', value: 'gpu', effect: 'NoSchedule' }]
    else if (y < 0.2) pod.affinity = { podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: group } }, topologyKey: 'node' }] } }
    else if (y < 0.22)
      pod.affinity = { podAntiAffinity: { preferred: [{ weight: 50, term: { labelSelector: { matchLabels: { app: group } }, topologyKey: 'site' } }] } }
    pods.push(pod)
  }
  return { nodes, pods, now: 60_000 }
}

function measure(nodeCount: number, podCount: number): number {
  const view = benchView(nodeCount, podCount)
  planPlacements(view) // warm up the JIT
  // Best of five: the figure is what one core can do, not what a busy machine happened to give.
  let best = Infinity
  let binds = 0
  for (let i = 0; i < 5; i++) {
    const t0 = process.hrtime.bigint()
    const res = planPlacements(view)
    const s = Number(process.hrtime.bigint() - t0) / 1e9
    binds = res.operations.length
    best = Math.min(best, s)
  }
  return Math.round(binds / best)
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(`sched placements/s 10000 pods over 5000 nodes: ${measure(5000, 10000)}`)
  console.log(`sched placements/s 10000 pods over 1000 nodes: ${measure(1000, 10000)}`)
}
