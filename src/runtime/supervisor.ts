/**
 * What the sandbox and oci runtimes share: a state dir with one record per container, a tiny
 * `sh` wrapper that joins the container's cgroups, runs the runtime binary and writes its exit
 * status to a file (so an agent that restarted still learns how an adopted container ended),
 * exit observation (child exit event, or /proc polling for adopted processes identified by pid +
 * start time), graceful stop and log rotation.
 */

import { createHash } from 'node:crypto'
import {
  chmodSync,
  closeSync,
  existsSync,
  type FSWatcher,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  watch,
  writeFileSync,
} from 'node:fs'
import { constants as osConstants } from 'node:os'
import { join } from 'node:path'
import pino from 'pino'
import { type Clock, every, execaRunner, sleep, systemClock, unrefTimers } from '../effects/index.ts'
import { byCodeUnits, OrcError, wrapError } from '../model/index.ts'
import { type CgroupLayout, cgroupPids, detectCgroupLayout, readCgroupUsage, removeContainerCgroups } from './cgroups.ts'
import { connectPortArgv, type ExecLaunch, resolveBinary, runExec, spawnExec } from './exec.ts'
import { spawnDetached } from './host.ts'
import { type ResolvedImage, resolveImage } from './image.ts'
import { openLogFile, rotateIfNeeded } from './logs.ts'
import { DEFAULT_LOG_ROTATION, type RuntimeOptions, type RuntimeOptionsInput } from './options.ts'
import { descendants, isSameProcessAlive, readProcStat, signalPid } from './procfs.ts'
import type {
  ContainerFence,
  ContainerHandle,
  ContainerRunSpec,
  ContainerStatus,
  ContainerUsage,
  EnforcedLimits,
  ExecProcess,
  ExecResult,
  ExecRunOptions,
  ExecSpec,
  ExitListener,
  ExitStatus,
  RecoverResult,
  Runtime,
  StopOptions,
} from './types.ts'

export const ID_PATTERN = /^[a-z0-9][a-z0-9_.-]{0,127}$/

export function resolveOptions(input: RuntimeOptionsInput): RuntimeOptions {
  const uid = input.uid ?? 65534
  return {
    stateDir: input.stateDir,
    imageCacheDir: input.imageCacheDir ?? join(input.stateDir, 'images'),
    uid,
    gid: input.gid ?? uid,
    ociHostUidBase: input.ociHostUidBase ?? 1_000_000,
    logs: { ...DEFAULT_LOG_ROTATION, ...input.logs },
    pollIntervalMs: input.pollIntervalMs ?? 500,
    seccomp: input.seccomp ?? process.arch === 'x64',
    bwrapPath: input.bwrapPath ?? 'bwrap',
    runcPath: input.runcPath ?? 'runc',
    runscPath: input.runscPath ?? 'runsc',
    runscPlatform: input.runscPlatform ?? 'auto',
    shPath: input.shPath ?? '/bin/sh',
    setprivPath: input.setprivPath ?? 'setpriv',
    nsenterPath: input.nsenterPath ?? 'nsenter',
    prlimitPath: input.prlimitPath ?? 'prlimit',
    clock: input.clock ?? systemClock,
    spawn: input.spawn ?? spawnDetached,
    run: input.run ?? execaRunner,
    logger: input.logger ?? pino({ level: 'silent' }),
  }
}

/** On-disk record of one container (`<stateDir>/containers/<id>/record.json`). */
export interface ContainerRecord {
  id: string
  runtime: 'sandbox' | 'oci' | 'gvisor'
  pid: number
  startTicks: number
  startedAt: number
  revision: number
  image: string
  logDir: string
  enforced: EnforcedLimits
  cgroupDirs: string[]
  exit?: ExitStatus
  /** Runtime-specific data (e.g. bundle path). */
  extra?: Record<string, unknown>
}

/** What a concrete runtime launches under the wrapper. */
export interface LaunchPlan {
  file: string
  args: string[]
  /** Extra fds for the child from fd 3 on (opened by the plan, closed after spawn). */
  extraFds: number[]
  /** Data the child reads from pipes at the fds after extraFds (SpawnRequest.inputs). */
  inputs?: Buffer[]
  /** cgroup.procs files the wrapper joins before exec (empty when the runtime manages cgroups). */
  cgroupProcs: string[]
  cgroupDirs: string[]
  enforced: EnforcedLimits
  extra?: Record<string, unknown>
}

