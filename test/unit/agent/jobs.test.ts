import assert from 'node:assert/strict'
import { test } from 'node:test'
import { JOB_CONTROLLER, type JobWrite, jobBackoffMs, ORPHAN_GRACE_MS, planCronJob, planJob, planJobs, timeMatters } from '../../../src/agent/jobs/index.ts'

const T0 = Date.parse('2026-06-01T10:00:30Z')
const iso = (t: number) => new Date(t).toISOString()

function job(spec: Record<string, unknown> = {}, status?: Record<string, unknown>, name = 'batch'): any {
  return {
    apiVersion: 'orc/v1',
    kind: 'Job',
    metadata: { name, namespace: 'default', createdAt: iso(T0) },
    spec: { template: { metadata: { labels: { app: 'b' } }, spec: { containers: [{ name: 'm', image: 'busybox' }] } }, ...spec },
    ...(status ? { status } : {}),
  }
}
function pod(name: string, phase?: string, finishedAt?: number, extra: Record<string, unknown> = {}): any {
  return {
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { app: 'b', 'orc/job': name.replace(/-[0-9]+$/, '') }, createdAt: iso(T0) },
    spec: { containers: [{ name: 'm', image: 'busybox' }], restartPolicy: 'Never', ...extra },
    status: {
      ...(phase ? { phase } : {}),
      ...(finishedAt !== undefined ? { containers: [{ name: 'm', state: 'exited', restarts: 0, finishedAt: iso(finishedAt) }] } : {}),
    },
  }
}
const created = (ws: JobWrite[]) => ws.flatMap((w) => (w.op === 'create' ? [w.manifest.metadata.name] : []))
const deleted = (ws: JobWrite[]) => ws.flatMap((w) => (w.op === 'delete' ? [`${w.ref.kind}/${w.ref.name}`] : []))
const statusOf = (ws: JobWrite[]) => ws.find((w) => w.op === 'status')?.status as Record<string, any> | undefined

test('a Job creates parallelism pods at a time, named by index, until completions succeed', () => {
  const j = job({ completions: 3, parallelism: 2 })
  let ws = planJob(j, [], T0 + 1000)
  assert.deepEqual(created(ws), ['batch-0', 'batch-1'])
  const p0 = ws.find((w) => w.op === 'create')!
  assert.equal(p0.author, JOB_CONTROLLER)
  assert.deepEqual((p0 as any).manifest.metadata.labels, { app: 'b', 'orc/job': 'batch' })
  assert.equal((p0 as any).manifest.spec.restartPolicy, 'Never')
  assert.equal((p0 as any).manifest.spec.policy, 'ha', 'a pod lost with its node runs again elsewhere')
  assert.deepEqual(statusOf(ws), { active: 2, succeeded: 0, failed: 0, startTime: iso(T0) })
  assert.deepEqual(planJob(j, [], T0 + 1000), ws, 'the same view plans the same writes (two writers converge)')

  // One succeeded, one running: one more, with the next index (never a name used before).
  ws = planJob(j, [pod('batch-0', 'Succeeded', T0 + 5000), pod('batch-1', 'Running')], T0 + 6000)
  assert.deepEqual(created(ws), ['batch-2'])
  // Two succeeded, one running: nothing more (3 - 2 = 1 still needed, and it runs).
  ws = planJob(j, [pod('batch-0', 'Succeeded', T0 + 5000), pod('batch-1', 'Succeeded', T0 + 7000), pod('batch-2', 'Running')], T0 + 8000)
  assert.deepEqual(created(ws), [])
  assert.equal(statusOf(ws)?.active, 1)
  // Three succeeded: Complete, at the last pod's finish time; the count is of pods, so no double counting.
  const done = [pod('batch-0', 'Succeeded', T0 + 5000), pod('batch-1', 'Succeeded', T0 + 7000), pod('batch-2', 'Succeeded', T0 + 9000)]
  ws = planJob(j, done, T0 + 20_000)
  assert.deepEqual(created(ws), [])
  const st = statusOf(ws)!
  assert.equal(st.succeeded, 3)
  assert.equal(st.completionTime, iso(T0 + 9000))
  assert.deepEqual(
    st.conditions.map((c: any) => [c.type, c.reason]),
    [['Complete', 'Completed']],
  )
  // Written once: the same view again writes nothing.
  assert.deepEqual(planJob({ ...j, status: st }, done, T0 + 30_000), [])
})

