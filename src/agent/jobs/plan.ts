/**
 * What the Job and CronJob controllers write, as a pure function of the store's contents and the
 * time: the pods a Job still needs (named `<job>-<index>`), the pods to stop, the Job's status, the
 * Jobs a CronJob's schedule is due for (named `<cronjob>-<scheduled unix seconds>`), and what a TTL
 * or a history limit removes. Every node computes the same writes from the same objects, so two
 * nodes that both believe they are the writer create objects of the same names and content, and the
 * store's merge keeps one (docs/jobs.md).
 */
import {
  API_VERSION,
  CRONJOB_LABEL,
  type CronJob,
  type CronJobStatus,
  byCodeUnits as cmp,
  deepEqual,
  JOB_LABEL,
  type Job,
  type JobCondition,
  type JobStatus,
  jobFinished,
  lastRunBetween,
  type ObjectRef,
  ORIGIN_CLUSTER_ANNOTATION,
  type OrcObject,
  type Pod,
  parseCron,
  SCHEDULED_LABEL,
} from '../../model/index.ts'

export const JOB_CONTROLLER = 'controller:job'
export const CRONJOB_CONTROLLER = 'controller:cronjob'

/**
 * Back-off before a Job makes new pods after failures, as Kubernetes': 10 s after the latest
 * failed pod finished, doubling with each failed pod, at most 6 minutes.
 */
export const JOB_BACKOFF_BASE_MS = 10_000
export const JOB_BACKOFF_MAX_MS = 6 * 60_000

/** How long after its latest failure a Job with `failedPods` failed pods waits before making pods again. */
export function jobBackoffMs(failedPods: number): number {
  return failedPods <= 0 ? 0 : Math.min(JOB_BACKOFF_MAX_MS, JOB_BACKOFF_BASE_MS * 2 ** Math.min(failedPods - 1, 20))
}

/** Pods (or Jobs) of a deleted owner are removed once they are this old: younger ones may have outrun their owner's replication. */
export const ORPHAN_GRACE_MS = 30_000

export type JobWrite =
  | { op: 'create'; author: string; manifest: OrcObject; reason: string }
  | { op: 'delete'; author: string; ref: ObjectRef; reason: string }
  | { op: 'status'; author: string; ref: ObjectRef; status: Record<string, unknown>; reason: string }

type Meta = { name: string; namespace?: string; labels?: Record<string, string>; createdAt?: string }
const metaOf = (o: { metadata: object }) => o.metadata as Meta
const nsOf = (o: { metadata: object }) => metaOf(o).namespace ?? 'default'
const createdMs = (o: { metadata: object }): number | undefined => {
  const t = Date.parse(String(metaOf(o).createdAt))
  return Number.isNaN(t) ? undefined : t
}
const iso = (t: number) => new Date(t).toISOString()

/** The index of a Job's pod from its name (`<job>-<index>`), or undefined. */
export function podIndex(job: string, pod: string): number | undefined {
  if (!pod.startsWith(`${job}-`)) return undefined
  const rest = pod.slice(job.length + 1)
  return /^(0|[1-9][0-9]{0,5})$/.test(rest) ? Number(rest) : undefined
}

/** The pod a Job runs as index `index`: its template, labelled, `restartPolicy` Never and `policy` ha unless the template says otherwise. */
export function jobPodManifest(job: Job, index: number): OrcObject {
  const t = (job.spec?.template ?? {}) as { metadata?: { labels?: Record<string, string> }; spec?: Record<string, unknown> }
  const spec = structuredClone(t.spec ?? {})
  spec.restartPolicy ??= 'Never'
  // A pod lost with its node is run again elsewhere after haAfterSeconds (docs/jobs.md).
  spec.policy ??= 'ha'
  return {
    apiVersion: API_VERSION,
    kind: 'Pod',
    metadata: {
      name: `${job.metadata.name}-${index}`,
      namespace: nsOf(job),
      labels: { ...t.metadata?.labels, [JOB_LABEL]: job.metadata.name },
      ...originOf(job),
    },
    spec,
  }
}

/**
 * In a federation's shared namespace a Job (a CronJob) records the cluster that created it
 * (`orc/cluster`, federation/routed-store.ts): what it makes carries it, so its pods run in that
 * cluster unless their template says `placement.clusters`, whichever cluster's node wrote them.
 */
