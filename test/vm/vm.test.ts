/**
 * VirtualMachines with a real agent (`orc up`), real qemu and a real guest (Debian's kernel and a
 * busybox initramfs built by the test; TCG where /dev/kvm is missing or hangs), driven through the
 * CLI: validation errors, apply → Running with the console marker in `orc logs vm/NAME`, the boot's
 * units in `orc why`, a guest that outlives an agent restart, `runStrategy: Halted` stopping it by
 * ACPI power-down over QMP, a kernel path the node refuses, delete. This agent has no pod network
 * (test agents run with it off): the reachability over IPv6 is the testbed's (test/testbed/vm.test.ts).
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { qemuLimits } from '../../src/runtime/index.ts'
import { descendants, isSameProcessAlive, readProcStat } from '../../src/runtime/procfs.ts'
import {
  assertLinesInOrder,
  bootDiskToolsMissing,
  buildBootDisk,
  buildGuest,
  DISK_MARK,
  diskToolsMissing,
  GUEST_READY,
  getVm,
  guestVmSpec,
  vmGuestMissing,
  vmManifest,
  waitVmRunning,
} from '../fixtures/vm-guest.ts'
import { podManifest, startTestAgent, type TestAgent, waitFor } from '../pods/helpers.ts'

const why = vmGuestMissing() ?? diskToolsMissing()
const noBootDisk = bootDiskToolsMissing()

/** A file of the VM's cgroup (v1 or v2 spelling), trimmed. */
function cgroupFile(dirs: string[], ...names: string[]): string | undefined {
  for (const d of dirs) for (const n of names) if (existsSync(join(d, n))) return readFileSync(join(d, n), 'utf8').trim()
  return undefined
}