test('a Job fails after backoffLimit failures, or at its deadline, stopping its running pods', () => {
  const j = job({ completions: 2, parallelism: 2, backoffLimit: 1 })
  let ws = planJob(j, [pod('batch-0', 'Failed', T0 + 2000), pod('batch-1', 'Running')], T0 + 3000)
  assert.deepEqual(created(ws), [], 'no new pod within the back-off (10 s after the failure)')
  assert.equal(statusOf(ws)?.failed, 1)
  ws = planJob(j, [pod('batch-0', 'Failed', T0 + 2000), pod('batch-1', 'Running')], T0 + 12_000)
  assert.deepEqual(created(ws), ['batch-2'], 'a failure within the limit is retried under a new name')
  assert.match((ws.find((w) => w.op === 'create') as { reason: string }).reason, /pod 2 \(after 1 failed, 10s back-off\)/)
  ws = planJob(j, [pod('batch-0', 'Failed', T0 + 2000), pod('batch-1', 'Running'), pod('batch-2', 'Failed', T0 + 4000)], T0 + 5000)
  assert.deepEqual(created(ws), [])
  assert.deepEqual(deleted(ws), ['Pod/batch-1'])
  assert.deepEqual(
    statusOf(ws)?.conditions.map((c: any) => [c.type, c.reason, c.lastTransitionTime]),
    [['Failed', 'BackoffLimitExceeded', iso(T0 + 4000)]],
  )
  // OnFailure: container restarts count as failures.
  const restarting = pod('batch-0', 'Running', undefined, { restartPolicy: 'OnFailure' })
  restarting.status.containers = [{ name: 'm', state: 'running', restarts: 2 }]
  ws = planJob(job({ backoffLimit: 1 }), [restarting], T0 + 5000)
  assert.equal(statusOf(ws)?.conditions?.[0]?.reason, 'BackoffLimitExceeded')
  // OnFailure: a Failed pod is run again by its node, so it is not replaced (one failure counted).
  const again = pod('batch-0', 'Failed', T0 + 2000, { restartPolicy: 'OnFailure' })
  ws = planJob(job({ backoffLimit: 3 }), [again], T0 + 5000)
  assert.deepEqual([created(ws), statusOf(ws)?.failed, statusOf(ws)?.active], [[], 1, 1])

  const slow = job({ activeDeadlineSeconds: 60 })
  assert.deepEqual(deleted(planJob(slow, [pod('batch-0', 'Running')], T0 + 59_000)), [])
  ws = planJob(slow, [pod('batch-0', 'Running')], T0 + 61_000)
  assert.deepEqual(deleted(ws), ['Pod/batch-0'])
  assert.deepEqual(
    statusOf(ws)?.conditions.map((c: any) => [c.type, c.reason, c.lastTransitionTime]),
    [['Failed', 'DeadlineExceeded', iso(T0 + 60_000)]],
  )
})

test('the back-off between failures doubles from 10 s to at most 6 min, from the latest failure', () => {
  assert.deepEqual([0, 1, 2, 3, 6, 7, 50].map(jobBackoffMs), [0, 10_000, 20_000, 40_000, 320_000, 360_000, 360_000])
  const j = job({ backoffLimit: 6 })
  const failed = [pod('batch-0', 'Failed', T0 + 1000), pod('batch-1', 'Failed', T0 + 30_000)]
  // Two failed pods: 20 s after the latest (T0 + 30 s), not after the first.
  assert.deepEqual(created(planJob(j, failed, T0 + 49_000)), [])
  assert.deepEqual(created(planJob(j, failed, T0 + 50_000)), ['batch-2'])
  // While it waits the Job's status says nothing is active, and time is watched for it.
  assert.equal(statusOf(planJob(j, failed, T0 + 40_000))?.active, 0)
  assert.equal(timeMatters([], [job({}, { failed: 2, active: 0 })]), true)
  assert.equal(timeMatters([], [job({})]), false)
})