export interface PlanContext {
  dir: string
  image: ResolvedImage
  uid: number
  gid: number
  layout: CgroupLayout
}

/** argv of the container: Kubernetes semantics for command/args over image entrypoint/cmd. */
export function containerArgv(spec: ContainerRunSpec, image: ResolvedImage): string[] {
  const command = spec.command ?? []
  const args = spec.args ?? []
  const argv = command.length > 0 ? [...command, ...args] : [...image.config.entrypoint, ...(args.length > 0 ? args : image.config.cmd)]
  if (argv.length === 0) throw new OrcError('invalid', `container ${spec.id}: no command given and the image has none`)
  return argv
}

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

export function containerEnv(spec: ContainerRunSpec, image: ResolvedImage): Record<string, string> {
  return { PATH: DEFAULT_PATH, HOME: '/', ...image.config.env, ...spec.env }
}

/**
 * The `sh` script every container runs under: its child joins the container's cgroups and execs the
 * runtime; the script writes the exit status to a file, so an agent that restarted still learns how
 * an adopted container ended. With a fence, the payload runs in the background beside a watchdog
 * loop that checks the lease once a second (ContainerRunSpec.fence): past ORC_FENCE_TERM seconds
 * it sends SIGTERM (once) to what is in the container's cgroups, or the payload when there are
 * none; past ORC_FENCE_KILL, SIGKILL to the payload's whole process tree and the cgroups. Either
 * leaves an `exit.fenced` file (the lease's age) beside the exit file.
 */
export function wrapperScript(shPath: string, fenced: boolean): string {
  const payload = `ORC_CGROUPS="$c" ${shPath} -c 'for f in $ORC_CGROUPS; do echo $$ > "$f" || exit 125; done; unset ORC_CGROUPS; exec "$@"' orc-payload "$@"`
  const head = `x="$ORC_EXIT"; c="$ORC_CGROUPS"; l="$ORC_LEASE"; ft="$ORC_FENCE_TERM"; fk="$ORC_FENCE_KILL"; unset ORC_EXIT ORC_CGROUPS ORC_LEASE ORC_FENCE_TERM ORC_FENCE_KILL; `
  if (!fenced) return `${head}${payload}; code=$?; echo "$code" > "$x"; exit "$code"`
  const watchdog =
    `kt() { for k in $(pgrep -P "$1"); do kt "$k" "$2"; done; kill -"$2" "$1" 2>/dev/null; }; ` +
    `cg() { for f in $c; do for q in $(cat "$f" 2>/dev/null); do kill -"$1" "$q" 2>/dev/null; done; done; }; ` +
    `(termed=; while sleep 1; do t=0; { read -r t < "$l"; } 2>/dev/null || t=0; case "$t" in ''|*[!0-9]*) t=0;; esac; a=$(( $(date +%s) - t )); ` +
    `if [ "$a" -ge "$fk" ]; then echo "$a" > "$x.fenced"; cg KILL; kt "$p" KILL; exit 0; fi; ` +
    `if [ "$a" -ge "$ft" ] && [ -z "$termed" ]; then termed=1; echo "$a" > "$x.fenced"; if [ -n "$c" ]; then cg TERM; else kill -TERM "$p" 2>/dev/null; fi; fi; done) & w=$!; `
  return `${head}${payload} & p=$!; ${watchdog}wait "$p"; code=$?; kill "$w" 2>/dev/null; echo "$code" > "$x"; exit "$code"`
}

/** The wrapper's watchdog settings (wrapperScript with `fenced`), for its environment; none without a fence. */
export function fenceEnv(fence: ContainerFence | undefined): Record<string, string> {
  if (fence === undefined) return {}
  return {
    ORC_LEASE: fence.leaseFile,
    ORC_FENCE_TERM: String(Math.max(0, Math.floor(fence.termAfterSeconds))),
    ORC_FENCE_KILL: String(Math.max(0, Math.floor(fence.killAfterSeconds))),
  }
}

