/**
 * The VM runtime: qemu-system-x86_64 under the same `sh` wrapper as containers (exit status to a
 * file, a record on disk, so a restarted agent re-adopts a running guest by pid + start time and
 * learns how one ended while it was away). The serial console goes to the VM's per-revision log
 * file; a QMP socket beside the record carries the graceful stop (`system_powerdown`: an ACPI power
 * button press), with SIGKILL after the grace period. KVM where a guest actually runs under it
 * (probed by booting the VM's kernel under KVM for up to 8 s, once per runtime), TCG otherwise.
 */
import { createHash } from 'node:crypto'
import { closeSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import pino from 'pino'
import { type Clock, type CommandRunner, every, execaRunner, sleep, systemClock, unrefTimers } from '../effects/index.ts'
import { OrcError, VM_MEMORY_OVERHEAD_BYTES } from '../model/index.ts'
import {
  type CgroupLayout,
  type CgroupUsage,
  type Controller,
  cgroupPids,
  createContainerCgroups,
  detectCgroupLayout,
  readCgroupUsage,
  removeContainerCgroups,
} from './cgroups.ts'
import { spawnDetached } from './host.ts'
import { logFilePath, openLogFile } from './logs.ts'
import { descendants, isSameProcessAlive, readProcStat, signalPid } from './procfs.ts'
import { takeJsonLines } from './qmp.ts'
import { DEFAULT_PATH, decodeExitCode, fenceEnv, ID_PATTERN, wrapperScript } from './supervisor.ts'
import type { ContainerFence, EnforcedLimits, ExitStatus, Spawner } from './types.ts'

export type VmAccel = 'kvm' | 'tcg'

export interface QemuOptions {
  /** `<stateDir>/qemu/<id>/`: record, exit file, QMP socket. */
  stateDir: string
  qemuPath?: string
  /** auto (default): kvm when a probe guest runs under it, else tcg. */
  accel?: 'auto' | VmAccel
  shPath?: string
  nsenterPath?: string
  clock?: Clock
  spawn?: Spawner
  run?: CommandRunner
  pollIntervalMs?: number
  logger?: pino.Logger
  /** Where qemu's cgroups go (tests); default: detected below the agent's own cgroup. */
  cgroupLayout?: CgroupLayout
}

/**
 * qemu's own memory beyond the guest's, besides TCG's code cache: the allowance the node's capacity
 * counts too (VM_MEMORY_OVERHEAD_BYTES, measured: ~55 MiB of an idle TCG guest's qemu is neither guest
 * RAM nor code cache). See docs/decisions.md.
 */
export const QEMU_OVERHEAD_MIB = VM_MEMORY_OVERHEAD_BYTES / 2 ** 20
/**
 * TCG's translated-code cache, capped with `-accel tcg,tb-size=` (qemu's default is 1 GiB, which
 * would have to be allowed on top of every guest). A boot of the test guest fills ~48 MiB; a full
 * cache is flushed and refilled, costing retranslation, not correctness.
 */
export const TCG_TB_MIB = 128
/** Tasks beyond the vCPU threads: main loop + RCU measured (3 tasks for 1 vCPU, 4 for 2); room for qemu's on-demand worker threads. */
export const QEMU_EXTRA_TASKS = 32

/** What bounds one guest's qemu: memory.max, cpu.max (cores), pids.max. */
export interface VmLimits {
  memoryBytes: number
  cpu: number
  pids: number
}

/** The limits of a guest's qemu, from its spec: guest memory + allowance, spec.cpus cores, vCPUs + QEMU_EXTRA_TASKS tasks. */
export function qemuLimits(spec: Pick<VmRunSpec, 'cpus' | 'memoryMiB' | 'accel'>): VmLimits {
  const overheadMiB = QEMU_OVERHEAD_MIB + (spec.accel === 'tcg' ? TCG_TB_MIB : 0)
  return { memoryBytes: (spec.memoryMiB + overheadMiB) * 2 ** 20, cpu: spec.cpus, pids: spec.cpus + QEMU_EXTRA_TASKS }
}

/** A guest's cgroup: its directories (one per hierarchy on cgroup v1), the limits and which of them hold. */
export interface VmCgroup {
  dirs: string[]
  limits: VmLimits
  enforced: EnforcedLimits
  /** Limits no cgroup enforces here, and why (cgroups not writable, controller missing): qemu runs without them. */
  unenforced?: string
}

export interface VmRunSpec {
  id: string
  revision: number
  /** Per-revision console logs (`<logDir>/<revision>.log`). */
  logDir: string
  /** Direct kernel boot; without one the firmware boots the drive marked `boot`. */
  kernel?: string
  initrd?: string
  cmdline: string
  cpus: number
  memoryMiB: number
  accel: VmAccel
  /** The guest's NIC: an existing tap device inside this network namespace. */
  net?: { netnsPath: string; tap: string; mac: string }
  /** virtio-blk drives in this order (the guest's vda, vdb, …). */
  disks?: VmDrive[]
  /**
   * A unix socket for the serial console (`orc console vm/NAME`): qemu listens on it and still
   * appends everything the guest writes to the log. Absent (or a path too long for a unix socket):
   * the console goes to the log only.
   */
  consoleSocket?: string
  /** An `ha` VM's watchdog (as an `ha` container's: the wrapper stops qemu once the lease is too old, agent or not). */
  fence?: ContainerFence
}

/** A host file the guest sees as a virtio-blk disk whose serial is `serial` (`/dev/disk/by-id/virtio-SERIAL`). */
export interface VmDrive {
  path: string
  format: 'raw' | 'qcow2'
  serial: string
  readOnly?: boolean
  /** The disk the firmware boots (disk boot: no kernel given). */
  boot?: boolean
}

/** A value inside a qemu option list: commas are doubled (`file=a,,b` is the file `a,b`). */
function qemuOptValue(v: string): string {
  return v.replaceAll(',', ',,')
}

export interface VmRecord {
  id: string
  pid: number
  startTicks: number
  startedAt: number
  revision: number
  accel: VmAccel
  logDir: string
  cgroup?: VmCgroup
  exit?: ExitStatus
}

export interface VmHandle {
  id: string
  pid: number
  startedAt: number
  revision: number
  accel: VmAccel
  /** qemu's cgroup (absent for a guest started by an agent before cgroups were made for qemu). */
  cgroup?: VmCgroup
  exited: Promise<ExitStatus>
}

/** How a stop went: the guest powered off on the ACPI request, or qemu was killed (or was already gone). */
export interface VmStopResult {
  how: 'powerdown' | 'killed' | 'gone'
  detail: string
}

interface Live {
  rec: VmRecord
  exited: Promise<ExitStatus>
  resolve: (e: ExitStatus) => void
  poll?: () => void
}

/** The newest kernel in /boot (what `orc doctor` probes KVM with), or undefined. */
export function newestBootKernel(boot = '/boot'): string | undefined {
  try {
    const name = readdirSync(boot)
      .filter((n) => n.startsWith('vmlinuz-'))
      .sort()
      .pop()
    return name === undefined ? undefined : join(boot, name)
  } catch {
    return undefined
  }
}

/** The longest path a unix socket may have (sun_path is 108 bytes with its NUL). */
export const MAX_UNIX_PATH = 107

/** qemu's argv for a guest (after the binary). */
export function qemuArgs(spec: VmRunSpec, qmpSocket: string, blockQmpSocket?: string): string[] {
  const args = ['-name', `orc-vm-${spec.id}`, '-nodefaults', '-no-user-config', '-display', 'none', '-vga', 'none', '-no-reboot']
  // TCG's code cache is capped so that qemu's cgroup memory limit can allow for it (qemuLimits).
  args.push('-machine', 'q35', '-accel', spec.accel === 'tcg' ? `tcg,tb-size=${TCG_TB_MIB}` : spec.accel, '-cpu', spec.accel === 'kvm' ? 'host' : 'max')
  args.push('-smp', String(spec.cpus), '-m', `${spec.memoryMiB}M`)
  if (spec.kernel !== undefined) {
    args.push('-kernel', spec.kernel, '-append', spec.cmdline)
    if (spec.initrd !== undefined) args.push('-initrd', spec.initrd)
  }
  // The console appends to the revision's log file (the wrapper's own output goes there too).
  const log = logFilePath(spec.logDir, spec.revision)
  // One client at a time may attach to the console socket (wait=off: the guest never waits for one).
  if (spec.consoleSocket !== undefined && Buffer.byteLength(spec.consoleSocket) <= MAX_UNIX_PATH)
    args.push('-chardev', `socket,id=con0,path=${qemuOptValue(spec.consoleSocket)},server=on,wait=off,logfile=${qemuOptValue(log)},logappend=on`)
  else args.push('-chardev', `file,id=con0,path=${qemuOptValue(log)},append=on`)
  args.push('-serial', 'chardev:con0')
  args.push('-qmp', `unix:${qmpSocket},server=on,wait=off`)
  // A second monitor for the block replication of Volume disks (volumes/blocksync.ts): a sync never
  // holds the one a graceful stop uses (a QMP socket serves one client at a time).
  if (blockQmpSocket !== undefined && Buffer.byteLength(blockQmpSocket) <= MAX_UNIX_PATH) args.push('-qmp', `unix:${blockQmpSocket},server=on,wait=off`)
  // Once the files, the tap and /dev/kvm are open, qemu runs as nobody under its seccomp sandbox (no
  // obsolete syscalls, no exec, no scheduler or cgroup changes). Setting uids stays allowed: -runas
  // itself needs it, and nobody cannot use it to get root back.
  args.push('-sandbox', 'on,obsolete=deny,spawn=deny,resourcecontrol=deny', '-runas', 'nobody')
  for (const [i, d] of (spec.disks ?? []).entries()) {
    if (!/^[A-Za-z0-9_-]{1,20}$/.test(d.serial)) throw new OrcError('invalid', `disk serial ${JSON.stringify(d.serial)}: letters, digits, - and _, at most 20`)
    // Opened (as root) before qemu drops to nobody; a qcow2 overlay opens its backing file read-only.
    const ro = d.readOnly ? ',readonly=on' : ''
    args.push('-drive', `file=${qemuOptValue(d.path)},format=${d.format},if=none,id=disk${i},discard=unmap${ro}`)
    args.push('-device', `virtio-blk-pci,drive=disk${i},serial=${d.serial}${d.boot ? ',bootindex=0' : ''}`)
  }
  if (spec.net !== undefined) {
    args.push('-netdev', `tap,id=net0,ifname=${spec.net.tap},script=no,downscript=no`)
    args.push('-device', `virtio-net-pci,netdev=net0,mac=${spec.net.mac}`)
  }
  return args
}

/**
 * Talk QMP on `socket`: capabilities, then `command`; resolves with the command's answer and keeps
 * reporting events to `onEvent` until `close()` (or the socket closes: qemu exited).
 */
export function qmpSession(
  socket: string,
  command: string,
  onEvent: (event: string, data: unknown) => void,
  timeoutMs: number,
): Promise<{ close(): void; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const sock = connect(socket)
    let buf = ''
    let step = 0
    let closedResolve!: () => void
    const closed = new Promise<void>((r) => (closedResolve = r))
    const timer = setTimeout(() => {
      sock.destroy()
      reject(new OrcError('unavailable', `qmp ${command}: no answer within ${timeoutMs} ms`))
    }, timeoutMs)
    sock.setEncoding('utf8')
    sock.on('error', (err) => {
      clearTimeout(timer)
      reject(new OrcError('unavailable', `qmp ${command}: ${err.message}`))
    })
    sock.on('close', () => {
      clearTimeout(timer)
      closedResolve()
      reject(new OrcError('unavailable', `qmp ${command}: qemu closed the socket`))
    })
    sock.on('data', (chunk: string) => {
      buf += chunk
      if (buf.length > 1 << 20) return sock.destroy()
      const taken = takeJsonLines(buf)
      buf = taken.rest
      for (const msg of taken.messages) {
        if (typeof msg.event === 'string') {
          onEvent(msg.event, msg.data)
          continue
        }
        if ('QMP' in msg && step === 0) {
          step = 1
          sock.write('{"execute":"qmp_capabilities"}\n')
        } else if (step === 1 && 'return' in msg) {
          step = 2
          sock.write(`${JSON.stringify({ execute: command })}\n`)
        } else if (step === 2 && ('return' in msg || 'error' in msg)) {
          step = 3
          clearTimeout(timer)
          if ('error' in msg) {
            sock.destroy()
            reject(new OrcError('invalid', `qmp ${command}: ${JSON.stringify(msg.error)}`))
          } else resolve({ close: () => sock.destroy(), closed })
        }
      }
    })
  })
}

