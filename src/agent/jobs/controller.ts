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
import type { Logger } from 'pino'
import type { Clock } from '../../effects/index.ts'
import { CRONJOB_LABEL, type CronJob, JOB_LABEL, type Job, type JobStatus, jobFinished, OrcError } from '../../model/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { deploymentWriter } from '../deployments/index.ts'
import { isForgotten, type NodeMember } from '../sched/index.ts'
import { type JobWrite, planCronJobs, planJobs } from './plan.ts'

export interface JobComponents extends Clock {
  store: ObjectStore
  nodeName: string
  /** This node's membership view; a node missing from it is not a candidate writer. */
  members(): readonly NodeMember[]
  log: Logger
  /** Least time between passes caused by store changes (default 200 ms). */
  minPassIntervalMs?: number
  /** How often deadlines, TTLs and schedules are looked at, and membership for a change of writer (default 1000 ms). */
  tickMs?: number
}

/** Whether a pass may have something to do because time passed: a CronJob, a Job deadline or TTL. */
export function timeMatters(cronjobs: readonly CronJob[], jobs: readonly Job[]): boolean {
  if (cronjobs.some((c) => c.spec?.suspend !== true)) return true
  return jobs.some((j) => {
    const done = jobFinished(j.status as JobStatus | undefined) !== undefined
    return done ? j.spec?.ttlSecondsAfterFinished !== undefined : j.spec?.activeDeadlineSeconds !== undefined
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

export class JobController {
  private busy = false
  private again = false
  private stopped = false
  private requested: unknown
  private tick: unknown
  private lastPassAt = Number.NEGATIVE_INFINITY
  private unsubscribe: (() => void) | undefined
  private running: Promise<void> | undefined
  private readonly refused = new Set<string>()
  /** The last pass left pods or Jobs whose owner is gone (deleted once past ORPHAN_GRACE_MS). */
  private orphans = false

  constructor(private readonly c: JobComponents) {}

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
      // Time moves deadlines, TTLs and schedules: look again on every tick while one waits.
      if (w !== lastWriter || (w === this.c.nodeName && (this.orphans || timeMatters(this.c.store.list('CronJob'), this.c.store.list('Job'))))) this.request()
      lastWriter = w
      this.tick = this.c.setTimeout(loop, this.c.tickMs ?? 1000)
    }
    loop()
  }

  async stop(): Promise<void> {
    this.stopped = true
    this.unsubscribe?.()
    if (this.requested !== undefined) this.c.clearTimeout(this.requested)
    if (this.tick !== undefined) this.c.clearTimeout(this.tick)
    await this.running
  }

  private relevant(key: string): boolean {
    if (key.startsWith('Job/') || key.startsWith('CronJob/') || key.startsWith('Node/')) return true
    if (!key.startsWith('Pod/')) return false
    const [, namespace, ...rest] = key.split('/')
    const p = this.c.store.get({ kind: 'Pod', namespace: namespace ?? '', name: rest.join('/') })
    return p === undefined || p.metadata.labels?.[JOB_LABEL] !== undefined
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

  /** One reconcile of every CronJob and Job (if this node is the writer); coalesces concurrent calls. */
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
    } while (this.again)
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
