/**
 * `orc exec` and `orc port-forward` on the node that runs the pod: each is a session holding a
 * runtime process (an exec, or a connection into the pod's network namespace). The client drives
 * it with request/answer exchanges — write stdin, long-poll for output — so the same routes work
 * on the unix socket, the remote API and the member API that carries them from any node to this
 * one, like log follows (docs/decisions.md: request-driven sessions instead of a stream protocol).
 *
 * A session belongs to the principal that opened it: another user cannot read or write it even with
 * the id. A session nobody polled for `idleMs` is killed; output waits in a bounded buffer and the
 * process is paused (backpressure) while the buffer is full.
 */
import { type Clock, every, type Random, randomHex, unrefTimers } from '../../effects/index.ts'
import { OrcError, type Pod, type Principal } from '../../model/index.ts'
import { type ExecProcess, endOf, type Runtime, type RuntimeKind } from '../../runtime/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import type { RouteHandlers } from '../router.ts'
import type { ExecStartBody, PodStreamIoAnswer, PodStreamOpened, PortForwardStartBody } from '../routes.ts'
import { assignedTo, containerIdOf, podSpecOf } from './spec.ts'

export interface PodStreamsComponents {
  store: Pick<ObjectStore, 'get'>
  nodeName: string
  /**
   * A shared namespace's store and this node's name there (`nodeName@cluster`): its pods are found
   * and placed there (docs/federation.md). Undefined for the cluster's own namespaces.
   */
  scopeOf?(ns: string): { store: Pick<ObjectStore, 'get'>; nodeName: string } | undefined
  /** The runtime a pod's containers run in (the lifecycle's). */
  runtime(kind: RuntimeKind): Runtime
  clock: Clock
  random: Random
  log?: { info(o: object, msg: string): void }
  /** Kill a session nobody polled for this long (default 60 s). */
  idleMs?: number
  /** Buffered output per session before the process is paused (default 1 MiB). */
  maxBufferBytes?: number
}

const MAX_WAIT_MS = 20_000
const DEFAULT_WAIT_MS = 10_000
const MAX_SESSIONS = 256
const MAX_COMMAND_BYTES = 64 * 1024
/** Most bytes of stdin one exchange may carry (base64 decoded). */
const MAX_STDIN_BYTES = 1 << 20

interface Session {
  id: string
  kind: 'exec' | 'portforward' | 'console'
  owner: string
  pod: string
  proc: ExecProcess
  out: Buffer[]
  err: Buffer[]
  buffered: number
  exit?: { code: number | null; signal: string | null }
  lastPoll: number
  wake: (() => void)[]
  paused: boolean
}

function ownerOf(p: Principal | undefined): string {
  if (p === undefined) return 'anonymous'
  return p.kind === 'user' ? `user:${p.name}` : `node:${p.peerId}`
}

function podKey(ns: string, name: string, uid: string): string {
  return `${ns}/${name}/${uid}`
}

export class PodStreams {
  private readonly sessions = new Map<string, Session>()
  private readonly idleMs: number
  private readonly maxBuffer: number
  private stopReaper: (() => void) | undefined

  constructor(private readonly c: PodStreamsComponents) {
    this.idleMs = c.idleMs ?? 60_000
    this.maxBuffer = c.maxBufferBytes ?? 1 << 20
  }