export class QemuRuntime {
  private readonly o: Required<Omit<QemuOptions, 'logger' | 'cgroupLayout'>> & { logger: pino.Logger }
  private readonly live = new Map<string, Live>()
  /** qemu answered `--version` once: not asked again on every boot (a missing one is, until it is installed). */
  private qemuFound = false
  private accelProbe: Promise<{ accel: VmAccel; reason: string }> | undefined
  private layout: CgroupLayout | undefined

  constructor(opts: QemuOptions) {
    this.o = {
      stateDir: opts.stateDir,
      qemuPath: opts.qemuPath ?? 'qemu-system-x86_64',
      accel: opts.accel ?? 'auto',
      shPath: opts.shPath ?? '/bin/sh',
      nsenterPath: opts.nsenterPath ?? 'nsenter',
      clock: opts.clock ?? systemClock,
      spawn: opts.spawn ?? spawnDetached,
      run: opts.run ?? execaRunner,
      pollIntervalMs: opts.pollIntervalMs ?? 500,
      logger: (opts.logger ?? pino({ level: 'silent' })).child({ module: 'qemu' }),
    }
    this.layout = opts.cgroupLayout
  }

  /**
   * Where guests' cgroups go: `orc-qemu-<hash of the state dir>` beside the pod runtimes'
   * `orc-sandbox-<hash>` below the agent's own cgroup (two agents on one host never share it).
   */
  private cgroupLayout(): CgroupLayout {
    const name = `orc-qemu-${createHash('sha256').update(this.o.stateDir).digest('hex').slice(0, 8)}`
    this.layout ??= detectCgroupLayout(undefined, undefined, name)
    return this.layout
  }

