/**
 * Scheduling of the pods of a federation's shared namespaces (docs/federation.md, "Placement").
 *
 * Every node of every member cluster runs the same pure `plan()` over the same inputs: the pods of
 * the federation document, the nodes of every member cluster (each node publishes a summary of
 * itself in its cluster's `Cluster` object: `status.nodes.<node>`) and the federation mesh's
 * membership (heartbeats across clusters). Nodes are named `node@cluster`; a pod may run only in
 * the clusters of `spec.placement.clusters` (absent: the cluster that created it). A node binds
 * only itself, as within a cluster, so an `ha` pod whose cluster is lost moves to another allowed
 * cluster by the same rule that moves it between nodes.
 *
 * Summaries come from other clusters: untrusted input. Each is checked and bounded here; an
 * unreadable entry is skipped (and the rest kept), never thrown at the scheduler.
 */
import type { Logger } from 'pino'
import { type Clock, type TimerHandle, unrefTimers } from '../../effects/index.ts'
import {
  API_VERSION,
  type Cluster,
  DNS_LABEL,
  deepEqual,
  defaultOwnership,
  isPlainObject,
  type Node,
  type ObjectRef,
  ORIGIN_CLUSTER_ANNOTATION,
  type Owner,
  OwnershipTable,
  type Pod,
  type Taint,
  USERS,
  type VirtualMachine,
} from '../../model/index.ts'
import { type ClusterView, parseCpu, parseMemory, podRequests } from '../../sched/index.ts'
import { type Authorize, defaultAuthorize, type ObjectStore, type Stored } from '../../store/index.ts'
import { buildSchedView, isForgotten, type NodeMember, type TaintSince, vmHolds } from '../sched/index.ts'
import { clusterOfMemberName, isClusterName, tagAuthor, untaggedAuthor } from './membership.ts'

export { ORIGIN_CLUSTER_ANNOTATION } from '../../model/index.ts'
/** Who writes node summaries into `Cluster.status.nodes` (tagged `@cluster` in the document). */
export const CLUSTER_CONTROLLER = 'controller:cluster'
/** At most this many nodes per cluster are read from a summary (a bound on hostile input). */
export const MAX_NODES_PER_CLUSTER = 10_000
const MAX_LABELS = 64
const MAX_TAINTS = 64

/** What a node says about itself in the federation document. */
export interface NodeSummary {
  /** Total resources (`Node.status.capacity`). */
  capacity: { cpu: string; memory: string }
  /** What is left for federated pods: capacity minus the requests of this cluster's own pods bound here and its VMs. */
  allocatable: { cpu: string; memory: string }
  labels?: Record<string, string>
  taints?: { key: string; value?: string; effect: string }[]
  unschedulable?: boolean
  /** Ready in its own cluster (tunnels up); a NotReady node takes no new federated pods. */
  ready: boolean
  /** `orc node forget` in its own cluster (written by any node of that cluster). */
  forgotten?: boolean
  /**
   * Where other clusters reach this node's federated pods (docs/federation.md, "Routing"): its
   * WireGuard key, its /64 and endpoints, as in its Node status. Read by other clusters' node
   * networks, which check it as untrusted input (`readSummaryNetwork`, src/agent/network/federation.ts).
   */
  network?: {
    publicKey: string
    prefix: string
    endpoints: string[]
    /** The /64s it has a fresh direct WireGuard handshake with (relays between clusters: docs/federation.md). */
    reach?: string[]
    /** Behind NAT, as its node network decides (relays between clusters). */
    nat?: true
    /** Its federated ingress address (`::2` of its /64) while its tcp-proxy serves a shared service: routed to it like a shared pod's /128. */
    ingress?: string
  }
}

/** What the cluster's VMs pinned to `node` hold (cpu millicores, memory bytes; docs/runtimes.md, "Capacity"). */
function vmsHeld(vms: readonly Stored<VirtualMachine>[], node: string): { cpu: number; mem: number } {
  let cpu = 0
  let mem = 0
  for (const v of vms) {
    const h = vmHolds(v)
    if (h === undefined || h.node !== node) continue
    cpu += h.cpu
    mem += h.mem
  }
  return { cpu, mem }
}