  /** The pod (running here) and the runtime id of one of its containers. */
  private target(ns: string, name: string, container: string | undefined): { pod: Stored<Pod>; runtime: Runtime; id: string; container: string } {
    const scope = this.c.scopeOf?.(ns)
    const self = scope?.nodeName ?? this.c.nodeName
    const pod = (scope?.store ?? this.c.store).get({ kind: 'Pod', namespace: ns, name })
    if (pod === undefined) throw new OrcError('not_found', `pod/${name} in namespace ${ns} not found`, { kind: 'Pod', namespace: ns, name })
    if (!assignedTo(pod, self)) {
      throw new OrcError('unavailable', `pod/${name} does not run on node ${self}`, { kind: 'Pod', namespace: ns, name, node: self })
    }
    const spec = podSpecOf(pod)
    const cname = container ?? spec.containers[0]?.name
    const cs = spec.containers.find((x) => x.name === cname)
    if (cname === undefined || cs === undefined) {
      throw new OrcError('not_found', `pod/${name} has no container ${JSON.stringify(cname)} (it has: ${spec.containers.map((x) => x.name).join(', ')})`, {
        kind: 'Pod',
        namespace: ns,
        name,
      })
    }
    const runtime = this.c.runtime(spec.runtime)
    const id = containerIdOf(pod.metadata.uid, cname)
    const st = runtime.status(id)
    if (st === undefined || st.state !== 'running') {
      throw new OrcError('conflict', `container ${cname} of pod/${name} is not running on node ${this.c.nodeName}`, { kind: 'Pod', namespace: ns, name })
    }
    return { pod, runtime, id, container: cname }
  }

  private open(kind: Session['kind'], principal: Principal | undefined, pod: Stored<Pod>, proc: ExecProcess): string {
    return this.attach(kind, principal, { namespace: pod.metadata.namespace ?? 'default', name: pod.metadata.name, uid: pod.metadata.uid }, proc)
  }

  /** Sessions open on `kind` of object NS/NAME/UID (a VM's console is one at a time: vms/console.ts). */
  openOn(kind: Session['kind'], namespace: string, name: string): { owner: string }[] {
    const key = podKey(namespace, name, '')
    return [...this.sessions.values()].filter((s) => s.kind === kind && s.pod.startsWith(key)).map((s) => ({ owner: s.owner }))
  }

