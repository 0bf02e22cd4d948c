/**
 * controller:deployment and controller:rollout — PinnedDeployments without a control plane.
 *
 * Who writes: one node at a time, chosen the same way by everyone — the alphabetically first node
 * that this node sees alive and that is not forgotten. Views can disagree for a while (a partition,
 * a node just joining): then two nodes both write, but what they write is a pure function of the
 * replicated objects (pod names from deployment name, template hash and ordinal or node; content from
 * the template), so concurrent creations of one pod carry the same content and the store's merge keeps
 * one. No node ever creates a second copy under another name.
 *
 * controller:deployment writes Pods (create, update, delete); controller:rollout writes
 * `PinnedDeployment.status` from the pods' phases. They are two controllers because one that read
 * `Pod.status.phase` and wrote `Pod.spec` would form a read/write loop with controller:lifecycle.
 */
import type { Logger } from 'pino'
import type { Clock } from '../../effects/index.ts'
import { OrcError, type Pod } from '../../model/index.ts'
import { DEPLOYMENT_LABEL } from '../../sched/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { isForgotten, type NodeMember } from '../sched/index.ts'
import { DEPLOYMENT_CONTROLLER, type DeploymentWrite, planDeploymentWrites, ROLLOUT_CONTROLLER, rolloutRecord, statusOf, storedStatus } from './plan.ts'

/** The clock's methods are its time and timers (the agent's clock, a manual one in tests). */
export interface DeploymentComponents extends Clock {
  store: ObjectStore
  nodeName: string
  /** This node's membership view; a node missing from it is not a candidate writer. */
  members(): readonly NodeMember[]
  log: Logger
  /** Least time between passes caused by store changes (default 200 ms). */
  minPassIntervalMs?: number
  /** How often membership is checked for a change of writer (default 1000 ms). */
  tickMs?: number
}

/** The node that writes deployments' pods and status, as `me` sees the cluster. */
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

export class DeploymentController {
  private busy = false
  private again = false
  private stopped = false
  private requested: unknown
  private tick: unknown
  private lastPassAt = Number.NEGATIVE_INFINITY
  private unsubscribe: (() => void) | undefined
  private readonly refused = new Set<string>()
  private readonly log: Logger

  constructor(private readonly c: DeploymentComponents) {
    this.log = c.log
  }

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
      if (w !== lastWriter) {
        lastWriter = w
        this.request()
      }
      // A rollout in progress is looked at every tick: its progress deadline passes without a store change.
      else if (w === this.c.nodeName && this.c.store.list('PinnedDeployment').some((d) => d.status?.rollout?.state === 'Progressing')) this.request()
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

  private running: Promise<void> | undefined

  private relevant(key: string): boolean {
    if (key.startsWith('PinnedDeployment/') || key.startsWith('Node/')) return true
    if (!key.startsWith('Pod/')) return false
    // A pod change matters only for pods of a deployment (or one deleted, which may have been one).
    const [, namespace, ...rest] = key.split('/')
    const p = this.c.store.get({ kind: 'Pod', namespace: namespace ?? '', name: rest.join('/') })
    return p === undefined || p.metadata.labels?.[DEPLOYMENT_LABEL] !== undefined
  }

  writer(): string {
    const nodes = this.c.store.list('Node')
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

  /** One reconcile of every deployment (if this node is the writer); coalesces concurrent calls. */
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
      const deployments = this.c.store.list('PinnedDeployment')
      const nodes = this.c.store.list('Node')
      for (const w of planDeploymentWrites(deployments, this.c.store.list('Pod'), nodes)) {
        if (this.stopped) return
        await this.write(w)
      }
      // Pods per deployment, once: a pass runs after every status change of a deployment's pod.
      const byDeployment = new Map<string, Stored<Pod>[]>()
      for (const p of this.c.store.list('Pod')) {
        const dep = p.metadata.labels?.[DEPLOYMENT_LABEL]
        if (dep === undefined) continue
        const k = `${p.metadata.namespace ?? 'default'}/${dep}`
        const list = byDeployment.get(k)
        if (list) list.push(p)
        else byDeployment.set(k, [p])
      }
      for (const d of this.c.store.list('PinnedDeployment')) {
        if (this.stopped) return
        let status: Record<string, unknown>
        let reason = 'rollout status'
        try {
          const mine = byDeployment.get(`${d.metadata.namespace ?? 'default'}/${d.metadata.name}`) ?? []
          const s = statusOf(d, mine, nodes)
          const before = d.status?.rollout
          const rollout = rolloutRecord(d, s, mine, this.c.now())
          if (rollout?.state === 'Aborted' && before?.state !== 'Aborted') {
            reason = `rollout of template ${rollout.template} aborted: ${rollout.reason}`
            this.log.warn({ kind: 'PinnedDeployment', ns: d.metadata.namespace, name: d.metadata.name, reason }, 'rollout aborted')
          }
          status = storedStatus(s, rollout)
        } catch {
          continue
        }
        const ref = { kind: 'PinnedDeployment', namespace: d.metadata.namespace ?? 'default', name: d.metadata.name }
        await this.c.store
          .patch(
            ref,
            Object.entries(status).map(([k, value]) => ({ path: ['status', k], value })),
            { author: ROLLOUT_CONTROLLER, reason, now: this.c.now() },
          )
          .catch((err) => this.log.warn({ kind: 'PinnedDeployment', ns: ref.namespace, name: ref.name, err: String(err) }, 'write rollout status'))
      }
    } while (this.again)
  }

  private async write(w: DeploymentWrite): Promise<void> {
    const now = this.c.now()
    const ref = w.op === 'apply' ? { kind: 'Pod', namespace: w.manifest.metadata.namespace ?? 'default', name: w.manifest.metadata.name } : w.ref
    try {
      if (w.op === 'apply') {
        const res = await this.c.store.apply(w.manifest, { author: DEPLOYMENT_CONTROLLER, reason: w.reason, now })
        if (res.revision)
          this.log.info({ kind: 'Pod', ns: ref.namespace, name: ref.name, rev: res.revision.number, reason: w.reason }, 'deployment pod written')
        this.refused.delete(`${ref.namespace}/${ref.name}`)
      } else {
        await this.c.store.delete(ref, { author: DEPLOYMENT_CONTROLLER, reason: w.reason, now })
        this.log.info({ kind: 'Pod', ns: ref.namespace, name: ref.name, reason: w.reason }, 'deployment pod deleted')
      }
    } catch (err) {
      if (err instanceof OrcError && err.code === 'not_found') return // deleted meanwhile
      // Typically a pod of that name created by a user: say so once, not on every pass.
      const k = `${ref.namespace}/${ref.name}`
      if (this.refused.has(k)) return
      this.refused.add(k)
      this.log.warn({ kind: 'Pod', ns: ref.namespace, name: ref.name, err: String(err) }, 'write deployment pod')
    }
  }
}
