/**
 * The qemu runtime on its own (src/runtime/qemu.ts): Debian's kernel and a busybox initramfs built
 * here boot under the accelerator the probe picks (TCG where /dev/kvm is missing or hangs), with the
 * serial console in the revision's log file, a virtio NIC on a tap device in a network namespace
 * (reached over IPv6 from that namespace), re-adoption by a second runtime instance (an agent
 * restart), and a graceful stop: QMP system_powerdown → ACPI power button → the guest powers off.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { noCloudFiles } from '../../src/agent/vms/index.ts'
import { createExecaRunner } from '../../src/effects/index.ts'
import { buildNoCloudSeed, diskImageFormat, ensureEmptyDisk, ensureImageOverlay, QemuRuntime, qemuLimits, type VmCgroup } from '../../src/runtime/index.ts'
import { descendants, signalPid } from '../../src/runtime/procfs.ts'
import {
  assertLinesInOrder,
  bootDiskToolsMissing,
  buildBootDisk,
  buildGuest,
  DISK_MARK,
  diskToolsMissing,
  GUEST_BANNER,
  GUEST_PORT,
  GUEST_READY,
  vmGuestMissing,
} from '../fixtures/vm-guest.ts'
import { waitFor } from '../helpers/wait.ts'

/** The first of `names` found in the cgroup's directories (v1 or v2 spelling), trimmed. */
function cgroupFile(cg: VmCgroup, ...names: string[]): string | undefined {
  for (const d of cg.dirs) for (const n of names) if (existsSync(join(d, n))) return readFileSync(join(d, n), 'utf8').trim()
  return undefined
}