  /**
   * Hold `proc` as a session of `principal` about object `of` (a pod's exec or port-forward, a VM's
   * console), driven by io() as the others are. Returns the session id.
   */
  attach(kind: Session['kind'], principal: Principal | undefined, of: { namespace: string; name: string; uid: string }, proc: ExecProcess): string {
    if (this.sessions.size >= MAX_SESSIONS) {
      proc.kill()
      throw new OrcError('unavailable', `node ${this.c.nodeName} has ${MAX_SESSIONS} exec/port-forward sessions open; try again later`)
    }
    this.ensureReaper()
    const id = randomHex(this.c.random, 16)
    const s: Session = {
      id,
      kind,
      owner: ownerOf(principal),
      pod: podKey(of.namespace, of.name, of.uid),
      proc,
      out: [],
      err: [],
      buffered: 0,
      lastPoll: this.c.clock.now(),
      wake: [],
      paused: false,
    }
    const take = (into: 'out' | 'err') => (chunk: Buffer | string) => {
      const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk)
      s[into].push(b)
      s.buffered += b.length
      if (s.buffered >= this.maxBuffer && !s.paused) {
        s.paused = true
        proc.stdout.pause()
        proc.stderr.pause()
      }
      this.wakeAll(s)
    }
    proc.stdout.on('data', take('out'))
    proc.stderr.on('data', take('err'))
    // The exit is reported with the last output: wait for both streams to end too.
    void Promise.all([proc.exited, endOf(proc.stdout), endOf(proc.stderr)]).then(([e]) => {
      s.exit = { code: e.code, signal: e.signal }
      this.wakeAll(s)
    })
    this.sessions.set(id, s)
    this.c.log?.info({ session: id, kind, pod: s.pod, owner: s.owner }, 'pod session opened')
    return id
  }

  private wakeAll(s: Session): void {
    const w = s.wake
    s.wake = []
    for (const f of w) f()
  }

  private ensureReaper(): void {
    if (this.stopReaper) return
    this.stopReaper = every(unrefTimers(this.c.clock), Math.min(10_000, this.idleMs), () => {
      const now = this.c.clock.now()
      for (const s of this.sessions.values()) {
        if (s.wake.length === 0 && now - s.lastPoll > this.idleMs) this.end(s, 'idle')
      }
    })
  }

  private end(s: Session, why: string): void {
    s.proc.kill()
    this.sessions.delete(s.id)
    this.wakeAll(s)
    this.c.log?.info({ session: s.id, kind: s.kind, pod: s.pod, why }, 'pod session ended')
  }

  async startExec(principal: Principal | undefined, ns: string, name: string, body: unknown): Promise<PodStreamOpened> {
    const b = parseExecBody(body)
    const t = this.target(ns, name, b.container)
    const proc = await t.runtime.execStream(t.id, {
      command: b.command,
      ...(b.tty ? { tty: true } : {}),
      ...(b.rows !== undefined ? { rows: b.rows } : {}),
      ...(b.cols !== undefined ? { cols: b.cols } : {}),
      ...(b.env !== undefined ? { env: b.env } : {}),
    })
    return { session: this.open('exec', principal, t.pod, proc), container: t.container, node: this.c.nodeName }
  }

  async startPortForward(principal: Principal | undefined, ns: string, name: string, body: unknown): Promise<PodStreamOpened> {
    const b = parsePortBody(body)
    const t = this.target(ns, name, b.container)
    const proc = await t.runtime.connectPort(t.id, b.port)
    return { session: this.open('portforward', principal, t.pod, proc), container: t.container, node: this.c.nodeName }
  }

  async io(kind: Session['kind'], principal: Principal | undefined, ns: string, name: string, id: string, body: unknown): Promise<PodStreamIoAnswer> {
    const b = parseIoBody(body)
    const s = this.sessions.get(id)
    // Someone else's session answers as a missing one: an id proves nothing.
    if (s === undefined || s.kind !== kind || s.owner !== ownerOf(principal) || !s.pod.startsWith(`${ns}/${name}/`)) {
      throw new OrcError(
        'not_found',
        `${kind} session ${id.slice(0, 32)} of ${kind === 'console' ? 'vm' : 'pod'}/${name} not found (ended, or idle for more than ${this.idleMs / 1000} s)`,
      )
    }
    s.lastPoll = this.c.clock.now()
    if (b.close) {
      this.end(s, 'closed by client')
      return { stdout: '', stderr: '', exit: s.exit ?? { code: null, signal: 'SIGKILL' } }
    }
    if (b.stdin !== undefined && b.stdin.length > 0) s.proc.stdin.write(b.stdin)
    if (b.eof) s.proc.stdin.end()
    if (!b.read) return { stdout: '', stderr: '' }
    if (s.out.length === 0 && s.err.length === 0 && s.exit === undefined) {
      const waitMs = Math.min(b.waitMs ?? DEFAULT_WAIT_MS, MAX_WAIT_MS)
      await new Promise<void>((resolve) => {
        const t = this.c.clock.setTimeout(() => {
          s.wake = s.wake.filter((f) => f !== done)
          resolve()
        }, waitMs)
        const done = () => {
          this.c.clock.clearTimeout(t)
          resolve()
        }
        s.wake.push(done)
      })
      // a little more of what is on its way, so an interactive echo comes in one answer
      if (s.exit === undefined && (s.out.length > 0 || s.err.length > 0)) await new Promise<void>((r) => this.c.clock.setTimeout(r, 5))
    }
    s.lastPoll = this.c.clock.now()
    const stdout = Buffer.concat(s.out)
    const stderr = Buffer.concat(s.err)
    s.out = []
    s.err = []
    s.buffered = 0
    if (s.paused) {
      s.paused = false
      s.proc.stdout.resume()
      s.proc.stderr.resume()
    }
    const answer: PodStreamIoAnswer = { stdout: stdout.toString('base64'), stderr: stderr.toString('base64') }
    if (s.exit !== undefined) {
      // the exit comes with the last output: the session is done
      answer.exit = s.exit
      this.sessions.delete(s.id)
      this.c.log?.info({ session: s.id, kind: s.kind, pod: s.pod, code: s.exit.code, signal: s.exit.signal }, 'pod session ended')
    }
    return answer
  }

  /** Kill every session (agent stop). */
  stop(): void {
    this.stopReaper?.()
    this.stopReaper = undefined
    for (const s of [...this.sessions.values()]) this.end(s, 'agent stopping')
  }

  get size(): number {
    return this.sessions.size
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function optInt(v: unknown, what: string, min: number, max: number): number | undefined {
  if (v === undefined) return undefined
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw new OrcError('invalid', `${what}: must be an integer in ${min}..${max}`)
  return v
}

function parseExecBody(body: unknown): ExecStartBody {
  if (!isRecord(body)) throw new OrcError('invalid', 'exec: the body must be an object with a command')
  const { command, container, tty, rows, cols, env } = body
  if (!Array.isArray(command) || command.length === 0 || !command.every((x) => typeof x === 'string')) {
    throw new OrcError('invalid', 'exec: command must be a non-empty list of strings')
  }
  if (command.some((x) => x.includes('\0')) || Buffer.byteLength(command.join(' ')) > MAX_COMMAND_BYTES) {
    throw new OrcError('invalid', `exec: command holds a NUL byte or is longer than ${MAX_COMMAND_BYTES} bytes`)
  }
  if (container !== undefined && typeof container !== 'string') throw new OrcError('invalid', 'exec: container must be a string')
  if (tty !== undefined && typeof tty !== 'boolean') throw new OrcError('invalid', 'exec: tty must be a boolean')
  let envOut: Record<string, string> | undefined
  if (env !== undefined) {
    if (!isRecord(env) || !Object.entries(env).every(([k, v]) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) && typeof v === 'string' && !v.includes('\0'))) {
      throw new OrcError('invalid', 'exec: env must map variable names to strings')
    }
    envOut = env as Record<string, string>
  }
  const r = optInt(rows, 'rows', 1, 1000)
  const c = optInt(cols, 'cols', 1, 1000)
  return {
    command: command as string[],
    ...(container !== undefined ? { container } : {}),
    ...(tty === true ? { tty } : {}),
    ...(r !== undefined ? { rows: r } : {}),
    ...(c !== undefined ? { cols: c } : {}),
    ...(envOut !== undefined ? { env: envOut } : {}),
  }
}

