/**
 * controller:scheduler — local scheduling on every node (DESIGN principle 7). Every node runs the
 * pure `plan()` on its own replica of the store and its own membership view; a node only ever
 * writes bindings *to itself*:
 * - `bind` to this node (a pending pod, or one whose node is lost for it by policy): patch
 *   `status.node` and record `status.scheduling` (why, from where, what binding it supersedes);
 * - `evict` from this node (untolerated NoExecute taint, pin moved away): clear `status.node`.
 * Every node computes the same plan from the same view, so only the chosen node binds. Partial views
 * can still produce concurrent bindings; the store keeps one value of `status.node` on every node,
 * and the lifecycle controller of any other node stops its copy (`assignedTo`) — and reports it in
 * its own Node (`status.stoppedCopies`), never in the pod's status.
 *
 * Membership is not in the store, so besides store changes the binder re-plans on a short tick and
 * at `nextDecisionTime` (when an ha timer or goneAfter runs out).
 */
import type { Logger } from 'pino'
import type { Clock } from '../../effects/index.ts'
import type { Node, Pod, VirtualMachine } from '../../model/index.ts'
import { type ClusterView, nextDecisionTime, plan, resolveOptions, type SchedOptions } from '../../sched/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { NODE_CONTROLLER } from '../node-info.ts'
import { buildSchedView, type NodeMember, schedOptionsOf, type TaintSince, vmSchedKey, withVmUses } from '../sched/index.ts'

export const SCHEDULER_CONTROLLER = 'controller:scheduler'

/**
 * The clock's methods are the binder's time and timers: the agent's clock, a manual one in tests,
 * the simulator's virtual time in netsim (which awaits the passes the timers start).
 */
export interface BinderComponents extends Clock {
  store: ObjectStore
  nodeName: string
  /** This node's membership view (the mesh's members()); a node missing from it counts as dead. */
  members(): readonly NodeMember[]
  log: Logger
  /** Re-plan at least this often (membership changes are not store changes). Default 1000 ms. */
  tickMs?: number
  /** Least time between passes caused by store changes (default 250 ms). */
  minPassIntervalMs?: number
  /**
   * The nodes pods may be bound to (default: the store's Node objects). A federation's binder
   * passes its member clusters' nodes, named `node@cluster`.
   */
  nodes?: () => Stored<Node>[]
  /** How the view is built (default buildSchedView); a federation's binder adds clusters. */
  buildView?: ViewBuilder
  /**
   * A value that changes whenever some member's state does (optional): the membership tick then
   * compares it instead of every member's state, which costs O(N log N) a tick with N members.
   */
  membershipVersion?: () => string | number
}

export type ViewBuilder = typeof buildSchedView

export interface BindDecision {
  /** A pod, or an unpinned VirtualMachine the plan placed as one (bound the same way: status.node, status.scheduling). */
  pod: Stored<Pod> | Stored<VirtualMachine>
  kind: 'Pod' | 'VirtualMachine'
  /** `bind`: set status.node to this node; `evict`: clear it. */
  action: 'bind' | 'evict'
  reason: string
  /** The node the pod leaves (a move). */
  from?: string
}

function membersOf(alive: readonly (string | NodeMember)[]): NodeMember[] {
  return alive.map((m) => (typeof m === 'string' ? { name: m, state: 'alive' as const } : m))
}

/**
 * What this node writes now (pure given the store contents, membership and `now`). `members` may be
 * plain names (all alive) or membership entries; `downSince` says since when a node is unreachable.
 */
export function decideBindings(
  pods: readonly Stored<Pod>[],
  nodes: readonly Stored<Node>[],
  me: string,
  members: readonly (string | NodeMember)[],
  now: number,
  opts: Partial<SchedOptions> = {},
  downSince?: (name: string) => number | undefined,
  taintSince?: TaintSince,
  build: ViewBuilder = buildSchedView,
  /** VirtualMachines (their unpinned ones are placed with the pods: withVmUses). */
  vms: readonly Stored<VirtualMachine>[] = [],
): BindDecision[] {
  const view = build(pods, nodes, me, membersOf(members), now, downSince, taintSince)
  return decideFromView(vms.length > 0 ? withVmUses(view, vms) : view, pods, me, opts, vms)
}

