import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ManualClock, systemClock } from '../../../src/effects/index.ts'
import { isOrcError } from '../../../src/model/index.ts'
import { parseWorkflowSnapshot, type UnitChangeEvent, WorkflowGraph, WorkflowRun } from '../../../src/workflow/index.ts'
import { hang, podGraph, sleep, timed } from './helpers.ts'

function deferred() {
  let resolve!: () => void
  let reject!: (e: unknown) => void
  const promise = new Promise<void>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

async function until(cond: () => boolean, what: string, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setImmediate(r))
  }
}

test('independent units run in parallel and dependents start only after them', async () => {
  const clock = new ManualClock()
  const log: string[] = []
  const gates = { a: deferred(), b: deferred(), c: deferred() }
  const unit = (name: 'a' | 'b' | 'c', deps: Partial<{ after: string[]; requires: string[] }> = {}) => ({
    name,
    wantedBy: ['all'],
    ...deps,
    run: async () => {
      log.push(`start ${name}`)
      await gates[name].promise
      log.push(`end ${name}`)
    },
  })
  const g = new WorkflowGraph()
    .addTarget({ name: 'all' })
    .addUnit(unit('a'))
    .addUnit(unit('b'))
    .addUnit(unit('c', { after: ['a'], requires: ['b'] }))
  const run = new WorkflowRun(g, { clock })
  const reached = run.reach('all')
  await until(() => log.length === 2, 'a and b to start')
  assert.deepEqual(log, ['start a', 'start b'], 'both independent units start before either ends')
  assert.equal(run.stateOf('c'), 'waiting')
  gates.a.resolve()
  await until(() => log.includes('end a'), 'a to end')
  assert.equal(run.stateOf('c'), 'waiting', 'c still waits for b')
  gates.b.resolve()
  await until(() => log.includes('start c'), 'c to start')
  gates.c.resolve()
  const r = await reached
  assert.deepEqual(r, { target: 'all', reached: true, state: 'done', at: 0 })
  assert.deepEqual(log, ['start a', 'start b', 'end a', 'end b', 'start c', 'end c'])
})

test('a failed requirement skips its dependents, naming the failed unit; ordering-only dependents still run', async () => {
  const clock = new ManualClock()
  const ran: string[] = []
  const g = new WorkflowGraph()
    .addTarget({ name: 'running' })
    .addUnit({
      name: 'pull-image',
      run: async () => {
        throw new Error('manifest unknown: nginx:nope')
      },
    })
    .addUnit({ name: 'start-containers', requires: ['pull-image'], wantedBy: ['running'], run: async () => void ran.push('start') })
    .addUnit({ name: 'report', after: ['pull-image'], wantedBy: ['done-reporting'], run: async () => void ran.push('report') })
    .addTarget({ name: 'done-reporting' })
  const run = new WorkflowRun(g, { clock })
  const r = await run.reach('running')
  assert.equal(r.reached, false)
  assert.equal(r.reason, 'requires start-containers, which was skipped because pull-image failed (manifest unknown: nginx:nope)')
  const s = run.snapshot()
  const byName = Object.fromEntries(s.units.map((u) => [u.name, u]))
  assert.equal(byName['pull-image']!.state, 'failed')
  assert.equal(byName['pull-image']!.lastError, 'manifest unknown: nginx:nope')
  assert.equal(byName['start-containers']!.state, 'skipped')
  assert.equal(byName['start-containers']!.reason, 'requires pull-image, which failed')
  assert.deepEqual(ran, [])
  // `after` is ordering only: a unit ordered after a failed one still runs once it has finished.
  const r2 = await run.reach('done-reporting')
  assert.equal(r2.reached, true)
  assert.deepEqual(ran, ['report'])
})

