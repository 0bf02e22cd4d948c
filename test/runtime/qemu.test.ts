/**
 * The qemu runtime on its own (src/runtime/qemu.ts): Debian's kernel and a busybox initramfs built
 * here boot under the accelerator the probe picks (TCG where /dev/kvm is missing or hangs), with the
 * serial console in the revision's log file, a virtio NIC on a tap device in a network namespace
 * (reached over IPv6 from that namespace), re-adoption by a second runtime instance (an agent
 * restart), and a graceful stop: QMP system_powerdown → ACPI power button → the guest powers off.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { QemuRuntime } from '../../src/runtime/index.ts'
import { descendants, signalPid } from '../../src/runtime/procfs.ts'
import { buildGuest, GUEST_BANNER, GUEST_PORT, GUEST_READY, vmGuestMissing } from '../fixtures/vm-guest.ts'
import { waitFor } from '../helpers/wait.ts'

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

  // An agent restart: a new runtime over the same state dir finds the guest running.
  rt.close()
  const rt2 = new QemuRuntime({ stateDir: join(dir, 'state') })
  const found = rt2.recover()
  assert.deepEqual(
    found.running.map((r) => [r.id, r.pid, r.accel]),
    [['vm-test', h.pid, accel.accel]],
  )

  // Graceful stop: ACPI power-down over QMP; the guest's acpid powers it off well within the grace.
  const stop = await rt2.stop('vm-test', 120_000)
  assert.equal(stop.how, 'powerdown', stop.detail)
  assert.match(stop.detail, /POWERDOWN/, 'qemu reported the power button press')
  assert.match(log(), /power button pressed, powering off/)
  const ended = await found.running[0]!.exited
  assert.equal(ended.code, 0, 'qemu exited cleanly (the guest powered off)')
  rt2.remove('vm-test')

  // A guest that ignores the power button (no root file system: the kernel panics and waits) is killed after the grace.
  const h2 = await rt2.start({
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
  const killed = await rt2.stop('vm-stubborn', 1_000)
  assert.equal(killed.how, 'killed', killed.detail)
  assert.equal((await h2.exited).signal === 'SIGKILL' || (await h2.exited).code === 137, true)
  rt2.remove('vm-stubborn')
  failed = false
})
