/**
 * An in-memory Runtime for unit tests of the agent and controllers: no processes; the test decides
 * when a container exits (`exit(id, code)`) and what a recover() after a "restart" finds.
 */
import { PassThrough } from 'node:stream'
import { type Clock, systemClock } from '../effects/index.ts'
import { byCodeUnits, OrcError } from '../model/index.ts'
import { runExec } from './exec.ts'
import type {
  ContainerHandle,
  ContainerRunSpec,
  ContainerStatus,
  ContainerUsage,
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

/** What a fake exec does: given the command and everything written to stdin, its exit code and output. */
export type FakeExecHandler = (id: string, spec: ExecSpec, stdin: Buffer) => { code: number; stdout?: string; stderr?: string }

/**
 * The fake's default exec: `echo ARGS` prints them, `cat` echoes stdin, `exit N` ends with N, `env`
 * prints the container's environment; anything else prints nothing and exits 0.
 */
function defaultExec(spec: ContainerRunSpec): FakeExecHandler {
  return (_id, e, stdin) => {
    const [cmd, ...args] = e.command
    if (cmd === 'echo') return { code: 0, stdout: `${args.join(' ')}\n` }
    if (cmd === 'cat') return { code: 0, stdout: stdin.toString('utf8') }
    if (cmd === 'exit') return { code: Number(args[0] ?? 0) }
    if (cmd === 'env') {
      const env = { ...spec.env, ...e.env }
      return {
        code: 0,
        stdout: Object.entries(env)
          .map(([k, v]) => `${k}=${v}\n`)
          .join(''),
      }
    }
    return { code: 0 }
  }
}

interface FakeContainer {
  spec: ContainerRunSpec
  status: ContainerStatus
  exited: Promise<ExitStatus>
  resolve: (e: ExitStatus) => void
  /** Does the container honour SIGTERM? Default true. */
  honoursTerm: boolean
}

export class FakeRuntime implements Runtime {
  readonly name = 'fake' as const
  readonly started: ContainerRunSpec[] = []
  readonly stopped: { id: string; graceMs?: number; killed: boolean }[] = []
  private readonly containers = new Map<string, FakeContainer>()
  private readonly listeners = new Set<ExitListener>()
  private nextPid = 1000
  /** Make the next start() of this id fail with the given error. */
  readonly failNext = new Map<string, Error>()

  /** Set to decide what exec does (default: defaultExec); `execs` records each call. */
  execHandler: FakeExecHandler | undefined
  readonly execs: { id: string; spec: ExecSpec }[] = []

  constructor(private readonly clock: Pick<Clock, 'now'> = { now: () => 0 }) {}

  async execStream(id: string, spec: ExecSpec): Promise<ExecProcess> {
    const c = this.containers.get(id)
    if (!c) throw new OrcError('not_found', `container ${id} not found`, { id })
    if (c.status.state !== 'running') throw new OrcError('conflict', `container ${id} is not running`, { id })
    if (spec.command.length === 0) throw new OrcError('invalid', 'exec needs a command')
    this.execs.push({ id, spec })
    const stdin = new PassThrough()
    const stdout = new PassThrough()
    const stderr = new PassThrough()
    const chunks: Buffer[] = []
    let killed: NodeJS.Signals | undefined
    let done!: (e: { code: number | null; signal: NodeJS.Signals | null }) => void
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => (done = r))
    stdin.on('data', (b: Buffer) => chunks.push(b))
    stdin.on('end', () => {
      if (killed) return
      const r = (this.execHandler ?? defaultExec(c.spec))(id, spec, Buffer.concat(chunks))
      stdout.end(r.stdout ?? '')
      stderr.end(r.stderr ?? '')
      done({ code: r.code, signal: null })
    })
    return {
      stdin,
      stdout,
      stderr,
      exited,
      kill: (signal: NodeJS.Signals = 'SIGKILL') => {
        if (killed) return
        killed = signal
        stdout.end()
        stderr.end()
        done({ code: null, signal })
      },
    }
  }

  /** Ports the fake "listens" on: what is written comes back (an echo server). Default: every port. */
  openPorts: Set<number> | undefined

  async connectPort(id: string, port: number): Promise<ExecProcess> {
    const c = this.containers.get(id)
    if (!c) throw new OrcError('not_found', `container ${id} not found`, { id })
    if (c.status.state !== 'running') throw new OrcError('conflict', `container ${id} is not running`, { id })
    const stdin = new PassThrough()
    const stdout = new PassThrough()
    const stderr = new PassThrough()
    let done!: (e: { code: number | null; signal: NodeJS.Signals | null }) => void
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => (done = r))
    if (this.openPorts !== undefined && !this.openPorts.has(port)) {
      stdout.end()
      stderr.end(`connect to port ${port}: connection refused\n`)
      done({ code: 1, signal: null })
    } else {
      stdin.pipe(stdout)
      stdin.on('end', () => {
        stderr.end()
        done({ code: 0, signal: null })
      })
    }
    return { stdin, stdout, stderr, exited, kill: () => stdin.end() }
  }

  /** Test control: what usage() reports per container id (default: zeros while running). */
  readonly usages = new Map<string, ContainerUsage>()

  async usage(id: string): Promise<ContainerUsage | undefined> {
    const c = this.containers.get(id)
    if (c?.status.state !== 'running') return undefined
    return this.usages.get(id) ?? { cpuSeconds: 0, memoryBytes: 0 }
  }

  async exec(id: string, opts: ExecRunOptions): Promise<ExecResult> {
    return runExec(await this.execStream(id, opts), opts, systemClock)
  }

  /** The agent's own ids: files it writes need no other owner. */
  hostIdsOf(): { uid: number; gid: number } {
    return { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 }
  }

  async start(spec: ContainerRunSpec): Promise<ContainerHandle> {
    const err = this.failNext.get(spec.id)
    if (err) {
      this.failNext.delete(spec.id)
      throw err
    }
    if (this.containers.has(spec.id)) throw new OrcError('conflict', `container ${spec.id} already exists`, { id: spec.id })
    let resolve!: (e: ExitStatus) => void
    const exited = new Promise<ExitStatus>((r) => (resolve = r))
    const status: ContainerStatus = {
      id: spec.id,
      state: 'running',
      pid: this.nextPid++,
      startedAt: this.clock.now(),
      revision: spec.revision ?? 0,
      image: spec.image,
      enforced: {},
    }
    const c: FakeContainer = { spec, status, exited, resolve, honoursTerm: true }
    this.containers.set(spec.id, c)
    this.started.push(spec)
    return this.handle(c)
  }

  private handle(c: FakeContainer): ContainerHandle {
    return { id: c.spec.id, pid: c.status.pid, startedAt: c.status.startedAt, exited: c.exited, status: () => ({ ...c.status }) }
  }

  /** Test control: the container ends with `code` (or `signal`). */
  exit(id: string, code: number | null, signal: NodeJS.Signals | null = null): void {
    const c = this.containers.get(id)
    if (c?.status.state !== 'running') return
    const exit: ExitStatus = { code, signal, finishedAt: this.clock.now() }
    c.status = { ...c.status, state: 'exited', exit }
    c.resolve(exit)
    for (const l of this.listeners) l(id, exit)
  }

  /** Test control: make a container ignore SIGTERM so stop() ends in SIGKILL. */
  ignoreTerm(id: string): void {
    const c = this.containers.get(id)
    if (c) c.honoursTerm = false
  }

  async stop(id: string, opts: StopOptions = {}): Promise<ExitStatus> {
    const c = this.containers.get(id)
    if (!c) throw new OrcError('not_found', `container ${id} not found`, { id })
    if (c.status.exit) return c.status.exit
    this.stopped.push({ id, graceMs: opts.graceMs, killed: !c.honoursTerm })
    if (c.honoursTerm) this.exit(id, null, 'SIGTERM')
    else this.exit(id, null, 'SIGKILL')
    return c.status.exit!
  }

  async remove(id: string): Promise<void> {
    const c = this.containers.get(id)
    if (c && c.status.state === 'running') throw new OrcError('conflict', `container ${id} is running; stop it first`, { id })
    this.containers.delete(id)
  }

  status(id: string): ContainerStatus | undefined {
    const c = this.containers.get(id)
    return c ? { ...c.status } : undefined
  }

  list(): ContainerStatus[] {
    return [...this.containers.values()].map((c) => ({ ...c.status })).sort((a, b) => byCodeUnits(a.id, b.id))
  }

  async recover(): Promise<RecoverResult> {
    const adopted: ContainerHandle[] = []
    const gone: ContainerStatus[] = []
    for (const c of this.containers.values()) {
      if (c.status.state === 'running') adopted.push(this.handle(c))
      else gone.push({ ...c.status })
    }
    return { adopted, gone }
  }

  onExit(listener: ExitListener): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  async close(): Promise<void> {}
}