function originOf(o: { metadata: { annotations?: Record<string, string> } }): { annotations?: Record<string, string> } {
  const c = o.metadata.annotations?.[ORIGIN_CLUSTER_ANNOTATION]
  return c === undefined ? {} : { annotations: { [ORIGIN_CLUSTER_ANNOTATION]: c } }
}

/** How a Job's pods are doing. */
export interface JobCounts {
  active: string[]
  succeeded: string[]
  failed: string[]
  /** Container restarts of OnFailure pods (they count as failures). */
  restarts: number
  /** Highest index in use, -1 when none. */
  maxIndex: number
  /** Latest container finish time among succeeded / failed pods (ms). */
  lastSucceededAt?: number
  lastFailedAt?: number
}

export function countJobPods(job: string, pods: readonly Pod[]): JobCounts {
  const out: JobCounts = { active: [], succeeded: [], failed: [], restarts: 0, maxIndex: -1 }
  for (const p of [...pods].sort((a, b) => cmp(a.metadata.name, b.metadata.name))) {
    const i = podIndex(job, p.metadata.name)
    if (i !== undefined && i > out.maxIndex) out.maxIndex = i
    const phase = p.status?.phase
    const containers = Array.isArray(p.status?.containers) ? p.status.containers : []
    const finished = Math.max(-Infinity, ...containers.map((c) => Date.parse(String(c?.finishedAt))).filter((t) => !Number.isNaN(t)))
    if (phase === 'Succeeded') {
      out.succeeded.push(p.metadata.name)
      if (Number.isFinite(finished)) out.lastSucceededAt = Math.max(out.lastSucceededAt ?? finished, finished)
    } else if (phase === 'Failed' && p.spec?.restartPolicy === 'OnFailure') {
      // The lifecycle runs it again on its node (docs/lifecycle.md): a failure, not a pod to replace.
      out.active.push(p.metadata.name)
      out.restarts++
    } else if (phase === 'Failed') {
      out.failed.push(p.metadata.name)
      if (Number.isFinite(finished)) out.lastFailedAt = Math.max(out.lastFailedAt ?? finished, finished)
    } else out.active.push(p.metadata.name)
    if (p.spec?.restartPolicy === 'OnFailure' && phase !== 'Succeeded')
      for (const c of containers) out.restarts += typeof c?.restarts === 'number' && c.restarts > 0 ? c.restarts : 0
  }
  return out
}

/**
 * One Job's writes at `now`, given its pods (those labelled for it). A finished Job stays finished
 * (its condition is kept); its pods still running are stopped; after its TTL it is deleted, then its pods.
 */