/** The summary this node publishes about itself, from its own cluster's store (pure). */
export function nodeSummaryOf(
  self: Stored<Node> | undefined,
  ownPods: readonly Stored<Pod>[],
  nodeName: string,
  vms: readonly Stored<VirtualMachine>[] = [],
): NodeSummary | undefined {
  if (!self) return undefined
  const cap: { cpu?: unknown; memory?: unknown } | undefined = self.status?.capacity
  let cpu = 0
  let mem = 0
  try {
    cpu = parseCpu(typeof cap?.cpu === 'string' || typeof cap?.cpu === 'number' ? (cap.cpu as string) : undefined)
    mem = parseMemory(typeof cap?.memory === 'string' || typeof cap?.memory === 'number' ? (cap.memory as string) : undefined)
  } catch {
    return undefined
  }
  let { cpu: usedCpu, mem: usedMem } = vmsHeld(vms, nodeName)
  for (const p of ownPods) {
    if (p.status?.node !== nodeName && p.spec?.placement?.node !== nodeName) continue
    const phase = p.status?.phase
    if (phase === 'Succeeded' || phase === 'Failed') continue
    try {
      const r = podRequests(p.spec?.containers ?? [])
      usedCpu += parseCpu(r.cpu)
      usedMem += parseMemory(r.memory)
    } catch {
      // an unreadable pod is refused by the cluster's own scheduler too
    }
  }
  const out: NodeSummary = {
    capacity: { cpu: `${cpu}m`, memory: String(mem) },
    allocatable: { cpu: `${Math.max(0, cpu - usedCpu)}m`, memory: String(Math.max(0, mem - usedMem)) },
    ready: self.status?.state === undefined || self.status.state === 'Ready',
  }
  if (self.metadata.labels && Object.keys(self.metadata.labels).length > 0) out.labels = { ...self.metadata.labels }
  const taints = self.spec?.taints
  if (Array.isArray(taints) && taints.length > 0) out.taints = taints
  if (self.spec?.unschedulable === true) out.unschedulable = true
  if (isForgotten(self)) out.forgotten = true
  const net:
    | { publicKey?: unknown; prefix?: unknown; endpoints?: unknown; reachPrefixes?: unknown; behindNat?: unknown; federatedIngress?: unknown }
    | undefined = self.status?.network
  if (typeof net?.publicKey === 'string' && typeof net.prefix === 'string') {
    const endpoints = Array.isArray(net.endpoints) ? net.endpoints.filter((e): e is string => typeof e === 'string').slice(0, 16) : []
    out.network = { publicKey: net.publicKey, prefix: net.prefix, endpoints }
    if (Array.isArray(net.reachPrefixes)) out.network.reach = net.reachPrefixes.filter((e): e is string => typeof e === 'string').slice(0, 4096)
    if (net.behindNat === true) out.network.nat = true
    if (typeof net.federatedIngress === 'string') out.network.ingress = net.federatedIngress
  }
  return out
}

/**
 * Federated pods that must leave this node because, with the cluster's own pods, they exceed its
 * capacity (pure). Both scopes bind to a node at once only from views a moment apart (the cluster's
 * scheduler counts the federated pods bound here, the federation's reads this node's summary, which
 * follows within its coalescing window), so this is rare; it is resolved the same way wherever it
 * is computed: the cluster's own pods keep their place (the summary offers federated pods only what
 * they leave free), and the federated pods bound latest yield first (ties: the greater
 * namespace/name), until the rest fit. Finished pods hold nothing.
 */
