import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ManualClock } from '../../../src/effects/index.ts'
import { isOrcError } from '../../../src/model/index.ts'
import {
  criticalChain,
  explainWhy,
  formatCriticalChain,
  formatWhy,
  parseWorkflowSnapshot,
  renderCriticalChain,
  renderWhy,
  WorkflowRun,
  type WorkflowSnapshot,
} from '../../../src/workflow/index.ts'
import { hang, podGraph, sleep } from './helpers.ts'

/** What another node sees: the snapshot after a trip through JSON (the pod's replicated status). */
function overTheWire(run: WorkflowRun): WorkflowSnapshot {
  return parseWorkflowSnapshot(JSON.parse(JSON.stringify(run.snapshot())))
}

async function stuckRun() {
  const clock = new ManualClock(1_700_000_000_000)
  const g = podGraph(clock, hang(), { retry: { attempts: 5, backoffMs: 2_000 } })
  const run = new WorkflowRun(g, { clock })
  void run.reach('running')
  // storage at 0.12s; attempt 1 times out at 30.12s; 2s backoff; attempt 2 has run 12.3s.
  await clock.advance(120 + 30_000 + 2_000 + 12_300)
  return overTheWire(run)
}

async function healthyRun() {
  const clock = new ManualClock(1_700_000_000_000)
  const g = podGraph(clock, ({ signal }) => sleep(clock, 300, signal))
  const run = new WorkflowRun(g, { clock })
  const p = run.reach('running')
  await clock.runAll()
  assert.equal((await p).reached, true)
  return overTheWire(run)
}

test('why: a stuck pod names the chain down to the running unit, its attempt, timeout and last error', async () => {
  const snap = await stuckRun()
  assert.equal(
    renderWhy(snap, 'running', { subject: 'pod/web' }),
    [
      'pod/web: target running not reached: waiting for pull-image, running 12.3s (attempt 2/5, timeout 30s, last error: timed out after 30s)',
      '',
      '  running waits for start-containers',
      '  └─start-containers waits for pull-image',
      '    └─pull-image running 12.3s (attempt 2/5, timeout 30s, last error: timed out after 30s)',
      '',
      'running:',
      '  pull-image  running 12.3s (attempt 2/5, timeout 30s, last error: timed out after 30s)',
      '',
      'waiting:',
      '  running           waits for start-containers',
      '  start-containers  waits for pull-image',
      '',
      'done:',
      '  create-netns    done in 80ms',
      '  mount-volumes   done in 120ms',
      '  assign-address  done in 50ms',
      '  storage         reached at +0.120s',
      '  network         reached at +0.130s',
    ].join('\n'),
  )
  const e = explainWhy(snap, 'running')
  assert.equal(e.reached, false)
  assert.deepEqual(
    e.blockedBy.map((s) => [s.unit, s.state, s.waitsFor]),
    [
      ['running', 'waiting', ['start-containers']],
      ['start-containers', 'waiting', ['pull-image']],
      ['pull-image', 'running', []],
    ],
  )
  assert.deepEqual(
    { ...e.running[0], status: undefined },
    {
      name: 'pull-image',
      kind: 'unit',
      state: 'running',
      status: undefined,
      startedAtMs: 120,
      durationMs: 12_300,
      attempts: 2,
      maxAttempts: 5,
      timeoutMs: 30_000,
      lastError: 'timed out after 30s',
    },
  )
  // JSON-serialisable for `orc why -o json`
  assert.deepEqual(JSON.parse(JSON.stringify(e)), e)
  // rendered later (e.g. on another node), the running time grows with `now`
  assert.match(renderWhy(snap, 'running', { now: snap.at + 5_000 }), /pull-image running 17\.3s/)
})

test('why: between attempts it says when the next attempt comes and why the last one failed', async () => {
  const clock = new ManualClock()
  const run = new WorkflowRun(podGraph(clock, hang(), { retry: { attempts: 3, backoffMs: 4_000 } }), { clock })
  void run.reach('running')
  await clock.advance(120 + 30_000 + 1_000)
  const text = renderWhy(overTheWire(run), 'running')
  assert.match(text, /\n {4}└─pull-image retrying in 3s \(attempt 1\/3 failed: timed out after 30s\)\n/)
})

