import assert from 'node:assert/strict'
import { test } from 'node:test'
import { type Component, startComponents } from '../../../src/agent/component.ts'
import { OrcError } from '../../../src/model/index.ts'

function recorder(): { calls: string[]; part(name: string, o?: { failStart?: Error; failStop?: Error; beforeStop?: boolean }): Component } {
  const calls: string[] = []
  return {
    calls,
    part: (name, o = {}) => ({
      name,
      async start() {
        await Promise.resolve()
        calls.push(`start ${name}`)
        if (o.failStart) throw o.failStart
      },
      stop() {
        calls.push(`stop ${name}`)
        if (o.failStop) throw o.failStop
      },
      ...(o.beforeStop ? { beforeStop: () => void calls.push(`beforeStop ${name}`) } : {}),
    }),
  }
}

test('components start in the listed order and stop in the reverse one, once', async () => {
  const r = recorder()
  const running = await startComponents([r.part('store'), r.part('mesh'), r.part('api')])
  assert.deepEqual(r.calls, ['start store', 'start mesh', 'start api'])
  await Promise.all([running.stop(), running.stop()])
  await running.stop()
  assert.deepEqual(r.calls.slice(3), ['stop api', 'stop mesh', 'stop store'])
})

test('beforeStop runs for every component, in reverse, before any stop', async () => {
  const r = recorder()
  const running = await startComponents([r.part('store'), r.part('api', { beforeStop: true }), r.part('pods'), r.part('http', { beforeStop: true })])
  await running.stop()
  assert.deepEqual(r.calls.slice(4), ['beforeStop http', 'beforeStop api', 'stop http', 'stop pods', 'stop api', 'stop store'])
})

test('a failing start stops what started, in reverse, and rethrows with the component named', async () => {
  const r = recorder()
  const cause = new OrcError('locked', 'data dir /x is in use', { dataDir: '/x' })
  await assert.rejects(
    startComponents([r.part('store'), r.part('mesh', { beforeStop: true }), r.part('network', { failStart: cause }), r.part('api')]),
    (err: unknown) => {
      assert.ok(err instanceof OrcError)
      // The user's one line is unchanged; the part that failed is in the details and the chain.
      assert.equal(err.code, 'locked')
      assert.equal(err.message, 'data dir /x is in use')
      assert.deepEqual(err.details, { dataDir: '/x', component: 'network' })
      assert.equal(err.cause, cause)
      return true
    },
  )
  assert.deepEqual(r.calls, ['start store', 'start mesh', 'start network', 'beforeStop mesh', 'stop mesh', 'stop store'])
})

test('a plain error from a start keeps its message and gains the component name', async () => {
  const r = recorder()
  await assert.rejects(startComponents([r.part('store'), r.part('mesh', { failStart: new Error('listen EADDRINUSE') })]), (err: unknown) => {
    assert.ok(err instanceof OrcError)
    assert.equal(err.message, 'listen EADDRINUSE')
    assert.equal(err.details.component, 'mesh')
    return true
  })
  assert.deepEqual(r.calls, ['start store', 'start mesh', 'stop store'])
})

test('a failing stop is reported and the other components still stop', async () => {
  const r = recorder()
  const failed: string[] = []
  const running = await startComponents([r.part('store'), r.part('mesh', { failStop: new Error('boom') }), r.part('api')], {
    onStopError: (name, err) => failed.push(`${name}: ${(err as Error).message}`),
  })
  await running.stop()
  assert.deepEqual(r.calls.slice(3), ['stop api', 'stop mesh', 'stop store'])
  assert.deepEqual(failed, ['mesh: boom'])
})