export function overcommitYields(
  self: Stored<Node> | undefined,
  ownPods: readonly Stored<Pod>[],
  fedPods: readonly Stored<Pod>[],
  me: string,
  cluster: string,
  vms: readonly Stored<VirtualMachine>[] = [],
): Stored<Pod>[] {
  const summary = nodeSummaryOf(self, ownPods, me, vms)
  if (summary === undefined) return []
  // Capacity less the cluster's VMs and own pods (which may exceed it: then nothing is free).
  const held = vmsHeld(vms, me)
  let freeCpu = parseCpu(summary.capacity.cpu) - held.cpu
  let freeMem = parseMemory(summary.capacity.memory) - held.mem
  for (const p of ownPods) {
    if (p.status?.node !== me && p.spec?.placement?.node !== me) continue
    if (p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') continue
    const r = requestsOf(p)
    freeCpu -= r.cpu
    freeMem -= r.mem
  }
  const here = `${me}@${cluster}`
  const bound: { pod: Stored<Pod>; at: number; key: string; cpu: number; mem: number }[] = []
  for (const p of fedPods) {
    if (p.status?.node !== here) continue
    if (p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') continue
    const r = requestsOf(p)
    const at = Date.parse(String((p.status?.scheduling as { at?: unknown } | undefined)?.at ?? ''))
    bound.push({ pod: p, at: Number.isNaN(at) ? 0 : at, key: `${p.metadata.namespace ?? 'default'}/${p.metadata.name}`, ...r })
  }
  // Earliest binding first: those keep their place while they fit.
  bound.sort((a, b) => a.at - b.at || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  const out: Stored<Pod>[] = []
  for (const b of bound) {
    if (b.cpu <= freeCpu && b.mem <= freeMem) {
      freeCpu -= b.cpu
      freeMem -= b.mem
    } else out.push(b.pod)
  }
  return out
}

function requestsOf(p: Stored<Pod>): { cpu: number; mem: number } {
  try {
    const r = podRequests(p.spec?.containers ?? [])
    return { cpu: parseCpu(r.cpu), mem: parseMemory(r.memory) }
  } catch {
    return { cpu: 0, mem: 0 }
  }
}

function stringRecord(v: unknown, max: number): Record<string, string> | undefined {
  if (!isPlainObject(v)) return undefined
  const out: Record<string, string> = {}
  let n = 0
  for (const [k, x] of Object.entries(v)) {
    if (typeof x !== 'string' || k.length > 317 || x.length > 63) continue
    if (++n > max) break
    out[k] = x
  }
  return out
}

/**
 * The nodes of every member cluster, as Node-shaped objects named `node@cluster` (what the binder
 * and `nodeViewOf` read). `removedClusters`: nodes of clusters removed from the federation that
 * pods are still bound to count as forgotten, so their pods move (by policy).
 */
export function federationNodesOf(
  clusters: readonly Stored<Cluster>[],
  boundTo: Iterable<string> = [],
  removedClusters: ReadonlySet<string> = new Set(),
): Stored<Node>[] {
  const out: Stored<Node>[] = []
  const seen = new Set<string>()
  for (const c of clusters) {
    const cluster = c.metadata.name
    if (!isClusterName(cluster)) continue
    const nodes = c.status?.nodes
    if (!isPlainObject(nodes)) continue
    let n = 0
    for (const [node, raw] of Object.entries(nodes)) {
      if (!DNS_LABEL.test(node) || !isPlainObject(raw)) continue
      if (++n > MAX_NODES_PER_CLUSTER) break
      const name = `${node}@${cluster}`
      const alloc = isPlainObject(raw.allocatable) ? raw.allocatable : raw.capacity
      const capacity = isPlainObject(alloc) ? { cpu: String(alloc.cpu ?? '0'), memory: String(alloc.memory ?? '0') } : { cpu: '0', memory: '0' }
      const taints = Array.isArray(raw.taints)
        ? raw.taints
            .slice(0, MAX_TAINTS)
            .filter(
              (t): t is Taint => isPlainObject(t) && typeof t.key === 'string' && ['NoSchedule', 'PreferNoSchedule', 'NoExecute'].includes(t.effect as string),
            )
        : []
      const obj = synthNode(name, stringRecord(raw.labels, MAX_LABELS), capacity, {
        unschedulable: raw.unschedulable === true || raw.ready === false,
        taints,
        forgotten: raw.forgotten === true,
      })
      seen.add(name)
      out.push(obj)
    }
  }
  // Pods bound to a node of a removed cluster: that node is gone for good.
  for (const name of boundTo) {
    const c = clusterOfMemberName(name)
    if (seen.has(name) || c === undefined || !removedClusters.has(c)) continue
    seen.add(name)
    out.push(synthNode(name, undefined, { cpu: '0', memory: '0' }, { unschedulable: true, taints: [], forgotten: true }))
  }
  return out
}

function synthNode(
  name: string,
  labels: Record<string, string> | undefined,
  capacity: { cpu: string; memory: string },
  o: { unschedulable: boolean; taints: Taint[]; forgotten: boolean },
): Stored<Node> {
  return {
    apiVersion: API_VERSION,
    kind: 'Node',
    metadata: { name, ...(labels ? { labels } : {}), uid: name, revision: 0, revisionId: '', createdAt: '', updatedAt: '', updatedBy: 'controller:federation' },
    spec: { ...(o.unschedulable ? { unschedulable: true } : {}), ...(o.taints.length > 0 ? { taints: o.taints } : {}) },
    // `Removed` counts as forgotten for scheduling (isForgotten) without a `status.forgotten`
    // record that the binder would try to clear on a Node object that does not exist here.
    status: { capacity, ...(o.forgotten ? { state: 'Removed' as const } : {}) },
  }
}

/**
 * The cluster-constraint defaults of shared pods: `placement.clusters` absent means the cluster
 * that created the pod (its `orc/cluster` annotation). A pod without either may run nowhere — it
 * stays pending with that reason rather than landing in a cluster nobody chose.
 *
 * Pins (`placement.node`): `node@cluster` names a node of any member cluster, and without
 * `placement.clusters` allows that cluster; a bare node name is a node of the pod's cluster (the
 * one cluster of `placement.clusters`, else the creating one).
 */
export function federatedView(view: ClusterView, podObjects: readonly Stored<Pod>[]): ClusterView {
  const origin = new Map<string, string>()
  for (const p of podObjects) {
    const o = p.metadata.annotations?.[ORIGIN_CLUSTER_ANNOTATION]
    if (typeof o === 'string') origin.set(`${p.metadata.namespace ?? 'default'}/${p.metadata.name}`, o)
  }
  return {
    now: view.now,
    nodes: view.nodes.map((n) => {
      const c = clusterOfMemberName(n.name)
      return c === undefined ? n : { ...n, cluster: c }
    }),
    pods: view.pods.map((p) => {
      const o = origin.get(`${p.namespace}/${p.name}`)
      const home = o !== undefined && isClusterName(o) ? o : undefined
      const out = p.pin === undefined ? p : { ...p, pin: qualifiedPin(p.pin, p.clusters, home) }
      if (out.clusters !== undefined) return out
      const pinned = out.pin === undefined ? undefined : clusterOfMemberName(out.pin)
      const allowed = pinned !== undefined && isClusterName(pinned) ? pinned : home
      return { ...out, clusters: allowed !== undefined ? [allowed] : [] }
    }),
  }
}

/** A pin in a shared namespace as `node@cluster`: a bare node name is a node of the pod's cluster (see federatedView). */
export function qualifiedPin(pin: string, clusters: readonly string[] | undefined, origin: string | undefined): string {
  if (pin.includes('@')) return pin
  const c = clusters?.length === 1 ? clusters[0] : origin
  return `${pin}@${c ?? ''}`
}

/** The node (`node@cluster`) a shared pod runs on or is pinned to, if any. */
export function sharedPodNode(p: Stored<Pod>): string | undefined {
  const bound = p.status?.node
  if (typeof bound === 'string' && bound !== '') return bound
  const pin = p.spec?.placement?.node
  if (typeof pin !== 'string' || pin === '') return undefined
  const clusters = p.spec?.placement?.clusters
  return qualifiedPin(pin, Array.isArray(clusters) ? clusters : undefined, p.metadata.annotations?.[ORIGIN_CLUSTER_ANNOTATION])
}

/** `buildSchedView` for a federation's binder (same signature, see Binder's `buildView`). */
export function buildFederatedSchedView(
  pods: readonly Stored<Pod>[],
  nodes: readonly Stored<Node>[],
  me: string,
  members: readonly NodeMember[],
  now: number,
  downSince?: (name: string) => number | undefined,
  taintSince?: TaintSince,
): ClusterView {
  return federatedView(buildSchedView(pods, nodes, me, members, now, downSince, taintSince), pods)
}

/**
 * The ownership table of a federation document as written from cluster `cluster`: the same fields,
 * each owned by the controller *of this cluster* (`controller:scheduler@home`), which is the author
 * every write from here carries (taggedStore) and the other clusters verify (replica.ts).
 */
export function clusterOwnership(cluster: string): OwnershipTable {
  const suffix = `@${cluster}`
  class Tagged extends OwnershipTable {
    override ownerOf(kind: string, path: readonly (string | number)[]): Owner | typeof USERS {
      const o = super.ownerOf(kind, path)
      return o === USERS ? o : (`${o}${suffix}` as Owner)
    }
  }
  return new Tagged(defaultOwnership().claims())
}

/**
 * How a federation document's replica judges a revision it receives: the cluster's rules
 * (defaultAuthorize: field ownership, the node and lifecycle rules) with the author's and creator's
 * `@cluster` taken off — the owner of `status.nodes` is `controller:cluster` of whichever cluster
 * wrote (its cluster is checked apart: replica.ts, checkAuthorship), where clusterOwnership(c)
 * would name this replica's own cluster's controller only. Users' roles are not checked here (a
 * member's users are its own cluster's; the share's writers restrict them: governance.ts).
 */
export function federationAuthorize(): Authorize {
  const inner = defaultAuthorize(defaultOwnership(), () => true)
  return (r, ctx) => inner({ ...r, a: untaggedAuthor(r.a) }, { ...ctx, ...(ctx.createdBy !== undefined ? { createdBy: untaggedAuthor(ctx.createdBy) } : {}) })
}

/** The store as this cluster's controllers write it: every author tagged `@cluster`. */
export function taggedStore(store: ObjectStore, cluster: string): ObjectStore {
  const tagged = new Set(['apply', 'planApply', 'patch', 'delete', 'rollback'])
  return new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver)
      if (typeof v !== 'function') return v
      if (typeof prop === 'string' && tagged.has(prop)) {
        return (a: unknown, b: unknown, opts?: { author: string }) => {
          const o = prop === 'apply' || prop === 'planApply' || prop === 'rollback' || prop === 'delete' ? b : opts
          const tag = (x: unknown) => (isPlainObject(x) && typeof x.author === 'string' ? { ...x, author: tagAuthor(x.author, cluster) } : x)
          if (o === b) return (v as (...args: unknown[]) => unknown).call(target, a, tag(b))
          return (v as (...args: unknown[]) => unknown).call(target, a, b, tag(opts))
        }
      }
      return (v as (...args: unknown[]) => unknown).bind(target)
    },
  })
}

