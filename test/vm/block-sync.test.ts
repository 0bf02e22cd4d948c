/**
 * Block-level replication of a Volume that a VM has as its disk, and the switches between it and the
 * file-level sync, on real ext4 images (loop devices) with a real qemu holding the primary's image
 * (test/fixtures/block-replication.ts; no agents: the primary's and the replica's code joined in one
 * process). The replica's image must equal the primary's byte for byte after each block-level sync,
 * a write travels as an incremental sync of only its cluster, a copy changed behind the primary's
 * back gets a full sync, the VM letting go resumes file-level syncs on the (mounted) copy, and a VM
 * taking the volume again starts with a full block-level sync.
 */
import assert from 'node:assert/strict'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { blockRig, blockRigMissing } from '../fixtures/block-replication.ts'

const skip = blockRigMissing()

test('a VM disk replicated at block level: full, incremental, full again after a mount of the copy; file level while no VM has it, and back', {
  skip,
  timeout: 180_000,
}, async (t) => {
  const rig = await blockRig(64, 1)
  t.after(() => rig.close())
  const { a, b } = rig.locals
  const same = () => readFileSync(a.imageOf(rig.uid)).equals(readFileSync(b.imageOf(rig.uid)))
  const volume = { uid: rig.uid, namespace: 'default', name: 'disk', sizeBytes: 64 << 20 }

  await rig.startQemu()
  rig.vmHolds = true
  const first = await rig.sync()
  assert.equal(first.blocks, 'full')
  assert.ok(first.bytes > 1 << 20 && first.bytes < 4 << 20, `a full sync sends what ext4 holds (1 MiB of files and metadata), not 64 MiB: ${first.bytes}`)
  assert.ok(same(), "the replica's image is the primary's")
  assert.ok(!b.isMounted(b.dataOf(rig.uid)), "the replica's copy is not mounted")

  // The "guest" writes 512 bytes at the start of the disk (unused by ext4): one 64 KiB cluster travels.
  await rig.qmp('human-monitor-command', { 'command-line': 'qemu-io disk0 "write -P 0x5a 0 512"' })
  const inc = await rig.sync()
  assert.deepEqual([inc.blocks, inc.changed, inc.bytes], ['incremental', 1, 65536])
  assert.equal(readFileSync(b.imageOf(rig.uid))[0], 0x5a)
  assert.ok(same())
  const idle = await rig.sync()
  assert.deepEqual([idle.blocks, idle.changed, idle.bytes], ['incremental', 0, 0], 'nothing written: nothing sent')

  // The replica's copy mounted (and so written) behind the primary's back: the next sync is full.
  await b.ensure(volume)
  await b.unmount(rig.uid)
  assert.equal(b.blockBase(rig.uid), undefined, 'a mount forgets the block sync point')
  await rig.qmp('human-monitor-command', { 'command-line': 'qemu-io disk0 "write -P 0x6b 0 512"' })
  const again = await rig.sync()
  assert.equal(again.blocks, 'full')
  assert.ok(same())

  // qemu stops while the VM still has the disk: no copy at all (never one from a host mount).
  await rig.stopQemu()
  await assert.rejects(rig.sync(), /is the disk of vm\/g, whose qemu is not running: no copy now/)
  assert.ok(!a.isMounted(a.dataOf(rig.uid)), "the primary's image was not mounted under the VM")

  // The VM lets go: file-level syncs resume — the copy written at block level mounts as ext4 with the files.
  rig.vmHolds = false
  await a.ensure(volume)
  writeFileSync(join(a.dataOf(rig.uid), 'after-vm'), 'file level again\n')
  const files = await rig.sync()
  assert.equal(files.blocks, undefined)
  assert.ok(files.changed >= 1, JSON.stringify(files))
  assert.equal(readFileSync(join(b.dataOf(rig.uid), 'after-vm'), 'utf8'), 'file level again\n')
  assert.ok(existsSync(join(b.dataOf(rig.uid), 'f1')), 'the files the block-level syncs carried are there')

  // A VM takes it again (its image unmounted on both sides): the first block-level sync is full.
  await rig.startQemu()
  rig.vmHolds = true
  const back = await rig.sync()
  assert.equal(back.blocks, 'full')
  assert.ok(!b.isMounted(b.dataOf(rig.uid)), 'the replica unmounted its copy to write it')
  await rig.stopQemu()
  assert.ok(same(), "the replica's image is the primary's again")
})