  /** Make the guest's cgroup and write its limits; a limit no cgroup can hold here is named with the reason. */
  private createCgroup(spec: VmRunSpec): VmCgroup {
    const layout = this.cgroupLayout()
    const limits = qemuLimits(spec)
    let cg: ReturnType<typeof createContainerCgroups>
    try {
      cg = createContainerCgroups(layout, spec.id, limits)
    } catch (err) {
      throw new OrcError('unavailable', `create the cgroup of vm ${spec.id}: ${(err as Error).message}`)
    }
    const missing = (['memory', 'cpu', 'pids'] as Controller[]).filter((c) => cg.enforced[c === 'memory' ? 'memoryBytes' : c] === undefined)
    const unenforced = missing.map((c) => `${c}: ${layout.reasons[c] ?? 'no usable cgroup'}`).join('; ')
    return { dirs: cg.dirs, limits, enforced: cg.enforced, ...(unenforced !== '' ? { unenforced: `not enforced (${unenforced})` } : {}) }
  }

  private dirOf(id: string): string {
    return join(this.o.stateDir, 'qemu', id)
  }

  qmpSocketOf(id: string): string {
    return join(this.dirOf(id), 'qmp.sock')
  }

  /** The QMP socket the block replication of the guest's Volume disks uses (absent for a guest started before it existed). */
  blockQmpSocketOf(id: string): string {
    return join(this.dirOf(id), 'qmp-block.sock')
  }