export interface SummaryPublisherComponents {
  /** The cluster's own store (this node's Node object and the cluster's pods). */
  own: ObjectStore
  /** The federation document, written as this cluster (node summaries; unbinding pods that overcommit this node). */
  fed: ObjectStore
  nodeName: string
  cluster: string
  /** Time and the re-check timer (not keeping the process up). */
  clock: Clock
  log: Logger
  /** Re-check at least this often (default 2000 ms). */
  everyMs?: number
  /**
   * A change of this node's free resources alone is written at most this often (default 30 s);
   * everything else (readiness, cordon, taints, labels, network) at once. See docs/decisions.md,
   * "Federation: node summaries coalesced".
   */
  coalesceMs?: number
}

/** Summary fields whose changes wait for the coalescing window: resources (they change with every pod). */
const COALESCED_FIELDS = new Set(['allocatable', 'capacity'])

/** Whether `want` differs from `have` only in coalesced fields (both present). */
function onlyResourcesChanged(have: unknown, want: NodeSummary): boolean {
  if (!isPlainObject(have)) return false
  const keys = new Set([...Object.keys(have), ...Object.keys(want)])
  for (const k of keys) {
    if (COALESCED_FIELDS.has(k)) continue
    if (!deepEqual(have[k], (want as unknown as Record<string, unknown>)[k])) return false
  }
  return true
}