export function planJob(job: Job, pods: readonly Pod[], now: number): JobWrite[] {
  const name = job.metadata.name
  const ns = nsOf(job)
  const ref = { kind: 'Job', namespace: ns, name }
  const spec = job.spec
  if (spec === undefined) return []
  const completions = spec.completions ?? 1
  const parallelism = spec.parallelism ?? 1
  const backoffLimit = spec.backoffLimit ?? 6
  const c = countJobPods(name, pods)
  const failures = c.failed.length + c.restarts
  const prev = (job.status ?? {}) as JobStatus
  // Suspended: its condition is kept while the spec says so; resumed: the deadline counts from then.
  const suspended = spec.suspend === true
  const was = (Array.isArray(prev.conditions) ? prev.conditions : []).find((x) => x?.type === 'Suspended')
  let suspension: JobCondition | undefined
  if (suspended)
    suspension =
      was?.status === 'True'
        ? was
        : { type: 'Suspended', status: 'True', reason: 'JobSuspended', message: 'spec.suspend is true', lastTransitionTime: iso(now) }
  else if (was !== undefined)
    suspension =
      was.status === 'False'
        ? was
        : { type: 'Suspended', status: 'False', reason: 'JobResumed', message: 'spec.suspend is false', lastTransitionTime: iso(now) }
  const resumedAt = suspension?.status === 'False' ? Date.parse(suspension.lastTransitionTime) : Number.NaN
  const start = Math.max(createdMs(job) ?? now, Number.isNaN(resumedAt) ? Number.NEGATIVE_INFINITY : resumedAt)
  let done: JobCondition | undefined = jobFinished(prev)
  if (done === undefined) {
    const at = (t: number | undefined) => iso(t ?? now)
    if (c.succeeded.length >= completions)
      done = {
        type: 'Complete',
        status: 'True',
        reason: 'Completed',
        message: `${c.succeeded.length} of ${completions} pods succeeded`,
        lastTransitionTime: at(c.lastSucceededAt),
      }
    else if (failures > backoffLimit)
      done = {
        type: 'Failed',
        status: 'True',
        reason: 'BackoffLimitExceeded',
        message: `${failures} failures; backoffLimit is ${backoffLimit}`,
        lastTransitionTime: at(c.lastFailedAt),
      }
    else if (!suspended && spec.activeDeadlineSeconds !== undefined && now >= start + spec.activeDeadlineSeconds * 1000)
      done = {
        type: 'Failed',
        status: 'True',
        reason: 'DeadlineExceeded',
        message: `still running ${spec.activeDeadlineSeconds}s after it started`,
        lastTransitionTime: iso(start + spec.activeDeadlineSeconds * 1000),
      }
  }
  const writes: JobWrite[] = []
  const podRef = (n: string) => ({ kind: 'Pod', namespace: ns, name: n })
  if (done !== undefined) {
    const finishedAt = Date.parse(done.lastTransitionTime)
    if (spec.ttlSecondsAfterFinished !== undefined && now >= finishedAt + spec.ttlSecondsAfterFinished * 1000) {
      // The Job first: a writer that still saw it without its pods would otherwise create them again.
      writes.push({ op: 'delete', author: JOB_CONTROLLER, ref, reason: `job/${name}: ttlSecondsAfterFinished (${spec.ttlSecondsAfterFinished}s) passed` })
      for (const p of pods) writes.push({ op: 'delete', author: JOB_CONTROLLER, ref: podRef(p.metadata.name), reason: `job/${name} was deleted after its TTL` })
      return writes
    }
    for (const n of c.active)
      writes.push({ op: 'delete', author: JOB_CONTROLLER, ref: podRef(n), reason: `job/${name} ${done.type.toLowerCase()} (${done.reason})` })
  } else if (suspended) for (const n of c.active) writes.push({ op: 'delete', author: JOB_CONTROLLER, ref: podRef(n), reason: `job/${name} suspended` })
  let created = 0
  // After failures no pod is made until the back-off from the latest one has passed.
  const backoff = jobBackoffMs(c.failed.length)
  const backedOff = c.lastFailedAt === undefined || now >= c.lastFailedAt + backoff
  if (done === undefined && !suspended && backedOff) {
    const want = Math.min(parallelism, completions - c.succeeded.length) - c.active.length
    for (let i = 0; i < want; i++) {
      const index = c.maxIndex + 1 + i
      const retry = c.failed.length > 0 ? ` (after ${c.failed.length} failed, ${backoff / 1000}s back-off)` : ''
      writes.push({ op: 'create', author: JOB_CONTROLLER, manifest: jobPodManifest(job, index), reason: `job/${name}: pod ${index}${retry}` })
      created++
    }
  }
  const status: JobStatus = {
    active: done === undefined && !suspended ? c.active.length + created : 0,
    succeeded: c.succeeded.length,
    failed: failures,
    startTime: iso(start),
  }
  if (done !== undefined) status.completionTime = done.lastTransitionTime
  const conditions = [...(suspension !== undefined ? [suspension] : []), ...(done !== undefined ? [done] : [])]
  if (conditions.length > 0) status.conditions = conditions
  if (changed(prev, status))
    writes.push({
      op: 'status',
      author: JOB_CONTROLLER,
      ref,
      status,
      reason:
        done !== undefined
          ? `job ${done.type.toLowerCase()}`
          : suspension !== undefined && suspension !== was
            ? `job ${suspension.status === 'True' ? 'suspended' : 'resumed'}`
            : 'job status',
    })
  return writes
}

/** Whether writing `next` changes any of its fields in `prev`. */
function changed(prev: Record<string, unknown>, next: Record<string, unknown>): boolean {
  return Object.entries(next).some(([k, v]) => !deepEqual(prev[k], v))
}