  /** Why VMs cannot start here (qemu missing), or undefined. */
  async unavailable(): Promise<string | undefined> {
    if (this.qemuFound) return undefined
    const r = await this.o.run(this.o.qemuPath, ['--version'], { timeoutMs: 10_000 }).catch((err: Error) => ({ exitCode: -1, stdout: '', stderr: err.message }))
    if (r.exitCode !== 0) return `${this.o.qemuPath} not found or not runnable (Debian qemu-system-x86): ${r.stderr.trim().split('\n')[0] ?? ''}`.trim()
    this.qemuFound = true
    return undefined
  }

  /**
   * kvm or tcg, and why: `/dev/kvm` must exist and `kernel` must print its banner under KVM within
   * 8 s (nested virtualisation can give a /dev/kvm that runs a boot sector but hangs a Linux guest).
   * Probed once per runtime, with the first kernel asked for.
   */
  accel(kernel: string | undefined): Promise<{ accel: VmAccel; reason: string }> {
    if (kernel === undefined) {
      // A disk-booted guest gives no kernel: the node's newest one probes, else no probe (not cached).
      kernel = newestBootKernel()
      if (kernel === undefined && this.accelProbe === undefined && this.o.accel === 'auto')
        return Promise.resolve({ accel: 'tcg', reason: 'no kernel in /boot to probe KVM with: emulated (slow)' })
    }
    this.accelProbe ??= this.probeAccel(kernel!)
    return this.accelProbe
  }

