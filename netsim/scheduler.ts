/**
 * Local scheduling on every simulated node: each node builds a ClusterView from its own store and
 * its own membership table, runs the real `plan` from src/sched, and executes only the binds that
 * name itself (as `controller:scheduler` patches of `status.node`). A node "runs" a pod when its own
 * store binds the pod to it. The checks here are the scheduler invariants.
 */
import { plan, podRequests, BindOp, nextDecisionTime, type ClusterView, type NodeView, type PodView, type SchedOptionsInput } from '../src/sched/index.ts'
import type { SimNode, Simulator } from './sim.ts'

export const APPS = 'apps'

export interface FailoverRecord {
  pod: string
  from: string
  lostAt: number
  runningAgainAt?: number
  /** Where it runs again. */
  to?: string
}

/**
 * How simulated nodes are named and grouped. The default is one cluster (`node-K`, pods in `apps`);
 * the federation scenario names nodes `node-K@cluster-C` and sets NodeView.cluster.
 */
export interface SchedNaming {
  namespace: string
  name(idx: number): string
  index(name: string): number
  cluster?(idx: number): string
}

export const CLUSTER_NAMING: SchedNaming = {
  namespace: APPS,
  name: (k) => `node-${k}`,
  index: (name) => Number(name.slice('node-'.length)),
}

export class LocalScheduler {
  readonly opts: SchedOptionsInput
  private nextAt = new Map<number, number>()
  /** Pods each node runs, recomputed only when its store changed. */
  private runs = new Map<number, string[]>()
  private runsDirty = new Set<number>()
  /** Pods whose node was lost (ha), waiting to run again. */
  readonly failovers: FailoverRecord[] = []
  /** Binds executed, with what they replaced. */
  binds = 0
  /** ha pods moved away from a node that was in fact up and reachable (a false suspicion). */
  spuriousHaMoves = 0
  /** Time series for the timeline plot. */
  readonly timeline: { t: number; up: number; running: number; doubled: number; pending: number }[] = []
  /** Once views have converged, a pod running on two nodes is a violation. */
  checkDoubles = false
  private total: number | undefined

  constructor(
    readonly sim: Simulator,
    opts: SchedOptionsInput = {},
    readonly naming: SchedNaming = CLUSTER_NAMING,
  ) {
    this.opts = { haAfterSeconds: 30, ...opts }
    const hook = (n: SimNode) => {
      n.dirty = true
      this.runsDirty.add(n.idx)
      n.store!.onChange(() => {
        n.dirty = true
        this.runsDirty.add(n.idx)
      })
    }
    sim.onBoot = hook
    for (const n of sim.upNodes) hook(n)
    sim.onRound = (n) => this.round(n)
    sim.afterRound = () => this.observe()
  }

  /** Create pods (user writes on `via`). */
  async createPods(via: SimNode, count: number, policy: (i: number) => 'ha' | 'best-effort'): Promise<void> {
    for (let i = 0; i < count; i++) {
      const manifest = {
        apiVersion: 'orc/v1',
        kind: 'Pod',
        metadata: { name: `app-${i}`, namespace: APPS, labels: { app: `app-${i}` } },
        spec: { policy: policy(i), containers: [{ name: 'main', image: '/images/app', resources: { requests: { cpu: '100m', memory: '64Mi' } } }] },
      }
      const r = await via.store!.apply(manifest as never, { author: 'user:netsim', now: this.sim.localNow(via) })
      if (r.revision) {
        this.sim.acked.push({ revisionId: r.revision.id, key: `${APPS}/app-${i}`, node: via.idx, at: this.sim.now })
        via.acked.push(r.revision.id)
      }
    }
  }

  viewOf(n: SimNode): ClusterView {
    const sim = this.sim
    const now = sim.localNow(n)
    const nodes: NodeView[] = []
    for (const k of n.known) {
      const alive = sim.isAlive(n, k)
      const since = n.notAlive.get(k)
      const state = alive ? 'alive' : since !== undefined && now - since >= sim.opts.deadAfterMs - sim.opts.suspectAfterMs ? 'dead' : 'suspect'
      const cluster = this.naming.cluster?.(k)
      nodes.push({
        name: this.naming.name(k),
        labels: { site: `site-${sim.nodes[k]!.site}` },
        ...(cluster !== undefined ? { cluster } : {}),
        allocatable: { cpu: '8', memory: '16Gi', pods: 110 },
        state,
        ...(alive ? {} : { since: since ?? now }),
      })
    }
    const pods: PodView[] = []
    const ns = this.naming.namespace
    for (const o of n.store!.list('Pod', ns)) {
      const spec = o.spec as { policy?: 'ha' | 'best-effort'; placement?: { node?: string; clusters?: string[]; preferClusters?: string[] }; containers: never[] }
      const status = (o.status ?? {}) as { node?: string }
      // As the agent's federated view: no placement.clusters → the cluster that created the pod.
      const origin = o.metadata.annotations?.['orc/cluster']
      const clusters = spec.placement?.clusters ?? (this.naming.cluster && origin !== undefined ? [origin] : undefined)
      pods.push({
        namespace: ns,
        name: o.metadata.name,
        labels: o.metadata.labels,
        requests: podRequests(spec.containers),
        policy: spec.policy ?? 'best-effort',
        createdAt: Date.parse(o.metadata.createdAt),
        ...(status.node ? { node: status.node } : {}),
        ...(spec.placement?.node ? { pin: spec.placement.node } : {}),
        ...(clusters !== undefined ? { clusters } : {}),
        ...(spec.placement?.preferClusters ? { preferClusters: spec.placement.preferClusters } : {}),
      })
    }
    return { nodes, pods, now }
  }

