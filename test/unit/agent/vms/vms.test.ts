// VirtualMachine: the kind's validation (naming the field), who may write its status on receipt
// (only the node it is pinned to), and the pure parts of the controller and the qemu runtime.
import assert from 'node:assert/strict'
import { appendFileSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { guestCmdline, guestMac, markerScanner, resolveBootFile, vmSpecHash } from '../../../../src/agent/vms/index.ts'
import { defaultOwnership, findKind, normalizeManifest, type VirtualMachineSpec } from '../../../../src/model/index.ts'
import { QEMU_EXTRA_TASKS, QEMU_OVERHEAD_MIB, qemuArgs, qemuLimits, TCG_TB_MIB } from '../../../../src/runtime/index.ts'
import { defaultAuthorize } from '../../../../src/store/index.ts'

const vm = (spec: Record<string, unknown>) => ({ apiVersion: 'orc/v1', kind: 'VirtualMachine', metadata: { name: 'builder' }, spec })
const ok = { node: 'n1', kernel: { path: '/boot/vmlinuz' } }

test('a VirtualMachine is accepted with defaults left out; the CLI finds the kind by its aliases', () => {
  const o = normalizeManifest({ ...vm({ ...ok, cpus: 2, memory: '2Gi', initrd: { image: 'initrd.gz' }, runStrategy: 'Halted', readyMarker: 'up' }) })
  assert.equal(o.kind, 'VirtualMachine')
  assert.equal((o.spec as VirtualMachineSpec).cpus, 2)
  for (const alias of ['vm', 'vms', 'virtualmachines', 'VirtualMachine']) assert.equal(findKind(alias)?.kind, 'VirtualMachine')
})

test('bad VirtualMachines are refused naming the field and the rule', () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ ...ok, policy: 'always' }, /spec\.policy/],
    [
      { ...ok, affinity: { nodeAffinity: { required: [{ matchExpressions: [{ key: 'disk', operator: 'In' }] }] } } },
      /spec\.affinity\.nodeAffinity\.required\[0\]\.matchExpressions\[0\]\.values: operator In needs at least one value/,
    ],
    [{ ...ok, affinity: { podAffinity: {} } }, /spec\.affinity\.podAffinity/],
    [{ ...ok, tolerations: [{ operator: 'Equal', value: 'x' }] }, /spec\.tolerations\[0\]\.key: required unless operator is Exists/],
    [{ node: 'n1' }, /spec\.kernel/],
    [{ ...ok, kernel: { path: '/boot/vmlinuz', image: 'k' } }, /spec\.kernel: must give exactly one of image/],
    [{ ...ok, kernel: { cmdline: 'quiet' } }, /spec\.kernel: must give exactly one of image/],
    [{ ...ok, kernel: { path: 'vmlinuz' } }, /spec\.kernel\.path/],
    [{ ...ok, kernel: { path: '/boot/../etc/shadow' } }, /spec\.kernel\.path: must not contain \.\./],
    [{ ...ok, kernel: { image: '../x' } }, /spec\.kernel\.image/],
    [{ ...ok, kernel: { path: '/boot/vmlinuz', cmdline: 'a\nb' } }, /spec\.kernel\.cmdline: must be one line/],
    [{ ...ok, initrd: {} }, /spec\.initrd: must give exactly one/],
    [{ ...ok, memory: '32Mi' }, /spec\.memory: must be between 64Mi and 256Gi/],
    [{ ...ok, memory: 'lots' }, /spec\.memory/],
    [{ ...ok, cpus: 65 }, /spec\.cpus/],
    [{ ...ok, network: 'bridge' }, /spec\.network/],
    [{ ...ok, runStrategy: 'Manual' }, /spec\.runStrategy/],
    [{ ...ok, disks: [] }, /spec\.disks/],
  ]
  for (const [spec, re] of cases) assert.throws(() => normalizeManifest(vm(spec)), re, JSON.stringify(spec))
})