  private async probeAccel(kernel: string): Promise<{ accel: VmAccel; reason: string }> {
    if (this.o.accel !== 'auto') return { accel: this.o.accel, reason: 'set by the agent options' }
    if (!existsSync('/dev/kvm')) return { accel: 'tcg', reason: 'no /dev/kvm: emulated (slow)' }
    const t0 = this.o.clock.now()
    // No root file system: the kernel prints its banner, panics and (panic=-1, -no-reboot) qemu exits.
    const r = await this.o
      .run(
        this.o.qemuPath,
        [
          ...['-nodefaults', '-no-user-config', '-display', 'none', '-no-reboot', '-accel', 'kvm', '-cpu', 'host', '-m', '128M'],
          ...['-kernel', kernel, '-append', 'console=ttyS0 panic=-1', '-serial', 'stdio'],
        ],
        { timeoutMs: 8_000 },
      )
      .catch((err: Error) => ({ exitCode: -1, stdout: '', stderr: err.message }))
    if (/Linux version|Kernel panic|VFS/.test(r.stdout)) return { accel: 'kvm', reason: `a probe guest booted under KVM in ${this.o.clock.now() - t0} ms` }
    const last = r.stderr.trim().split('\n').pop() ?? ''
    const why = r.stdout.trim() === '' ? 'a probe kernel under KVM printed nothing within 8 s' : last || `exit status ${r.exitCode}`
    return { accel: 'tcg', reason: `/dev/kvm is not usable (${why}): emulated (slow)` }
  }

  private persist(rec: VmRecord): void {
    const dir = this.dirOf(rec.id)
    writeFileSync(join(dir, 'record.json.tmp'), JSON.stringify(rec))
    renameSync(join(dir, 'record.json.tmp'), join(dir, 'record.json'))
  }

  async start(spec: VmRunSpec): Promise<VmHandle> {
    if (!ID_PATTERN.test(spec.id)) throw new OrcError('invalid', `vm id ${JSON.stringify(spec.id)} must match ${ID_PATTERN}`)
    const cur = this.live.get(spec.id)
    if (cur !== undefined && cur.rec.exit === undefined) throw new OrcError('conflict', `vm ${spec.id} is already running (pid ${cur.rec.pid})`)
    const dir = this.dirOf(spec.id)
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    const qmp = this.qmpSocketOf(spec.id)
    const qemu = [this.o.qemuPath, ...qemuArgs(spec, qmp, this.blockQmpSocketOf(spec.id))]
    const argv = spec.net !== undefined ? [this.o.nsenterPath, `--net=${spec.net.netnsPath}`, '--', ...qemu] : qemu
    // A cgroup left by a qemu that ended while no agent watched is empty: remove it before making it afresh.
    removeContainerCgroups(this.cgroupLayoutDirs(spec.id))
    const cgroup = this.createCgroup(spec)
    // The wrapper's child joins the cgroup before it execs (nsenter, then) qemu: qemu starts inside.
    const procs = cgroup.dirs.map((d) => join(d, 'cgroup.procs'))
    let spawned: ReturnType<Spawner> | undefined
    const logFd = openLogFile(spec.logDir, spec.revision)
    try {
      spawned = this.o.spawn({
        file: this.o.shPath,
        args: ['-c', wrapperScript(this.o.shPath, spec.fence !== undefined), 'orc-wrapper', ...argv],
        env: {
          PATH: process.env.PATH ?? DEFAULT_PATH,
          ORC_EXIT: join(dir, 'exit'),
          ORC_CGROUPS: procs.join(' '),
          ...fenceEnv(spec.fence),
        },
        fds: [null, logFd, logFd],
        cwd: dir,
      })
    } finally {
      closeSync(logFd)
      if (spawned === undefined || spawned.pid === 0) removeContainerCgroups(cgroup.dirs)
    }
    if (spawned.pid === 0) throw new OrcError('internal', `start vm ${spec.id}: cannot spawn ${this.o.shPath}`)
    const rec: VmRecord = {
      id: spec.id,
      pid: spawned.pid,
      startTicks: readProcStat(spawned.pid)?.startTicks ?? -1,
      startedAt: this.o.clock.now(),
      revision: spec.revision,
      accel: spec.accel,
      logDir: spec.logDir,
      cgroup,
    }
    this.persist(rec)
    const live = this.track(rec)
    spawned.exit.then((raw) => void this.finish(live, raw.signal ? { code: null, signal: raw.signal } : decodeExitCode(raw.code ?? 1)))
    this.o.logger.info(
      { id: spec.id, pid: rec.pid, accel: spec.accel, revision: spec.revision, limits: cgroup.limits, enforced: cgroup.enforced },
      'vm started',
    )
    return this.handle(live)
  }