test('why: a failed pull is named as the reason, with its error, through the skipped units', async () => {
  const clock = new ManualClock()
  const g = podGraph(clock, async () => {
    throw new Error('pull docker.io/library/nginx:nope: manifest unknown')
  })
  const run = new WorkflowRun(g, { clock })
  const p = run.reach('running')
  await clock.runAll()
  await p
  const text = renderWhy(overTheWire(run), 'running', { subject: 'pod/web' })
  assert.equal(
    text.split('\n\n').slice(0, 3).join('\n\n'),
    [
      'pod/web: target running not reached: pull-image failed: pull docker.io/library/nginx:nope: manifest unknown',
      '',
      '  running skipped: requires start-containers, which was skipped because pull-image failed',
      '  └─start-containers skipped: requires pull-image, which failed',
      '    └─pull-image failed: pull docker.io/library/nginx:nope: manifest unknown',
      '',
      'failed:',
      '  pull-image  failed: pull docker.io/library/nginx:nope: manifest unknown',
    ].join('\n'),
  )
  assert.equal(
    formatCriticalChain(criticalChain(overTheWire(run), 'running'))
      .split('\n')
      .slice(2)
      .join('\n'),
    [
      'running (skipped)',
      '└─start-containers (skipped)',
      '  └─pull-image @0.120s +0.000s (failed)',
      '    └─storage @0.120s',
      '      └─mount-volumes @0.000s +0.120s',
    ].join('\n'),
  )
})

test('why: a healthy pod says when the target was reached and lists what was done', async () => {
  const snap = await healthyRun()
  const text = renderWhy(snap, 'running', { subject: 'pod/web' })
  assert.equal(
    text,
    [
      'pod/web: target running reached at +1.314s',
      '',
      'done:',
      '  create-netns      done in 80ms',
      '  mount-volumes     done in 120ms',
      '  assign-address    done in 50ms',
      '  pull-image        done in 300ms',
      '  storage           reached at +0.120s',
      '  network           reached at +0.130s',
      '  start-containers  done in 894ms',
      '  running           reached at +1.314s',
    ].join('\n'),
  )
  // asking about an intermediate target shows only what it depends on
  assert.deepEqual(
    explainWhy(snap, 'network').done.map((u) => u.name),
    ['create-netns', 'assign-address', 'network'],
  )
  assert.throws(
    () => renderWhy(snap, 'ready'),
    (e: unknown) => isOrcError(e, 'not_found') && /ready is not part of this workflow run/.test(e.message),
  )
})

test('critical chain: the path of last-finishing dependencies, with start and duration', async () => {
  const snap = await healthyRun()
  assert.equal(
    renderCriticalChain(snap, 'running'),
    [
      'The time when a unit started (a target: was reached) is printed after "@", the time it took after "+".',
      '',
      'running @1.314s',
      '└─start-containers @0.420s +0.894s',
      '  └─pull-image @0.120s +0.300s',
      '    └─storage @0.120s',
      '      └─mount-volumes @0.000s +0.120s',
    ].join('\n'),
  )
  const c = criticalChain(snap, 'running')
  assert.equal(c.reached, true)
  assert.equal(c.totalMs, 1_314)
  assert.deepEqual(c.steps[1], { unit: 'start-containers', kind: 'unit', state: 'done', depth: 1, atMs: 420, durationMs: 894 })
  assert.deepEqual(JSON.parse(JSON.stringify(c)), c)
})

test('critical chain of a target not reached yet runs through what it still waits for', async () => {
  const snap = await stuckRun()
  assert.deepEqual(renderCriticalChain(snap, 'running', { subject: 'pod/web' }).split('\n'), [
    'pod/web: running not reached after 44.420s',
    'The time when a unit started (a target: was reached) is printed after "@", the time it took after "+".',
    '',
    'running (not reached)',
    '└─start-containers (waiting)',
    '  └─pull-image @0.120s +44.300s (running)',
    '    └─storage @0.120s',
    '      └─mount-volumes @0.000s +0.120s',
  ])
})

test('formatWhy works on explanations only (no engine needed)', () => {
  const snap: WorkflowSnapshot = {
    version: 1,
    startedAt: 0,
    at: 2_000,
    targets: ['ready'],
    units: [
      {
        name: 'wg-up',
        kind: 'unit',
        state: 'running',
        after: [],
        requires: [],
        startedAt: 0,
        attemptStartedAt: 0,
        attempts: 1,
        maxAttempts: 1,
        timeoutMs: null,
      },
      { name: 'ready', kind: 'target', state: 'waiting', after: ['wg-up', 'missing'], requires: ['missing'], attempts: 0, maxAttempts: 0, timeoutMs: null },
    ],
  }
  const text = formatWhy(explainWhy(snap, 'ready', { subject: 'node/a' }))
  assert.match(
    text,
    /^node\/a: target ready not reached: missing is not defined\n\n {2}ready waits for wg-up, missing\n {2}└─missing is not defined \(no controller registered it\)/,
  )
})