/** qemu under the wrapper (status.pid) is in every directory of the VM's cgroup, which holds the limits derived from the spec. */
function assertQemuLimited(st: Record<string, any>, cpus: number, memoryMiB: number): void {
  const qemu = descendants(st.pid).find((p) => {
    try {
      return readFileSync(`/proc/${p}/comm`, 'utf8').startsWith('qemu-system')
    } catch {
      return false
    }
  })
  assert.ok(qemu !== undefined, 'qemu runs under the wrapper')
  const lim = st.limits
  assert.deepEqual({ memoryBytes: lim.memoryBytes, cpu: lim.cpu, pids: lim.pids }, qemuLimits({ cpus, memoryMiB, accel: st.accel }))
  assert.ok(lim.cgroup.length > 0, JSON.stringify(lim))
  for (const d of lim.cgroup as string[]) assert.ok(readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n').includes(String(qemu)), `qemu in ${d}`)
  assert.equal(Number(cgroupFile(lim.cgroup, 'memory.max', 'memory.limit_in_bytes')), (memoryMiB + (st.accel === 'tcg' ? 256 : 128)) * 2 ** 20)
  const quota = cgroupFile(lim.cgroup, 'cpu.max') ?? `${cgroupFile(lim.cgroup, 'cpu.cfs_quota_us')} ${cgroupFile(lim.cgroup, 'cpu.cfs_period_us')}`
  assert.equal(quota, `${cpus * 100_000} 100000`, `${cpus} cores`)
  assert.equal(Number(cgroupFile(lim.cgroup, 'pids.max')), lim.pids)
}

describe('VirtualMachine on a real agent', { skip: why ? `skipped: ${why}` : false, timeout: 900_000 }, () => {
  let a: TestAgent
  let kernel: string
  let failed = true
  const vm = (name: string) => getVm(a.orc, name)

  before(async () => {
    a = await startTestAgent('n1')
    // The initramfs is an image of the node's store: named, not a host path.
    const g = buildGuest(join(a.dataDir, 'images'))
    kernel = g.kernel
  })
  after(async () => {
    if (failed && a) console.error(`--- agent output ---\n${a.output().slice(-4000)}`)
    await a?.orc(['delete', 'vm/guest']).catch(() => undefined)
    await a?.stop()
    a?.remove()
  })

  it('refuses a bad spec with errors that name the field, and stores nothing', async () => {
    const bad = [
      [vmManifest('bad', { node: 'n1', kernel: { path: kernel, image: 'k' } }), /spec\.kernel: must give exactly one of image .* or path/],
      [vmManifest('bad', { node: 'n1', kernel: { path: kernel }, memory: '1Mi' }), /spec\.memory: must be between 64Mi and 256Gi/],
      [vmManifest('bad', { kernel: { path: kernel }, policy: 'always' }), /spec\.policy/],
      [vmManifest('bad', { node: 'n1', kernel: { path: kernel }, runStrategy: 'Sometimes' }), /spec\.runStrategy/],
      [vmManifest('bad', { node: 'n1', kernel: { path: kernel }, cpus: 0 }), /spec\.cpus/],
      [
        vmManifest('bad', { node: 'n1', kernel: { path: kernel }, disks: [{ name: 'a', emptyDisk: { size: '1Gi' }, image: 'x.raw' }] }),
        /spec\.disks\[0\]: must give exactly one of emptyDisk .* image .* or volume/,
      ],
      [
        vmManifest('bad', {
          node: 'n1',
          kernel: { path: kernel },
          disks: [
            { name: 'a', emptyDisk: { size: '1Gi' } },
            { name: 'a', image: 'x.raw' },
          ],
        }),
        /spec\.disks\[1\]\.name: duplicate value "a"/,
      ],
      [
        vmManifest('bad', { node: 'n1', kernel: { path: kernel }, disks: [{ name: 'a', emptyDisk: { size: '100Ki' } }] }),
        /spec\.disks\[0\]\.emptyDisk\.size: must be between 1Mi and 64Ti/,
      ],
      [vmManifest('bad', { node: 'n1', kernel: { path: kernel }, disks: [{ name: 'Data_1', emptyDisk: { size: '1Gi' } }] }), /spec\.disks\[0\]\.name/],
      [
        vmManifest('bad', { node: 'n1', kernel: { path: kernel }, disks: [{ name: 'cidata', emptyDisk: { size: '1Gi' } }] }),
        /spec\.disks\[0\]\.name: cidata is the cloud-init seed/,
      ],
      [
        vmManifest('bad', {
          node: 'n1',
          kernel: { path: kernel },
          disks: Array.from({ length: 17 }, (_, i) => ({ name: `d${i}`, emptyDisk: { size: '1Mi' } })),
        }),
        /spec\.disks: must have at most 16 items/,
      ],
      [vmManifest('bad', { node: 'n1', disks: [{ name: 'root', image: 'r.raw' }], bootDisk: 'rot' }), /spec\.bootDisk: names no disk of spec\.disks/],
      [vmManifest('bad', { node: 'n1', kernel: { path: kernel }, disks: [{ name: 'root', image: 'r.raw' }], bootDisk: 'root' }), /spec\.bootDisk: give kernel/],
      [
        vmManifest('bad', {
          node: 'n1',
          kernel: { path: kernel },
          cloudInit: { userData: '#!/bin/sh\necho hi', sshAuthorizedKeys: { secret: 'k', key: 'k' } },
        }),
        /spec\.cloudInit\.sshAuthorizedKeys: needs userData that is #cloud-config/,
      ],
    ] as const
    for (const [m, re] of bad) {
      const r = await a.orc(['apply', '-f', '-'], m)
      assert.notEqual(r.exitCode, 0, m)
      assert.match(r.stderr, re)
    }
    assert.equal(await vm('bad'), undefined)
  })

  it('boots: Running, the console marker in orc logs, the boot units in orc why, the accelerator in status', { timeout: 600_000 }, async () => {
    // orc.test.shell: the guest runs a shell on its serial console (orc console, below).
    const spec = guestVmSpec(kernel, { terminationGracePeriodSeconds: 120, kernel: { path: kernel, cmdline: 'panic=-1 orc.test.shell' } })
    const r = await a.orc(['apply', '-f', '-'], vmManifest('guest', spec))
    assert.equal(r.exitCode, 0, r.stderr)
    const st = await waitFor(
      'vm/guest Running',
      async () => {
        const o = await vm('guest')
        if (o?.status?.phase === 'Failed') throw new Error(`vm failed: ${o.status.reason}`)
        return o?.status?.phase === 'Running' ? o.status : undefined
      },
      300_000,
    )
    assert.match(st.accel, /^(kvm|tcg)$/)
    assert.ok(typeof st.accelReason === 'string' && st.accelReason.length > 0)
    assert.ok(isSameProcessAlive(st.pid, readProcStat(st.pid)!.startTicks), 'qemu runs under its wrapper')
    // No pod network on this agent: the guest has no NIC, and the status says why.
    assert.match(st.network, /^none: /)
    assertQemuLimited(st, 1, 256)

    const logs = await a.orc(['logs', 'vm/guest'])
    assert.equal(logs.exitCode, 0, logs.stderr)
    assert.match(logs.stdout, /Linux version/)
    assert.ok(logs.stdout.includes(GUEST_READY))
    const tail = await a.orc(['logs', 'vm', 'guest', '--tail', '1', '-o', 'json'])
    assert.equal(JSON.parse(tail.stdout).lines.length, 1)

    // orc console: the guest's shell on its serial console answers; one session at a time; what it
    // printed is in orc logs too.
    const holder = a.orc(['console', 'vm/guest', '--wait', '15'], 'echo orc-console-$((6*7))\n')
    // Its session is open once what it typed has run (the console log has every byte of it).
    await waitFor(
      'the first console session typed into the guest',
      async () => /orc-console-42/.test((await a.orc(['logs', 'vm/guest'])).stdout) || undefined,
      20_000,
    )
    const second = await a.orc(['console', 'vm/guest', '--wait', '0'], '')
    assert.notEqual(second.exitCode, 0, 'a second console while the first is open')
    assert.match(second.stderr, /the console of vm\/guest is in use \(a session of user:/)
    const con = await holder
    assert.equal(con.exitCode, 0, con.stderr)
    assert.match(con.stdout, /orc-console-42/)

    const w = await a.orc(['why', 'vm/guest'])
    assert.equal(w.exitCode, 0, w.stderr)
    assert.match(w.stdout, /^vm\/guest: Running on node n1, running revision \d+/)
    assert.match(w.stdout, /accel: (kvm|tcg) \(/)
    assert.match(w.stdout, /limits: memory (384|512)Mi, cpu 1, pids 33 \(enforced by cgroup-v[12] in \/sys\/fs\/cgroup\/.*orc-qemu-[0-9a-f]{8}\//)
    for (const unit of ['resolve-kernel', 'sandbox-network', 'create-tap', 'start-qemu', 'wait-console-marker'])
      assert.match(w.stdout, new RegExp(`${unit}\\s+done in`), `${unit} in orc why`)
    const chain = await a.orc(['why', 'vm/guest', '--critical-chain'])
    assert.match(chain.stdout, /running @[\d.]+s\n└─wait-console-marker @[\d.]+s \+[\d.]+s\n {2}└─start-qemu/)

    // orc top vms: qemu's use, read from its cgroup (pods' rows stay pods only).
    const top = await a.orc(['top', 'vms', '-o', 'json'])
    assert.equal(top.exitCode, 0, top.stderr)
    const row = (JSON.parse(top.stdout) as any[]).find((r) => r.name === 'guest')
    assert.ok(row !== undefined, top.stdout)
    assert.equal(row.node, 'n1')
    assert.deepEqual(
      row.containers.map((c: { name: string }) => c.name),
      ['qemu'],
    )
    assert.ok(row.memoryBytes > 16 * 2 ** 20 && row.memoryBytes <= st.limits.memoryBytes, `qemu's working set ${row.memoryBytes}`)
    assert.ok(typeof row.cpuMillis === 'number' && row.cpuSeconds > 0, JSON.stringify(row))
    assert.match((await a.orc(['top', 'vms'])).stdout, /^NAME\s+CPU\s+MEMORY\s+NODE\nguest\s+\d+m\s+\d+Mi\s+n1\n/)
    assert.equal((await a.orc(['top', 'pods', '-o', 'json'])).stdout.includes('"guest"'), false, 'a VM is not a pod')

    const get = await a.orc(['get', 'vms', '-o', 'wide'])
    assert.match(get.stdout, /guest\s+Running\s+n1\s+<none>\s+1\s+256Mi\s+(kvm|tcg)/)
    const desc = await a.orc(['describe', 'vm/guest'])
    assert.equal(desc.exitCode, 0, desc.stderr)
    assert.match(desc.stdout, /VirtualMachine/)
  })

  it('the guest outlives an agent restart and is re-adopted (same qemu pid)', async () => {
    const before = (await vm('guest'))!.status
    await a.stop()
    assert.ok(isSameProcessAlive(before.pid, readProcStat(before.pid)!.startTicks), 'qemu kept running without an agent')
    await a.start()
    const st = await waitFor('vm/guest re-adopted', async () => {
      const o = await vm('guest')
      return o?.status?.phase === 'Running' && o.status.pid === before.pid ? o.status : undefined
    })
    assert.equal(st.runningRevision, before.runningRevision)
    assert.equal(st.restarts, before.restarts, `restarts ${before.restarts} before the agent restart; last stop ${JSON.stringify(st.lastStop)}`)
    assert.deepEqual(st.limits, before.limits, 'the re-adopted guest keeps its cgroup')
    assertQemuLimited(st, 1, 256)
    assert.ok((await a.orc(['logs', 'vm/guest'])).stdout.includes(GUEST_READY))
    // The console socket outlives the agent too.
    const con = await a.orc(['console', 'vm/guest', '--wait', '4'], 'echo after-restart-$((7*6))\n')
    assert.equal(con.exitCode, 0, con.stderr)
    assert.match(con.stdout, /after-restart-42/)
  })

  it('a changed spec (cpus 1 → 2) powers the guest down and boots the new revision on the same node', { timeout: 600_000 }, async () => {
    const cur = (await vm('guest'))!
    const old = cur.status.runningRevision as number
    const r = await a.orc(['apply', '-f', '-'], vmManifest('guest', { ...cur.spec, cpus: 2 }))
    assert.equal(r.exitCode, 0, r.stderr)
    const st = await waitFor(
      'vm/guest running its new revision',
      async () => {
        const o = await vm('guest')
        return o?.status?.phase === 'Running' && o.status.runningRevision > old ? o.status : undefined
      },
      300_000,
    )
    assert.equal(st.lastStop.how, 'powerdown', JSON.stringify(st.lastStop))
    assert.match(st.lastStop.detail, /^spec changed: the guest powered off after system_powerdown/)
    assert.notEqual(st.pid, cur.status.pid)
    assertQemuLimited(st, 2, 256)
    // The new guest has two CPUs; the old revision's console is kept beside it.
    assert.match((await a.orc(['logs', 'vm/guest'])).stdout, /Brought up 1 node, 2 CPUs/)
    assert.match((await a.orc(['logs', 'vm/guest', '--revision', String(old)])).stdout, /power button pressed/)
    assert.match((await a.orc(['history', 'vm/guest'])).stdout, /stopping: spec changed/)
  })

  it('runStrategy Halted powers the guest down over QMP (ACPI), recorded in status and history', async () => {
    const cur = (await vm('guest'))!
    const pid = cur.status.pid as number
    const ticks = readProcStat(pid)!.startTicks
    const r = await a.orc(['apply', '-f', '-'], vmManifest('guest', { ...cur.spec, runStrategy: 'Halted' }))
    assert.equal(r.exitCode, 0, r.stderr)
    const st = await waitFor('vm/guest Stopped', async () => {
      const o = await vm('guest')
      return o?.status?.phase === 'Stopped' ? o.status : undefined
    })
    assert.equal(st.lastStop.how, 'powerdown', JSON.stringify(st.lastStop))
    assert.match(st.lastStop.detail, /POWERDOWN/)
    assert.equal(isSameProcessAlive(pid, ticks), false, 'qemu is gone')
    for (const d of cur.status.limits.cgroup as string[]) assert.equal(existsSync(d), false, `${d} removed with qemu`)
    assert.equal(st.limits, undefined, 'a stopped VM has no cgroup')
    assert.equal(st.runningRevision, undefined, 'a stopped VM runs no revision')
    const logs = await a.orc(['logs', 'vm/guest', '--revision', String(st.targetRevision)])
    assert.match(logs.stdout, /power button pressed, powering off/)
    const h = await a.orc(['history', 'vm/guest'])
    assert.match(h.stdout, /controller:vm/)
    assert.match(h.stdout, /halted/)
  })

  it('a guest that powers off by itself is booted again after the back-off (runStrategy Always)', { timeout: 600_000 }, async () => {
    const r = await a.orc(
      ['apply', '-f', '-'],
      vmManifest('flaky', {
        node: 'n1',
        kernel: { path: kernel, cmdline: 'panic=-1 orc.test.poweroff' },
        initrd: { image: 'initramfs.gz' },
        readyMarker: GUEST_READY,
      }),
    )
    assert.equal(r.exitCode, 0, r.stderr)
    const first = await waitFor(
      'vm/flaky stopped by its guest',
      async () => {
        const o = await vm('flaky')
        return o?.status?.lastStop?.how === 'exited' ? o.status : undefined
      },
      300_000,
    )
    assert.match(first.lastStop.detail, /qemu exited with status 0 \(the guest powered off or qemu failed\)/)
    const again = await waitFor(
      'vm/flaky booted again',
      async () => {
        const o = await vm('flaky')
        return (o?.status?.restarts ?? 0) >= 1 && o?.status.pid !== undefined && o?.status.pid !== first.pid && o.status.limits ? o?.status : undefined
      },
      300_000,
    )
    assert.equal(again.restarts >= 1, true)
    assert.match((await a.orc(['history', 'vm/flaky'])).stdout, /start revision \d+: boot again/)
    // Its cgroup as it booted again (this guest powers off 2 s after its marker, so it may already be gone by the delete).
    const cgroup = again.limits.cgroup as string[]
    assert.ok(cgroup.length > 0)
    assert.equal((await a.orc(['delete', 'vm/flaky'])).exitCode, 0)
    await waitFor('vm/flaky cgroup removed after delete', () => (cgroup.some((d) => existsSync(d)) ? undefined : true), 60_000)
  })

  it('a kernel path outside /boot and the image stores is refused on the node, with the reason in orc why', async () => {
    const r = await a.orc(['apply', '-f', '-'], vmManifest('sneaky', { node: 'n1', kernel: { path: '/etc/hostname' } }))
    assert.equal(r.exitCode, 0, r.stderr)
    const st = await waitFor('vm/sneaky Failed', async () => {
      const o = await vm('sneaky')
      return o?.status?.phase === 'Failed' ? o.status : undefined
    })
    assert.match(st.reason, /resolve-kernel.*outside \/boot and the node's image stores/)
    const w = await a.orc(['why', 'vm/sneaky'])
    assert.match(w.stdout, /resolve-kernel\s+failed/)
    assert.equal((await a.orc(['delete', 'vm/sneaky'])).exitCode, 0)
  })

  it('disks and cloud-init: an empty disk, an image overlay and a Volume keep the guest writes across a halt, the image is not written, the seed carries the Secret key', {
    timeout: 600_000,
  }, async () => {
    const image = join(a.dataDir, 'images', 'base.raw')
    writeFileSync(image, Buffer.concat([Buffer.from(`${DISK_MARK} 100\n`), Buffer.alloc(2 ** 20 - 18)]))
    const imageHash = () => createHash('sha256').update(readFileSync(image)).digest('hex')
    const hashBefore = imageHash()
    const key = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2eOrcTestKey test@orc'
    const manifests = [
      { apiVersion: 'orc/v1', kind: 'Secret', metadata: { name: 'keys' }, spec: { data: { authorized_keys: `# the admin\n${key}\n` } } },
      { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'vdata' }, spec: { size: '16Mi', node: 'n1' } },
    ]
    for (const m of manifests) assert.equal((await a.orc(['apply', '-f', '-'], JSON.stringify(m))).exitCode, 0)
    const spec = guestVmSpec(kernel, {
      terminationGracePeriodSeconds: 5,
      disks: [
        { name: 'data', emptyDisk: { size: '64Mi' } },
        { name: 'base', image: 'base.raw' },
        { name: 'vol', volume: { name: 'vdata' } },
      ],
      cloudInit: { userData: '#cloud-config\npackages: [htop]\n', sshAuthorizedKeys: { secret: 'keys', key: 'authorized_keys' }, hostname: 'tiny' },
    })
    assert.equal((await a.orc(['apply', '-f', '-'], vmManifest('disky', spec))).exitCode, 0)
    const o = await waitVmRunning(a.orc, 'disky')
    const uid = o.metadata.uid as string
    const logs = (await a.orc(['logs', 'vm/disky'])).stdout
    // In the spec's order with their names as serials, the seed last.
    assert.match(logs, /guest: disk vda serial data sectors 131072/)
    assert.match(logs, /guest: disk vdb serial base sectors 2048/)
    assert.match(logs, /guest: disk vdc serial vol sectors 32768/)
    assert.match(logs, /guest: disk vdd serial cidata/)
    assert.match(logs, /guest: disk data reads <empty>/)
    assert.match(logs, /guest: disk base reads ORC-DISK-MARK 100\s/)
    assert.match(logs, /guest: disk vol reads <empty>/)
    // The seed: the Secret's key merged into the user's #cloud-config, meta-data from the VM.
    assert.ok(logs.includes(`guest: cidata user-data:   - ${key}`), logs.slice(-2000))
    assert.match(logs, /guest: cidata user-data: #cloud-config/)
    assert.match(logs, /guest: cidata user-data: packages:/)
    assert.ok(logs.includes(`guest: cidata meta-data: instance-id: "${uid}"`))
    assert.match(logs, /guest: cidata meta-data: local-hostname: "tiny"/)
    const seed = join(a.dataDir, 'vms', uid, 'disks', 'cidata.img')
    assert.equal(statSync(seed).mode & 0o777, 0o600, 'the seed is 0600')
    assert.equal(a.output().includes('AAAAC3NzaC1lZDI1NTE5AAAAIE2eOrcTestKey'), false, 'the key is not in the agent log')
    assert.equal(statSync(join(a.dataDir, 'vms', uid, 'disks', 'data.raw')).blocks < 1024, true, 'the empty disk is sparse')

    assert.match((await a.orc(['why', 'vm/disky'])).stdout, /prepare-disks\s+done in/)
    const desc = (await a.orc(['describe', 'vm/disky'])).stdout
    assert.match(
      desc,
      /Disks \(in the guest's order[^\n]*\n\s+NAME\s+DEVICE\s+SOURCE\n\s+data\s+vda\s+emptyDisk 64Mi\n\s+base\s+vdb\s+image base\.raw \(raw, copy-on-write\)\n\s+vol\s+vdc\s+volume vdata\n\s+cidata\s+vdd\s+cloud-init NoCloud seed \(read-only\)/,
    )
    // The Volume is the VM's: attached to it, not deletable, and not mounted on the host.
    const vol = JSON.parse((await a.orc(['get', 'volume/vdata', '-o', 'json'])).stdout)
    assert.equal(vol.status.attachedTo, 'vm/default/disky')
    assert.equal(vol.status.phase, 'Attached')
    assert.equal(
      readFileSync('/proc/self/mountinfo', 'utf8').includes(join(a.dataDir, 'volumes', vol.metadata.uid, 'mnt')),
      false,
      'the volume is not mounted on the node',
    )
    const snap = await a.orc(['volume', 'snapshot', 'vdata', '--name', 'while-vm'])
    assert.notEqual(snap.exitCode, 0)
    assert.match(snap.stderr, /volume\/vdata is the disk of vm\/disky: halt it \(runStrategy: Halted\) first/)
    const del = await a.orc(['delete', 'volume/vdata'])
    assert.notEqual(del.exitCode, 0)
    assert.match(del.stderr, /volume\/vdata is used by vm\/disky: delete or change it first \(nothing was deleted\)/)

    // A bad change is refused naming the field, and the stored VM keeps its revision.
    const bad = await a.orc(['apply', '-f', '-'], vmManifest('disky', { ...spec, disks: [{ name: 'data', emptyDisk: { size: 'lots' } }] }))
    assert.notEqual(bad.exitCode, 0)
    assert.match(bad.stderr, /spec\.disks\[0\]\.emptyDisk\.size/)
    const stored = await vm('disky')
    assert.deepEqual(stored!.spec, o.spec)

    // Halted: the guest powers off, the Volume is free again; Always: the next boot reads what the last one wrote.
    assert.equal((await a.orc(['apply', '-f', '-'], vmManifest('disky', { ...spec, runStrategy: 'Halted' }))).exitCode, 0)
    await waitFor('vm/disky Stopped and its Volume detached', async () => {
      const [v, d] = [await vm('disky'), JSON.parse((await a.orc(['get', 'volume/vdata', '-o', 'json'])).stdout)]
      return v?.status?.phase === 'Stopped' && d.status.phase === 'Available' && d.status.attachedTo === undefined ? true : undefined
    })
    assert.equal((await a.orc(['apply', '-f', '-'], vmManifest('disky', spec))).exitCode, 0)
    const again = await waitVmRunning(a.orc, 'disky', o.status.runningRevision)
    const logs2 = (await a.orc(['logs', 'vm/disky', '--revision', String(again.status.runningRevision)])).stdout
    assert.match(logs2, /guest: disk data reads ORC-DISK-MARK 1\s/, 'the empty disk kept its data')
    assert.match(logs2, /guest: disk base reads ORC-DISK-MARK 101\s/, 'the overlay kept the guest write')
    assert.match(logs2, /guest: disk vol reads ORC-DISK-MARK 1\s/, 'the Volume kept its data')
    assert.equal(imageHash(), hashBefore, 'the image file is unchanged')

    // Delete: the disks go with the VM, the Volume stays (detached, its data kept).
    assert.equal((await a.orc(['delete', 'vm/disky'])).exitCode, 0)
    await waitFor('the vm disks removed', () => (existsSync(join(a.dataDir, 'vms', uid)) ? undefined : true), 60_000)
    await waitFor('volume/vdata detached', async () => {
      const d = JSON.parse((await a.orc(['get', 'volume/vdata', '-o', 'json'])).stdout)
      return d.status.phase === 'Available' ? true : undefined
    })
    assert.equal((await a.orc(['delete', 'volume/vdata'])).exitCode, 0)
  })

  it('disk boot: no kernel, the firmware boots an image disk (copy-on-write) whose boot loader starts the guest', {
    timeout: 600_000,
    skip: noBootDisk ? `skipped: ${noBootDisk}` : false,
  }, async () => {
    const image = buildBootDisk(join(a.dataDir, 'images'), { kernel, initrd: join(a.dataDir, 'images', 'initramfs.gz') })
    const hash = createHash('sha256').update(readFileSync(image)).digest('hex')
    const r = await a.orc(
      ['apply', '-f', '-'],
      vmManifest('booted', { node: 'n1', disks: [{ name: 'root', image: 'boot.raw' }], bootDisk: 'root', readyMarker: GUEST_READY }),
    )
    assert.equal(r.exitCode, 0, r.stderr)
    await waitVmRunning(a.orc, 'booted')
    const logs = (await a.orc(['logs', 'vm/booted'])).stdout
    assert.match(logs, /SYSLINUX \d/)
    assert.match(logs, /guest: disk root holds other data, left alone/)
    assert.match((await a.orc(['describe', 'vm/booted'])).stdout, /root\s+vda\s+image boot\.raw \(raw, copy-on-write\), boot disk/)
    assert.match((await a.orc(['why', 'vm/booted'])).stdout, /resolve-kernel\s+done in/)
    assert.equal((await a.orc(['delete', 'vm/booted'])).exitCode, 0)
    assert.equal(createHash('sha256').update(readFileSync(image)).digest('hex'), hash, 'the image is unchanged')
  })

  it('a Volume has one user at a time: the VM waits Pending while a pod mounts it, then a pod waits while the VM has it; the data survives both', {
    timeout: 600_000,
  }, async () => {
    const volume = { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'shared' }, spec: { size: '16Mi', node: 'n1' } }
    assert.equal((await a.orc(['apply', '-f', '-'], JSON.stringify(volume))).exitCode, 0)
    const mountShared = { volumes: [{ name: 'd', volume: { name: 'shared' } }] }
    const withMount = (m: string) => {
      const p = JSON.parse(m)
      p.spec.containers[0].volumeMounts = [{ name: 'd', mountPath: '/d' }]
      return JSON.stringify(p)
    }
    const writer = withMount(podManifest('writer', 'busybox', 'echo from-the-pod > /d/hello && exec sleep 3600', mountShared))
    assert.equal((await a.orc(['apply', '-f', '-'], writer)).exitCode, 0)
    await waitFor('pod/writer Running with volume/shared', async () => (await a.pod('writer'))?.status?.phase === 'Running' || undefined)
    const spec = guestVmSpec(kernel, { terminationGracePeriodSeconds: 5, disks: [{ name: 'shared', volume: { name: 'shared' } }] })
    assert.equal((await a.orc(['apply', '-f', '-'], vmManifest('waiter', spec))).exitCode, 0)
    const pending = await waitFor('vm/waiter Pending for the volume', async () => {
      const o = await vm('waiter')
      return o?.status?.phase === 'Pending' && /volume shared is in use by pod writer/.test(o.status.reason ?? '') ? o.status : undefined
    })
    assert.match(pending.reason, /prepare-disks/)
    assert.match((await a.orc(['why', 'vm/waiter'])).stdout, /prepare-disks\s+failed/)

    // The pod goes: the VM takes the Volume (unmounted from the node) without waiting out its back-off.
    assert.equal((await a.orc(['delete', 'pod/writer'])).exitCode, 0)
    await waitVmRunning(a.orc, 'waiter')
    assertLinesInOrder((await a.orc(['logs', 'vm/waiter'])).stdout, 'guest: disk shared reads <empty>', 'guest: disk shared wrote ORC-DISK-MARK 1')

    // A pod that wants it now waits, naming the VM.
    const late = withMount(podManifest('late', 'busybox', 'cat /d/hello && exec sleep 3600', mountShared))
    assert.equal((await a.orc(['apply', '-f', '-'], late)).exitCode, 0)
    await waitFor('pod/late waits for vm/waiter', async () => {
      const w = await a.orc(['why', 'pod/late'])
      return /volume shared is in use by vm\/waiter/.test(w.stdout) || undefined
    })
    assert.notEqual((await a.pod('late'))?.status?.phase, 'Running')

    // Halted: the pod gets it, and reads what the first pod wrote (the guest wrote only the ext4 boot block).
    assert.equal((await a.orc(['apply', '-f', '-'], vmManifest('waiter', { ...spec, runStrategy: 'Halted' }))).exitCode, 0)
    await waitFor('pod/late Running', async () => (await a.pod('late'))?.status?.phase === 'Running' || undefined, 120_000)
    await waitFor('pod/late read the file', async () => /from-the-pod/.test((await a.orc(['logs', 'pod/late'])).stdout) || undefined)
    for (const r of ['pod/late', 'vm/waiter']) assert.equal((await a.orc(['delete', r])).exitCode, 0)
    await waitFor('volume/shared deletable', async () => (await a.orc(['delete', 'volume/shared'])).exitCode === 0 || undefined, 60_000)
  })

  it('delete removes the VM and its console logs from the node', async () => {
    const uid = (await vm('guest'))!.metadata.uid as string
    const r = await a.orc(['delete', 'vm/guest'])
    assert.equal(r.exitCode, 0, r.stderr)
    await waitFor('the vm directory removed', () => (existsSync(join(a.dataDir, 'vms', uid)) ? undefined : true), 60_000)
    failed = false
  })
})