/** Every Job's writes, and the deletion of pods whose Job is gone (after ORPHAN_GRACE_MS). */
export function planJobs(jobs: readonly Job[], pods: readonly Pod[], now: number): JobWrite[] {
  const byJob = new Map<string, Pod[]>()
  for (const p of pods) {
    const j = p.metadata.labels?.[JOB_LABEL]
    if (j === undefined) continue
    const k = `${nsOf(p)}/${j}`
    const list = byJob.get(k)
    if (list) list.push(p)
    else byJob.set(k, [p])
  }
  const writes: JobWrite[] = []
  const seen = new Set<string>()
  for (const j of [...jobs].sort(byKey)) {
    const k = `${nsOf(j)}/${j.metadata.name}`
    seen.add(k)
    writes.push(...planJob(j, byJob.get(k) ?? [], now))
  }
  for (const [k, list] of [...byJob].sort((a, b) => cmp(a[0], b[0]))) {
    if (seen.has(k)) continue
    for (const p of list.sort(byKey)) {
      const born = createdMs(p)
      if (born !== undefined && now - born < ORPHAN_GRACE_MS) continue
      writes.push({
        op: 'delete',
        author: JOB_CONTROLLER,
        ref: { kind: 'Pod', namespace: nsOf(p), name: p.metadata.name },
        reason: `job/${k.split('/')[1]} was deleted`,
      })
    }
  }
  return writes
}

/** The scheduled time of a CronJob's Job (ms), from its label. */
export function scheduledOf(job: Job): number | undefined {
  const v = job.metadata.labels?.[SCHEDULED_LABEL]
  return v !== undefined && /^[0-9]{1,12}$/.test(v) ? Number(v) * 1000 : undefined
}

/** The Job a CronJob makes for the run scheduled at `t` (ms). */
export function cronJobRun(cj: CronJob, t: number): OrcObject {
  const tpl = (cj.spec?.jobTemplate ?? {}) as { metadata?: { labels?: Record<string, string> }; spec?: Record<string, unknown> }
  const secs = Math.floor(t / 1000)
  return {
    apiVersion: API_VERSION,
    kind: 'Job',
    metadata: {
      name: `${cj.metadata.name}-${secs}`,
      namespace: nsOf(cj),
      labels: { ...tpl.metadata?.labels, [CRONJOB_LABEL]: cj.metadata.name, [SCHEDULED_LABEL]: String(secs) },
      ...originOf(cj),
    },
    spec: structuredClone(tpl.spec ?? {}),
  }
}

/**
 * One CronJob's writes at `now`, given its Jobs (those labelled for it): the Job for the latest run
 * due since the last one made (none when suspended, too late for startingDeadlineSeconds, or
 * forbidden by a running one), Jobs replaced or beyond the history limits deleted, and the status.
 */