test('a suspended Job stops its running pods and makes none; resumed, its deadline counts from the resume', () => {
  const spec = { completions: 3, parallelism: 2, activeDeadlineSeconds: 60 }
  const running = [pod('batch-0', 'Succeeded', T0 + 5000), pod('batch-1', 'Running'), pod('batch-2', 'Running')]
  let ws = planJob(job({ ...spec, suspend: true }), running, T0 + 10_000)
  assert.deepEqual(deleted(ws), ['Pod/batch-1', 'Pod/batch-2'], 'its running pods are stopped')
  assert.deepEqual(created(ws), [])
  let st = statusOf(ws)!
  assert.deepEqual([st.active, st.succeeded], [0, 1], 'the success is kept')
  assert.deepEqual(st.conditions, [
    { type: 'Suspended', status: 'True', reason: 'JobSuspended', message: 'spec.suspend is true', lastTransitionTime: iso(T0 + 10_000) },
  ])
  assert.equal((ws.find((w) => w.op === 'status') as { reason: string }).reason, 'job suspended')
  // Suspended past its deadline: no DeadlineExceeded, nothing made, the condition keeps its time.
  const suspendedJob = job({ ...spec, suspend: true }, st)
  const left = [pod('batch-0', 'Succeeded', T0 + 5000)]
  ws = planJob(suspendedJob, left, T0 + 120_000)
  assert.deepEqual([created(ws), deleted(ws), statusOf(ws)], [[], [], undefined], 'nothing to write while it stays suspended')
  // Resumed at T0 + 200 s: pods again, the deadline counts from then (not from creation).
  ws = planJob(job(spec, st), left, T0 + 200_000)
  assert.deepEqual(created(ws), ['batch-1', 'batch-2'], 'the stopped pods are made again under their names')
  st = statusOf(ws)!
  assert.deepEqual(
    st.conditions.map((x: any) => [x.type, x.status, x.reason, x.lastTransitionTime]),
    [['Suspended', 'False', 'JobResumed', iso(T0 + 200_000)]],
  )
  assert.equal(st.startTime, iso(T0 + 200_000))
  const resumed = job(spec, st)
  const again = [...left, pod('batch-1', 'Running'), pod('batch-2', 'Running')]
  assert.equal(statusOf(planJob(resumed, again, T0 + 259_000))?.conditions?.[1], undefined, 'within 60 s of the resume')
  ws = planJob(resumed, again, T0 + 261_000)
  assert.deepEqual(
    statusOf(ws)?.conditions.map((x: any) => [x.type, x.reason]),
    [
      ['Suspended', 'JobResumed'],
      ['Failed', 'DeadlineExceeded'],
    ],
  )
  assert.deepEqual(deleted(ws), ['Pod/batch-1', 'Pod/batch-2'])
})

test('a finished Job is deleted after its TTL, then its pods; pods of a deleted Job go after a grace', () => {
  const finished = {
    succeeded: 1,
    completionTime: iso(T0 + 10_000),
    conditions: [{ type: 'Complete', status: 'True', reason: 'Completed', lastTransitionTime: iso(T0 + 10_000) }],
  }
  const j = job({ ttlSecondsAfterFinished: 30 }, finished)
  const pods = [pod('batch-0', 'Succeeded', T0 + 10_000)]
  assert.deepEqual(deleted(planJob(j, pods, T0 + 39_000)), [])
  assert.deepEqual(deleted(planJob(j, pods, T0 + 40_000)), ['Job/batch', 'Pod/batch-0'])
  // No Job: its pods are orphans, deleted once older than the grace.
  assert.deepEqual(deleted(planJobs([], pods, T0 + ORPHAN_GRACE_MS - 1)), [])
  assert.deepEqual(deleted(planJobs([], pods, T0 + ORPHAN_GRACE_MS)), ['Pod/batch-0'])
})

function cronjob(spec: Record<string, unknown> = {}, status?: Record<string, unknown>): any {
  return {
    apiVersion: 'orc/v1',
    kind: 'CronJob',
    metadata: { name: 'tick', namespace: 'default', createdAt: iso(T0) },
    spec: { schedule: '* * * * *', jobTemplate: { spec: { template: { spec: { containers: [{ name: 'm', image: 'busybox' }] } } } }, ...spec },
    ...(status ? { status } : {}),
  }
}
const run = (secs: number, finished?: 'Complete' | 'Failed'): any => ({
  apiVersion: 'orc/v1',
  kind: 'Job',
  metadata: { name: `tick-${secs}`, namespace: 'default', labels: { 'orc/cronjob': 'tick', 'orc/scheduled': String(secs) }, createdAt: iso(secs * 1000) },
  spec: {},
  ...(finished
    ? {
        status: {
          completionTime: iso(secs * 1000 + 5000),
          conditions: [{ type: finished, status: 'True', reason: 'x', lastTransitionTime: iso(secs * 1000 + 5000) }],
        },
      }
    : {}),
})

