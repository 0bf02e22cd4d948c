import { isTimeZone, parseCron } from '../cron.ts'
import { formatDuration } from '../duration.ts'
import { defineKind, type ObjectOfKind } from '../kind.ts'
import type { Issue } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt, labelsSchema, text } from './common.ts'
import { podKind, podSpecIssues } from './pod.ts'

/**
 * Job: run a pod template to `completions` successes, `parallelism` at a time, giving up after
 * `backoffLimit` failures or `activeDeadlineSeconds`; deleted `ttlSecondsAfterFinished` after it
 * ends. CronJob: a Job per tick of a cron schedule. Both are driven by leaderless controllers
 * (src/agent/jobs, docs/jobs.md).
 */
const podTemplate = s.object({
  metadata: s.object({ labels: labelsSchema }),
  spec: s.required(podKind.spec),
})

/** Pod names are `<job>-<index>` (index up to 5 digits) and must stay DNS labels (≤ 63). */
export const MAX_JOB_NAME = 57
/** CronJob runs are Jobs named `<cronjob>-<scheduled unix seconds>` (10 digits). */
export const MAX_CRONJOB_NAME = MAX_JOB_NAME - 11
export const MAX_COMPLETIONS = 10_000

/** Labels orc sets on what the controllers create. */
export const JOB_LABEL = 'orc/job'
export const CRONJOB_LABEL = 'orc/cronjob'
/** The scheduled time of a CronJob's run (unix seconds). */
export const SCHEDULED_LABEL = 'orc/scheduled'

export type JobConditionType = 'Complete' | 'Failed' | 'Suspended'
export interface JobCondition {
  type: JobConditionType
  /** `False` only for `Suspended`, once the Job was resumed. */
  status: 'True' | 'False'
  /** Complete: `Completed`; Failed: `BackoffLimitExceeded` or `DeadlineExceeded`; Suspended: `JobSuspended` or `JobResumed`. */
  reason: string
  message?: string
  lastTransitionTime: string
}

/** Written by controller:job (src/agent/jobs/plan.ts). */
export type JobStatus = {
  active?: number
  succeeded?: number
  failed?: number
  startTime?: string
  completionTime?: string
  conditions?: JobCondition[]
  [field: string]: unknown
}

const jobSpec = s.object({
  template: s.required(podTemplate),
  /** Successful pods needed (default 1). */
  completions: s.int({ min: 1, max: MAX_COMPLETIONS }),
  /** Pods running at once (default 1; 0 pauses the Job). */
  parallelism: s.int({ min: 0, max: 1000 }),
  /** Failed pods (and, with restartPolicy OnFailure, container restarts) before the Job fails (default 6). */
  backoffLimit: s.int({ min: 0, max: MAX_COMPLETIONS }),
  /** The Job fails this long after it was created, stopping its pods. */
  activeDeadlineSeconds: s.int({ min: 1, max: 366 * 24 * 3600 }),
  /** Delete the Job (and its pods) this long after it finished. */
  ttlSecondsAfterFinished: s.int({ min: 0, max: 366 * 24 * 3600 }),
  /** Stop the Job's running pods and make none until it is false again (default false). */
  suspend: s.bool(),
})

function jobSpecIssues(spec: Record<string, any> | undefined, base: string): Issue[] {
  if (spec === undefined) return []
  const issues: Issue[] = []
  const t = spec.template
  if (t !== undefined) {
    issues.push(...podSpecIssues(t.spec, `${base}.template.spec`))
    const rp = t.spec?.restartPolicy
    if (rp === 'Always') issues.push({ path: `${base}.template.spec.restartPolicy`, rule: 'must be Never or OnFailure for a Job (default Never)' })
    for (const k of [JOB_LABEL, CRONJOB_LABEL, SCHEDULED_LABEL])
      if (k in (t.metadata?.labels ?? {})) issues.push({ path: `${base}.template.metadata.labels[${JSON.stringify(k)}]`, rule: 'is set by orc' })
  }
  return issues
}

/** Whether a Job's status says it is suspended now. */
export function jobSuspended(status: JobStatus | undefined): boolean {
  return (Array.isArray(status?.conditions) ? status.conditions : []).some((c) => c?.type === 'Suspended' && c.status === 'True')
}

/** The finished condition of a Job's status, if any. */
export function jobFinished(status: JobStatus | undefined): JobCondition | undefined {
  return (Array.isArray(status?.conditions) ? status.conditions : []).find((c) => c?.status === 'True' && (c.type === 'Complete' || c.type === 'Failed'))
}

function jobDuration(o: { status?: JobStatus }, now: number): string {
  const start = Date.parse(String(o.status?.startTime))
  if (Number.isNaN(start)) return '<none>'
  const end = o.status?.completionTime !== undefined ? Date.parse(String(o.status.completionTime)) : now
  return Number.isNaN(end) ? '<none>' : formatDuration(end - start)
}

