/** Scheduler options. Every node must use the same values, or nodes will disagree on placements. */
export interface SchedOptions {
  /** Seed of the tie-break hash; part of the cluster's config so all nodes agree. */
  seed: number
  /** Cluster default: an `ha` pod is rebound after its node has been suspect/dead this long. */
  haAfterSeconds: number
  /** A `best-effort` pod is rebound after its node has been unreachable this long (or is forgotten). */
  goneAfterSeconds: number
  /**
   * Share of nodes to look at for one pod, like Kubernetes' percentageOfNodesToScore: the scan stops
   * once this many feasible nodes are found. 0 = adaptive (50% minus 1% per 125 nodes, at least 5%).
   * 100 = always score every feasible node (best placement, O(nodes) per pod).
   */
  percentageOfNodesToScore: number
  /** Never stop scanning before this many feasible nodes were found (unless all nodes were seen). */
  minFeasibleNodesToFind: number
  /**
   * Topology keys that replicas of one group (`PodView.group`) are spread across, besides nodes:
   * node labels, and `cluster` (the node's cluster in a federation's view).
   */
  spreadTopologyKeys: string[]
  weights: ScoreWeights
}

export interface ScoreWeights {
  /** Prefer nodes with the most free cpu and memory left after placing the pod. */
  leastAllocated: number
  /** Prefer nodes whose cpu and memory use stay in proportion. */
  balanced: number
  /** Prefer nodes and topology domains holding fewer replicas of the same group. */
  spread: number
  /** `preferred` node affinity terms. */
  nodeAffinity: number
  /** `preferred` pod affinity and anti-affinity terms. */
  podAffinity: number
  /** Avoid untolerated PreferNoSchedule taints. */
  taints: number
  /** `placement.preferClusters`: the first listed cluster gets the whole weight, later ones less. */
  clusters: number
}

export const DEFAULT_SCHED_OPTIONS: Readonly<SchedOptions> = Object.freeze({
  seed: 0,
  haAfterSeconds: 30,
  goneAfterSeconds: 7 * 24 * 3600,
  percentageOfNodesToScore: 0,
  minFeasibleNodesToFind: 100,
  spreadTopologyKeys: ['site', 'cluster'],
  weights: Object.freeze({ leastAllocated: 1, balanced: 1, spread: 2, nodeAffinity: 2, podAffinity: 2, taints: 3, clusters: 4 }),
})

export type SchedOptionsInput = Partial<Omit<SchedOptions, 'weights'>> & { weights?: Partial<ScoreWeights> }

export function resolveOptions(input: SchedOptionsInput = {}): SchedOptions {
  return {
    ...DEFAULT_SCHED_OPTIONS,
    ...input,
    spreadTopologyKeys: [...(input.spreadTopologyKeys ?? DEFAULT_SCHED_OPTIONS.spreadTopologyKeys)],
    weights: { ...DEFAULT_SCHED_OPTIONS.weights, ...input.weights },
  }
}
