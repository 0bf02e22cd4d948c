/**
 * The lifecycle's status writes as history shows them (issue #23): a pod that starts within the
 * progress window costs one lifecycle revision; a slow start shows its progress at most once per
 * window; a settling write carries the progress waiting before it and says its own reason.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import pino from 'pino'
import { StatusWriter } from '../../../../src/agent/pods/status.ts'
import { ManualClock } from '../../../../src/effects/index.ts'
import type { ObjectRef } from '../../../../src/model/index.ts'
import { openStore } from '../../../../src/store/index.ts'
import { tempDir } from '../../../helpers/store.ts'

const ref: ObjectRef<'Pod'> = { kind: 'Pod', namespace: 'default', name: 'web' }

const stepOf = (store: { get(r: ObjectRef<'Pod'>): { status?: unknown } | undefined }) => (store.get(ref)?.status as { step?: number } | undefined)?.step

async function setup() {
  const t = tempDir()
  const store = await openStore({ dir: join(t.dir, 'db') })
  await store.apply(
    { apiVersion: 'orc/v1', kind: 'Pod', metadata: { name: 'web', namespace: 'default' }, spec: { containers: [{ name: 'main', image: 'busybox' }] } } as never,
    { author: 'user:admin', now: 0 },
  )
  const clock = new ManualClock(1_000)
  const writer = new StatusWriter(store, ref, clock, pino({ level: 'silent' }), () => true, 1_000)
  const lifecycle = async () => (await store.history(ref)).filter((r) => r.author === 'controller:lifecycle').map((r) => r.reason)
  return { store, clock, writer, lifecycle, done: async () => (await store.close(), t.cleanup()) }
}

test('a start that settles within the window is one revision, named by the settling write', async () => {
  const s = await setup()
  s.writer.set({ phase: 'Starting', step: 0 }, 'start revision 1', { defer: true })
  for (let i = 1; i <= 4; i++) {
    await s.clock.advance(100)
    s.writer.set({ phase: 'Starting', step: i }, 'lifecycle progress', { defer: true })
  }
  assert.deepEqual(await s.lifecycle(), [], 'nothing written inside the window')
  s.writer.set({ phase: 'Running', step: 5 }, 'running revision 1')
  await s.writer.settled()
  await s.clock.advance(5_000)
  assert.deepEqual(await s.lifecycle(), ['running revision 1'])
  assert.equal(stepOf(s.store), 5)
  await s.done()
})

test('a slow start shows its progress once per window, under the name of the write that opened it', async () => {
  const s = await setup()
  s.writer.set({ phase: 'Starting', step: 0 }, 'start revision 1', { defer: true })
  await s.clock.advance(400)
  s.writer.set({ phase: 'Starting', step: 1 }, 'lifecycle progress', { defer: true })
  await s.clock.advance(700)
  await s.writer.settled()
  assert.deepEqual(await s.lifecycle(), ['start revision 1'])
  assert.equal(stepOf(s.store), 1, 'the window writes the newest status')
  for (let i = 2; i <= 7; i++) {
    s.writer.set({ phase: 'Starting', step: i }, 'lifecycle progress', { defer: true })
    await s.clock.advance(300)
  }
  await s.writer.settled()
  const reasons = await s.lifecycle()
  assert.ok(reasons.length <= 3, `six transitions over 1.8 s: at most two more revisions, got ${reasons.join(' | ')}`)
  assert.equal(stepOf(s.store), 7, 'settled() writes what was waiting')
  await s.done()
})

test('progress arriving while a slow write is in flight waits for its window too (a loaded machine)', async () => {
  const s = await setup()
  // Every store write takes 30 ms of real time while the manual clock moves on.
  const slow = new Proxy(s.store, {
    get: (target, prop, recv) =>
      prop === 'patch'
        ? async (...args: Parameters<typeof target.patch>) => {
            await new Promise((r) => setTimeout(r, 30))
            return target.patch(...args)
          }
        : Reflect.get(target, prop, recv),
  })
  const w = new StatusWriter(slow, ref, s.clock, pino({ level: 'silent' }), () => true, 1_000)
  w.set({ phase: 'Starting', step: 0 }, 'start revision 1', { defer: true })
  for (let i = 1; i <= 40; i++) {
    await s.clock.advance(100)
    w.set({ phase: 'Starting', step: i }, 'lifecycle progress', { defer: true })
    await new Promise((r) => setTimeout(r, 10)) // real time passes too: writes are in flight meanwhile
  }
  await w.settled()
  const n = (await s.lifecycle()).length
  assert.ok(n <= 5, `40 transitions over 4 s (manual) of 1 s windows: at most 5 revisions, got ${n}`)
  assert.equal(stepOf(s.store), 40)
  await s.done()
})

test('without a window (0) every write goes at once; cancelDeferred drops what waits', async () => {
  const s = await setup()
  const now = new StatusWriter(s.store, ref, s.clock, pino({ level: 'silent' }), () => true, 0)
  now.set({ phase: 'Starting' }, 'start revision 1', { defer: true })
  await now.settled()
  assert.deepEqual(await s.lifecycle(), ['start revision 1'])
  s.writer.set({ phase: 'Starting', step: 9 }, 'lifecycle progress', { defer: true })
  s.writer.cancelDeferred()
  await s.clock.advance(5_000)
  await s.writer.settled()
  assert.deepEqual(await s.lifecycle(), ['start revision 1'])
  await s.done()
})