/** Decode the wrapper's exit status (sh reports death by signal N as 128+N). */
export function decodeExitCode(code: number): { code: number | null; signal: NodeJS.Signals | null } {
  if (code > 128 && code < 128 + 65) {
    const name = Object.entries(osConstants.signals as unknown as Record<string, number>).find(([, n]) => n === code - 128)?.[0]
    if (name) return { code: null, signal: name as NodeJS.Signals }
  }
  return { code, signal: null }
}

interface Live {
  rec: ContainerRecord
  exited: Promise<ExitStatus>
  resolve: (e: ExitStatus) => void
  /** Stops the liveness poll of an adopted process. */
  poll?: () => void
  watcher?: FSWatcher
}

export abstract class SupervisedRuntime implements Runtime {
  abstract readonly name: 'sandbox' | 'oci' | 'gvisor'
  protected readonly opts: RuntimeOptions
  protected readonly log: RuntimeOptions['logger']
  private readonly live = new Map<string, Live>()
  private readonly listeners = new Set<ExitListener>()
  private rotateTimer: (() => void) | undefined
  private layoutCache: CgroupLayout | undefined
  private closed = false

  constructor(input: RuntimeOptionsInput) {
    this.opts = resolveOptions(input)
    this.log = this.opts.logger.child({ module: 'runtime' })
    // Unpacked images live below; the unprivileged container uid must be able to traverse to them.
    mkdirSync(this.opts.imageCacheDir!, { recursive: true, mode: 0o711 })
    for (const d of [this.opts.stateDir, this.opts.imageCacheDir!]) {
      try {
        chmodSync(d, 0o711)
      } catch {}
    }
  }

  protected abstract plan(spec: ContainerRunSpec, ctx: PlanContext): Promise<LaunchPlan>
  abstract hostIdsOf(spec: Pick<ContainerRunSpec, 'uid' | 'gid' | 'rootInside'>): { uid: number; gid: number }
  /** Deliver a graceful signal to the container's main process. */
  protected abstract signalMain(rec: ContainerRecord, signal: NodeJS.Signals): Promise<void>
  /** How to launch `spec` inside running container `rec` (argv run on the host, and its environment). */
  protected abstract execLaunch(rec: ContainerRecord, spec: ExecSpec): Promise<Omit<ExecLaunch, 'tty' | 'rows' | 'cols'>>
  /** A host pid inside the container's namespaces (its main process), or undefined when there is none. */
  protected abstract namespacePid(rec: ContainerRecord): Promise<number | undefined>
  /** Runtime-specific cleanup after the container ended (e.g. runc delete). */
  protected async cleanup(_rec: ContainerRecord): Promise<void> {}

  protected containersDir(): string {
    return join(this.opts.stateDir, this.name, 'containers')
  }

  /**
   * Name of this runtime's cgroup below the agent's own: unique per state dir and runtime, so two
   * agents on one host (the testbed) or the two runtimes of one agent never share a cgroup.
   */
  protected cgroupName(): string {
    return `orc-${this.name}-${createHash('sha256').update(this.opts.stateDir).digest('hex').slice(0, 8)}`
  }

  protected containerDir(id: string): string {
    return join(this.containersDir(), id)
  }

  protected cgroupLayout(): CgroupLayout {
    this.layoutCache ??= detectCgroupLayout(undefined, undefined, this.cgroupName())
    return this.layoutCache
  }

  private persist(rec: ContainerRecord): void {
    const dir = this.containerDir(rec.id)
    writeFileSync(join(dir, 'record.json.tmp'), JSON.stringify(rec))
    renameSync(join(dir, 'record.json.tmp'), join(dir, 'record.json'))
  }