/**
 * Keeps `Cluster/<cluster>.status.nodes.<node>` of this node current in the federation document,
 * and marks nodes of this cluster forgotten there once `orc node forget` forgot them here.
 * Re-checks on a timer too: two nodes creating `status.nodes` at once keep only one map (Yjs), so
 * an entry that was lost that way is written again.
 */
export class NodeSummaryPublisher {
  /** When this node last wrote its summary (ms); resources-only changes wait `coalesceMs` after it. */
  private lastWriteAt = Number.NEGATIVE_INFINITY
  private timer: TimerHandle | undefined
  private busy = false
  private stopped = false
  private offOwn: (() => void) | undefined

  constructor(private readonly c: SummaryPublisherComponents) {}

  start(): void {
    const offOwn = this.c.own.onChange((keys) => {
      if (keys.some((k) => k.startsWith('Node/') || k.startsWith('Pod/'))) this.soon(300)
    })
    // A federated pod bound here may overcommit the node (overcommitYields).
    const offFed = this.c.fed.onChange((keys) => {
      if (keys.some((k) => k.startsWith('Pod/'))) this.soon(300)
    })
    this.offOwn = () => {
      offOwn()
      offFed()
    }
    this.soon(0)
  }

  /** Unbind federated pods that overcommit this node: their binder places them again, elsewhere. */
  private async yieldPods(pods: readonly Stored<Pod>[], now: number): Promise<void> {
    const here = `${this.c.nodeName}@${this.c.cluster}`
    for (const p of pods) {
      const ref = { kind: 'Pod', namespace: p.metadata.namespace ?? 'default', name: p.metadata.name }
      const reason = `node ${here} over capacity: the cluster's own pods and federated pods bound at the same moment; the latest federated binding yields`
      await this.c.fed.patch(
        ref,
        [
          { path: ['status', 'node'], value: undefined },
          { path: ['status', 'scheduling'], value: { evictedFrom: here, at: new Date(now).toISOString(), by: here, reason } },
        ],
        { author: 'controller:scheduler', reason: `evict from ${here}: ${reason}`, now },
      )
      this.c.log.warn({ kind: 'Pod', ns: ref.namespace, name: ref.name, node: here }, 'federated pod yields: node over capacity')
    }
  }