  private async round(n: SimNode): Promise<void> {
    const sim = this.sim
    if (sim.opts.membership !== 'full' || !n.store) return
    const now = sim.localNow(n)
    const due = this.nextAt.get(n.idx)
    if (!n.dirty && (due === undefined || now < due)) return
    n.dirty = false
    const view = this.viewOf(n)
    const next = nextDecisionTime(view, { haAfterSeconds: this.opts.haAfterSeconds ?? 30, goneAfterSeconds: this.opts.goneAfterSeconds ?? 7 * 24 * 3600 })
    if (next === undefined) this.nextAt.delete(n.idx)
    else this.nextAt.set(n.idx, next)
    const pods = new Map(view.pods.map((p) => [`${p.namespace}/${p.name}`, p]))
    const me = this.naming.name(n.idx)
    for (const op of plan(view, this.opts)) {
      if (!(op instanceof BindOp) || op.node !== me) continue
      const pod = pods.get(op.pod)!
      if (op.from !== undefined) this.checkMove(n, pod, op.from)
      const [namespace, name] = op.pod.split('/') as [string, string]
      await n.store.patch({ kind: 'Pod', namespace, name }, [{ path: ['status', 'node'], value: me }], { author: 'controller:scheduler', now: sim.localNow(n) })
      this.binds++
      if (!n.up) return
    }
  }

  /** Ground truth for a move away from `fromName`: how long has it really been unreachable from `n`? */
  private checkMove(n: SimNode, pod: PodView, fromName: string): void {
    const sim = this.sim
    const from = sim.nodes[this.naming.index(fromName)]!
    let unreachableFor = -1
    if (!from.up) unreachableFor = sim.now - from.downSince
    else if (sim.net.blocked(from.idx, n.idx) || !sim.net.reaches(from.idx, n.idx)) unreachableFor = sim.now - sim.net.since
    if (pod.policy === 'ha') {
      if (unreachableFor < 0) this.spuriousHaMoves++
      return
    }
    const gone = (this.opts.goneAfterSeconds ?? 7 * 24 * 3600) * 1000
    // Detection needs up to a heartbeat round; skew does not enter (each node uses its own clock).
    if (unreachableFor < gone - sim.heartbeatMs) {
      sim.violation(`best-effort pod ${pod.name} moved early by ${n.name} from ${fromName} (unreachable for ${(unreachableFor / 1000).toFixed(0)}s, goneAfter ${gone / 1000}s)`)
    }
  }

  /** Who runs what: node X runs pod P when X is up and its own store binds P to X. */
  runners(): Map<string, string[]> {
    const out = new Map<string, string[]>()
    for (const n of this.sim.upNodes) {
      let mine = this.runs.get(n.idx)
      if (mine === undefined || this.runsDirty.has(n.idx)) {
        const me = this.naming.name(n.idx)
        mine = n.store!.list('Pod', this.naming.namespace).filter((o) => (o.status as { node?: string } | undefined)?.node === me).map((o) => o.metadata.name)
        this.runs.set(n.idx, mine)
        this.runsDirty.delete(n.idx)
      }
      for (const pod of mine) {
        const list = out.get(pod) ?? []
        list.push(this.naming.name(n.idx))
        out.set(pod, list)
      }
    }
    return out
  }

  /** Record a pod losing its node (for the failover bound). */
  noteLost(node: SimNode): void {
    const me = this.naming.name(node.idx)
    for (const o of node.store?.list('Pod', this.naming.namespace) ?? []) {
      const s = o.status as { node?: string } | undefined
      if (s?.node === me && (o.spec as { policy?: string }).policy === 'ha') {
        this.failovers.push({ pod: o.metadata.name, from: me, lostAt: this.sim.now })
      }
    }
  }

  private observe(): void {
    const run = this.runners()
    let doubled = 0
    for (const [pod, nodes] of run) {
      if (nodes.length > 1) {
        doubled++
        if (this.checkDoubles) this.sim.violation(`pod ${pod} runs on ${nodes.join(', ')} after views converged`)
      }
    }
    for (const f of this.failovers) {
      if (f.runningAgainAt !== undefined || !run.has(f.pod)) continue
      f.runningAgainAt = this.sim.now
      f.to = run.get(f.pod)![0]
    }
    const total = this.total ?? (this.total = this.sim.upNodes[0]?.store!.list('Pod', this.naming.namespace).length ?? 0)
    this.timeline.push({ t: this.sim.now, up: this.sim.upNodes.length, running: run.size, doubled, pending: total - run.size })
  }
}