/** `decideBindings` on a view already built from `pods` (and `vms`, when the builder adds them). */
function decideFromView(
  view: ClusterView,
  pods: readonly Stored<Pod>[],
  me: string,
  opts: Partial<SchedOptions>,
  vms: readonly Stored<VirtualMachine>[] = [],
): BindDecision[] {
  const out: BindDecision[] = []
  const byKey = new Map<string, { obj: Stored<Pod> | Stored<VirtualMachine>; kind: BindDecision['kind'] }>(
    pods.map((p) => [`${p.metadata.namespace ?? 'default'}/${p.metadata.name}`, { obj: p, kind: 'Pod' }]),
  )
  for (const v of vms) byKey.set(vmSchedKey(v.metadata.namespace ?? 'default', v.metadata.name), { obj: v, kind: 'VirtualMachine' })
  const decided = new Set<string>()
  for (const op of plan(view, opts)) {
    const found = byKey.get(op.pod)
    if (!found) continue
    const { obj: pod, kind } = found
    if (op.type === 'bind' && op.node === me) {
      out.push({ pod, kind, action: 'bind', reason: op.reason, ...(op.from !== undefined ? { from: op.from } : {}) })
      decided.add(op.pod)
    } else if (op.type === 'evict' && op.node === me && !decided.has(op.pod)) {
      // An evicted pod that plan() re-places here in the same pass stays bound here.
      const rebound = out.some((d) => d.pod === pod)
      if (!rebound) out.push({ pod, kind, action: 'evict', reason: op.reason })
    }
  }
  // A pod pinned here runs here whatever its binding says (assignedTo); keep status.node honest.
  for (const p of pods) {
    const pin = p.spec?.placement?.node
    const key = `${p.metadata.namespace ?? 'default'}/${p.metadata.name}`
    if (pin === me && p.status?.node !== me && !decided.has(key)) out.push({ pod: p, kind: 'Pod', action: 'bind', reason: 'pinned to this node' })
  }
  // So is a VM's: its binding names its pin (spec.node).
  for (const v of vms)
    if (v.spec?.node === me && v.status?.node !== me) out.push({ pod: v, kind: 'VirtualMachine', action: 'bind', reason: 'pinned to this node' })
  // An evict followed by a bind here in one plan is a no-op for status.node.
  return out.filter((d) => !(d.action === 'evict' && out.some((o) => o.pod === d.pod && o.action === 'bind')))
}

export class Binder {
  /** Builds the scheduler's view (the federation binder adds the shared pods' view). */
  private get build(): ViewBuilder {
    return this.c.buildView ?? buildSchedView
  }
  private busy = false
  private again = false
  private stopped = false
  private tick: unknown
  private wake: { at: number; handle: unknown } | undefined
  /** When this node first saw each node unreachable (membership may not know when it last heard). */
  private readonly downSince = new Map<string, number>()
  /** When this node first saw each NoExecute taint (`node|key=value`): tolerationSeconds count from it. */
  private readonly taintSeen = new Map<string, number>()

  constructor(private readonly c: BinderComponents) {
    this.startedAt = c.now()
  }

  start(): void {
    const every = this.c.tickMs ?? 1000
    const loop = () => {
      if (this.stopped) return
      const pass = this.watchMembership()
      this.tick = this.c.setTimeout(loop, every)
      return pass
    }
    this.tick = this.c.setTimeout(loop, every)
  }

  private ticks = 0
  private lastMembership: string | number = ''

  /**
   * One tick of the membership watch (`start` runs it every `tickMs`; the simulator once per
   * heartbeat round, when membership can change). Membership is not in the store, so the tick
   * watches it; a full pass runs only when some member changed state (and every 10th tick as a
   * safety net): planning over every pod each second would cost the writes a share of the CPU.
   */
  watchMembership(): Promise<void> | undefined {
    if (this.stopped) return undefined
    const membership =
      this.c.membershipVersion?.() ??
      this.c
        .members()
        .map((m) => `${m.name}:${m.state}`)
        .sort()
        .join(',')
    if (membership === this.lastMembership && ++this.ticks % 10 !== 0) return undefined
    this.lastMembership = membership
    return this.pass()
  }

