/**
 * Local scheduling on every simulated node: each node process runs the agent's own binder
 * (src/agent/pods/binder.ts: its view from the node's store and membership, the real `plan`, binds
 * to itself as `controller:scheduler` patches) on the node's virtual clock. What is the simulator's
 * here: the binder's clock, its membership (the node's MembershipTable as the heartbeat rounds fed
 * it), the Node objects (synthesised: netsim stores hold no Node objects), the namespace it
 * schedules, and the model of the agent's fence. A node "runs" a pod when its own store binds the
 * pod to it and, for an `ha` pod, while the real self-fencing rule (src/sched/fencing.ts) lets it:
 * every heartbeat round each node computes its quorum state from its own membership table's
 * last-heard times. The checks here are the scheduler invariants.
 */
import { pino } from 'pino'
import { buildFederatedSchedView, federationNodesOf, type NodeSummary } from '../src/agent/federation/index.ts'
import { Binder, type ViewBuilder } from '../src/agent/pods/index.ts'
import { buildSchedView, type NodeMember } from '../src/agent/sched/index.ts'
import type { Clock, TimerHandle } from '../src/effects/index.ts'
import { type Cluster, isRefOf, type Node } from '../src/model/index.ts'
import {
  DEFAULT_FENCING,
  decideFence,
  type FencingOptions,
  fenceWindowMs,
  type QuorumMember,
  type QuorumState,
  quorumState,
  resolveFencing,
  type SchedOptionsInput,
} from '../src/sched/index.ts'
import type { ObjectStore, Stored } from '../src/store/index.ts'
import { EPOCH, type SimNode, type Simulator } from './sim.ts'

const silent = pino({ level: 'silent' })

/**
 * A node process's clock on the simulator's virtual time: its own skewed `now`; timers are events
 * the simulator awaits (so a binder pass a timer starts completes before time moves on), dropped
 * once the process crashed.
 */
export function processClock(sim: Simulator, n: SimNode): Clock {
  const gen = n.gen
  return {
    now: () => sim.localNow(n),
    setTimeout: (fn, ms) => {
      const timer = { cancelled: false }
      sim.at(sim.now + Math.max(0, ms), async () => {
        if (timer.cancelled || n.gen !== gen) return
        await fn()
      })
      return timer
    },
    clearTimeout: (handle: TimerHandle) => {
      if (handle !== undefined) (handle as { cancelled: boolean }).cancelled = true
    },
  }
}

/**
 * Stop grace passed to `decideFence`: 0, so a fenced copy counts as running until the SIGKILL
 * deadline (lastQuorumAt + fenceWindow) — a container that ignores SIGTERM, the worst case. The
 * stop itself is instantaneous, seen at the first heartbeat round at or after the deadline.
 */
export const FENCE_GRACE_MS = 0

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

interface RunningPod {
  name: string
  ha: boolean
}

/** One fault and its heal: the worst ha pod's figures (ms). */
export interface HaEpisode {
  label: string
  start: number
  /** False for a fault fencing is known not to cover: measured, not a violation. */
  checked: boolean
  healedAt?: number
  end?: number
  /** Longest total time one ha pod ran on two or more nodes while the fault lasted, and after the heal. */
  overlapFault: number
  overlapAfter: number
  /** Longest total time one ha pod ran nowhere. */
  down: number
  /** Observations of two copies once the fault had lasted haAfter + margin (violations). */
  late: number
  byPod: Map<string, { fault: number; after: number; down: number }>
}