test('an ordering cycle is refused at registration, naming the cycle and its declarations', () => {
  const g = new WorkflowGraph()
  g.addTarget({ name: 'running' })
  g.addUnit({ name: 'a', run: async () => {}, wantedBy: ['running'] })
  g.addUnit({ name: 'b', run: async () => {}, after: ['a'] })
  assert.throws(
    () => g.addUnit({ name: 'c', run: async () => {}, requires: ['b'], before: ['a'] }),
    (err: unknown) => {
      assert.ok(isOrcError(err, 'invalid'))
      assert.equal(err.message, 'unit c would close an ordering cycle: c → a → b → c (c before a; b after a; c requires b)')
      assert.deepEqual(err.details.cycle, ['c', 'a', 'b', 'c'])
      return true
    },
  )
  assert.equal(g.has('c'), false, 'the refused unit is not registered')
  assert.throws(() => g.addUnit({ name: 'self', run: async () => {}, after: ['self'] }), /self → self \(self after self\)/)
  assert.throws(() => g.addUnit({ name: 'a', run: async () => {} }), /unit a is already registered/)
  // a controller can still add its own units and intermediate targets afterwards
  g.addTarget({ name: 'image-ready', wantedBy: ['running'] })
  g.addUnit({ name: 'verify', run: async () => {}, wantedBy: ['image-ready'], after: ['b'] })
  assert.ok(g.has('verify'))
})

test('a hanging unit is cut by its timeout and retried with doubling backoff', async () => {
  const clock = new ManualClock()
  const aborted: string[] = []
  const starts: number[] = []
  const g = new WorkflowGraph().addTarget({ name: 'running' }).addUnit({
    name: 'pull-image',
    wantedBy: ['running'],
    timeoutMs: 30_000,
    retry: { attempts: 4, backoffMs: 1_000, maxBackoffMs: 3_000 },
    run: ({ signal, attempt }) => {
      starts.push(clock.now())
      if (attempt === 4) return sleep(clock, 500, signal)
      return new Promise((_res, rej) => {
        signal.addEventListener('abort', () => {
          aborted.push(String((signal.reason as Error).message))
          rej(signal.reason)
        })
      })
    },
  })
  const events: UnitChangeEvent[] = []
  const run = new WorkflowRun(g, { clock })
  run.onChange((e) => events.push(e))
  const reached = run.reach('running')
  await clock.advance(30_000)
  assert.deepEqual(aborted, ['timed out after 30s'])
  const during = run.snapshot().units.find((u) => u.name === 'pull-image')!
  assert.equal(during.state, 'running')
  assert.equal(during.attempts, 1)
  assert.equal(during.lastError, 'timed out after 30s')
  assert.equal(during.retryAt, 31_000)
  await clock.runAll()
  const r = await reached
  assert.equal(r.reached, true)
  // attempts at 0; 30s timeout + 1s; +30s + 2s; +30s + 3s (capped)
  assert.deepEqual(starts, [0, 31_000, 63_000, 96_000])
  assert.equal(aborted.length, 3)
  const end = run.snapshot().units.find((u) => u.name === 'pull-image')!
  assert.equal(end.state, 'done')
  assert.equal(end.attempts, 4)
  assert.equal(end.startedAt, 0)
  assert.equal(end.endedAt, 96_500)
  assert.ok(
    events.some((e) => e.unit === 'pull-image' && e.retryAt === 63_000),
    'retry scheduling is announced',
  )
  assert.deepEqual(
    events.filter((e) => e.unit === 'running').map((e) => e.state),
    ['done'],
  )
})

test('retries run out: the unit fails with the last error; a deaf unit is still cut off', async () => {
  const clock = new ManualClock()
  const g = podGraph(clock, hang(true), { retry: { attempts: 2, backoffMs: 5_000 } })
  const run = new WorkflowRun(g, { clock })
  const reached = run.reach('running')
  await clock.runAll()
  const r = await reached
  assert.equal(r.reached, false)
  assert.equal(r.state, 'skipped')
  assert.equal(r.reason, 'requires start-containers, which was skipped because pull-image failed (timed out after 30s)')
  const pull = run.snapshot().units.find((u) => u.name === 'pull-image')!
  assert.equal(pull.state, 'failed')
  assert.equal(pull.attempts, 2)
  // storage reached at 120ms; attempt 1 times out at 30.12s, backoff 5s, attempt 2 times out 30s later.
  assert.equal(pull.endedAt, 120 + 30_000 + 5_000 + 30_000)
  assert.equal(run.idle(), true)
  assert.equal(clock.pending(), 0, 'no timers left behind')
})

