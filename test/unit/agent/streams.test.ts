// exec and port-forward sessions on the pod's node (agent/pods/streams.ts) against the fake runtime:
// output in order and complete with the exit, sessions bound to their owner, idle sessions killed.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { PodStreams } from '../../../src/agent/pods/streams.ts'
import { systemClock } from '../../../src/effects/index.ts'
import type { Principal } from '../../../src/model/index.ts'
import { FakeRuntime } from '../../../src/runtime/index.ts'

const pod = {
  kind: 'Pod',
  apiVersion: 'orc/v1',
  metadata: { name: 'web', namespace: 'default', uid: 'u1' },
  spec: { placement: { node: 'n1' }, containers: [{ name: 'main', image: 'busybox' }] },
  status: { phase: 'Running', node: 'n1' },
}

async function setup(opts: { idleMs?: number } = {}) {
  const rt = new FakeRuntime()
  await rt.start({ id: 'u1.main', image: 'busybox', logDir: '/nonexistent', env: { FROM: 'spec' } })
  let n = 0
  const streams = new PodStreams({
    store: { get: (ref: { name: string }) => (ref.name === 'web' ? pod : undefined) } as never,
    nodeName: 'n1',
    runtime: () => rt,
    clock: systemClock,
    random: (k) => new Uint8Array(k).fill(++n),
    ...opts,
  })
  return { rt, streams }
}

const alice: Principal = { kind: 'user', name: 'alice', via: 'socket' }
const bob: Principal = { kind: 'user', name: 'bob', via: 'socket' }
const text = (b64: string) => Buffer.from(b64, 'base64').toString('utf8')

test('an exec session: input in, output and exit code out, the session gone after its exit', async () => {
  const { streams } = await setup()
  const open = await streams.startExec(alice, 'default', 'web', { command: ['cat'] })
  assert.equal(open.container, 'main')
  assert.equal(open.node, 'n1')
  const w = await streams.io('exec', alice, 'default', 'web', open.session, { stdin: Buffer.from('hi\n').toString('base64'), eof: true, read: false })
  assert.deepEqual(w, { stdout: '', stderr: '' }, 'a writer takes no output')
  const r = await streams.io('exec', alice, 'default', 'web', open.session, { waitMs: 2000 })
  assert.equal(text(r.stdout), 'hi\n')
  assert.deepEqual(r.exit, { code: 0, signal: null })
  await assert.rejects(streams.io('exec', alice, 'default', 'web', open.session, {}), /not found/)
  const env = await streams.startExec(alice, 'default', 'web', { command: ['env'], env: { TERM: 'xterm' } })
  await streams.io('exec', alice, 'default', 'web', env.session, { eof: true, read: false })
  const e = await streams.io('exec', alice, 'default', 'web', env.session, { waitMs: 2000 })
  assert.equal(text(e.stdout), 'FROM=spec\nTERM=xterm\n')
})

test("a session answers only its owner; another user's exchange finds nothing", async () => {
  const { streams } = await setup()
  const open = await streams.startExec(alice, 'default', 'web', { command: ['exit', '3'] })
  await assert.rejects(streams.io('exec', bob, 'default', 'web', open.session, { eof: true }), /not found/)
  await assert.rejects(streams.io('portforward', alice, 'default', 'web', open.session, {}), /not found/, 'nor as another kind')
  await streams.io('exec', alice, 'default', 'web', open.session, { eof: true, read: false })
  const r = await streams.io('exec', alice, 'default', 'web', open.session, { waitMs: 2000 })
  assert.deepEqual(r.exit, { code: 3, signal: null })
})

test('bad requests are refused with one clear line', async () => {
  const { streams } = await setup()
  await assert.rejects(streams.startExec(alice, 'default', 'web', { command: [] }), /command must be a non-empty list/)
  await assert.rejects(streams.startExec(alice, 'default', 'web', { command: ['x'], container: 'side' }), /no container "side"/)
  await assert.rejects(streams.startExec(alice, 'default', 'nope', { command: ['x'] }), /pod\/nope in namespace default not found/)
  await assert.rejects(streams.startPortForward(alice, 'default', 'web', { port: 70000 }), /port: must be an integer in 1..65535/)
  const open = await streams.startExec(alice, 'default', 'web', { command: ['cat'] })
  await assert.rejects(streams.io('exec', alice, 'default', 'web', open.session, { stdin: '!!not base64' }), /stdin must be base64/)
})

test('a port-forward session carries bytes both ways; closing it ends it', async () => {
  const { streams } = await setup()
  const open = await streams.startPortForward(alice, 'default', 'web', { port: 80 })
  await streams.io('portforward', alice, 'default', 'web', open.session, { stdin: Buffer.from('GET /').toString('base64'), read: false })
  const r = await streams.io('portforward', alice, 'default', 'web', open.session, { waitMs: 2000 })
  assert.equal(text(r.stdout), 'GET /', 'the fake port echoes')
  const c = await streams.io('portforward', alice, 'default', 'web', open.session, { close: true })
  assert.ok(c.exit)
  assert.equal(streams.size, 0)
})

test('a session nobody polls is killed after idleMs', async () => {
  const { streams } = await setup({ idleMs: 50 })
  await streams.startExec(alice, 'default', 'web', { command: ['cat'] })
  assert.equal(streams.size, 1)
  const deadline = Date.now() + 5000
  while (streams.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  assert.equal(streams.size, 0)
  streams.stop()
})