export class LocalScheduler {
  /** Scheduler options: haAfter/goneAfter reach the binders as a Cluster object's spec.scheduling (the only ones the agent reads there). */
  readonly opts: SchedOptionsInput
  private readonly clusterObjects: Stored<Cluster>[]
  /** Each live node process's binder (the agent's). */
  private binders = new Map<number, Binder>()
  /** Synthesised Node objects, one per node index. */
  private nodeObjects = new Map<number, Stored<Node>>()
  /** Pods each node runs, recomputed only when its store changed. */
  private runs = new Map<number, RunningPod[]>()
  private runsDirty = new Set<number>()
  /** Pods whose node was lost (ha), waiting to run again. */
  readonly failovers: FailoverRecord[] = []
  /** Binds executed, with what they replaced. */
  binds = 0
  /** ha pods moved away from a node that was in fact up and reachable (a false suspicion). */
  spuriousHaMoves = 0
  /** One fault (partition or crash) and its heal, as the ha overlap invariant measures it. */
  episode: HaEpisode | undefined
  readonly episodes: HaEpisode[] = []
  /** Fencing rules in force, or false (ha pods run wherever the store binds them). */
  readonly fencing: FencingOptions | false
  /** Each node's quorum state at its last heartbeat round. */
  private quorum = new Map<number, QuorumState>()
  /** Since when each node has heard a quorum without a gap (its local time). */
  private heardSince = new Map<number, number>()
  /** Nodes whose ha pods were fenced: they start them again only after FENCE_SETTLE_MS of quorum, as the agent does. */
  private wasFenced = new Set<number>()
  /** Copies of a crashed agent that outlive it: its ha containers' watchdogs stop them at the lease deadline. */
  private orphans = new Map<number, { pods: RunningPod[]; until: number }>()
  /** The ha pods (from createPods), and how many copies each had at the last observation. */
  readonly haPods = new Set<string>()
  private copies = new Map<string, number>()
  private lastObserved = 0
  /** Time series for the timeline plot. */
  readonly timeline: { t: number; up: number; running: number; doubled: number; pending: number }[] = []
  /** Once views have converged, a pod running on two nodes is a violation. */
  checkDoubles = false
  private total: number | undefined

