import assert from 'node:assert/strict'
import { test } from 'node:test'
import { lastRunBetween, nextRun, normalizeManifest, parseCron } from '../../../src/model/index.ts'

const T = (iso: string) => Date.parse(iso)
const iso = (t: number | undefined) => (t === undefined ? undefined : new Date(t).toISOString())
/** The next `n` runs after `from`. */
function runs(expr: string, from: string, n: number, zone?: string): string[] {
  const s = parseCron(expr)
  const out: string[] = []
  let t = T(from)
  for (let i = 0; i < n; i++) {
    const next = nextRun(s, t, zone)
    if (next === undefined) break
    out.push(iso(next)!)
    t = next
  }
  return out
}

test('cron fields: lists, ranges, steps, names, 7 as Sunday, macros', () => {
  assert.deepEqual(runs('*/15 * * * *', '2026-03-01T10:07:00Z', 3), ['2026-03-01T10:15:00.000Z', '2026-03-01T10:30:00.000Z', '2026-03-01T10:45:00.000Z'])
  assert.deepEqual(runs('0 9-17/4 * * *', '2026-03-01T00:00:00Z', 4), [
    '2026-03-01T09:00:00.000Z',
    '2026-03-01T13:00:00.000Z',
    '2026-03-01T17:00:00.000Z',
    '2026-03-02T09:00:00.000Z',
  ])
  // 2026-03-01 is a Sunday.
  assert.deepEqual(runs('30 6 * * mon,FRI', '2026-03-01T00:00:00Z', 2), ['2026-03-02T06:30:00.000Z', '2026-03-06T06:30:00.000Z'])
  assert.deepEqual(runs('0 0 * * 7', '2026-03-01T00:00:00Z', 1), ['2026-03-08T00:00:00.000Z'])
  assert.deepEqual(runs('0 0 1 jan-mar *', '2026-01-15T00:00:00Z', 3), ['2026-02-01T00:00:00.000Z', '2026-03-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z'])
  assert.deepEqual(runs('@hourly', '2026-03-01T10:00:00Z', 2), ['2026-03-01T11:00:00.000Z', '2026-03-01T12:00:00.000Z'])
  assert.deepEqual(runs('@yearly', '2026-03-01T10:00:00Z', 1), ['2027-01-01T00:00:00.000Z'])
  assert.deepEqual(runs('5/20 * * * *', '2026-03-01T10:00:00Z', 3), ['2026-03-01T10:05:00.000Z', '2026-03-01T10:25:00.000Z', '2026-03-01T10:45:00.000Z'])
  // Both day fields restricted: either one (Vixie cron); 13th of March 2026 is a Friday.
  assert.deepEqual(runs('0 0 13 * 5', '2026-03-01T00:00:00Z', 3), ['2026-03-06T00:00:00.000Z', '2026-03-13T00:00:00.000Z', '2026-03-20T00:00:00.000Z'])
  // A day that never comes.
  assert.equal(nextRun(parseCron('0 0 30 2 *'), T('2026-01-01T00:00:00Z')), undefined)
})

test('six fields put seconds first', () => {
  assert.deepEqual(runs('*/10 * * * * *', '2026-03-01T10:00:05Z', 3), ['2026-03-01T10:00:10.000Z', '2026-03-01T10:00:20.000Z', '2026-03-01T10:00:30.000Z'])
  assert.deepEqual(runs('0 * * * *', '2026-03-01T10:00:05.500Z', 1), ['2026-03-01T11:00:00.000Z'], 'a five-field schedule runs on whole minutes')
})

test('time zones: the wall clock of the zone, across a daylight-saving change', () => {
  // 09:00 in Berlin is 08:00 UTC in winter, 07:00 UTC in summer (clocks go forward on 2026-03-29).
  assert.deepEqual(runs('0 9 * * *', '2026-03-28T00:00:00Z', 2, 'Europe/Berlin'), ['2026-03-28T08:00:00.000Z', '2026-03-29T07:00:00.000Z'])
  // 02:30 does not exist in Berlin on 2026-03-29: that day has no run.
  assert.deepEqual(runs('30 2 * * *', '2026-03-28T12:00:00Z', 2, 'Europe/Berlin'), ['2026-03-30T00:30:00.000Z', '2026-03-31T00:30:00.000Z'])
  assert.deepEqual(runs('0 0 * * *', '2026-03-01T00:00:00Z', 1, 'Asia/Kathmandu'), ['2026-03-01T18:15:00.000Z'], 'a +05:45 zone')
})

