// Receipt of a VirtualMachine's binding and status between signed replicas (docs/security.md):
// the scheduler binds a VM only to its own node; controller:vm writes only from a node the receiver
// has seen the VM bound or pinned (spec.node) to, the old node of an ha move included.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { Store } from '../../../src/store/store.ts'
import { memStore, nodeObject, outbox, testNode } from './trust-helpers.ts'

const a = testNode('a')
const b = testNode('b')
const c = testNode('c')
const members = [a, b, c]
const vmRef = (name: string) => ({ kind: 'VirtualMachine', namespace: 'default', name })
const vm = (name: string, spec: Record<string, unknown> = {}) => ({
  apiVersion: 'orc/v1',
  kind: 'VirtualMachine',
  metadata: { name, namespace: 'default' },
  spec: { kernel: { image: 'vmlinuz' }, ...spec },
})

async function sync(from: Store, to: Store): Promise<void> {
  await to.applyRemote(await from.encodeMissing(to.encodeSyncState()))
}

async function refused(p: Promise<unknown>): Promise<void> {
  await assert.rejects(p, (err: any) => {
    assert.equal(err.code, 'forbidden', err.message)
    assert.equal(err.details.refused, 'unauthorized', err.message)
    return true
  })
}

test('a VM: status from a node it was never bound to refused; the old node of a move still reports; a binding elsewhere refused; a pin counts', async () => {
  const [A, B, C] = [await memStore(a, members), await memStore(b, members), await memStore(c, members)]
  try {
    let t = 1000
    for (const [s, n] of [
      [A, a],
      [B, b],
      [C, c],
    ] as const)
      await s.apply(nodeObject(n.name), { author: 'controller:node', now: t++ })
    for (const x of [A, B, C]) for (const y of [A, B, C]) if (x !== y) await sync(x, y)

    await A.apply(vm('g', { policy: 'ha' }), { author: 'user:alice', now: 6000 })
    await A.patch(vmRef('g'), [{ path: ['status', 'node'], value: 'a' }], { author: 'controller:scheduler', now: 6001 })
    await A.patch(vmRef('g'), [{ path: ['status', 'phase'], value: 'Running' }], { author: 'controller:vm', now: 6002 })
    await sync(A, B)
    await sync(A, C)
    assert.equal(C.get(vmRef('g'))?.status?.phase, 'Running')
    // b never ran it: its report is refused.
    const forging = outbox(B)
    await B.patch(vmRef('g'), [{ path: ['status', 'phase'], value: 'Failed' }], { author: 'controller:vm', now: 6003 })
    await refused(C.applyRemote(forging[0]!))
    assert.equal(C.get(vmRef('g'))?.status?.phase, 'Running')
    // The ha move: a fresh replica of b binds it to itself and reports; accepted.
    const B1 = await memStore(b, members)
    try {
      await sync(C, B1)
      const sent = outbox(B1)
      await B1.patch(vmRef('g'), [{ path: ['status', 'node'], value: 'b' }], { author: 'controller:scheduler', now: 6004 })
      await B1.patch(vmRef('g'), [{ path: ['status', 'phase'], value: 'Starting' }], { author: 'controller:vm', now: 6005 })
      for (const m of sent) await C.applyRemote(m)
      assert.deepEqual([C.get(vmRef('g'))?.status?.node, C.get(vmRef('g'))?.status?.phase], ['b', 'Starting'])
      // a, not yet aware of the move, still reports on its copy: accepted (it was bound there).
      const fromOld = outbox(A)
      await A.patch(vmRef('g'), [{ path: ['status', 'phase'], value: 'Stopping' }], { author: 'controller:vm', now: 6006 })
      await C.applyRemote(fromOld[0]!)
      // b binding it to c is refused.
      await B1.patch(vmRef('g'), [{ path: ['status', 'node'], value: 'c' }], { author: 'controller:scheduler', now: 6007 })
      await refused(C.applyRemote(sent[2]!))
      assert.equal(C.get(vmRef('g'))?.status?.node, 'b')
    } finally {
      await B1.close()
    }
    // Pinned to c: c reports before any binding is written.
    await A.apply(vm('p', { node: 'c' }), { author: 'user:alice', now: 6100 })
    await sync(A, C)
    await sync(A, B)
    const fromC = outbox(C)
    await C.patch(vmRef('p'), [{ path: ['status', 'phase'], value: 'Starting' }], { author: 'controller:vm', now: 6101 })
    await B.applyRemote(fromC[0]!)
    assert.equal(B.get(vmRef('p'))?.status?.phase, 'Starting')
  } finally {
    for (const s of [A, B, C]) await s.close()
  }
})
