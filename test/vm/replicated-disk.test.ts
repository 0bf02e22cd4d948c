/**
 * An `ha` VirtualMachine whose disk is a replicated Volume, on three real agents (real mesh, real
 * qemu under TCG where /dev/kvm does not work, the test's busybox guest). While the guest has the
 * disk, its primary copies it to the replica at block level through qemu (a dirty bitmap, a full
 * backup then incremental ones, sent as block ranges): the guest writes its mark on the disk at
 * boot, the replica's copy gets it (`syncedAt` after the write), the primary's agent is killed -9,
 * and the VM boots on the replica's node — promoted by controller:volume, in `orc history` — and
 * reads the mark its first boot wrote.
 */
import assert from 'node:assert/strict'
import { closeSync, openSync, readSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { type NodeProcess, waitFor } from '../cluster/helpers.ts'
import { DISK_MARK, GUEST_READY, guestVmSpec, vmGuestMissing, vmManifest } from '../fixtures/vm-guest.ts'
import { startVmCluster } from './cluster.ts'

const skip = vmGuestMissing()

test('an ha VM on a replicated Volume: block-level copies while it runs, failover to the promoted replica with the guest’s writes', {
  skip,
  timeout: 300_000,
}, async (t) => {
  const { nodes, kernel, qemus, apply } = await startVmCluster(t, ['a', 'b', 'c'])
  const a = nodes[0]!
  await apply(
    JSON.stringify({ apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'vdisk' }, spec: { size: '32Mi', replicas: 2, syncIntervalSeconds: 2 } }),
  )
  const { node: _pin, ...unpinned } = guestVmSpec(kernel, { terminationGracePeriodSeconds: 0 })
  await apply(vmManifest('g', { ...unpinned, policy: 'ha', haAfterSeconds: 10, disks: [{ name: 'data', volume: { name: 'vdisk' } }] }))

  const first = await waitFor(
    'vm/g Running',
    async () => {
      const v = await a.getJson('vm/g')
      if (v?.status?.phase === 'Failed') throw new Error(`vm failed: ${v.status.reason}`)
      return v?.status?.phase === 'Running' ? v : undefined
    },
    120_000,
  )
  qemus.push(first.status.pid)
  const byName = new Map(nodes.map((n) => [n.name, n]))
  const primary = byName.get(first.status.node)!
  const logs1 = (await primary.cli(['logs', 'vm/g'])).stdout
  assert.match(logs1, new RegExp(`guest: disk data wrote ${DISK_MARK} 1\\s`), 'the first boot writes mark 1 on the blank volume')
  // The guest wrote its mark before its ready marker; the Running write (the VM's newest revision now) came after.
  const historyOf = async (n: NodeProcess, ref: string): Promise<{ time: number; author?: string; reason?: string }[]> => {
    const h = JSON.parse((await n.cli(['history', ref, '-o', 'json'])).stdout)
    return Array.isArray(h) ? h : (h.revisions ?? h.items ?? [])
  }
  const wroteBy = (await historyOf(primary, 'vm/g')).at(-1)!.time

  // The replica's copy: synced at block level after the guest's write.
  const vol = await waitFor(
    'the replica synced after the guest wrote',
    async () => {
      const v = await a.getJson('volume/vdisk')
      const reps = Object.entries((v?.status?.replicas ?? {}) as Record<string, { syncedAt?: string }>)
      return v?.status?.node === primary.name && reps.length === 1 && Date.parse(reps[0]![1].syncedAt ?? '') > wroteBy ? v : undefined
    },
    60_000,
  )
  assert.equal(vol.status.attachedTo, 'vm/default/g')
  const replicaName = Object.keys(vol.status.replicas)[0]!
  const replica = byName.get(replicaName)!
  // The copy on the replica's node is its ext4 image, written at block level: the mark is in its first bytes.
  const img = join(replica.dataDir, 'volumes', vol.metadata.uid, 'disk.img')
  const head = Buffer.alloc(64)
  const fd = openSync(img, 'r')
  readSync(fd, head, 0, 64, 0)
  closeSync(fd)
  assert.match(head.toString('latin1'), new RegExp(`^${DISK_MARK} 1\\n`), "the replica's copy holds the guest's write")
  const reasons = (await historyOf(a, 'volume/vdisk')).map((r) => r.reason ?? '')
  assert.ok(
    reasons.some((r) => new RegExp(`^replica on ${replicaName} synced at block level \\(full\\): \\d+ ranges, \\d+ bytes sent$`).test(r)),
    reasons.join('\n'),
  )
  // orc get volumes: its replica, and a lag in seconds (not `never`).
  const table = (await a.cli(['get', 'volumes'])).stdout.split('\n')
  const header = table[0]!.split(/\s{2,}/)
  const row = table.find((l) => l.startsWith('vdisk '))!.split(/\s{2,}/)
  assert.equal(row[header.indexOf('REPLICAS')], replicaName, table.join('\n'))
  assert.match(row[header.indexOf('LAG')] ?? '', /^\d+s$/, table.join('\n'))

  await t.test('kill -9 of the primary: the VM boots on the replica’s node, promoted, with the mark on its disk', { timeout: 200_000 }, async () => {
    await primary.kill('SIGKILL')
    const killedAt = Date.now()
    const moved = await waitFor(
      'vm/g Running on the replica',
      async () => {
        const v = await replica.getJson('vm/g')
        if (v?.status?.phase === 'Failed') throw new Error(`vm failed: ${v.status.reason}`)
        return v?.status?.phase === 'Running' && v.status.node === replicaName && v.status.pid !== first.status.pid ? v : undefined
      },
      150_000,
    )
    qemus.push(moved.status.pid)
    t.diagnostic(`running on ${replicaName} ${Date.now() - killedAt} ms after kill -9 of ${primary.name}`)
    const logs = (await replica.cli(['logs', 'vm/g'])).stdout
    assert.ok(logs.includes(GUEST_READY))
    assert.match(logs, new RegExp(`guest: disk data reads ${DISK_MARK} 1\\s`), 'the second boot reads the first boot’s write')
    const v = await replica.getJson('volume/vdisk')
    assert.equal(v.status.node, replicaName)
    assert.equal(v.status.promotedFrom, primary.name)
    assert.equal(v.status.attachedTo, 'vm/default/g')
    const revs = await historyOf(replica, 'volume/vdisk')
    const promo = revs.find((r) => r.reason?.startsWith(`replica on node ${replicaName} promoted to primary for ha vm/g: node ${primary.name} is lost`))
    assert.equal(promo?.author, 'controller:volume', JSON.stringify(revs.slice(-4)))
    assert.match(logs, new RegExp(`guest: disk data wrote ${DISK_MARK} 2\\s`))
  })

  await t.test('the old primary comes back as a replica: a full block-level sync gives it the new primary’s disk', { timeout: 120_000 }, async () => {
    const back = Date.now()
    await primary.up().ready()
    await waitFor(
      `the replica on ${primary.name} synced`,
      async () => {
        const v = await replica.getJson('volume/vdisk')
        return Date.parse(v?.status?.replicas?.[primary.name]?.syncedAt ?? '') > back || undefined
      },
      90_000,
    )
    const reasons = (await historyOf(replica, 'volume/vdisk')).map((r) => r.reason ?? '')
    assert.ok(
      reasons.some((r) => r.startsWith(`replica on ${primary.name} synced at block level (full):`)),
      reasons.slice(-5).join('\n'),
    )
    // Its image holds what the guest wrote on the new primary (mark 2), not its own last state (mark 1).
    const head = Buffer.alloc(64)
    const fd = openSync(join(primary.dataDir, 'volumes', vol.metadata.uid, 'disk.img'), 'r')
    readSync(fd, head, 0, 64, 0)
    closeSync(fd)
    assert.match(head.toString('latin1'), new RegExp(`^${DISK_MARK} 2\\n`))
    assert.equal((await replica.cli(['delete', 'vm/g'])).exitCode, 0)
  })
})