  private requested: unknown
  private lastPassAt = Number.NEGATIVE_INFINITY

  /**
   * Ask for a pass after a store change. A pass plans over every pod, so passes are spaced at
   * least `minPassIntervalMs` apart and the changes in between share one: with thousands of pods
   * being applied, planning on every change would take the whole CPU from the writes themselves.
   */
  request(): void {
    if (this.requested !== undefined || this.stopped) return
    const wait = Math.max(0, this.lastPassAt + (this.c.minPassIntervalMs ?? 250) - this.c.now())
    this.requested = this.c.setTimeout(() => {
      this.requested = undefined
      return this.pass()
    }, wait)
  }

  stop(): void {
    this.stopped = true
    if (this.requested !== undefined) this.c.clearTimeout(this.requested)
    if (this.tick !== undefined) this.c.clearTimeout(this.tick)
    if (this.wake) this.c.clearTimeout(this.wake.handle)
  }

  private options(): SchedOptions {
    return resolveOptions(schedOptionsOf(this.c.store.list('Cluster')))
  }

  /** Since when `name` has been unreachable as this node sees it; tracks first observations. */
  private trackDown(members: readonly NodeMember[], nodes: readonly Stored<Node>[], now: number): (name: string) => number | undefined {
    const byName = new Map(members.map((m) => [m.name, m]))
    for (const n of nodes) {
      const name = n.metadata.name
      const m = byName.get(name)
      if (name === this.c.nodeName || m?.state === 'alive') {
        this.downSince.delete(name)
        continue
      }
      if (!this.downSince.has(name)) {
        // Under swim, lastSeen is evidence that may reach us a few periods late, so haAfter counts
        // from when this node learnt of the suspicion if that is later (docs/decisions.md).
        const seen = typeof m?.lastSeen === 'number' ? Math.min(m.lastSeen, now) : now
        this.downSince.set(name, typeof m?.downSince === 'number' ? Math.max(seen, Math.min(m.downSince, now)) : seen)
      }
    }
    return (name) => this.downSince.get(name)
  }

  /** First sight of each NoExecute taint; taints that went away are forgotten. */
  private trackTaints(nodes: readonly Stored<Node>[], now: number): TaintSince {
    const present = new Set<string>()
    for (const n of nodes) {
      const taints = n.spec?.taints
      if (!Array.isArray(taints)) continue
      for (const t of taints) {
        if (t.effect !== 'NoExecute') continue
        const k = `${n.metadata.name}|${t.key}=${t.value ?? ''}`
        present.add(k)
        if (!this.taintSeen.has(k)) this.taintSeen.set(k, now)
      }
    }
    for (const k of this.taintSeen.keys()) if (!present.has(k)) this.taintSeen.delete(k)
    return (node, t) => this.taintSeen.get(`${node}|${t.key}=${t.value ?? ''}`)
  }

  /** The view and options the next pass plans with (`orc why`). */
  currentView(): { view: ClusterView; opts: SchedOptions } {
    const now = this.c.now()
    const nodes = this.nodes()
    const members = this.c.members()
    const down = this.trackDown(members, nodes, now)
    const taints = this.trackTaints(nodes, now)
    return { view: this.build(this.c.store.list('Pod'), nodes, this.c.nodeName, members, now, down, taints), opts: this.options() }
  }

  private nodes(): Stored<Node>[] {
    return this.c.nodes ? this.c.nodes() : this.c.store.list('Node')
  }

  /** Bind what should be bound here; coalesces calls made while a pass is running. */
  async pass(): Promise<void> {
    if (this.busy) {
      this.again = true
      return
    }
    this.busy = true
    try {
      do {
        this.again = false
        if (this.stopped) return
        const now = this.c.now()
        this.lastPassAt = now
        const pods = this.c.store.list('Pod')
        const vms = this.c.store.list('VirtualMachine')
        const nodes = this.nodes()
        const members = this.c.members()
        const opts = this.options()
        const down = this.trackDown(members, nodes, now)
        const taints = this.trackTaints(nodes, now)
        await this.clearOwnForgotten(nodes)
        // One view per pass: plan() and nextDecisionTime() only read it.
        const view = this.build(pods, nodes, this.c.nodeName, members, now, down, taints)
        for (const d of decideFromView(view, pods, this.c.nodeName, opts, vms)) await this.write(d)
        this.scheduleWake(nextDecisionTime(view, opts))
      } while (this.again)
    } finally {
      this.busy = false
    }
  }