test('only the node a VirtualMachine is pinned to writes its status (controller:vm), and only VMs', () => {
  const authorize = defaultAuthorize(defaultOwnership(), () => true)
  const obj = (node: string, status?: Record<string, unknown>) => ({
    kind: 'VirtualMachine',
    metadata: { name: 'g', namespace: 'default' },
    spec: { node },
    ...(status ? { status } : {}),
  })
  const judge = (signer: string, before: Record<string, unknown>, after: Record<string, unknown>, kind = 'VirtualMachine') =>
    authorize(
      { i: 'x.1', k: `${kind}/default/g`, s: 2, o: 'update', a: 'controller:vm', r: 'running', t: 1 },
      {
        before,
        after,
        changes: [{ op: 'set', path: ['status'], value: (after as { status?: unknown }).status }],
        createdBy: 'user:admin',
        signer: { id: `peer-${signer}`, node: signer },
        objects: { get: () => undefined, list: () => [] } as never,
      },
    )
  assert.equal(judge('a', obj('a'), obj('a', { phase: 'Running' })), undefined)
  assert.match(judge('b', obj('a'), obj('a', { phase: 'Running' })) ?? '', /node b may not write virtualmachine\/g, which runs on node a/)
  assert.match(judge('a', obj('a'), obj('a', { phase: 'Running' }), 'Pod') ?? '', /writes VirtualMachines only|owned by/)
})