  stop(): void {
    this.stopped = true
    this.offOwn?.()
    if (this.timer !== undefined) this.c.clock.clearTimeout(this.timer)
  }

  private soon(ms: number): void {
    if (this.stopped) return
    if (this.timer !== undefined) this.c.clock.clearTimeout(this.timer)
    this.timer = unrefTimers(this.c.clock).setTimeout(() => {
      this.timer = undefined
      void this.publish().finally(() => this.soon(this.c.everyMs ?? 2000))
    }, ms)
  }

  /** One pass (tests call it directly). */
  async publish(): Promise<void> {
    if (this.busy || this.stopped) return
    this.busy = true
    try {
      const ref: ObjectRef = { kind: 'Cluster', namespace: '', name: this.c.cluster }
      const cur = this.c.fed.get(ref)
      if (!cur) return // our Cluster object has not arrived yet
      const nodes = cur.status?.nodes
      const have = isPlainObject(nodes) ? nodes : {}
      const self = this.c.own.get({ kind: 'Node', namespace: '', name: this.c.nodeName })
      const ownPods = this.c.own.list('Pod')
      const vms = this.c.own.list('VirtualMachine')
      const want = nodeSummaryOf(self, ownPods, this.c.nodeName, vms)
      // Federated pods bound here beyond what the cluster's own pods and VMs leave: they yield (below).
      const yields = overcommitYields(self, ownPods, this.c.fed.list('Pod'), this.c.nodeName, this.c.cluster, vms)
      const patches: { path: string[]; value: unknown }[] = []
      const now = this.c.clock.now()
      const mine = have[this.c.nodeName]
      if (want && !deepEqual(mine, want)) {
        // Free resources change with every pod of the cluster that starts or ends here: written at
        // most every coalesceMs (the latest value then), so the Cluster object's history does not
        // grow a revision per pod. Anything that decides eligibility goes at once, and so does a
        // summary that let federated pods overcommit this node (else they would be bound here again).
        const wait = yields.length === 0 && onlyResourcesChanged(mine, want) && now - this.lastWriteAt < (this.c.coalesceMs ?? 30_000)
        if (!wait) patches.push({ path: ['status', 'nodes', this.c.nodeName], value: want })
      }
      for (const n of this.c.own.list('Node')) {
        const e = have[n.metadata.name]
        if (n.metadata.name !== this.c.nodeName && isForgotten(n) && isPlainObject(e) && e.forgotten !== true) {
          patches.push({ path: ['status', 'nodes', n.metadata.name, 'forgotten'], value: true })
        }
      }
      if (patches.length > 0) {
        await this.c.fed.patch(ref, patches, {
          author: CLUSTER_CONTROLLER,
          reason: `node ${this.c.nodeName} of ${this.c.cluster}: resources, labels, readiness`,
          now,
        })
        this.lastWriteAt = now
      }
      await this.yieldPods(yields, now)
    } catch (err) {
      this.c.log.warn({ err: (err as Error).message }, 'publish node summary to the federation')
    } finally {
      this.busy = false
    }
  }
}
