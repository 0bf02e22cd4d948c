import assert from 'node:assert/strict'
import { test } from 'node:test'
import { cronJobSource, jobFromCronJob } from '../../../src/cli/commands/jobs.ts'
import { normalizeManifest } from '../../../src/model/index.ts'

test('orc create job --from cronjob/NAME: the template as a plain Job, not one of the CronJob runs', () => {
  const cj: any = {
    apiVersion: 'orc/v1',
    kind: 'CronJob',
    metadata: { name: 'nightly', namespace: 'ops' },
    spec: {
      schedule: '@daily',
      jobTemplate: { metadata: { labels: { app: 'backup' } }, spec: { completions: 2, template: { spec: { containers: [{ name: 'm', image: 'busybox' }] } } } },
    },
  }
  const job = jobFromCronJob(cj, 'backup-now')
  assert.deepEqual(job.metadata, { name: 'backup-now', namespace: 'ops', labels: { app: 'backup' } })
  assert.equal(job.spec?.completions, 2)
  assert.doesNotThrow(() => normalizeManifest(job))
  assert.equal(cronJobSource('cronjob/nightly'), 'nightly')
  assert.equal(cronJobSource('cj/nightly'), 'nightly')
  assert.throws(() => cronJobSource('job/nightly'), /give cronjob\/NAME/)
  assert.throws(() => cronJobSource('nightly'), /give cronjob\/NAME/)
})