  async start(spec: ContainerRunSpec): Promise<ContainerHandle> {
    if (this.closed) throw new OrcError('unavailable', `runtime ${this.name} is closed`)
    mkdirSync(this.containersDir(), { recursive: true })
    if (!ID_PATTERN.test(spec.id)) throw new OrcError('invalid', `container id ${JSON.stringify(spec.id)} must match ${ID_PATTERN}`)
    const dir = this.containerDir(spec.id)
    if (this.live.has(spec.id) || existsSync(join(dir, 'record.json'))) {
      throw new OrcError('conflict', `container ${spec.id} already exists`, { id: spec.id })
    }
    const image = resolveImage(spec.image, this.opts.imageCacheDir!)
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    const revision = spec.revision ?? 0
    const uid = spec.uid ?? this.opts.uid
    const gid = spec.gid ?? this.opts.gid
    let plan: LaunchPlan
    try {
      plan = await this.plan(spec, { dir, image, uid, gid, layout: this.cgroupLayout() })
    } catch (err) {
      rmSync(dir, { recursive: true, force: true })
      throw wrapError(`start container ${spec.id}`, err)
    }
    const logFd = openLogFile(spec.logDir, revision)
    const exitFile = join(dir, 'exit')
    // The wrapper stays outside the container's cgroups; its child joins them, then execs.
    const script = wrapperScript(this.opts.shPath, spec.fence !== undefined)
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? DEFAULT_PATH,
      ORC_EXIT: exitFile,
      ORC_CGROUPS: plan.cgroupProcs.join(' '),
      ...fenceEnv(spec.fence),
    }
    let spawned
    try {
      spawned = this.opts.spawn({
        file: this.opts.shPath,
        args: ['-c', script, 'orc-wrapper', plan.file, ...plan.args],
        env,
        fds: [null, logFd, logFd, ...plan.extraFds],
        ...(plan.inputs ? { inputs: plan.inputs } : {}),
        cwd: dir,
      })
    } finally {
      closeSync(logFd)
      for (const fd of plan.extraFds) closeSync(fd)
    }
    if (spawned.pid === 0) {
      removeContainerCgroups(plan.cgroupDirs)
      rmSync(dir, { recursive: true, force: true })
      throw new OrcError('internal', `start container ${spec.id}: cannot spawn ${this.opts.shPath}`)
    }
    const stat = readProcStat(spawned.pid)
    const rec: ContainerRecord = {
      id: spec.id,
      runtime: this.name,
      pid: spawned.pid,
      startTicks: stat?.startTicks ?? -1,
      startedAt: this.opts.clock.now(),
      revision,
      image: spec.image,
      logDir: spec.logDir,
      enforced: plan.enforced,
      cgroupDirs: plan.cgroupDirs,
      extra: plan.extra,
    }
    this.persist(rec)
    const live = this.track(rec)
    spawned.exit.then((raw) => {
      const decoded = raw.signal ? { code: null, signal: raw.signal } : decodeExitCode(raw.code ?? 1)
      void this.finish(live, decoded)
    })
    this.log.info({ id: rec.id, pid: rec.pid, revision, runtime: this.name, enforced: rec.enforced }, 'container started')
    return this.handle(live)
  }

  private track(rec: ContainerRecord): Live {
    let resolve!: (e: ExitStatus) => void
    const exited = new Promise<ExitStatus>((r) => (resolve = r))
    const live: Live = { rec, exited, resolve }
    this.live.set(rec.id, live)
    if (rec.exit) {
      resolve(rec.exit)
      return live
    }
    try {
      mkdirSync(rec.logDir, { recursive: true })
      live.watcher = watch(rec.logDir, () => this.rotate(live))
      live.watcher.on('error', () => {})
    } catch {}
    this.ensureRotateTimer()
    return live
  }

  private rotate(live: Live): void {
    if (live.rec.exit && live.watcher === undefined) return
    try {
      rotateIfNeeded(live.rec.logDir, live.rec.revision, this.opts.logs)
    } catch (err) {
      this.log.warn({ id: live.rec.id, err: String(err) }, 'log rotation failed')
    }
  }

  private ensureRotateTimer(): void {
    if (this.rotateTimer || this.closed) return
    // Watching must not keep the agent's process alive.
    this.rotateTimer = every(unrefTimers(this.opts.clock), this.opts.logs.checkIntervalMs, () => {
      for (const l of this.live.values()) if (!l.rec.exit) this.rotate(l)
    })
  }

  /** Poll /proc for an adopted process: it is not our child, so no exit event reaches us. */
  private watchAdopted(live: Live): void {
    const tick = () => {
      if (!isSameProcessAlive(live.rec.pid, live.rec.startTicks)) void this.finish(live, this.readExitFile(live.rec.id))
    }
    live.poll = every(unrefTimers(this.opts.clock), this.opts.pollIntervalMs, tick)
  }

  private readExitFile(id: string): { code: number | null; signal: NodeJS.Signals | null } | undefined {
    try {
      const text = readFileSync(join(this.containerDir(id), 'exit'), 'utf8').trim()
      if (text === '') return undefined
      return decodeExitCode(Number(text))
    } catch {
      return undefined
    }
  }

  private async finish(live: Live, raw: { code: number | null; signal: NodeJS.Signals | null } | undefined): Promise<void> {
    // after close() this instance is as good as dead: a new agent re-adopts from the state dir
    if (live.rec.exit || this.closed) return
    const exit: ExitStatus = { code: raw?.code ?? null, signal: raw?.signal ?? null, finishedAt: this.opts.clock.now() }
    live.rec.exit = exit
    live.poll?.()
    // a last rotation check, then stop watching
    this.rotate(live)
    live.watcher?.close()
    live.watcher = undefined
    // stragglers (e.g. a daemonized child that escaped the pid namespace init) die with the container
    for (const pid of cgroupPids(live.rec.cgroupDirs)) signalPid(pid, 'SIGKILL')
    try {
      await this.cleanup(live.rec)
    } catch (err) {
      this.log.warn({ id: live.rec.id, err: String(err) }, 'container cleanup failed')
    }
    // processes leave a cgroup a moment after they are reaped: retry briefly
    for (let i = 0; i < 50 && removeContainerCgroups(live.rec.cgroupDirs).length > 0; i++) await sleep(this.opts.clock, 10)
    try {
      if (existsSync(this.containerDir(live.rec.id))) this.persist(live.rec)
    } catch {}
    this.log.info({ id: live.rec.id, code: exit.code, signal: exit.signal }, 'container exited')
    live.resolve(exit)
    for (const l of this.listeners) {
      try {
        l(live.rec.id, exit)
      } catch (err) {
        this.log.error({ err: String(err) }, 'exit listener threw')
      }
    }
  }

  private handle(live: Live): ContainerHandle {
    return {
      id: live.rec.id,
      pid: live.rec.pid,
      startedAt: live.rec.startedAt,
      exited: live.exited,
      status: () => this.toStatus(live.rec),
    }
  }

  private toStatus(rec: ContainerRecord): ContainerStatus {
    const unknown = rec.exit !== undefined && rec.exit.code === null && rec.exit.signal === null
    return {
      id: rec.id,
      state: rec.exit === undefined ? 'running' : unknown ? 'unknown' : 'exited',
      pid: rec.pid,
      startedAt: rec.startedAt,
      exit: rec.exit,
      revision: rec.revision,
      image: rec.image,
      enforced: rec.enforced,
    }
  }

  /** Kill the whole tree: descendants of the wrapper and everything in the container's cgroups. */
  protected killTree(rec: ContainerRecord): void {
    const pids = new Set([...descendants(rec.pid), ...cgroupPids(rec.cgroupDirs)])
    for (const pid of pids) signalPid(pid, 'SIGKILL')
  }

  async stop(id: string, opts: StopOptions = {}): Promise<ExitStatus> {
    const live = this.live.get(id)
    if (!live) throw new OrcError('not_found', `container ${id} not found`, { id })
    if (live.rec.exit) return live.rec.exit
    const graceMs = opts.graceMs ?? 10_000
    try {
      await this.signalMain(live.rec, 'SIGTERM')
    } catch (err) {
      this.log.warn({ id, err: String(err) }, 'graceful signal failed')
    }
    if (await settlesWithin(this.opts.clock, live.exited, graceMs)) return live.exited
    this.log.info({ id, graceMs }, 'container ignored SIGTERM, killing')
    this.killTree(live.rec)
    if (await settlesWithin(this.opts.clock, live.exited, 10_000)) return live.exited
    throw new OrcError('internal', `stop container ${id}: still running 10 s after SIGKILL`, { id, pid: live.rec.pid })
  }

  async remove(id: string): Promise<void> {
    const live = this.live.get(id)
    if (live && !live.rec.exit) throw new OrcError('conflict', `container ${id} is running; stop it first`, { id })
    if (live) removeContainerCgroups(live.rec.cgroupDirs)
    this.live.delete(id)
    rmSync(this.containerDir(id), { recursive: true, force: true })
  }

  async execStream(id: string, spec: ExecSpec): Promise<ExecProcess> {
    const live = this.live.get(id)
    if (!live) throw new OrcError('not_found', `container ${id} not found`, { id })
    if (live.rec.exit) throw new OrcError('conflict', `container ${id} is not running`, { id })
    if (spec.command.length === 0) throw new OrcError('invalid', 'exec needs a command')
    const launch = await this.execLaunch(live.rec, spec)
    const tty = spec.tty === true
    this.log.info({ id, tty, program: spec.command[0] }, 'exec started')
    return spawnExec({
      ...launch,
      tty,
      ...(spec.rows !== undefined ? { rows: spec.rows } : {}),
      ...(spec.cols !== undefined ? { cols: spec.cols } : {}),
      ...(tty ? { scriptPath: resolveBinary('script'), sttyPath: resolveBinary('stty') } : {}),
    })
  }

  async connectPort(id: string, port: number): Promise<ExecProcess> {
    const live = this.live.get(id)
    if (!live) throw new OrcError('not_found', `container ${id} not found`, { id })
    if (live.rec.exit) throw new OrcError('conflict', `container ${id} is not running`, { id })
    const pid = await this.namespacePid(live.rec)
    if (pid === undefined) throw new OrcError('conflict', `container ${id} has no running process to reach its network from`, { id })
    const argv = connectPortArgv(this.opts.nsenterPath, pid, port, process.getuid?.() === 0)
    return spawnExec({ argv, env: { PATH: process.env.PATH ?? DEFAULT_PATH }, tty: false })
  }

  /** The cgroup directories that account the container (the sandbox's own; runc's, found from its process). */
  protected async accountingDirs(rec: ContainerRecord): Promise<string[]> {
    return rec.cgroupDirs
  }

  async usage(id: string): Promise<ContainerUsage | undefined> {
    const live = this.live.get(id)
    if (!live || live.rec.exit) return undefined
    return readCgroupUsage(await this.accountingDirs(live.rec))
  }

  async exec(id: string, opts: ExecRunOptions): Promise<ExecResult> {
    return runExec(await this.execStream(id, opts), opts, this.opts.clock)
  }

  status(id: string): ContainerStatus | undefined {
    const live = this.live.get(id)
    return live ? this.toStatus(live.rec) : undefined
  }

  list(): ContainerStatus[] {
    return [...this.live.values()].map((l) => this.toStatus(l.rec)).sort((a, b) => byCodeUnits(a.id, b.id))
  }

  async recover(): Promise<RecoverResult> {
    const adopted: ContainerHandle[] = []
    const gone: ContainerStatus[] = []
    let ids: string[] = []
    try {
      ids = readdirSync(this.containersDir())
    } catch {}
    for (const id of ids.sort()) {
      if (this.live.has(id)) continue
      let rec: ContainerRecord
      try {
        rec = JSON.parse(readFileSync(join(this.containerDir(id), 'record.json'), 'utf8')) as ContainerRecord
      } catch {
        // a start interrupted before its record was written: nothing to adopt
        rmSync(this.containerDir(id), { recursive: true, force: true })
        continue
      }
      if (rec.runtime !== this.name) continue
      if (!rec.exit && isSameProcessAlive(rec.pid, rec.startTicks)) {
        const live = this.track(rec)
        this.watchAdopted(live)
        adopted.push(this.handle(live))
        this.log.info({ id, pid: rec.pid }, 'container adopted')
        continue
      }
      const live = this.track({ ...rec })
      if (!rec.exit) await this.finish(live, this.readExitFile(id))
      gone.push(this.toStatus(live.rec))
    }
    return { adopted, gone }
  }

  onExit(listener: ExitListener): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  async close(): Promise<void> {
    this.closed = true
    this.rotateTimer?.()
    for (const l of this.live.values()) {
      l.poll?.()
      l.watcher?.close()
    }
  }

  /** Open a file in the container's state dir for a child fd. */
  protected openStateFile(dir: string, name: string, flags: 'r' | 'w'): number {
    return openSync(join(dir, name), flags, 0o600)
  }
}

function settlesWithin(clock: Clock, p: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const t = clock.setTimeout(() => resolve(false), ms)
    p.then(() => {
      clock.clearTimeout(t)
      resolve(true)
    })
  })
}
