/**
 * controller:job and controller:cronjob — Jobs and CronJobs without a control plane.
 *
 * Every agent runs this component; the node that writes is chosen as for PinnedDeployments (the
 * alphabetically first node this node sees alive and not forgotten, deploymentWriter). Views can
 * disagree for a while (a partition, a node joining, the writer just killed): then two nodes write,
 * but what they write is a pure function of the replicated objects and the time (plan.ts): a Job's
 * pods are `<job>-<index>` from the same counts, a CronJob's run is `<cronjob>-<scheduled time>`, so
 * concurrent creations carry the same name and content and the store's merge keeps one.
 */
import { CRONJOB_LABEL, type CronJob, JOB_LABEL, type Job, type JobStatus, jobFinished, OrcError } from '../../model/index.ts'
import { type LeaderlessComponents, LeaderlessController } from '../deployments/index.ts'
import { type JobWrite, planCronJobs, planJobs } from './plan.ts'

/** The shared leaderless components (deployments/leaderless.ts); `tickMs` also paces deadlines, TTLs and schedules. */
export type JobComponents = LeaderlessComponents

/** Whether a pass may have something to do because time passed: a CronJob, a Job deadline, back-off or TTL. */
export function timeMatters(cronjobs: readonly CronJob[], jobs: readonly Job[]): boolean {
  if (cronjobs.some((c) => c.spec?.suspend !== true)) return true
  return jobs.some((j) => {
    const status = j.status as JobStatus | undefined
    if (jobFinished(status) !== undefined) return j.spec?.ttlSecondsAfterFinished !== undefined
    // A Job with failures may be waiting out its back-off.
    return j.spec?.activeDeadlineSeconds !== undefined || (status?.failed ?? 0) > 0
  })
}

/** Whether some object labelled for an owner (`label`) has no such owner. */
function hasOrphans(
  children: readonly { metadata: { namespace?: string; labels?: Record<string, string> } }[],
  label: string,
  owners: readonly { metadata: { namespace?: string; name: string } }[],
): boolean {
  const have = new Set(owners.map((o) => `${o.metadata.namespace ?? 'default'}/${o.metadata.name}`))
  return children.some((c) => {
    const o = c.metadata.labels?.[label]
    return o !== undefined && !have.has(`${c.metadata.namespace ?? 'default'}/${o}`)
  })
}

export class JobController extends LeaderlessController {
  private readonly refused = new Set<string>()
  /** The last pass left pods or Jobs whose owner is gone (deleted once past ORPHAN_GRACE_MS). */
  private orphans = false

  protected relevant(key: string): boolean {
    if (key.startsWith('Job/') || key.startsWith('CronJob/') || key.startsWith('Node/')) return true
    if (!key.startsWith('Pod/')) return false
    const [, namespace, ...rest] = key.split('/')
    const p = this.c.store.get({ kind: 'Pod', namespace: namespace ?? '', name: rest.join('/') })
    return p === undefined || p.metadata.labels?.[JOB_LABEL] !== undefined
  }

  /** Time moves deadlines, TTLs and schedules (and the orphans' grace): look again on every tick while one waits. */
  protected timeMatters(): boolean {
    return this.orphans || timeMatters(this.c.store.list('CronJob'), this.c.store.list('Job'))
  }

  /** One reconcile of every CronJob and Job. */
  protected async reconcile(): Promise<void> {
    // CronJobs first, so a Job they create gets its pods in the same pass.
    const jobs = () => this.c.store.list('Job')
    for (const w of planCronJobs(this.c.store.list('CronJob'), jobs(), this.c.now())) {
      if (this.stopped) return
      await this.write(w)
    }
    for (const w of planJobs(jobs(), this.c.store.list('Pod'), this.c.now())) {
      if (this.stopped) return
      await this.write(w)
    }
    this.orphans =
      hasOrphans(this.c.store.list('Pod'), JOB_LABEL, this.c.store.list('Job')) ||
      hasOrphans(this.c.store.list('Job'), CRONJOB_LABEL, this.c.store.list('CronJob'))
  }

  private async write(w: JobWrite): Promise<void> {
    const now = this.c.now()
    const ref = w.op === 'create' ? { kind: w.manifest.kind, namespace: w.manifest.metadata.namespace ?? 'default', name: w.manifest.metadata.name } : w.ref
    const fields = { kind: ref.kind, ns: ref.namespace, name: ref.name, reason: w.reason }
    const k = `${ref.kind}/${ref.namespace}/${ref.name}`
    try {
      if (w.op === 'create') {
        // Created only when absent here: a same-named object created concurrently elsewhere has the same content.
        if (this.c.store.get(ref) !== undefined) return
        const res = await this.c.store.apply(w.manifest, { author: w.author, reason: w.reason, now })
        if (res.revision) this.c.log.info({ ...fields, rev: res.revision.number }, 'job object created')
      } else if (w.op === 'delete') {
        await this.c.store.delete(ref, { author: w.author, reason: w.reason, now })
        this.c.log.info(fields, 'job object deleted')
      } else {
        await this.c.store.patch(
          ref,
          Object.entries(w.status).map(([key, value]) => ({ path: ['status', key], value })),
          { author: w.author, reason: w.reason, now },
        )
      }
      this.refused.delete(k)
    } catch (err) {
      if (err instanceof OrcError && err.code === 'not_found') return // deleted meanwhile
      // Typically an object of that name a user made: say so once, not on every pass.
      if (this.refused.has(k)) return
      this.refused.add(k)
      this.c.log.warn({ ...fields, err: String(err) }, 'write job object')
    }
  }
}