test('the latest run due between two instants (missed runs)', () => {
  const s = parseCron('*/5 * * * *')
  assert.equal(iso(lastRunBetween(s, T('2026-03-01T10:00:00Z'), T('2026-03-01T10:17:30Z'))), '2026-03-01T10:15:00.000Z')
  assert.equal(lastRunBetween(s, T('2026-03-01T10:15:00Z'), T('2026-03-01T10:17:30Z')), undefined, 'the run at `from` is not due again')
  // Far behind: still the latest one, cheaply.
  assert.equal(iso(lastRunBetween(parseCron('* * * * * *'), 0, T('2026-03-01T10:17:30Z'))), '2026-03-01T10:17:30.000Z')
  assert.equal(iso(lastRunBetween(parseCron('@yearly'), T('2020-06-01T00:00:00Z'), T('2026-03-01T10:17:30Z'))), '2026-01-01T00:00:00.000Z')
})

test('a bad schedule names the field; a CronJob names spec.schedule and spec.timeZone', () => {
  assert.throws(() => parseCron('61 * * * *'), /minute "61" is not a value from 0 to 59/)
  assert.throws(() => parseCron('* * * *'), /needs 5 fields/)
  assert.throws(() => parseCron('* * * foo *'), /month "foo"/)
  assert.throws(() => parseCron('* * * * 1-9'), /day of week "9"/)
  assert.throws(() => parseCron('*/0 * * * *'), /step must be at least 1/)
  assert.throws(() => parseCron('5-1 * * * *'), /runs backwards/)
  assert.throws(() => parseCron('@often'), /unknown macro/)
  const cj = (spec: Record<string, unknown>) => ({
    apiVersion: 'orc/v1',
    kind: 'CronJob',
    metadata: { name: 'nightly' },
    spec: { jobTemplate: { spec: { template: { spec: { containers: [{ name: 'm', image: 'busybox' }] } } } }, ...spec },
  })
  assert.throws(() => normalizeManifest(cj({ schedule: '0 25 * * *' })), /spec\.schedule.*hour "25"/)
  assert.throws(() => normalizeManifest(cj({ schedule: '@daily', timeZone: 'Mars/Olympus' })), /spec\.timeZone.*unknown time zone/)
  assert.doesNotThrow(() => normalizeManifest(cj({ schedule: '@daily', timeZone: 'Europe/Berlin' })))
})

test('a bad Job names the field', () => {
  const job = (spec: Record<string, unknown>, tpl: Record<string, unknown> = {}) => ({
    apiVersion: 'orc/v1',
    kind: 'Job',
    metadata: { name: 'once' },
    spec: { template: { spec: { containers: [{ name: 'm', image: 'busybox' }], ...tpl } }, ...spec },
  })
  assert.throws(() => normalizeManifest(job({}, { restartPolicy: 'Always' })), /job\/once: spec\.template\.spec\.restartPolicy: must be Never or OnFailure/)
  assert.throws(() => normalizeManifest(job({ completions: 0 })), /spec\.completions/)
  assert.throws(() => normalizeManifest(job({ backoffLimit: -1 })), /spec\.backoffLimit/)
  assert.throws(() => normalizeManifest(job({ parallelism: 'two' })), /spec\.parallelism/)
  assert.throws(() => normalizeManifest({ ...job({}), spec: { completions: 1 } }), /spec\.template: required/)
  assert.doesNotThrow(() => normalizeManifest(job({ completions: 3, parallelism: 2, backoffLimit: 1, activeDeadlineSeconds: 60, ttlSecondsAfterFinished: 0 })))
})