export const jobKind = defineKind({
  kind: 'Job',
  plural: 'jobs',
  aliases: ['job'],
  namespaced: true,
  spec: jobSpec,
  status: s.open<JobStatus>(),
  owned: [{ path: 'status', owner: 'controller:job' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    {
      header: 'STATUS',
      value: (o) => jobFinished(o.status)?.type ?? (jobSuspended(o.status) ? 'Suspended' : (o.status?.active ?? 0) > 0 ? 'Running' : 'Pending'),
    },
    { header: 'COMPLETIONS', value: (o) => `${o.status?.succeeded ?? 0}/${o.spec?.completions ?? 1}` },
    { header: 'DURATION', value: (o, now) => jobDuration(o, now) },
    { header: 'ACTIVE', value: (o) => String(o.status?.active ?? 0), wide: true },
    { header: 'FAILED', value: (o) => String(o.status?.failed ?? 0), wide: true },
    { header: 'REASON', value: (o) => text(jobFinished(o.status)?.reason), wide: true },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
  check(obj) {
    const issues: Issue[] = []
    if (obj.metadata.name.length > MAX_JOB_NAME)
      issues.push({ path: 'metadata.name', rule: `must be at most ${MAX_JOB_NAME} characters (pod names add an index)` })
    issues.push(...jobSpecIssues(obj.spec, 'spec'))
    return issues
  },
})

export interface CronJobStatus {
  /** The latest scheduled time a Job was created for. */
  lastScheduleTime?: string
  lastSuccessfulTime?: string
  /** Names of the CronJob's Jobs not finished yet. */
  active?: string[]
  [field: string]: unknown
}

export const cronJobKind = defineKind({
  kind: 'CronJob',
  plural: 'cronjobs',
  aliases: ['cronjob', 'cj'],
  namespaced: true,
  spec: s.object({
    /** Five cron fields (or six, seconds first), or @hourly, @daily, … (docs/jobs.md). */
    schedule: s.required(s.string({ minLength: 1, maxLength: 256 })),
    /** IANA time zone the schedule is read in (default UTC). */
    timeZone: s.string({ minLength: 1, maxLength: 64 }),
    /** When a run is due while an earlier one is still going: Allow (default), Forbid (skip), Replace (stop it). */
    concurrencyPolicy: s.enum('Allow', 'Forbid', 'Replace'),
    /** A run not started this long after its time is skipped (default: no limit; only the latest missed run is made up). */
    startingDeadlineSeconds: s.int({ min: 0, max: 366 * 24 * 3600 }),
    suspend: s.bool(),
    successfulJobsHistoryLimit: s.int({ min: 0, max: 100 }),
    failedJobsHistoryLimit: s.int({ min: 0, max: 100 }),
    jobTemplate: s.required(s.object({ metadata: s.object({ labels: labelsSchema }), spec: s.required(jobSpec) })),
  }),
  status: s.open<CronJobStatus>(),
  owned: [{ path: 'status', owner: 'controller:cronjob' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'SCHEDULE', value: (o) => text(o.spec?.schedule) },
    { header: 'TIMEZONE', value: (o) => text(o.spec?.timeZone, 'UTC'), wide: true },
    { header: 'SUSPEND', value: (o) => String(o.spec?.suspend === true) },
    { header: 'ACTIVE', value: (o) => String(Array.isArray(o.status?.active) ? o.status.active.length : 0) },
    { header: 'LAST SCHEDULE', value: (o, now) => (typeof o.status?.lastScheduleTime === 'string' ? age(o.status.lastScheduleTime, now) : '<none>') },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
  check(obj) {
    const issues: Issue[] = []
    if (obj.metadata.name.length > MAX_CRONJOB_NAME)
      issues.push({ path: 'metadata.name', rule: `must be at most ${MAX_CRONJOB_NAME} characters (its Jobs add the scheduled time)` })
    const spec = obj.spec
    if (typeof spec?.schedule === 'string') {
      try {
        parseCron(spec.schedule)
      } catch (err) {
        issues.push({ path: 'spec.schedule', rule: (err as Error).message })
      }
    }
    if (typeof spec?.timeZone === 'string' && !isTimeZone(spec.timeZone))
      issues.push({ path: 'spec.timeZone', rule: `unknown time zone ${JSON.stringify(spec.timeZone)} (an IANA name such as Europe/Berlin)` })
    issues.push(...jobSpecIssues(spec?.jobTemplate?.spec, 'spec.jobTemplate.spec'))
    return issues
  },
})

// Interfaces (not aliases) so that type errors name them.
export interface Job extends ObjectOfKind<typeof jobKind> {}
export type JobSpec = NonNullable<Job['spec']>
export interface CronJob extends ObjectOfKind<typeof cronJobKind> {}
export type CronJobSpec = NonNullable<CronJob['spec']>