  /** The guests a previous agent left running (re-adopted: their exit is watched by polling /proc), and those that ended meanwhile. */
  recover(): { running: VmHandle[]; ended: { id: string; revision: number; exit: ExitStatus }[] } {
    const root = join(this.o.stateDir, 'qemu')
    const out: ReturnType<QemuRuntime['recover']> = { running: [], ended: [] }
    let ids: string[] = []
    try {
      ids = readdirSync(root).filter((d) => ID_PATTERN.test(d))
    } catch {
      return out
    }
    for (const id of ids) {
      if (this.live.has(id)) continue
      let rec: VmRecord
      try {
        rec = JSON.parse(readFileSync(join(this.dirOf(id), 'record.json'), 'utf8')) as VmRecord
      } catch {
        continue
      }
      if (rec.exit === undefined && isSameProcessAlive(rec.pid, rec.startTicks)) {
        const live = this.track(rec)
        live.poll = every(unrefTimers(this.o.clock), this.o.pollIntervalMs, () => {
          if (!isSameProcessAlive(rec.pid, rec.startTicks)) void this.finish(live, this.readExit(id))
        })
        out.running.push(this.handle(live))
      } else {
        // qemu ended while no agent watched: its (now empty) cgroup goes.
        removeContainerCgroups(rec.cgroup?.dirs ?? [])
        const exit = rec.exit ?? { ...(this.readExit(id) ?? { code: null, signal: null }), finishedAt: this.o.clock.now() }
        out.ended.push({ id, revision: rec.revision, exit })
      }
    }
    return out
  }

  private readExit(id: string): { code: number | null; signal: NodeJS.Signals | null } | undefined {
    try {
      const t = readFileSync(join(this.dirOf(id), 'exit'), 'utf8').trim()
      return t === '' ? undefined : decodeExitCode(Number(t))
    } catch {
      return undefined
    }
  }

  private track(rec: VmRecord): Live {
    let resolve!: (e: ExitStatus) => void
    const exited = new Promise<ExitStatus>((r) => (resolve = r))
    const live: Live = { rec, exited, resolve }
    this.live.set(rec.id, live)
    return live
  }

  private handle(live: Live): VmHandle {
    const r = live.rec
    return {
      id: r.id,
      pid: r.pid,
      startedAt: r.startedAt,
      revision: r.revision,
      accel: r.accel,
      ...(r.cgroup ? { cgroup: r.cgroup } : {}),
      exited: live.exited,
    }
  }

  /** The directories a guest's cgroup has (or would have) in this runtime's layout. */
  private cgroupLayoutDirs(id: string): string[] {
    const l = this.cgroupLayout()
    const places = [...Object.values(l.places), ...(l.cpuacct ? [l.cpuacct] : [])]
    return [...new Set(places.map((p) => join(p.parent, id)))]
  }

