// VirtualMachine: the kind's validation (naming the field), who may write its status on receipt
// (only the node it is pinned to), and the pure parts of the controller and the qemu runtime.
import assert from 'node:assert/strict'
import { appendFileSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { parse } from 'yaml'
import {
  authorizedKeyLines,
  guestCmdline,
  guestMac,
  markerScanner,
  noCloudFiles,
  resolveBootFile,
  staleVmDirs,
  vmSpecHash,
} from '../../../../src/agent/vms/index.ts'
import { defaultOwnership, findKind, normalizeManifest, type VirtualMachineSpec } from '../../../../src/model/index.ts'
import { logFilePath, QEMU_EXTRA_TASKS, QEMU_OVERHEAD_MIB, qemuArgs, qemuLimits, TCG_TB_MIB } from '../../../../src/runtime/index.ts'
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
    [{ ...ok, disks: [{ name: 'a' }] }, /spec\.disks\[0\]: must give exactly one of emptyDisk/],
    [{ ...ok, disks: [{ name: 'a', emptyDisk: { size: '1Gi' }, volume: { name: 'v' } }] }, /spec\.disks\[0\]: must give exactly one/],
    [
      {
        ...ok,
        disks: [
          { name: 'a', emptyDisk: { size: '1Gi' } },
          { name: 'a', emptyDisk: { size: '1Gi' } },
        ],
      },
      /spec\.disks\[1\]\.name: duplicate value "a"/,
    ],
    [{ ...ok, disks: [{ name: 'a', emptyDisk: { size: '65Ti' } }] }, /spec\.disks\[0\]\.emptyDisk\.size: must be between 1Mi and 64Ti/],
    [{ ...ok, disks: [{ name: 'a', emptyDisk: {} }] }, /spec\.disks\[0\]\.emptyDisk\.size/],
    [{ ...ok, disks: [{ name: 'a-very-long-disk-name-x', emptyDisk: { size: '1Gi' } }] }, /spec\.disks\[0\]\.name/],
    [{ ...ok, disks: [{ name: 'a', image: '../etc/shadow' }] }, /spec\.disks\[0\]\.image/],
    [{ ...ok, disks: [{ name: 'a', volume: { name: 'Bad_Name' } }] }, /spec\.disks\[0\]\.volume\.name/],
    [{ ...ok, disks: Array.from({ length: 17 }, (_, i) => ({ name: `d${i}`, emptyDisk: { size: '1Gi' } })) }, /spec\.disks: must have at most 16 items/],
    [{ ...ok, cloudInit: { sshAuthorizedKeys: { secret: 'keys' } } }, /spec\.cloudInit\.sshAuthorizedKeys\.key/],
    [{ node: 'n1', disks: [{ name: 'root', image: 'r.qcow2' }] }, /spec\.kernel: is required \(direct kernel boot\), or give bootDisk/],
    [{ ...ok, disks: [{ name: 'root', image: 'r.qcow2' }], bootDisk: 'root' }, /spec\.bootDisk: give kernel .* or bootDisk .*, not both/],
    [{ node: 'n1', disks: [{ name: 'root', image: 'r.qcow2' }], bootDisk: 'rot' }, /spec\.bootDisk: names no disk of spec\.disks \("rot"\)/],
    [{ node: 'n1', disks: [{ name: 'root', image: 'r.qcow2' }], bootDisk: 'root', initrd: { image: 'i' } }, /spec\.initrd: needs kernel/],
    [{ ...ok, cloudInit: { hostname: 'not a name' } }, /spec\.cloudInit\.hostname/],
    [{ ...ok, cloudInit: { userData: 'x'.repeat(65537) } }, /spec\.cloudInit\.userData/],
  ]
  for (const [spec, re] of cases) assert.throws(() => normalizeManifest(vm(spec)), re, JSON.stringify(spec))
})