export function planCronJob(cj: CronJob, jobs: readonly Job[], now: number): JobWrite[] {
  const name = cj.metadata.name
  const ns = nsOf(cj)
  const spec = cj.spec
  if (spec === undefined) return []
  let schedule: ReturnType<typeof parseCron>
  try {
    schedule = parseCron(spec.schedule)
  } catch {
    return [] // refused on apply; a merge of concurrent edits could still produce one
  }
  const prev = (cj.status ?? {}) as CronJobStatus
  const mine = [...jobs].sort((a, b) => (scheduledOf(a) ?? 0) - (scheduledOf(b) ?? 0) || cmp(a.metadata.name, b.metadata.name))
  const active = mine.filter((j) => jobFinished(j.status as JobStatus | undefined) === undefined)
  const lastStatus = Date.parse(String(prev.lastScheduleTime))
  let latest = Math.max(Number.isNaN(lastStatus) ? -Infinity : lastStatus, ...mine.map((j) => scheduledOf(j) ?? -Infinity))
  const from = Math.max(createdMs(cj) ?? now, latest)
  const writes: JobWrite[] = []
  const removed = new Set<string>()
  const jobRef = (n: string) => ({ kind: 'Job', namespace: ns, name: n })
  const due = spec.suspend === true ? undefined : lastRunBetween(schedule, from, now, spec.timeZone)
  let madeName: string | undefined
  if (due !== undefined) {
    const late = spec.startingDeadlineSeconds !== undefined && now - due > spec.startingDeadlineSeconds * 1000
    const policy = spec.concurrencyPolicy ?? 'Allow'
    if (!late && !(policy === 'Forbid' && active.length > 0)) {
      if (policy === 'Replace')
        for (const j of active) {
          writes.push({ op: 'delete', author: CRONJOB_CONTROLLER, ref: jobRef(j.metadata.name), reason: `cronjob/${name}: replaced by the run at ${iso(due)}` })
          removed.add(j.metadata.name)
        }
      const run = cronJobRun(cj, due)
      madeName = run.metadata.name
      if (!mine.some((j) => j.metadata.name === madeName))
        writes.push({ op: 'create', author: CRONJOB_CONTROLLER, manifest: run, reason: `cronjob/${name}: run scheduled at ${iso(due)}` })
      latest = Math.max(latest, due)
    }
  }
  // History: the newest finished Jobs per outcome are kept.
  const keep = { Complete: spec.successfulJobsHistoryLimit ?? 3, Failed: spec.failedJobsHistoryLimit ?? 1 }
  for (const type of ['Complete', 'Failed'] as const) {
    const finished = mine.filter((j) => jobFinished(j.status as JobStatus | undefined)?.type === type)
    for (const j of finished.slice(0, Math.max(0, finished.length - keep[type]))) {
      writes.push({
        op: 'delete',
        author: CRONJOB_CONTROLLER,
        ref: jobRef(j.metadata.name),
        reason: `cronjob/${name}: beyond the ${type === 'Complete' ? 'successful' : 'failed'} jobs history limit (${keep[type]})`,
      })
      removed.add(j.metadata.name)
    }
  }
  const activeNames = [
    ...active.map((j) => j.metadata.name).filter((n) => !removed.has(n)),
    ...(madeName !== undefined && !active.some((j) => j.metadata.name === madeName) ? [madeName] : []),
  ].sort()
  const lastOk = Math.max(
    -Infinity,
    ...mine
      .filter((j) => jobFinished(j.status as JobStatus | undefined)?.type === 'Complete')
      .map((j) => Date.parse(String((j.status as JobStatus).completionTime)))
      .filter((t) => !Number.isNaN(t)),
  )
  const status: CronJobStatus = { active: activeNames }
  if (Number.isFinite(latest)) status.lastScheduleTime = iso(latest)
  if (Number.isFinite(lastOk)) status.lastSuccessfulTime = iso(lastOk)
  if (changed(prev, status))
    writes.push({ op: 'status', author: CRONJOB_CONTROLLER, ref: { kind: 'CronJob', namespace: ns, name }, status, reason: 'cronjob status' })
  return writes
}

/** Every CronJob's writes, and the deletion of Jobs whose CronJob is gone (after ORPHAN_GRACE_MS). */
export function planCronJobs(cronjobs: readonly CronJob[], jobs: readonly Job[], now: number): JobWrite[] {
  const byOwner = new Map<string, Job[]>()
  for (const j of jobs) {
    const o = j.metadata.labels?.[CRONJOB_LABEL]
    if (o === undefined) continue
    const k = `${nsOf(j)}/${o}`
    const list = byOwner.get(k)
    if (list) list.push(j)
    else byOwner.set(k, [j])
  }
  const writes: JobWrite[] = []
  const seen = new Set<string>()
  for (const cj of [...cronjobs].sort(byKey)) {
    const k = `${nsOf(cj)}/${cj.metadata.name}`
    seen.add(k)
    writes.push(...planCronJob(cj, byOwner.get(k) ?? [], now))
  }
  for (const [k, list] of [...byOwner].sort((a, b) => cmp(a[0], b[0]))) {
    if (seen.has(k)) continue
    for (const j of list.sort(byKey)) {
      const born = createdMs(j)
      if (born !== undefined && now - born < ORPHAN_GRACE_MS) continue
      writes.push({
        op: 'delete',
        author: CRONJOB_CONTROLLER,
        ref: { kind: 'Job', namespace: nsOf(j), name: j.metadata.name },
        reason: `cronjob/${k.split('/')[1]} was deleted`,
      })
    }
  }
  return writes
}

function byKey(a: { metadata: object }, b: { metadata: object }): number {
  return cmp(`${nsOf(a)}/${metaOf(a).name}`, `${nsOf(b)}/${metaOf(b).name}`)
}
