/**
 * The loop shared by the cluster-wide controllers without a leader (controller:deployment and
 * controller:rollout, controller:job and controller:cronjob): every agent watches the store, and the
 * node that writes is chosen the same way by everyone (`deploymentWriter`). A pass runs at most every
 * `minPassIntervalMs` after relevant store changes, concurrent requests coalesce into one more pass,
 * and a tick looks again when the writer changes or when time alone may give a pass work.
 */
import type { Logger } from 'pino'
import type { Clock } from '../../effects/index.ts'
import type { Node } from '../../model/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { isForgotten, type NodeMember } from '../sched/index.ts'

/** The clock's methods are its time and timers (the agent's clock, a manual one in tests). */
export interface LeaderlessComponents extends Clock {
  store: ObjectStore
  nodeName: string
  /** This node's membership view; a node missing from it is not a candidate writer. */
  members(): readonly NodeMember[]
  log: Logger
  /**
   * The nodes writers and placements are chosen among (default: the store's Node objects). A
   * federation's shared namespaces have no Node objects: their nodes are the member clusters'
   * summaries, `node@cluster` (federation/scheduling.ts).
   */
  nodes?(): readonly Stored<Node>[]
  /** Least time between passes caused by store changes (default 200 ms). */
  minPassIntervalMs?: number
  /** How often membership is checked for a change of writer, and time-driven work looked at (default 1000 ms). */
  tickMs?: number
}

/** The node that writes deployments' pods and status (and Jobs'), as `me` sees the cluster. */
export function deploymentWriter(
  me: string,
  members: readonly NodeMember[],
  nodes: readonly { metadata: { name: string } }[],
  forgotten: (name: string) => boolean,
): string {
  const alive = new Set(members.filter((m) => m.state === 'alive' || m.self).map((m) => m.name))
  alive.add(me)
  let best = me
  for (const n of nodes) {
    const name = n.metadata.name
    if (!alive.has(name) || forgotten(name)) continue
    if (name < best) best = name
  }
  return best
}

export abstract class LeaderlessController {
  protected stopped = false
  private busy = false
  private again = false
  private requested: unknown
  private tick: unknown
  private lastPassAt = Number.NEGATIVE_INFINITY
  private unsubscribe: (() => void) | undefined
  private running: Promise<void> | undefined

  constructor(protected readonly c: LeaderlessComponents) {}

  /** Whether a change of the object with store key `key` may give a pass work. */
  protected abstract relevant(key: string): boolean
  /** On a tick of the writer, with no change of writer: whether time alone may give a pass work. */
  protected abstract timeMatters(): boolean
  /** One pass, run only on the writer; return early once `stopped`. */
  protected abstract reconcile(): Promise<void>

  start(): void {
    // Store notifications come inside its transaction: look at the keys on the next turn.
    let pending: string[] = []
    this.unsubscribe = this.c.store.onChange((keys) => {
      if (pending.length === 0) {
        setImmediate(() => {
          const ks = pending
          pending = []
          if (!this.stopped && ks.some((k) => this.relevant(k))) this.request()
        })
      }
      pending.push(...keys)
    })
    let lastWriter = ''
    const loop = () => {
      if (this.stopped) return
      const w = this.writer()
      if (w !== lastWriter || (w === this.c.nodeName && this.timeMatters())) this.request()
      lastWriter = w
      this.tick = this.c.setTimeout(loop, this.c.tickMs ?? 1000)
    }
    loop()
  }

  /** Stop reacting; resolves when a pass in progress has finished its current write. */
  async stop(): Promise<void> {
    this.stopped = true
    this.unsubscribe?.()
    if (this.requested !== undefined) this.c.clearTimeout(this.requested)
    if (this.tick !== undefined) this.c.clearTimeout(this.tick)
    await this.running
  }

  /** The nodes of this controller's scope. */
  protected nodes(): readonly Stored<Node>[] {
    return this.c.nodes?.() ?? this.c.store.list('Node')
  }

  writer(): string {
    const nodes = this.nodes()
    const forgotten = new Set(nodes.filter(isForgotten).map((n) => n.metadata.name))
    return deploymentWriter(this.c.nodeName, this.c.members(), nodes, (n) => forgotten.has(n))
  }

  request(): void {
    if (this.requested !== undefined || this.stopped) return
    const wait = Math.max(0, this.lastPassAt + (this.c.minPassIntervalMs ?? 200) - this.c.now())
    this.requested = this.c.setTimeout(() => {
      this.requested = undefined
      void this.pass()
    }, wait)
  }

  /** One pass (if this node is the writer); coalesces concurrent calls. */
  pass(): Promise<void> {
    if (this.busy) {
      this.again = true
      return this.running ?? Promise.resolve()
    }
    this.busy = true
    this.running = this.run().finally(() => {
      this.busy = false
      this.running = undefined
    })
    return this.running
  }

  private async run(): Promise<void> {
    do {
      this.again = false
      if (this.stopped) return
      this.lastPassAt = this.c.now()
      if (this.writer() !== this.c.nodeName) return
      await this.reconcile()
    } while (this.again)
  }
}