test('boot files: by name in an image store, or a path under /boot or a store; anything else is refused', () => {
  const dir = mkdtempSync(join(tmpdir(), 'orc-vm-unit-'))
  try {
    const store = join(dir, 'images')
    mkdirSync(store)
    writeFileSync(join(store, 'initrd.gz'), 'x')
    writeFileSync(join(dir, 'secret'), 'x')
    symlinkSync(join(dir, 'secret'), join(store, 'sneaky'))
    assert.equal(resolveBootFile({ image: 'initrd.gz' }, [store], 'initrd'), join(store, 'initrd.gz'))
    assert.equal(resolveBootFile({ path: join(store, 'initrd.gz') }, [store], 'initrd'), join(store, 'initrd.gz'))
    assert.throws(() => resolveBootFile({ image: 'missing' }, [store], 'kernel'), /kernel image missing is not in the node's image stores/)
    assert.throws(() => resolveBootFile({ path: join(dir, 'secret') }, [store], 'kernel'), /outside \/boot and the node's image stores/)
    // A symlink in a store that leads out of it is judged by where it leads.
    assert.throws(() => resolveBootFile({ image: 'sneaky' }, [store], 'kernel'), /outside \/boot/)
    assert.throws(() => resolveBootFile({ path: '/boot/no-such-kernel' }, [store], 'kernel'), /does not exist on this node/)
    assert.throws(() => resolveBootFile({ path: store }, [dir], 'kernel'), /is not a file/)
    // Under the boot dir only what every user may read: a root-only file there is refused.
    const boot = join(dir, 'boot')
    mkdirSync(boot)
    writeFileSync(join(boot, 'vmlinuz'), 'k', { mode: 0o644 })
    writeFileSync(join(boot, 'System.map'), 's', { mode: 0o600 })
    assert.equal(resolveBootFile({ path: join(boot, 'vmlinuz') }, [store], 'kernel', boot), join(boot, 'vmlinuz'))
    assert.throws(
      () => resolveBootFile({ path: join(boot, 'System.map') }, [store], 'initrd', boot),
      /initrd .*System\.map is not readable by every user of this node \(mode 600\)/,
    )
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test('the guest command line gets the serial console and its pod address; the hash ignores runStrategy', () => {
  assert.equal(guestCmdline({ kernel: { cmdline: 'quiet' } }, undefined), 'quiet console=ttyS0')
  assert.equal(guestCmdline({ kernel: { cmdline: 'console=hvc0' } }, { ipv6: 'fd00::5' }), 'console=hvc0 orc.ipv6=fd00::5 orc.gateway=fe80::1')
  const spec: VirtualMachineSpec = { node: 'n1', kernel: { path: '/boot/k' }, cpus: 1 }
  assert.equal(vmSpecHash({ ...spec, runStrategy: 'Halted' }), vmSpecHash(spec))
  assert.notEqual(vmSpecHash({ ...spec, cpus: 2 }), vmSpecHash(spec))
  assert.notEqual(vmSpecHash({ ...spec, kernel: { path: '/boot/k2' } }), vmSpecHash(spec), 'a new kernel is a new boot')
  assert.notEqual(vmSpecHash({ ...spec, kernel: { path: '/boot/k', cmdline: 'quiet' } }), vmSpecHash(spec), 'so is a new command line')
  assert.notEqual(vmSpecHash({ ...spec, initrd: { path: '/boot/i' } }), vmSpecHash(spec), 'and an initrd')
  assert.match(guestMac('uid-1'), /^52:54:00(:[0-9a-f]{2}){3}$/)
  assert.equal(guestMac('uid-1'), guestMac('uid-1'))
  assert.notEqual(guestMac('uid-1'), guestMac('uid-2'))
})

test("qemu's argv: the accelerator, size, console to the revision's log, QMP, and the tap NIC", () => {
  const args = qemuArgs(
    {
      id: 'u1',
      revision: 4,
      logDir: '/d/console',
      kernel: '/boot/k',
      initrd: '/i',
      cmdline: 'console=ttyS0',
      cpus: 2,
      memoryMiB: 512,
      accel: 'tcg',
      net: { netnsPath: '/var/run/netns/x', tap: 'tap0', mac: '52:54:00:01:02:03' },
    },
    '/s/qmp.sock',
  )
  const after = (flag: string) => args[args.indexOf(flag) + 1]
  // TCG's code cache is capped: qemu's cgroup memory limit allows for it.
  assert.equal(after('-accel'), `tcg,tb-size=${TCG_TB_MIB}`)
  assert.equal(after('-cpu'), 'max')
  assert.equal(after('-smp'), '2')
  assert.equal(after('-m'), '512M')
  assert.equal(after('-initrd'), '/i')
  assert.equal(after('-chardev'), 'file,id=con0,path=/d/console/4.log,append=on')
  assert.equal(after('-qmp'), 'unix:/s/qmp.sock,server=on,wait=off')
  assert.equal(after('-netdev'), 'tap,id=net0,ifname=tap0,script=no,downscript=no')
  assert.equal(after('-device'), 'virtio-net-pci,netdev=net0,mac=52:54:00:01:02:03')
  assert.ok(args.includes('-no-reboot'), 'a guest reboot ends qemu (the controller boots it again)')
  assert.equal(after('-runas'), 'nobody')
  assert.match(after('-sandbox') ?? '', /^on,.*spawn=deny/)
})

test('the console marker is found as the guest writes it: split between reads, across a rotation, and not before it is there', () => {
  const dir = mkdtempSync(join(tmpdir(), 'orc-vm-unit-'))
  try {
    const file = join(dir, '1.log')
    const seen = markerScanner(file, 'orc-guest-ready')
    assert.equal(seen(), false, 'no file yet')
    writeFileSync(file, 'Booting Linux\n[    0.1] orc-gue')
    assert.equal(seen(), false, 'half the marker')
    appendFileSync(file, 'st-ready\n')
    assert.equal(seen(), true, 'the marker split between two reads')
    // After a copy-and-truncate rotation the rest of the copy is read, then the live file anew.
    const again = markerScanner(file, 'second-marker')
    writeFileSync(file, 'x'.repeat(100))
    assert.equal(again(), false)
    appendFileSync(file, ' second-marker\n')
    copyFileSync(file, `${file}.1`)
    truncateSync(file, 0)
    assert.equal(again(), true, 'the marker written just before the rotation is in the copy')
    const third = markerScanner(file, 'third')
    assert.equal(third(), false)
    appendFileSync(file, 'third\n')
    assert.equal(third(), true)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test("qemu's cgroup limits: guest memory plus qemu's allowance (and TCG's code cache), spec.cpus cores, vCPUs plus helper tasks", () => {
  const MiB = 2 ** 20
  assert.deepEqual(qemuLimits({ cpus: 1, memoryMiB: 256, accel: 'tcg' }), {
    memoryBytes: (256 + QEMU_OVERHEAD_MIB + TCG_TB_MIB) * MiB,
    cpu: 1,
    pids: 1 + QEMU_EXTRA_TASKS,
  })
  assert.deepEqual(qemuLimits({ cpus: 4, memoryMiB: 2048, accel: 'kvm' }), {
    memoryBytes: (2048 + QEMU_OVERHEAD_MIB) * MiB,
    cpu: 4,
    pids: 4 + QEMU_EXTRA_TASKS,
  })
})