const ip = (args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString()

test('qemu runtime: boots a guest, console in the log, reachable over IPv6 on its tap, adopted, powered down over QMP', { timeout: 600_000 }, async (t) => {
  const why = vmGuestMissing()
  if (why) return t.skip(`skipped: ${why}`)
  const dir = mkdtempSync(join(tmpdir(), 'orc-qemu-'))
  const ns = `orc-qemu-${process.pid}`
  let failed = true
  const wrappers: number[] = []
  t.after(() => {
    if (failed) t.diagnostic(`--- console ---\n${log().slice(-3000)}`)
    // A failed run leaves no guest behind.
    for (const pid of wrappers) for (const p of [...descendants(pid), pid]) signalPid(p, 'SIGKILL')
    try {
      ip(['netns', 'del', ns])
    } catch {}
    rmSync(dir, { recursive: true, force: true })
  })
  const guest = buildGuest(join(dir, 'guest'))
  ip(['netns', 'add', ns])
  const inNs = (args: string[]) => ip(['-n', ns, ...args])
  inNs(['tuntap', 'add', 'dev', 'tap0', 'mode', 'tap'])
  inNs(['link', 'set', 'lo', 'up'])
  inNs(['link', 'set', 'tap0', 'up'])
  inNs(['addr', 'add', 'fe80::1/64', 'dev', 'tap0', 'nodad'])
  inNs(['addr', 'add', 'fd00:5eed::1/64', 'dev', 'tap0', 'nodad'])

  const rt = new QemuRuntime({ stateDir: join(dir, 'state') })
  const accel = await rt.accel(guest.kernel)
  t.diagnostic(`accel ${accel.accel}: ${accel.reason}`)
  const logDir = join(dir, 'console')
  const t0 = Date.now()
  const h = await rt.start({
    id: 'vm-test',
    revision: 3,
    logDir,
    kernel: guest.kernel,
    initrd: guest.initrd,
    cmdline: 'console=ttyS0 panic=-1 orc.ipv6=fd00:5eed::2 orc.gateway=fe80::1',
    cpus: 1,
    memoryMiB: 256,
    accel: accel.accel,
    net: { netnsPath: `/var/run/netns/${ns}`, tap: 'tap0', mac: '52:54:00:12:34:56' },
  })
  wrappers.push(h.pid)
  function log(): string {
    try {
      return readFileSync(join(dir, 'console', '3.log'), 'utf8')
    } catch {
      return ''
    }
  }
  await waitFor('the guest prints its ready marker on the serial console', () => (log().includes(GUEST_READY) ? true : undefined), 300_000)
  t.diagnostic(`booted in ${Date.now() - t0} ms (${accel.accel})`)
  assert.match(log(), /Linux version/, 'the kernel banner is in the console log')

  // Over the tap: the guest answers on its address.
  const banner = await waitFor(
    'the guest answers on [fd00:5eed::2]:7777 from the namespace',
    () => {
      try {
        const out = execFileSync('ip', ['netns', 'exec', ns, 'busybox', 'nc', '-w', '3', 'fd00:5eed::2', String(GUEST_PORT)], {
          stdio: ['ignore', 'pipe', 'ignore'],
          timeout: 10_000,
        }).toString()
        return out.includes(GUEST_BANNER) ? out : undefined
      } catch {
        return undefined
      }
    },
    60_000,
  )
  assert.match(banner, new RegExp(GUEST_BANNER))

  // qemu itself runs as nobody under its seccomp sandbox once the guest is up (it was started as root).
  const qemuPid = [...descendants(h.pid), h.pid].find((p) => {
    try {
      return readFileSync(`/proc/${p}/comm`, 'utf8').startsWith('qemu-system')
    } catch {
      return false
    }
  })
  assert.ok(qemuPid !== undefined, 'the qemu process under the wrapper')
  const status = readFileSync(`/proc/${qemuPid}/status`, 'utf8')
  assert.match(status, /^Uid:\s+65534\s+65534\s+65534\s+65534$/m, 'qemu runs as nobody')
  assert.match(status, /^Seccomp:\s+2$/m, 'under a seccomp filter')

  // qemu runs in the guest's own cgroup, whose limits come from the spec: memory = guest + qemu's allowance, cpu = 1 core.
  const cg = h.cgroup
  assert.ok(cg !== undefined, 'the handle names the cgroup')
  t.diagnostic(`cgroup ${cg.dirs.join(' ')} enforced ${JSON.stringify(cg.enforced)}${cg.unenforced ? ` ${cg.unenforced}` : ''}`)
  assert.deepEqual(cg.limits, qemuLimits({ cpus: 1, memoryMiB: 256, accel: accel.accel }))
  assert.equal(cg.unenforced, undefined, 'root on this host: memory, cpu and pids all enforced by cgroups')
  for (const d of cg.dirs) {
    assert.ok(d.endsWith('/vm-test') && /\/orc-qemu-[0-9a-f]{8}\/vm-test$/.test(d), d)
    const procs = readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n').map(Number)
    assert.ok(procs.includes(qemuPid), `qemu (pid ${qemuPid}) is in ${d}`)
    assert.ok(!procs.includes(h.pid), 'the wrapper stays outside (it records how qemu ended)')
  }
  assert.equal(Number(cgroupFile(cg, 'memory.max', 'memory.limit_in_bytes')), cg.limits.memoryBytes)
  const quota = cgroupFile(cg, 'cpu.max') ?? `${cgroupFile(cg, 'cpu.cfs_quota_us')} ${cgroupFile(cg, 'cpu.cfs_period_us')}`
  assert.equal(quota, '100000 100000', 'one core')
  assert.equal(Number(cgroupFile(cg, 'pids.max')), cg.limits.pids)
  const tasks = Number(cgroupFile(cg, 'pids.current'))
  t.diagnostic(`qemu: ${tasks} tasks, ${status.match(/^VmRSS:\s+(\d+)/m)?.[1]} kB RSS`)
  assert.ok(tasks >= 2 && tasks < cg.limits.pids, `qemu's ${tasks} tasks are within pids.max`)
  const used = rt.usage('vm-test')
  assert.ok(
    used?.memoryBytes && used.memoryBytes > 16 * 2 ** 20 && used.memoryBytes < cg.limits.memoryBytes,
    `qemu's working set from its cgroup: ${used?.memoryBytes}`,
  )
  assert.ok(used.cpuSeconds !== null && used.cpuSeconds > 0, 'its CPU time from its cgroup')

  // An agent restart: a new runtime over the same state dir finds the guest running.
  rt.close()
  const rt2 = new QemuRuntime({ stateDir: join(dir, 'state') })
  const found = rt2.recover()
  assert.deepEqual(
    found.running.map((r) => [r.id, r.pid, r.accel]),
    [['vm-test', h.pid, accel.accel]],
  )
  assert.deepEqual(found.running[0]!.cgroup, cg, 'the adopted guest keeps its cgroup')
  assert.ok(rt2.usage('vm-test')?.memoryBytes, "the adopting runtime reads qemu's usage from it")

  // Graceful stop: ACPI power-down over QMP; the guest's acpid powers it off well within the grace.
  const stop = await rt2.stop('vm-test', 120_000)
  assert.equal(stop.how, 'powerdown', stop.detail)
  assert.match(stop.detail, /POWERDOWN/, 'qemu reported the power button press')
  assert.match(log(), /power button pressed, powering off/)
  const ended = await found.running[0]!.exited
  assert.equal(ended.code, 0, 'qemu exited cleanly (the guest powered off)')
  for (const d of cg.dirs) assert.equal(existsSync(d), false, `${d} removed once qemu exited`)
  rt2.remove('vm-test')

  // Where no cgroup can be made (cgroups not writable), qemu still runs, and the handle says which limits do not hold and why.
  const rt3 = new QemuRuntime({
    stateDir: join(dir, 'state3'),
    cgroupLayout: { places: {}, reasons: { memory: 'cgroup v2 /x not writable', cpu: 'cgroup v2 /x not writable', pids: 'cgroup v2 /x not writable' } },
  })

  // A guest that ignores the power button (no root file system: the kernel panics and waits) is killed after the grace.
  const h2 = await rt3.start({
    id: 'vm-stubborn',
    revision: 1,
    logDir,
    kernel: guest.kernel,
    cmdline: 'console=ttyS0',
    cpus: 1,
    memoryMiB: 128,
    accel: accel.accel,
  })
  wrappers.push(h2.pid)
  assert.deepEqual(h2.cgroup?.dirs, [])
  assert.match(h2.cgroup?.unenforced ?? '', /^not enforced \(memory: cgroup v2 \/x not writable; cpu: .*; pids: .*\)$/)
  const killed = await rt3.stop('vm-stubborn', 1_000)
  assert.equal(killed.how, 'killed', killed.detail)
  assert.equal((await h2.exited).signal === 'SIGKILL' || (await h2.exited).code === 137, true)
  rt3.remove('vm-stubborn')
  failed = false
})

test('qemu runtime: disks — an empty disk and an image overlay keep the guest writes across boots, the image file is never written, the NoCloud seed is read', {
  timeout: 600_000,
}, async (t) => {
  const why = vmGuestMissing() ?? diskToolsMissing()
  if (why) return t.skip(`skipped: ${why}`)
  const dir = mkdtempSync(join(tmpdir(), 'orc-qemu-disks-'))
  const wrappers: number[] = []
  let failed = true
  const log = (rev: number) => {
    try {
      return readFileSync(join(dir, 'console', `${rev}.log`), 'utf8')
    } catch {
      return ''
    }
  }
  t.after(() => {
    if (failed) t.diagnostic(`--- console ---\n${log(1).slice(-2000)}\n${log(2).slice(-2000)}`)
    for (const pid of wrappers) for (const p of [...descendants(pid), pid]) signalPid(p, 'SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  })
  const guest = buildGuest(join(dir, 'guest'))
  const disks = join(dir, 'disks')
  mkdirSync(disks)
  // The image: a raw file that already holds mark 100.
  const image = join(dir, 'images', 'base.raw')
  mkdirSync(join(dir, 'images'))
  writeFileSync(image, Buffer.concat([Buffer.from(`${DISK_MARK} 100\n`), Buffer.alloc(2 ** 20 - 18)]))
  const hash = () => createHash('sha256').update(readFileSync(image)).digest('hex')
  const before = hash()
  const run = createExecaRunner()
  assert.equal(await diskImageFormat(run, image), 'raw')
  assert.deepEqual(ensureEmptyDisk(join(disks, 'data.raw'), 64 * 2 ** 20), { created: true, grew: false })
  assert.equal(statSync(join(disks, 'data.raw')).blocks, 0, 'the empty disk is sparse')
  assert.equal(statSync(join(disks, 'data.raw')).mode & 0o777, 0o600)
  assert.equal(await ensureImageOverlay(run, join(disks, 'base.qcow2'), image, 'raw'), true)
  assert.equal(await ensureImageOverlay(run, join(disks, 'base.qcow2'), image, 'raw'), false, 'an overlay over the same image is kept')
  const seed = join(dir, 'seed.img')
  await buildNoCloudSeed(run, seed, {
    metaData: 'instance-id: 1234\nlocal-hostname: tiny\n',
    userData: '#cloud-config\nssh_authorized_keys:\n  - ssh-ed25519 AAAAC3Nza-test-key user@test\n',
  })
  assert.equal(statSync(seed).mode & 0o777, 0o600)
  assert.deepEqual(readdirSync(dir).sort(), ['disks', 'guest', 'images', 'seed.img'], 'no clear user-data left beside the seed')
  // A qcow2 image that names a backing file of its own is refused (it could name any host file).
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', '/etc/hostname', '-F', 'raw', join(dir, 'images', 'sneaky.qcow2')])
  await assert.rejects(diskImageFormat(run, join(dir, 'images', 'sneaky.qcow2')), /names another file/)

  const rt = new QemuRuntime({ stateDir: join(dir, 'state') })
  const accel = await rt.accel(guest.kernel)
  const boot = async (revision: number) => {
    const h = await rt.start({
      id: 'vm-disks',
      revision,
      logDir: join(dir, 'console'),
      kernel: guest.kernel,
      initrd: guest.initrd,
      cmdline: 'console=ttyS0 panic=-1',
      cpus: 1,
      memoryMiB: 256,
      accel: accel.accel,
      disks: [
        { path: join(disks, 'data.raw'), format: 'raw', serial: 'data' },
        { path: join(disks, 'base.qcow2'), format: 'qcow2', serial: 'base' },
        { path: seed, format: 'raw', serial: 'cidata', readOnly: true },
      ],
    })
    wrappers.push(h.pid)
    await waitFor(`boot ${revision}: the guest's ready marker`, () => (log(revision).includes(GUEST_READY) ? true : undefined), 300_000)
    // The guest wrote its marks with fsync: killing qemu loses nothing of them.
    const stop = await rt.stop('vm-disks', 0)
    assert.equal(stop.how, 'killed', stop.detail)
    rt.remove('vm-disks')
    return log(revision)
  }
  const first = await boot(1)
  t.diagnostic(
    first
      .split('\n')
      .filter((l) => l.startsWith('guest: '))
      .join('\n'),
  )
  // In order, each with its name as serial: vda, vdb, then the seed.
  assert.match(first, /guest: disk vda serial data sectors 131072/)
  assert.match(first, /guest: disk vdb serial base sectors 2048/)
  assert.match(first, /guest: disk vdc serial cidata/)
  assertLinesInOrder(first, 'guest: disk data reads <empty>', 'guest: disk data wrote ORC-DISK-MARK 1')
  assertLinesInOrder(first, 'guest: disk base reads ORC-DISK-MARK 100', 'guest: disk base wrote ORC-DISK-MARK 101')
  assert.match(first, /guest: cidata files meta-data user-data/)
  assert.match(first, /guest: cidata user-data: {3}- ssh-ed25519 AAAAC3Nza-test-key user@test/)
  assert.match(first, /guest: cidata meta-data: local-hostname: tiny/)

  const second = await boot(2)
  assert.match(second, /guest: disk data reads ORC-DISK-MARK 1\s/, 'the empty disk kept what the first boot wrote')
  assert.match(second, /guest: disk base reads ORC-DISK-MARK 101\s/, 'the overlay kept the guest write')
  assert.equal(hash(), before, 'the image file is unchanged')
  assert.equal(readFileSync(join(disks, 'data.raw')).subarray(0, 16).toString(), `${DISK_MARK} 2\n`)
  failed = false
})

test('qemu runtime: disk boot — no kernel given, SeaBIOS boots the disk marked boot (SYSLINUX on it), the seed carries network-config', {
  timeout: 600_000,
}, async (t) => {
  const why = vmGuestMissing() ?? diskToolsMissing() ?? bootDiskToolsMissing()
  if (why) return t.skip(`skipped: ${why}`)
  const dir = mkdtempSync(join(tmpdir(), 'orc-qemu-diskboot-'))
  const wrappers: number[] = []
  const log = () => {
    try {
      return readFileSync(join(dir, 'console', '1.log'), 'utf8')
    } catch {
      return ''
    }
  }
  let failed = true
  t.after(() => {
    if (failed) t.diagnostic(`--- console ---\n${log().slice(-3000)}`)
    for (const pid of wrappers) for (const p of [...descendants(pid), pid]) signalPid(p, 'SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  })
  const guest = buildGuest(join(dir, 'guest'))
  const disk = buildBootDisk(dir, guest)
  const bootSector = readFileSync(disk).subarray(0, 512)
  const seed = join(dir, 'seed.img')
  const net = { ipv6: 'fd00:5eed::2', gateway: 'fe80::1', mac: '52:54:00:12:34:56' }
  await buildNoCloudSeed(createExecaRunner(), seed, noCloudFiles({ uid: 'u-boot', name: 'booted' }, {}, [], net))
  const rt = new QemuRuntime({ stateDir: join(dir, 'state') })
  const accel = await rt.accel(undefined)
  const h = await rt.start({
    id: 'vm-diskboot',
    revision: 1,
    logDir: join(dir, 'console'),
    cmdline: '',
    cpus: 1,
    memoryMiB: 256,
    accel: accel.accel,
    disks: [
      { path: seed, format: 'raw', serial: 'cidata', readOnly: true },
      { path: disk, format: 'raw', serial: 'root', boot: true },
    ],
  })
  wrappers.push(h.pid)
  await waitFor("the disk-booted guest's ready marker", () => (log().includes(GUEST_READY) ? true : undefined), 300_000)
  const out = log()
  assert.match(out, /SYSLINUX \d/, "the disk's boot loader ran")
  assert.match(
    out,
    /Command line: BOOT_IMAGE=vmlinuz console=ttyS0 panic=-1 initrd=initrd.gz\r?\n/,
    "the kernel's command line is the boot loader's (orc gave none)",
  )
  // The seed first, the boot disk second: bootindex, not the order, picks the disk.
  assert.match(out, /guest: disk vda serial cidata/)
  assert.match(out, /guest: disk vdb serial root sectors 131072/)
  assert.match(out, /guest: disk root holds other data, left alone/)
  assert.match(out, /guest: cidata network-config: {7}- "fd00:5eed::2\/128"/)
  assert.match(out, /guest: cidata network-config: {7}macaddress: "52:54:00:12:34:56"/)
  assert.match(out, /guest: cidata network-config: {9}via: "fe80::1"/)
  assert.equal((await rt.stop('vm-diskboot', 0)).how, 'killed')
  rt.remove('vm-diskboot')
  assert.deepEqual(readFileSync(disk).subarray(0, 512), bootSector, 'the boot sector is intact')
  failed = false
})