  constructor(
    readonly sim: Simulator,
    opts: SchedOptionsInput = {},
    readonly naming: SchedNaming = CLUSTER_NAMING,
    fencing: Partial<FencingOptions> | false = {},
  ) {
    this.opts = { haAfterSeconds: 30, ...opts }
    const scheduling = {
      haAfterSeconds: this.opts.haAfterSeconds,
      ...(this.opts.goneAfterSeconds !== undefined ? { goneAfterSeconds: this.opts.goneAfterSeconds } : {}),
    }
    this.clusterObjects = [
      {
        apiVersion: 'orc/v1',
        kind: 'Cluster',
        metadata: { name: 'netsim', uid: 'netsim', revision: 0, revisionId: '', createdAt: '', updatedAt: '', updatedBy: 'netsim' },
        spec: { scheduling },
      },
    ]
    this.fencing = fencing === false ? false : resolveFencing(fencing)
    const hook = (n: SimNode) => {
      this.runsDirty.add(n.idx)
      this.quorum.delete(n.idx)
      this.heardSince.delete(n.idx)
      // A booted agent whose ha containers were killed by their lease starts them like a fenced node.
      const o = this.orphans.get(n.idx)
      if (o !== undefined && this.sim.now >= o.until) this.wasFenced.add(n.idx)
      this.orphans.delete(n.idx)
      const binder = sim.opts.membership === 'full' ? this.binderFor(n) : undefined
      if (binder) this.binders.set(n.idx, binder)
      else this.binders.delete(n.idx)
      const store = n.store!
      store.onChange((keys) => {
        this.runsDirty.add(n.idx)
        // As the agent's lifecycle controller: only a change that can need a binding wakes the binder.
        if (binder && keys.some((k) => this.mayNeedBinding(store, k, n))) binder.request()
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
      if (policy(i) === 'ha') this.haPods.add(`app-${i}`)
      const r = await via.store!.apply(manifest as never, { author: 'user:netsim', now: this.sim.localNow(via) })
      if (r.revision) {
        this.sim.acked.push({ revisionId: r.revision.id, key: `${APPS}/app-${i}`, node: via.idx, at: this.sim.now })
        via.acked.push(r.revision.id)
      }
    }
  }

  /** The agent's binder for a node process that just started, on its virtual clock. */
  private binderFor(n: SimNode): Binder {
    const gen = n.gen
    const store = n.store!
    const ns = this.naming.namespace
    const me = this.naming.name(n.idx)
    // The binder schedules the scenario's namespace only (sim.write's objects are Pods too), and
    // its writes are counted and checked here; a crashed process's writes go nowhere.
    const scoped = {
      list: (kind: string, namespace?: string) =>
        kind === 'Pod' ? store.list('Pod', ns) : kind === 'Cluster' ? this.clusterObjects : store.list(kind, namespace),
      get: (ref: Parameters<ObjectStore['get']>[0]) => store.get(ref),
      patch: async (...args: Parameters<ObjectStore['patch']>) => {
        if (n.gen !== gen || !n.up) throw new Error('the process crashed')
        const [ref, ops] = args
        const bound = ops.find((o) => o.path.join('.') === 'status.node')?.value
        if (isRefOf(ref, 'Pod') && bound === me) {
          const from = (ops.find((o) => o.path.join('.') === 'status.scheduling')?.value as { from?: string } | undefined)?.from
          const pod = store.get(ref)
          if (from !== undefined && pod) this.checkMove(n, ref.name, pod.spec?.policy === 'ha' ? 'ha' : 'best-effort', from)
          this.binds++
        }
        return store.patch(...args)
      },
    } as unknown as ObjectStore
    const base: ViewBuilder = this.naming.cluster ? buildFederatedSchedView : buildSchedView
    const clock = processClock(this.sim, n)
    return new Binder({
      store: scoped,
      nodeName: me,
      members: () => this.membersOf(n),
      membershipVersion: () => this.membershipVersionOf(n),
      nodes: () => n.known.map((k) => this.nodeObject(k)),
      // As the agent's lifecycle controller: a node without a quorum moves no ha pod (view.noQuorum).
      buildView: (...args) => {
        const v = base(...args)
        const q = this.quorum.get(n.idx)
        return q !== undefined && this.lacksQuorum(q) ? { ...v, noQuorum: `hears ${q.heard} of ${q.size} nodes (quorum ${q.needed})` } : v
      },
      now: () => clock.now(),
      setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
      clearTimeout: (h) => clock.clearTimeout(h),
      log: silent,
    })
  }

  /**
   * Changes whenever a member's state in membersOf(n) does: a transition (memberVersion), or a
   * suspect member becoming dead with time.
   */
  private membershipVersionOf(n: SimNode): string {
    const now = this.sim.localNow(n)
    const deadAfter = this.sim.opts.deadAfterMs - this.sim.opts.suspectAfterMs
    let dead = 0
    for (const since of n.notAlive.values()) if (now - since >= deadAfter) dead++
    return `${n.memberVersion}/${dead}`
  }

  /** `n`'s membership as the mesh's members() would give it: state, and when it last heard each. */
  private membersOf(n: SimNode): NodeMember[] {
    const sim = this.sim
    const now = sim.localNow(n)
    const out: NodeMember[] = []
    for (const k of n.known) {
      const alive = sim.isAlive(n, k)
      const since = n.notAlive.get(k)
      const swim = k === n.idx ? undefined : sim.swimState(n, k)
      const state = swim ?? (alive ? 'alive' : since !== undefined && now - since >= sim.opts.deadAfterMs - sim.opts.suspectAfterMs ? 'dead' : 'suspect')
      const seen = n.lastHeard.get(k)
      // swim: when this node learnt it is not alive (MemberView.downSince; the binder counts haAfter from the later of it and lastSeen).
      const down = swim !== undefined && swim !== 'alive' && since !== undefined ? { downSince: since } : {}
      out.push({ name: this.naming.name(k), state, ...(seen !== undefined ? { lastSeen: seen } : {}), ...down, ...(k === n.idx ? { self: true } : {}) })
    }
    return out
  }

  /** The Node object of node `k` as the binder reads it (labels, capacity). */
  private nodeObject(k: number): Stored<Node> {
    let o = this.nodeObjects.get(k)
    if (o === undefined && this.naming.cluster) {
      // As an agent sees a node of a federation: from its summary in its cluster's Cluster object.
      const [node, cluster] = this.naming.name(k).split('@') as [string, string]
      const capacity = { cpu: '8000m', memory: String(16 * 1024 ** 3) }
      const summary: NodeSummary = { capacity, allocatable: capacity, labels: { site: `site-${this.sim.nodes[k]!.site}` }, ready: true }
      const c = {
        apiVersion: 'orc/v1',
        kind: 'Cluster',
        metadata: { name: cluster, uid: cluster, revision: 1, revisionId: '', createdAt: '', updatedAt: '', updatedBy: 'netsim' },
        spec: { id: cluster },
        status: { nodes: { [node]: summary } },
      } as unknown as Stored<Cluster>
      o = federationNodesOf([c])[0]!
      this.nodeObjects.set(k, o)
    }
    if (o === undefined) {
      const name = this.naming.name(k)
      o = {
        apiVersion: 'orc/v1',
        kind: 'Node',
        metadata: {
          name,
          labels: { site: `site-${this.sim.nodes[k]!.site}` },
          uid: name,
          revision: 0,
          revisionId: '',
          createdAt: '',
          updatedAt: '',
          updatedBy: 'netsim',
        },
        spec: {},
        status: { capacity: { cpu: '8', memory: '16Gi' } },
      }
      this.nodeObjects.set(k, o)
    }
    return o
  }

  /** The lifecycle controller's wake-up rule: a pod gone, or one with no node (and not pinned elsewhere). */
  private mayNeedBinding(store: ObjectStore, key: string, n: SimNode): boolean {
    if (!key.startsWith('Pod/')) return key.startsWith('Node/')
    const [, namespace, name] = key.split('/') as [string, string, string]
    if (namespace !== this.naming.namespace) return false
    const pod = store.get({ kind: 'Pod', namespace, name })
    if (!pod) return true
    const pin = pod.spec?.placement?.node
    if (typeof pin === 'string' && pin !== '' && pin !== this.naming.name(n.idx)) return false
    const node = pod.status?.node
    return typeof node !== 'string' || node === ''
  }

  get haAfterMs(): number {
    return (this.opts.haAfterSeconds ?? 30) * 1000
  }

  /** haAfter + the fencing margin: the longest two copies of an ha pod may run after a fault (checked with fencing off too). */
  get overlapBoundMs(): number {
    return this.haAfterMs + (this.fencing === false ? DEFAULT_FENCING : this.fencing).fenceMarginSeconds * 1000
  }

  private lacksQuorum(q: QuorumState): boolean {
    return this.fencing !== false && q.heard < q.needed
  }

  /** Recompute `n`'s quorum state from its membership's last-heard times (every heartbeat round; netsim forgets no member). */
  private updateQuorum(n: SimNode): void {
    if (this.fencing === false || !n.table) return
    const now = this.sim.localNow(n)
    const others: QuorumMember[] = []
    for (const k of n.known) {
      if (k === n.idx) continue
      const seen = n.lastHeard.get(k)
      others.push(seen === undefined ? { name: this.naming.name(k) } : { name: this.naming.name(k), lastSeen: seen })
    }
    const q = quorumState(others, now, this.fencing)
    this.quorum.set(n.idx, q)
    if (this.lacksQuorum(q)) this.heardSince.delete(n.idx)
    else if (!this.heardSince.has(n.idx)) this.heardSince.set(n.idx, now)
  }

  /** Is `n` fenced now: may it not run its ha pods? */
  fenced(n: SimNode): boolean {
    if (this.fencing === false) return false
    const q = this.quorum.get(n.idx)
    if (q === undefined) return true // not a heartbeat round since the process started: no quorum heard yet
    const since = this.heardSince.get(n.idx)
    // A node that fenced its ha pods starts them again like the agent: after a quorum heard for FENCE_SETTLE_MS.
    const run = decideFence(
      since === undefined ? q : { ...q, heardSince: since },
      this.sim.localNow(n),
      this.haAfterMs,
      FENCE_GRACE_MS,
      this.fencing,
      this.wasFenced.has(n.idx),
    ).run
    if (run) this.wasFenced.delete(n.idx)
    else this.wasFenced.add(n.idx)
    return !run
  }

  /**
   * The agent process of `n` crashes but the machine stays up: its ha containers run on until the
   * lease deadline their watchdog checks (lastQuorumAt + fence window, written at the last round),
   * best-effort ones until the agent is back. Without fencing this is a plain crash (all stop).
   */
  crashAgent(n: SimNode): void {
    const q = this.quorum.get(n.idx)
    if (this.fencing !== false && q !== undefined && n.store) {
      const me = this.naming.name(n.idx)
      const pods = n.store.list('Pod', this.naming.namespace).filter((o) => (o.status as { node?: string } | undefined)?.node === me)
      const lease = q.lastQuorumAt + fenceWindowMs(this.haAfterMs, this.fencing) - EPOCH - n.skew
      if (pods.length > 0)
        this.orphans.set(n.idx, { pods: pods.map((o) => ({ name: o.metadata.name, ha: (o.spec as { policy?: string }).policy === 'ha' })), until: lease })
    }
    this.sim.crash(n)
  }

  /** A heartbeat round on `n`: its quorum, then the binder's membership watch (membership changes only at rounds). */
  private async round(n: SimNode): Promise<void> {
    if (this.sim.opts.membership !== 'full' || !n.store) return
    this.updateQuorum(n)
    await this.binders.get(n.idx)?.watchMembership()
  }

  /** Ground truth for a move away from `fromName`: how long has it really been unreachable from `n`? */
  private checkMove(n: SimNode, pod: string, policy: 'ha' | 'best-effort', fromName: string): void {
    const sim = this.sim
    const from = sim.nodes[this.naming.index(fromName)]!
    let unreachableFor = -1
    if (!from.up) unreachableFor = sim.now - from.downSince
    else if (sim.net.blocked(from.idx, n.idx) || !sim.net.reaches(from.idx, n.idx)) unreachableFor = sim.now - sim.net.since
    if (policy === 'ha') {
      if (unreachableFor < 0) this.spuriousHaMoves++
      return
    }
    const gone = (this.opts.goneAfterSeconds ?? 7 * 24 * 3600) * 1000
    // Detection needs up to a heartbeat round; skew does not enter (each node uses its own clock).
    if (unreachableFor < gone - sim.heartbeatMs) {
      sim.violation(
        `best-effort pod ${pod} moved early by ${n.name} from ${fromName} (unreachable for ${(unreachableFor / 1000).toFixed(0)}s, goneAfter ${gone / 1000}s)`,
      )
    }
  }

  /**
   * Who runs what: node X runs pod P when X is up and its own store binds P to X — an ha pod only
   * while X is not fenced. A crashed agent's containers run on until their lease deadline.
   */
  runners(): Map<string, string[]> {
    const out = new Map<string, string[]>()
    const add = (pod: string, node: string) => {
      const list = out.get(pod) ?? []
      list.push(node)
      out.set(pod, list)
    }
    for (const n of this.sim.upNodes) {
      let mine = this.runs.get(n.idx)
      if (mine === undefined || this.runsDirty.has(n.idx)) {
        const me = this.naming.name(n.idx)
        mine = n
          .store!.list('Pod', this.naming.namespace)
          .filter((o) => (o.status as { node?: string } | undefined)?.node === me)
          .map((o) => ({ name: o.metadata.name, ha: (o.spec as { policy?: string }).policy === 'ha' }))
        this.runs.set(n.idx, mine)
        this.runsDirty.delete(n.idx)
      }
      const fenced = mine.some((p) => p.ha) && this.fenced(n)
      for (const pod of mine) if (!(pod.ha && fenced)) add(pod.name, this.naming.name(n.idx))
    }
    for (const [idx, o] of this.orphans) {
      for (const pod of o.pods) if (!pod.ha || this.sim.now < o.until) add(pod.name, this.naming.name(idx))
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

  /** A fault begins now (call right after it is applied): ha overlap and downtime are measured from here. */
  beginFault(label: string, opts: { checked?: boolean } = {}): void {
    this.closeEpisode()
    this.episode = { label, start: this.sim.now, checked: opts.checked ?? true, overlapFault: 0, overlapAfter: 0, down: 0, late: 0, byPod: new Map() }
  }

  /** The fault is over (healed, or the crashed nodes are back): overlap from now on counts as after the heal. */
  endFault(): void {
    if (this.episode && this.episode.healedAt === undefined) this.episode.healedAt = this.sim.now
  }

  /** Close the current episode: its worst per-pod figures, checked against haAfter + margin. */
  closeEpisode(): HaEpisode | undefined {
    const ep = this.episode
    if (!ep) return undefined
    this.episode = undefined
    ep.end = this.sim.now
    for (const [pod, t] of ep.byPod) {
      ep.overlapFault = Math.max(ep.overlapFault, t.fault)
      ep.overlapAfter = Math.max(ep.overlapAfter, t.after)
      ep.down = Math.max(ep.down, t.down)
      if (ep.checked && t.fault + t.after > this.overlapBoundMs) {
        this.sim.violation(
          `${ep.label}: ha pod ${pod} ran on two or more nodes for ${((t.fault + t.after) / 1000).toFixed(0)}s in all (bound haAfter + margin = ${this.overlapBoundMs / 1000}s)`,
        )
      }
    }
    this.episodes.push(ep)
    return ep
  }

  /** Credit the time since the last observation to the copies counted then (stops are seen at rounds). */
  private account(run: Map<string, string[]>): void {
    const now = this.sim.now
    const dt = now - this.lastObserved
    this.lastObserved = now
    const ep = this.episode
    if (ep) {
      for (const pod of this.haPods) {
        const before = this.copies.get(pod) ?? 0
        let t = ep.byPod.get(pod)
        if (t === undefined) ep.byPod.set(pod, (t = { fault: 0, after: 0, down: 0 }))
        const from = Math.max(now - dt, ep.start)
        const span = Math.max(0, now - from)
        if (before >= 2) {
          if (ep.healedAt === undefined) t.fault += span
          else t.after += span
        } else if (before === 0) t.down += span
        const copies = run.get(pod)?.length ?? 0
        // The stronger form: once the fault has lasted haAfter + margin, at most one copy.
        if (copies >= 2 && ep.healedAt === undefined && now - ep.start >= this.overlapBoundMs) {
          ep.late++
          if (ep.late === 1 && ep.checked)
            this.sim.violation(
              `${ep.label}: ha pod ${pod} runs on ${run.get(pod)!.join(', ')} ${((now - ep.start) / 1000).toFixed(0)}s into the fault (bound haAfter + margin = ${this.overlapBoundMs / 1000}s)`,
            )
        }
      }
    }
    for (const pod of this.haPods) this.copies.set(pod, run.get(pod)?.length ?? 0)
  }

  private observe(): void {
    const run = this.runners()
    this.account(run)
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
    const total = this.total ?? (this.total = this.sim.upNodes[0]?.store?.list('Pod', this.naming.namespace).length ?? 0)
    this.timeline.push({ t: this.sim.now, up: this.sim.upNodes.length, running: run.size, doubled, pending: total - run.size })
  }
}
