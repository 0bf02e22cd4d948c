import { parseCpu, parseMemory, type Quantity } from './quantity.ts'

/**
 * The scheduler's input: plain data the agent builds from store objects and membership. Nothing here
 * is read from the outside world; `now` comes in with the view. Array order does not matter — the
 * scheduler sorts — so every node computes the same answer from the same view.
 */
export interface ClusterView {
  nodes: NodeView[]
  pods: PodView[]
  /** Milliseconds since the epoch, from the injected clock. */
  now: number
  /**
   * Set when the planning node does not hear a quorum of its cluster (src/sched/fencing.ts): why.
   * Such a node moves no `ha` pod off a lost node — it may be the one cut off, and its own `ha`
   * pods are being fenced.
   */
  noQuorum?: string
}

export type MemberState = 'alive' | 'suspect' | 'dead'
export type TaintEffect = 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute'

export interface Resources {
  cpu?: Quantity
  memory?: Quantity
  /** Maximum number of pods (allocatable only). */
  pods?: number
}

/** What one VirtualMachine holds of its node (`namespace/name`). */
export interface VmUse {
  name: string
  cpu: Quantity
  memory: Quantity
}

export interface Taint {
  key: string
  value?: string
  effect: TaintEffect
  /** When the taint was added (ms); counts `tolerationSeconds` of NoExecute tolerations. */
  since?: number
}

export interface NodeView {
  name: string
  labels?: Record<string, string>
  /** `Node.status.capacity`. */
  capacity?: Resources
  /** `Node.status.allocatable` (capacity minus what the host keeps); capacity when absent. */
  allocatable?: Resources
  /**
   * VirtualMachines pinned here that their node wants running (not Halted), each with what it holds
   * (its vCPUs; guest memory plus qemu's allowance): pods get allocatable less these.
   */
  vms?: VmUse[]
  taints?: Taint[]
  /** Cordoned: no new pods, running pods stay. */
  unschedulable?: boolean
  /** Membership as this node sees it (ephemeral gossip, not store history). */
  state: MemberState
  /**
   * When `state` is suspect or dead: since when the node has been unreachable (the moment it was
   * first suspected, not reset by suspect → dead). Ignored when alive.
   */
  since?: number
  /** `orc node forget`: the operator declared the node gone. */
  forgotten?: boolean
  /**
   * The cluster the node belongs to, in a federation's view (`h1@home` → `home`); also the
   * topology domain of the key `cluster`. Absent in a cluster's own view.
   */
  cluster?: string
}

export type SelectorOperator = 'In' | 'NotIn' | 'Exists' | 'DoesNotExist' | 'Gt' | 'Lt'

export interface SelectorRequirement {
  key: string
  operator: SelectorOperator
  values?: string[]
}

/** Kubernetes-style label selector: all of matchLabels and all of matchExpressions must hold. */
export interface LabelSelector {
  matchLabels?: Record<string, string>
  matchExpressions?: SelectorRequirement[]
}

/** Pods matching `labelSelector` (in `namespaces`, default the pod's own), per value of `topologyKey`. */
export interface PodAffinityTerm {
  labelSelector: LabelSelector
  /** A node label such as `site`; the pseudo-key `node` means the node itself. */
  topologyKey: string
  namespaces?: string[]
}

export interface WeightedPodAffinityTerm {
  weight: number // 1..100
  term: PodAffinityTerm
}

export interface NodeAffinity {
  /** Any one of these selectors must match the node's labels. */
  required?: LabelSelector[]
  preferred?: { weight: number; selector: LabelSelector }[]
}

export interface Affinity {
  nodeAffinity?: NodeAffinity
  /** Co-locate with pods matching the term (same topology domain). */
  podAffinity?: { required?: PodAffinityTerm[]; preferred?: WeightedPodAffinityTerm[] }
  /** Keep away from pods matching the term (different topology domain). */
  podAntiAffinity?: { required?: PodAffinityTerm[]; preferred?: WeightedPodAffinityTerm[] }
}

export interface Toleration {
  /** Empty/absent with operator Exists tolerates every taint. */
  key?: string
  operator?: 'Equal' | 'Exists'
  value?: string
  /** Absent tolerates all effects. */
  effect?: TaintEffect
  /** NoExecute only: stay this long after the taint was added, then be evicted. */
  tolerationSeconds?: number
}

export type PodPolicy = 'ha' | 'best-effort'

export interface PodView {
  namespace: string
  name: string
  labels?: Record<string, string>
  /** Sum of the containers' `resources.requests` (see `podRequests`). */
  requests?: Resources
  /** `status.node`: where the pod is bound now. */
  node?: string
  /** `spec.placement.node`: the only node this pod may run on. */
  pin?: string
  /** The node holding the persistent Volumes the pod uses (volumes.ts, volumeConstraints). */
  volumeNode?: string
  /** Why the pod's Volumes let it run nowhere now (missing, another writer, a forgotten node). */
  volumeBlock?: string
  nodeSelector?: Record<string, string>
  affinity?: Affinity
  tolerations?: Toleration[]
  /** `spec.policy`, default best-effort. */
  policy?: PodPolicy
  /** `spec.haAfterSeconds`: overrides the cluster's haAfter for this pod. */
  haAfterSeconds?: number
  /** Replicas sharing a group (e.g. the owning deployment) are spread across nodes and sites. */
  group?: string
  /** Higher is placed first. Default 0. */
  priority?: number
  /** Creation time (ms); older pods are placed first among equal priority. */
  createdAt?: number
  /** Finished pods hold no resources and are never placed. */
  phase?: 'Pending' | 'Running' | 'Succeeded' | 'Failed'
  /**
   * The clusters the pod may run in (`spec.placement.clusters`, or the cluster that created a
   * shared pod when absent). Absent: no cluster constraint (a pod of the cluster's own scope).
   * A node without a cluster never matches a list.
   */
  clusters?: string[]
  /** `spec.placement.preferClusters`: most preferred first; a soft preference among `clusters`. */
  preferClusters?: string[]
  /**
   * Set when this entry stands for an unpinned VirtualMachine (`namespace/name`; the entry's name is
   * `vm/NAME`, which no pod can have): placed and moved like a pod, but it holds its node as a VM
   * (named in explanations, not counted in the node's pod count) and takes no part in pod affinity.
   */
  vm?: string
}

/** `namespace/name`, the key operations refer to a pod by. */
export function podKey(pod: { namespace: string; name: string }): string {
  return `${pod.namespace}/${pod.name}`
}

/** Sum container requests the way the agent builds `PodView.requests` from a Pod spec. */
export function podRequests(containers: readonly { resources?: { requests?: { cpu?: Quantity; memory?: Quantity } } }[]): {
  cpu: string
  memory: string
} {
  let cpu = 0
  let memory = 0
  for (const c of containers) {
    cpu += parseCpu(c.resources?.requests?.cpu)
    memory += parseMemory(c.resources?.requests?.memory)
  }
  return { cpu: `${cpu}m`, memory: String(memory) }
}