test('cancel aborts running units, skips waiting ones and answers pending reach calls; a new run starts fresh', async () => {
  const clock = new ManualClock()
  let signal: AbortSignal | undefined
  let pulls = 0
  const g = podGraph(clock, (ctx) => {
    pulls++
    signal = ctx.signal
    return pulls === 1 ? hang()(ctx) : sleep(clock, 10)
  })
  const run = new WorkflowRun(g, { clock, id: 'pod/web@1' })
  const reached = run.reach('running')
  await clock.advance(1_000)
  assert.equal(run.stateOf('pull-image'), 'running')
  run.cancel('spec changed')
  const r = await reached
  assert.equal(r.reached, false)
  assert.equal(signal?.aborted, true)
  assert.match(String((signal?.reason as Error | undefined)?.message), /cancelled: spec changed/)
  const s = run.snapshot()
  assert.equal(s.cancelled, 'spec changed')
  assert.equal(s.id, 'pod/web@1')
  assert.equal(s.units.find((u) => u.name === 'pull-image')!.state, 'failed')
  assert.equal(s.units.find((u) => u.name === 'start-containers')!.reason, 'cancelled: spec changed')
  assert.equal(clock.pending(), 0)

  const again = new WorkflowRun(g, { clock, id: 'pod/web@2' })
  const p = again.reach('running')
  await clock.runAll()
  assert.equal((await p).reached, true)
  assert.equal(pulls, 2)
})

test('a requirement nobody defined skips its dependents; an unknown target is refused', async () => {
  const clock = new ManualClock()
  const g = new WorkflowGraph().addTarget({ name: 'ready' }).addUnit({ name: 'join', requires: ['wireguard-up'], wantedBy: ['ready'], run: async () => {} })
  const run = new WorkflowRun(g, { clock })
  const r = await run.reach('ready')
  assert.equal(r.reached, false)
  assert.equal(run.snapshot().units.find((u) => u.name === 'join')!.reason, 'requires wireguard-up, which is not defined')
  await assert.rejects(run.reach('nope'), (e: unknown) => isOrcError(e, 'not_found'))
})

test('the snapshot is plain JSON that survives a round trip, and events report every state change', async () => {
  const clock = new ManualClock(1_700_000_000_000)
  const g = podGraph(clock, ({ signal }) => sleep(clock, 300, signal))
  const run = new WorkflowRun(g, { clock })
  const seen: string[] = []
  run.onChange((e) => seen.push(`${e.unit}:${e.previous}→${e.state}`))
  const p = run.reach('running')
  await clock.runAll()
  assert.equal((await p).reached, true)
  const snap = run.snapshot()
  const copy = parseWorkflowSnapshot(JSON.parse(JSON.stringify(snap)))
  assert.deepEqual(copy, snap)
  assert.ok(seen.includes('pull-image:waiting→running'))
  assert.ok(seen.includes('pull-image:running→done'))
  assert.ok(seen.includes('running:waiting→done'))
  assert.throws(() => parseWorkflowSnapshot({ ...snap, units: [{ name: 'x' }] }), /units\[0\]\.kind/)
  assert.throws(() => parseWorkflowSnapshot('nope'), /not an object/)
})

test('the system clock drives a real run', async () => {
  const g = new WorkflowGraph()
    .addTarget({ name: 'ready' })
    .addUnit({ name: 'quick', wantedBy: ['ready'], timeoutMs: 5_000, run: () => new Promise((r) => setImmediate(r)) })
    .addUnit({ name: 'hung', timeoutMs: 20, run: hang(), wantedBy: ['other'] })
    .addTarget({ name: 'other' })
  const run = new WorkflowRun(g, { clock: systemClock })
  assert.equal((await run.reach('ready')).reached, true)
  const r = await run.reach('other')
  assert.equal(r.reached, false)
  assert.match(r.reason ?? '', /hung failed \(timed out after 20ms\)|which failed \(timed out after 20ms\)/)
})

test('timed units on the manual clock record their real durations', async () => {
  const clock = new ManualClock()
  const g = new WorkflowGraph().addTarget({ name: 't' }).addUnit(timed(clock, 'x', 250, { wantedBy: ['t'] }))
  const run = new WorkflowRun(g, { clock })
  const p = run.reach('t')
  await clock.runAll()
  await p
  const x = run.snapshot().units.find((u) => u.name === 'x')!
  assert.equal(x.endedAt! - x.startedAt!, 250)
})