  private startedAt = Number.POSITIVE_INFINITY

  /**
   * `orc node forget` on this node, written before this agent started (it arrives when this node
   * syncs after coming back): this node is back, so the mark goes. A mark written while this agent
   * runs (a partition; the operator chose) stays until the agent restarts.
   */
  private async clearOwnForgotten(nodes: readonly Stored<Node>[]): Promise<void> {
    const self = nodes.find((n) => n.metadata.name === this.c.nodeName)
    const f = self?.status?.forgotten
    if (!f || typeof f !== 'object') return
    const at = Date.parse(String(f.at))
    if (!(at < this.startedAt)) return
    const now = this.c.now()
    await this.c.store
      .patch({ kind: 'Node', namespace: '', name: this.c.nodeName }, [{ path: ['status', 'forgotten'], value: undefined }], {
        author: NODE_CONTROLLER,
        reason: `node ${this.c.nodeName} is back (forgotten at ${new Date(at).toISOString()})`,
        now,
      })
      .then(() => this.c.log.warn({ node: this.c.nodeName, forgottenAt: at }, 'this node had been forgotten; it is back'))
      .catch((err) => this.c.log.warn({ err: String(err) }, 'clear forgotten mark'))
  }

  private scheduleWake(at: number | undefined): void {
    if (at === undefined || this.stopped) return
    if (this.wake && this.wake.at <= at) return
    if (this.wake) this.c.clearTimeout(this.wake.handle)
    const handle = this.c.setTimeout(
      () => {
        this.wake = undefined
        return this.pass()
      },
      Math.max(0, at - this.c.now()) + 5,
    )
    this.wake = { at, handle }
  }

  private async write(d: BindDecision): Promise<void> {
    const pod = d.pod
    const ref = { kind: d.kind, namespace: pod.metadata.namespace ?? 'default', name: pod.metadata.name }
    const me = this.c.nodeName
    const now = this.c.now()
    const at = new Date(now).toISOString()
    try {
      if (d.action === 'bind') {
        const previous = pod.status?.node
        const scheduling: Record<string, unknown> = { node: me, at, by: me, reason: d.reason }
        if (typeof previous === 'string' && previous !== '' && previous !== me) scheduling.from = previous
        const res = await this.c.store.patch(
          ref,
          [
            { path: ['status', 'node'], value: me },
            { path: ['status', 'scheduling'], value: scheduling },
          ],
          { author: SCHEDULER_CONTROLLER, reason: `bind to ${me}${scheduling.from ? ` (from ${String(scheduling.from)})` : ''}: ${d.reason}`, now },
        )
        if (res.revision)
          this.c.log.info(
            { kind: d.kind, ns: ref.namespace, name: ref.name, rev: res.revision.number, node: me, from: scheduling.from, reason: d.reason },
            d.kind === 'Pod' ? 'pod bound' : 'vm bound',
          )
      } else {
        const res = await this.c.store.patch(
          ref,
          [
            { path: ['status', 'node'], value: undefined },
            { path: ['status', 'scheduling'], value: { evictedFrom: me, at, by: me, reason: d.reason } },
          ],
          { author: SCHEDULER_CONTROLLER, reason: `evict from ${me}: ${d.reason}`, now },
        )
        if (res.revision)
          this.c.log.info(
            { kind: d.kind, ns: ref.namespace, name: ref.name, rev: res.revision.number, node: me, reason: d.reason },
            `${d.kind === 'Pod' ? 'pod' : 'vm'} evicted`,
          )
      }
    } catch (err) {
      // deleted meanwhile, or refused: the next pass sees the new state
      this.c.log.warn({ kind: d.kind, ns: ref.namespace, name: ref.name, err: String(err) }, d.kind === 'Pod' ? 'bind pod' : 'bind vm')
    }
  }
}