test("a deleted VM's directory (console, disks) is found by its uid missing from the store", () => {
  const root = mkdtempSync(join(tmpdir(), 'orc-vm-dirs-'))
  try {
    for (const uid of ['kept', 'gone']) mkdirSync(join(root, uid, 'disks'), { recursive: true })
    assert.deepEqual(staleVmDirs(root, new Set(['kept', 'other'])), [join(root, 'gone')])
    assert.deepEqual(staleVmDirs(join(root, 'missing'), new Set()), [])
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})

test('disk boot: a VM without a kernel boots a disk of its spec', () => {
  const o = normalizeManifest(vm({ node: 'n1', disks: [{ name: 'root', image: 'debian.qcow2' }], bootDisk: 'root' }))
  assert.equal((o.spec as VirtualMachineSpec).bootDisk, 'root')
  const args = qemuArgs(
    {
      id: 'u',
      revision: 1,
      logDir: '/d',
      cmdline: '',
      cpus: 1,
      memoryMiB: 256,
      accel: 'tcg',
      disks: [{ path: '/r', format: 'qcow2', serial: 'root', boot: true }],
    },
    '/s',
  )
  assert.equal(args.includes('-kernel'), false)
  assert.equal(args.includes('-append'), false)
  assert.equal(args[args.indexOf('-device') + 1], 'virtio-blk-pci,drive=disk0,serial=root,bootindex=0')
})

test('disks: a good spec is accepted; the cloud-init files merge the Secret keys into #cloud-config, other user-data is kept as is', () => {
  normalizeManifest(
    vm({
      ...ok,
      disks: [
        { name: 'root', image: 'debian.qcow2' },
        { name: 'data', emptyDisk: { size: '10Gi' } },
        { name: 'db', volume: { name: 'pgdata' } },
      ],
      cloudInit: { userData: '#cloud-config\npackages: [htop]\n', sshAuthorizedKeys: { secret: 'keys', key: 'admin' }, hostname: 'db-1' },
    }),
  )
  assert.deepEqual(authorizedKeyLines('# admins\nssh-ed25519 AAA a@b\r\n\n  ssh-rsa BBB c@d  \n'), ['ssh-ed25519 AAA a@b', 'ssh-rsa BBB c@d'])
  const vmId = { uid: 'u-1', name: 'db' }
  const merged = noCloudFiles(vmId, { userData: '#cloud-config\nssh_authorized_keys: [ssh-ed25519 OLD x@y]\npackages: [htop]\n' }, ['ssh-ed25519 NEW a@b'])
  assert.equal(merged.metaData, 'instance-id: "u-1"\nlocal-hostname: "db"\n')
  assert.ok(merged.userData.startsWith('#cloud-config\n'))
  assert.deepEqual(parse(merged.userData), { ssh_authorized_keys: ['ssh-ed25519 OLD x@y', 'ssh-ed25519 NEW a@b'], packages: ['htop'] })
  assert.deepEqual(parse(noCloudFiles(vmId, { hostname: 'h' }, ['k1']).userData), { ssh_authorized_keys: ['k1'] })
  assert.equal(noCloudFiles(vmId, { hostname: 'h' }, []).metaData, 'instance-id: "u-1"\nlocal-hostname: "h"\n')
  // network-config v2 for a guest with a pod address: values quoted (YAML 1.1 reads an unquoted MAC as a number).
  const nc = noCloudFiles(vmId, {}, [], { ipv6: 'fd00::2', gateway: 'fe80::1', mac: '52:54:00:12:34:56' }).networkConfig ?? ''
  assert.match(nc, /macaddress: "52:54:00:12:34:56"/)
  assert.deepEqual(parse(nc), {
    version: 2,
    ethernets: {
      eth0: {
        match: { macaddress: '52:54:00:12:34:56' },
        'set-name': 'eth0',
        dhcp4: false,
        dhcp6: false,
        'accept-ra': false,
        addresses: ['fd00::2/128'],
        routes: [{ to: '::/0', via: 'fe80::1', 'on-link': true }],
      },
    },
  })
  // With the VM's egress IPv4: its /32 and an IPv4 default route through the node's 10.88.0.1, on-link.
  const nc4 = noCloudFiles(vmId, {}, [], { ipv6: 'fd00::2', gateway: 'fe80::1', mac: '52:54:00:12:34:56', ipv4: '10.88.7.9', gateway4: '10.88.0.1' })
  const eth0 = (parse(nc4.networkConfig ?? '') as { ethernets: { eth0: { addresses: string[]; routes: unknown[] } } }).ethernets.eth0
  assert.deepEqual(eth0.addresses, ['fd00::2/128', '10.88.7.9/32'])
  assert.deepEqual(eth0.routes, [
    { to: '::/0', via: 'fe80::1', 'on-link': true },
    { to: '0.0.0.0/0', via: '10.88.0.1', 'on-link': true },
  ])
  assert.equal(noCloudFiles(vmId, {}, []).networkConfig, undefined, 'no pod address: no network-config')
  assert.equal(noCloudFiles(vmId, {}, []).userData, '#cloud-config\n')
  // A script (or MIME, #include) is the user's own: passed as is.
  assert.equal(noCloudFiles(vmId, { userData: '#!/bin/sh\necho hi\n' }, []).userData, '#!/bin/sh\necho hi\n')
  // A #cloud-config without keys to merge is passed as is too (comments kept).
  assert.equal(noCloudFiles(vmId, { userData: '#cloud-config\n# mine\nruncmd: [ls]\n' }, []).userData, '#cloud-config\n# mine\nruncmd: [ls]\n')
  assert.throws(() => noCloudFiles(vmId, { userData: '#cloud-config\n- a list\n' }, ['k']), /a #cloud-config must be a YAML mapping/)
  assert.throws(() => noCloudFiles(vmId, { userData: '#cloud-config\na: [\n' }, ['k']), /spec\.cloudInit\.userData is not YAML/)
  assert.throws(() => noCloudFiles(vmId, { userData: '#cloud-config\nssh_authorized_keys: one\n' }, ['k']), /ssh_authorized_keys must be a list/)
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
  assert.equal(
    guestCmdline({ kernel: { cmdline: 'quiet' } }, { ipv6: 'fd00::5', ipv4: '10.88.3.4' }),
    'quiet console=ttyS0 orc.ipv6=fd00::5 orc.gateway=fe80::1 orc.ipv4=10.88.3.4 orc.gateway4=10.88.0.1',
  )
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

test("qemu's argv: a second QMP monitor for block replication, left out when its path is too long for a socket", () => {
  const base = { id: 'u1', revision: 1, logDir: '/d', kernel: '/k', cmdline: '', cpus: 1, memoryMiB: 256, accel: 'tcg' as const }
  const qmps = (args: string[]) => args.flatMap((a, i) => (a === '-qmp' ? [args[i + 1]] : []))
  assert.deepEqual(qmps(qemuArgs(base, '/s/qmp.sock', '/s/qmp-block.sock')), [
    'unix:/s/qmp.sock,server=on,wait=off',
    'unix:/s/qmp-block.sock,server=on,wait=off',
  ])
  assert.deepEqual(qmps(qemuArgs(base, '/s/qmp.sock', `/${'x'.repeat(100)}/qmp-block.sock`)), ['unix:/s/qmp.sock,server=on,wait=off'])
})

test("qemu's argv: each disk a virtio-blk drive in order, its name as serial, the seed read-only, commas in paths escaped", () => {
  const base = { id: 'u1', revision: 1, logDir: '/d', kernel: '/k', cmdline: '', cpus: 1, memoryMiB: 256, accel: 'tcg' as const }
  const args = qemuArgs(
    {
      ...base,
      disks: [
        { path: '/v/u1/disks/data.raw', format: 'raw', serial: 'data' },
        { path: '/img,x/root.qcow2', format: 'qcow2', serial: 'root' },
        { path: '/v/u1/disks/cidata.img', format: 'raw', serial: 'cidata', readOnly: true },
      ],
    },
    '/s',
  )
  const values = (flag: string) => args.flatMap((a, i) => (a === flag ? [args[i + 1]] : []))
  assert.deepEqual(values('-drive'), [
    'file=/v/u1/disks/data.raw,format=raw,if=none,id=disk0,discard=unmap',
    'file=/img,,x/root.qcow2,format=qcow2,if=none,id=disk1,discard=unmap',
    'file=/v/u1/disks/cidata.img,format=raw,if=none,id=disk2,discard=unmap,readonly=on',
  ])
  assert.deepEqual(values('-device'), [
    'virtio-blk-pci,drive=disk0,serial=data',
    'virtio-blk-pci,drive=disk1,serial=root',
    'virtio-blk-pci,drive=disk2,serial=cidata',
  ])
  assert.throws(() => qemuArgs({ ...base, disks: [{ path: '/x', format: 'raw', serial: 'a,b' }] }, '/s'), /disk serial "a,b"/)
})

test("qemu's argv: the serial console on a unix socket that also appends to the log; a file only when the socket path is too long", () => {
  const base = { id: 'u1', revision: 3, logDir: '/d', kernel: '/k', cmdline: '', cpus: 1, memoryMiB: 256, accel: 'tcg' as const }
  const after = (args: string[], flag: string) => args[args.indexOf(flag) + 1]
  const sock = qemuArgs({ ...base, consoleSocket: '/v/u1/console.sock' }, '/s')
  assert.equal(after(sock, '-chardev'), `socket,id=con0,path=/v/u1/console.sock,server=on,wait=off,logfile=${logFilePath('/d', 3)},logappend=on`)
  assert.equal(after(sock, '-serial'), 'chardev:con0')
  const long = qemuArgs({ ...base, consoleSocket: `/${'x'.repeat(120)}/console.sock` }, '/s')
  assert.equal(after(long, '-chardev'), `file,id=con0,path=${logFilePath('/d', 3)},append=on`)
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