test('a CronJob makes one Job per tick, named by its scheduled time; missed runs, suspend, concurrency', () => {
  const m1 = Date.parse('2026-06-01T10:01:00Z') / 1000
  const m2 = m1 + 60
  assert.deepEqual(created(planCronJob(cronjob(), [], T0 + 10_000)), [], 'nothing is due before the first minute after creation')
  let ws = planCronJob(cronjob(), [], m1 * 1000 + 2000)
  assert.deepEqual(created(ws), [`tick-${m1}`])
  const made = ws.find((w) => w.op === 'create') as any
  assert.deepEqual(made.manifest.metadata.labels, { 'orc/cronjob': 'tick', 'orc/scheduled': String(m1) })
  assert.deepEqual(statusOf(ws), { active: [`tick-${m1}`], lastScheduleTime: iso(m1 * 1000) })
  // Made already (by this node or another): not again, whatever the status says.
  assert.deepEqual(created(planCronJob(cronjob(), [run(m1)], m1 * 1000 + 30_000)), [])
  // Missed several ticks: only the latest is made up ...
  assert.deepEqual(created(planCronJob(cronjob(), [], m1 * 1000 + 5 * 60_000 + 1000)), [`tick-${m1 + 300}`])
  // ... and none too late for startingDeadlineSeconds.
  assert.deepEqual(created(planCronJob(cronjob({ startingDeadlineSeconds: 10 }), [], m1 * 1000 + 11_000)), [])
  assert.deepEqual(created(planCronJob(cronjob({ suspend: true }), [], m2 * 1000 + 1000)), [])
  // Concurrency: Forbid skips while one runs; Replace deletes it; Allow runs both.
  assert.deepEqual(created(planCronJob(cronjob({ concurrencyPolicy: 'Forbid' }), [run(m1)], m2 * 1000 + 1000)), [])
  ws = planCronJob(cronjob({ concurrencyPolicy: 'Replace' }), [run(m1)], m2 * 1000 + 1000)
  assert.deepEqual([created(ws), deleted(ws)], [[`tick-${m2}`], [`Job/tick-${m1}`]])
  assert.deepEqual(statusOf(ws)?.active, [`tick-${m2}`])
  ws = planCronJob(cronjob(), [run(m1)], m2 * 1000 + 1000)
  assert.deepEqual([created(ws), statusOf(ws)?.active], [[`tick-${m2}`], [`tick-${m1}`, `tick-${m2}`]])
  // Seconds schedules (six fields) tick within a minute.
  assert.deepEqual(created(planCronJob(cronjob({ schedule: '*/10 * * * * *' }), [], T0 + 12_000)), [`tick-${T0 / 1000 + 10}`])
  // Time zone: 10:05 in Berlin is 08:05 UTC in June.
  const tz = cronjob({ schedule: '5 10 * * *', timeZone: 'Europe/Berlin' })
  tz.metadata.createdAt = '2026-06-01T00:00:00Z'
  assert.deepEqual(created(planCronJob(tz, [], Date.parse('2026-06-01T08:06:00Z'))), [`tick-${Date.parse('2026-06-01T08:05:00Z') / 1000}`])
})

test('a CronJob keeps the newest finished Jobs up to its history limits', () => {
  const base = Date.parse('2026-06-01T10:01:00Z') / 1000
  const jobs = [run(base, 'Complete'), run(base + 60, 'Failed'), run(base + 120, 'Complete'), run(base + 180, 'Failed'), run(base + 240, 'Complete')]
  const ws = planCronJob(cronjob({ successfulJobsHistoryLimit: 2, failedJobsHistoryLimit: 1 }), jobs, (base + 250) * 1000)
  assert.deepEqual(deleted(ws).sort(), [`Job/tick-${base}`, `Job/tick-${base + 60}`])
  assert.equal(statusOf(ws)?.lastSuccessfulTime, iso((base + 240) * 1000 + 5000))
})

test('the controller looks again as time passes only when a deadline, a TTL or a schedule waits', () => {
  assert.equal(timeMatters([], [job()]), false)
  assert.equal(timeMatters([], [job({ activeDeadlineSeconds: 60 })]), true)
  const done = { conditions: [{ type: 'Complete', status: 'True', reason: 'Completed', lastTransitionTime: iso(T0) }] }
  assert.equal(timeMatters([], [job({ activeDeadlineSeconds: 60 }, done)]), false)
  assert.equal(timeMatters([], [job({ ttlSecondsAfterFinished: 60 }, done)]), true)
  assert.equal(timeMatters([cronjob()], []), true)
  assert.equal(timeMatters([cronjob({ suspend: true })], []), false)
})

test('the Job and CronJob examples are valid', async () => {
  const { readManifests } = await import('../../../src/cli/manifests.ts')
  const { normalizeManifest } = await import('../../../src/model/index.ts')
  const root = new URL('../../..', import.meta.url).pathname
  for (const f of ['examples/job.yaml', 'examples/cronjob.yaml']) {
    const docs = await readManifests([`${root}${f}`])
    assert.equal(docs.length, 1)
    assert.doesNotThrow(() => normalizeManifest(docs[0]!.value), f)
  }
})
