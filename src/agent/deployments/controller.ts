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
import { OrcError, type Pod } from '../../model/index.ts'
import { DEPLOYMENT_LABEL } from '../../sched/index.ts'
import type { Stored } from '../../store/index.ts'
import { type LeaderlessComponents, LeaderlessController } from './leaderless.ts'
import { DEPLOYMENT_CONTROLLER, type DeploymentWrite, planDeploymentWrites, ROLLOUT_CONTROLLER, rolloutRecord, statusOf, storedStatus } from './plan.ts'

/** The deployment controllers take the shared leaderless components (leaderless.ts). */
export type DeploymentComponents = LeaderlessComponents

export class DeploymentController extends LeaderlessController {
  private readonly refused = new Set<string>()
  private readonly log: Logger

  constructor(c: DeploymentComponents) {
    super(c)
    this.log = c.log
  }

  protected relevant(key: string): boolean {
    if (key.startsWith('PinnedDeployment/') || key.startsWith('Node/')) return true
    // A federation's nodes are its clusters' summaries (LeaderlessComponents.nodes).
    if (key.startsWith('Cluster/')) return this.c.nodes !== undefined
    if (!key.startsWith('Pod/')) return false
    // A pod change matters only for pods of a deployment (or one deleted, which may have been one).
    const [, namespace, ...rest] = key.split('/')
    const p = this.c.store.get({ kind: 'Pod', namespace: namespace ?? '', name: rest.join('/') })
    return p === undefined || p.metadata.labels?.[DEPLOYMENT_LABEL] !== undefined
  }

  /** A rollout in progress is looked at every tick: its progress deadline passes without a store change. */
  protected timeMatters(): boolean {
    return this.c.store.list('PinnedDeployment').some((d) => d.status?.rollout?.state === 'Progressing')
  }

  protected async reconcile(): Promise<void> {
    const deployments = this.c.store.list('PinnedDeployment')
    const nodes = this.nodes()
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
