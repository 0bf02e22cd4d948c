// A node keeps pod workers only for pods it runs or ran: before, every node held one for every pod of
// the cluster (~0.9 KB each, and a fence tick each a second), whatever node it was bound to.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { FakeRuntime } from '../../../../src/runtime/index.ts'
import { lifecycleOnA } from './lifecycle-fixture.ts'

const pod = (name: string, node: string) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name, namespace: 'default' },
  spec: { placement: { node }, containers: [{ name: 'main', image: 'img', command: ['sleep', '3600'] }] },
})

async function until(what: string, ok: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

test('pods pinned to other nodes leave no worker here; a pod pinned here keeps its own', async (t) => {
  const rt = new FakeRuntime()
  const { store, lc } = await lifecycleOnA(t, rt)
  const opts = { author: 'user:admin' as const, now: Date.now() }
  for (let i = 0; i < 50; i++) await store.apply(pod(`far-${i}`, 'b'), opts)
  await store.apply(pod('here', 'a'), opts)
  await until('the pod pinned here to run', () => rt.list().some((c) => c.state === 'running')).catch((e) => {
    throw new Error(`${e.message}: ${JSON.stringify(store.get({ kind: 'Pod', namespace: 'default', name: 'here' })?.status)}`)
  })
  // Let the reconciles of the far pods finish; then only the worker of the pod here is left.
  await until('one worker left', () => lc.workerCount() === 1)
  // A far pod moved here gets a worker again and runs.
  await store.apply(pod('far-7', 'a'), { ...opts, now: Date.now() })
  await until('the moved pod running here', () => rt.list().filter((c) => c.state === 'running').length === 2)
  assert.equal(lc.workerCount(), 2)
})