function parsePortBody(body: unknown): PortForwardStartBody {
  if (!isRecord(body)) throw new OrcError('invalid', 'port-forward: the body must be an object with a port')
  const port = optInt(body.port, 'port', 1, 65535)
  if (port === undefined) throw new OrcError('invalid', 'port-forward: port is required')
  if (body.container !== undefined && typeof body.container !== 'string') throw new OrcError('invalid', 'port-forward: container must be a string')
  return { port, ...(typeof body.container === 'string' ? { container: body.container } : {}) }
}

function parseIoBody(body: unknown): { stdin?: Buffer; eof: boolean; close: boolean; read: boolean; waitMs?: number } {
  const b = body === undefined || body === null ? {} : body
  if (!isRecord(b)) throw new OrcError('invalid', 'session exchange: the body must be an object')
  let stdin: Buffer | undefined
  if (b.stdin !== undefined) {
    if (typeof b.stdin !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(b.stdin)) throw new OrcError('invalid', 'session exchange: stdin must be base64')
    stdin = Buffer.from(b.stdin, 'base64')
    if (stdin.length > MAX_STDIN_BYTES) throw new OrcError('too_large', `session exchange: stdin is larger than ${MAX_STDIN_BYTES} bytes`)
  }
  const waitMs = optInt(b.waitMs, 'waitMs', 0, 60_000)
  return {
    ...(stdin !== undefined ? { stdin } : {}),
    eof: b.eof === true,
    close: b.close === true,
    read: b.read !== false,
    ...(waitMs !== undefined ? { waitMs } : {}),
  }
}

/** The routes of the sessions this node holds (wrapped by the forwarding proxy in a cluster). */
export function podStreamRoutes(streams: () => PodStreams) {
  return {
    podExec: ({ params, body, principal }) => streams().startExec(principal, params.ns, params.name, body),
    podExecIo: ({ params, body, principal }) => streams().io('exec', principal, params.ns, params.name, params.session, body),
    podPortForward: ({ params, body, principal }) => streams().startPortForward(principal, params.ns, params.name, body),
    podPortForwardIo: ({ params, body, principal }) => streams().io('portforward', principal, params.ns, params.name, params.session, body),
  } satisfies RouteHandlers
}