  /** Remove a guest's cgroup once qemu has left it (the kernel moves a reaped task out a moment later). */
  private async removeCgroup(rec: VmRecord): Promise<void> {
    const dirs = rec.cgroup?.dirs ?? []
    for (let i = 0; i < 100 && removeContainerCgroups(dirs).length > 0; i++) {
      for (const pid of cgroupPids(dirs)) signalPid(pid, 'SIGKILL')
      await sleep(this.o.clock, 20)
    }
    const left = removeContainerCgroups(dirs)
    if (left.length > 0) this.o.logger.warn({ id: rec.id, left }, 'vm cgroup not removed')
  }

  /** CPU and memory of a running guest's qemu, from its cgroup (as `orc top` reads a container's). */
  usage(id: string): CgroupUsage | undefined {
    const live = this.live.get(id)
    if (live === undefined || live.rec.exit !== undefined || live.rec.cgroup === undefined) return undefined
    return readCgroupUsage(live.rec.cgroup.dirs)
  }

  private async finish(live: Live, raw: { code: number | null; signal: NodeJS.Signals | null } | undefined): Promise<void> {
    if (live.rec.exit) return
    const exit: ExitStatus = { code: raw?.code ?? null, signal: raw?.signal ?? null, finishedAt: this.o.clock.now() }
    live.rec.exit = exit
    live.poll?.()
    await this.removeCgroup(live.rec)
    try {
      if (existsSync(this.dirOf(live.rec.id))) this.persist(live.rec)
    } catch {}
    this.o.logger.info({ id: live.rec.id, code: exit.code, signal: exit.signal }, 'vm exited')
    live.resolve(exit)
  }

  /**
   * Stop a guest: ACPI power-down over QMP, wait up to `graceMs` for qemu to exit (the guest powered
   * off), then SIGKILL qemu and the wrapper.
   */
  async stop(id: string, graceMs: number): Promise<VmStopResult> {
    const live = this.live.get(id)
    if (live === undefined || live.rec.exit !== undefined) return { how: 'gone', detail: 'not running' }
    const events: string[] = []
    let session: { close(): void } | undefined
    let asked = ''
    if (graceMs > 0) {
      try {
        session = await qmpSession(
          this.qmpSocketOf(id),
          'system_powerdown',
          (e, data) => {
            const reason = (data as { reason?: unknown } | undefined)?.reason
            events.push(typeof reason === 'string' ? `${e}(${reason})` : e)
          },
          5_000,
        )
      } catch (err) {
        asked = ` (qmp: ${(err as Error).message})`
      }
    }
    const ended = await Promise.race([live.exited.then(() => true), sleep(this.o.clock, session ? graceMs : 0).then(() => false)])
    session?.close()
    if (ended) {
      const ev = events.length > 0 ? `: qmp events ${events.join(', ')}` : ''
      return { how: 'powerdown', detail: `the guest powered off after system_powerdown${ev}` }
    }
    // qemu (the wrapper's child) first, so the wrapper records how it ended.
    const kids = [...new Set([...descendants(live.rec.pid), ...cgroupPids(live.rec.cgroup?.dirs ?? [])])]
    for (const pid of kids.length > 0 ? kids : [live.rec.pid]) signalPid(pid, 'SIGKILL')
    await Promise.race([live.exited, sleep(this.o.clock, 5_000)])
    return {
      how: 'killed',
      detail: session ? `the guest did not power off within ${graceMs / 1000}s of system_powerdown: killed` : `killed${asked}`,
    }
  }

  /** Forget a guest that has ended: its record, exit file and QMP socket. */
  remove(id: string): void {
    const live = this.live.get(id)
    if (live !== undefined && live.rec.exit === undefined) return
    this.live.delete(id)
    rmSync(this.dirOf(id), { recursive: true, force: true })
  }

  running(id: string): VmHandle | undefined {
    const live = this.live.get(id)
    return live !== undefined && live.rec.exit === undefined ? this.handle(live) : undefined
  }

  /** Stop watching (the guests keep running: a new agent re-adopts them). */
  close(): void {
    for (const l of this.live.values()) l.poll?.()
  }
}
