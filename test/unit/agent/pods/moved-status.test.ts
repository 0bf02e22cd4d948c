// A pod that moves to this node (an ha failover: its binding changed) still carries the status of
// the copy on the node it left: phase Running, that node's address. The node it moved to replaces
// that status as soon as it starts the pod, not after the progress window (issue #25: in the
// three-cluster testbed, `orc get pod` showed the new node with the lost copy's address, and the
// service name answered it, for 1–2.6 s after the move).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { describesACopy } from '../../../../src/agent/pods/worker.ts'
import type { ContainerHandle, ContainerRunSpec } from '../../../../src/runtime/index.ts'
import { FakeRuntime } from '../../../../src/runtime/index.ts'
import { lifecycleOnA } from './lifecycle-fixture.ts'

/** A fake runtime whose container starts wait until `open()`: the pod stays starting meanwhile. */
class GatedRuntime extends FakeRuntime {
  private gate: Promise<void>
  open!: () => void
  constructor() {
    super()
    this.gate = new Promise((r) => (this.open = r))
  }
  override async start(spec: ContainerRunSpec): Promise<ContainerHandle> {
    await this.gate
    return super.start(spec)
  }
}

async function until<T>(what: string, fn: () => T | undefined, ms = 20_000): Promise<T> {
  const end = Date.now() + ms
  for (;;) {
    const v = fn()
    if (v !== undefined) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

const OLD_ADDRESS = 'fd00:1:2:b::1234'

for (const moved of [true, false]) {
  test(
    moved
      ? "a pod moved here replaces the old copy's phase and address at once, while it starts"
      : 'a new pod keeps its first status for the progress window (a quick start: one revision)',
    async (t) => {
      const rt = new GatedRuntime()
      // Registered first, so it runs before the lifecycle stops: a start still waiting ends.
      t.after(() => rt.open())
      // A long progress window: without the fix the old status would stay for 60 s.
      const { store } = await lifecycleOnA(t, rt, { progressWriteMs: 60_000 })
      const ref = { kind: 'Pod' as const, namespace: 'default', name: 'web' }
      const at = () => ({ now: Date.now() })
      await store.apply(
        {
          apiVersion: 'orc/v1',
          kind: 'Pod',
          metadata: { name: 'web', namespace: 'default' },
          spec: { containers: [{ name: 'main', image: 'img', command: ['sleep', '3600'] }] },
        },
        { author: 'user:admin', ...at() },
      )
      if (moved) {
        // It ran on b: b's binding, and b's lifecycle status (Running, b's address).
        await store.patch(ref, [{ path: ['status', 'node'], value: 'b' }], { author: 'controller:scheduler', reason: 'bind to b', ...at() })
        await store.patch(
          ref,
          [
            { path: ['status', 'phase'], value: 'Running' },
            { path: ['status', 'network'], value: { ipv6: OLD_ADDRESS } },
            { path: ['status', 'containers'], value: [{ name: 'main', state: 'running', restarts: 0, ready: true }] },
          ],
          { author: 'controller:lifecycle', reason: 'running revision 1', ...at() },
        )
        assert.equal(describesACopy(store.get(ref)?.status), true)
      }
      // Bound here (an ha move from b, or a first binding).
      await store.patch(
        ref,
        [
          { path: ['status', 'node'], value: 'a' },
          { path: ['status', 'scheduling'], value: { node: 'a', ...(moved ? { from: 'b' } : {}) } },
        ],
        { author: 'controller:scheduler', reason: 'bind to a', ...at() },
      )
      assert.equal(describesACopy(store.get(ref)?.status), moved)
      if (moved) {
        const st = await until('a status of the copy here', () => {
          const s = store.get(ref)?.status as Record<string, any> | undefined
          return s?.phase !== 'Running' ? s : undefined
        })
        assert.equal(st.phase, 'Starting')
        assert.equal(st.network, undefined, "the old copy's address is gone")
        assert.ok(
          (st.containers as any[]).every((c) => c.state !== 'running'),
          JSON.stringify(st.containers),
        )
        assert.equal(rt.list().length, 0, 'written while the container has not started yet')
      } else {
        // Nothing to replace: the start's progress waits for its window (or the running write).
        await new Promise((r) => setTimeout(r, 500))
        assert.equal(store.get(ref)?.status?.phase, undefined)
      }
      // Once started, it is Running here (with no pod network in this test: no address).
      rt.open()
      await until('running here', () => (store.get(ref)?.status?.phase === 'Running' ? true : undefined))
      assert.equal(rt.list().length, 1)
    },
  )
}
