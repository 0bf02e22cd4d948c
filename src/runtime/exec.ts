/**
 * Running a command inside a running container (`orc exec`): the process edge both real runtimes
 * share. The runtime decides the launcher (nsenter into a sandbox's namespaces, `runc exec`); this
 * file spawns it, wires its streams, optionally puts it on a pseudo-terminal (util-linux `script`)
 * and kills its whole tree on timeout or when the caller goes away.
 */
import { spawn } from 'node:child_process'
import { accessSync, constants, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import type { Clock } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import { descendants, signalPid } from './procfs.ts'
import type { ExecProcess, ExecResult, ExecRunOptions } from './types.ts'

export const DEFAULT_EXEC_TIMEOUT_MS = 60_000
export const DEFAULT_EXEC_OUTPUT_BYTES = 4 << 20

/** Quote one word for sh (single quotes; a quote inside becomes '\''). */
export function shellQuote(word: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`
}

/** Absolute path of `name` on the agent's PATH (launchers run before the container's PATH applies). */
export function resolveBinary(name: string, path = process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'): string {
  if (name.includes('/')) return name
  for (const dir of path.split(':')) {
    if (!dir) continue
    const p = join(dir, name)
    try {
      accessSync(p, constants.X_OK)
      return p
    } catch {}
  }
  throw new OrcError('unavailable', `${name} not found on the agent's PATH`, { binary: name })
}

/** The environment a process started with (/proc/PID/environ). */
export function readEnviron(pid: number, procRoot = '/proc'): Record<string, string> {
  const out: Record<string, string> = {}
  for (const kv of readFileSync(`${procRoot}/${pid}/environ`, 'utf8').split('\0')) {
    const eq = kv.indexOf('=')
    if (eq > 0) out[kv.slice(0, eq)] = kv.slice(eq + 1)
  }
  return out
}

/** The id a host uid/gid has inside the user namespace of `pid` (its uid_map/gid_map). */
export function idInside(pid: number, which: 'uid' | 'gid', hostId: number, procRoot = '/proc'): number | undefined {
  const map = readFileSync(`${procRoot}/${pid}/${which}_map`, 'utf8')
  for (const line of map.split('\n')) {
    const [inside, outside, count] = line.trim().split(/\s+/).map(Number)
    if (inside === undefined || outside === undefined || count === undefined || Number.isNaN(count)) continue
    if (hostId >= outside && hostId < outside + count) return inside + (hostId - outside)
  }
  return undefined
}

/** A host id of `pid` (real uid/gid, from /proc/PID/status as the host sees it). */
export function hostIdOf(pid: number, which: 'uid' | 'gid', procRoot = '/proc'): number {
  const key = which === 'uid' ? 'Uid:' : 'Gid:'
  const line = readFileSync(`${procRoot}/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(key))
  const v = Number(line?.split(/\s+/)[1])
  if (!Number.isInteger(v)) throw new OrcError('internal', `cannot read the ${which} of process ${pid}`)
  return v
}

export interface ExecLaunch {
  /** argv of the launcher (absolute program first). */
  argv: string[]
  /** Its environment (the container's, for nsenter; it passes it on to the command). */
  env: Record<string, string>
  tty: boolean
  rows?: number
  cols?: number
  /** Host binaries for the tty wrapper. */
  scriptPath?: string
  sttyPath?: string
  /** Called before the launcher's tree is killed (runsc: the command lives in the sandbox, not below the launcher). */
  beforeKill?: () => void
  /** Called once the launcher ended (removes what the launch wrote). */
  afterExit?: () => void
}

/**
 * Spawn the launcher. With a tty, `script` runs it on a fresh pseudo-terminal (sized with stty
 * first) and the terminal's output comes back on stdout; `script -e` returns the command's status.
 */
export function spawnExec(launch: ExecLaunch): ExecProcess {
  let file = launch.argv[0]!
  let args = launch.argv.slice(1)
  let env = launch.env
  if (launch.tty) {
    const size =
      launch.rows !== undefined && launch.cols !== undefined
        ? `${shellQuote(launch.sttyPath ?? 'stty')} rows ${Math.floor(launch.rows)} cols ${Math.floor(launch.cols)} 2>/dev/null; `
        : ''
    // script runs the line with $SHELL: the host's sh, while the container's own SHELL (if any) is restored for the command.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion, not a template
    const restore = 'if [ -n "${ORC_SHELL+x}" ]; then SHELL="$ORC_SHELL"; else unset SHELL; fi; unset ORC_SHELL; '
    const line = `${restore}${size}exec ${launch.argv.map(shellQuote).join(' ')}`
    const { SHELL: shell, ...rest } = launch.env
    env = { ...rest, SHELL: '/bin/sh', ...(shell !== undefined ? { ORC_SHELL: shell } : {}) }
    file = launch.scriptPath ?? 'script'
    args = ['-q', '-e', '-c', line, '/dev/null']
  }
  const child = spawn(file, args, { env, stdio: ['pipe', 'pipe', 'pipe'] })
  const stdout = new PassThrough()
  const stderr = new PassThrough()
  child.stdout.pipe(stdout)
  child.stderr.pipe(stderr)
  child.stdin.on('error', () => {})
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('error', (err) => {
      stderr.end(`exec: ${err.message}\n`)
      resolve({ code: 127, signal: null })
    })
    child.once('close', (code, signal) => resolve({ code, signal }))
  })
  if (launch.afterExit) void exited.then(launch.afterExit)
  const pid = child.pid
  return {
    stdin: child.stdin,
    stdout,
    stderr,
    exited,
    kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (pid === undefined) return
      launch.beforeKill?.()
      // nsenter and script fork: the command is a descendant, not the child itself. The child goes
      // first, so its own end is the signal: killed after its command, a `runc exec` saw the command
      // die and exited 137 by itself, and a timed-out exec reported no signal.
      const tree = descendants(pid).reverse()
      signalPid(pid, signal)
      for (const p of tree) signalPid(p, signal)
    },
  }
}

/** Resolves when `s` has emitted its last data (it must be flowing or read). */
export function endOf(s: NodeJS.ReadableStream): Promise<void> {
  return new Promise((resolve) => {
    if ((s as { readableEnded?: boolean }).readableEnded) return resolve()
    s.once('end', () => resolve())
    s.once('close', () => resolve())
  })
}

/** Drive an exec to its end: feed stdin, collect bounded output, kill at the deadline. */
export async function runExec(proc: ExecProcess, opts: ExecRunOptions, clock: Pick<Clock, 'setTimeout' | 'clearTimeout'>): Promise<ExecResult> {
  const max = opts.maxOutputBytes ?? DEFAULT_EXEC_OUTPUT_BYTES
  let truncated = false
  const collect = (s: NodeJS.ReadableStream) => {
    const chunks: Buffer[] = []
    let size = 0
    s.on('data', (c: Buffer) => {
      const b = Buffer.isBuffer(c) ? c : Buffer.from(c)
      if (size >= max) {
        truncated = true
        return
      }
      const keep = b.subarray(0, max - size)
      if (keep.length < b.length) truncated = true
      chunks.push(keep)
      size += keep.length
    })
    return () => Buffer.concat(chunks)
  }
  const out = collect(proc.stdout)
  const err = collect(proc.stderr)
  proc.stdin.end(opts.stdin ?? '')
  const drained = Promise.all([endOf(proc.stdout), endOf(proc.stderr)])
  let timedOut = false
  const t = clock.setTimeout(() => {
    timedOut = true
    proc.kill('SIGKILL')
  }, opts.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS)
  try {
    const exit = await proc.exited
    await drained
    // Timed out, the command was sent SIGKILL; its launcher may still exit with a code of its own
    // first (gVisor's `runsc exec` after beforeKill, once in ~5 full runs, 2026-12-05): say what was sent.
    const signal = exit.signal ?? (timedOut ? 'SIGKILL' : null)
    return { code: exit.code, signal, stdout: out(), stderr: err(), timedOut, truncated }
  } finally {
    clock.clearTimeout(t)
  }
}

/**
 * The program a port-forward runs inside the container's network namespace (node, the agent's own
 * interpreter, so nothing is needed in the image): stdin/stdout spliced to localhost:PORT, IPv4
 * first, then IPv6.
 */
export const CONNECT_PORT_SCRIPT = [
  "const net = require('node:net')",
  'const port = Number(process.argv[1])',
  'const hosts = ["127.0.0.1", "::1"]',
  'const go = () => {',
  '  const host = hosts.shift(); let up = false',
  '  const s = net.connect({ host, port })',
  "  s.once('connect', () => { up = true; process.stdin.pipe(s); s.pipe(process.stdout) })",
  "  s.once('close', () => { if (up) process.exit(0) })",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a template in the script's own source
  "  s.once('error', (e) => { if (!up && hosts.length > 0) return go(); process.stderr.write(`connect to port ${port}: ${e.message}\\n`); process.exit(1) })",
  '}',
  'go()',
].join('\n')

/** Launch argv of a port connection from the host into the network namespace of `pid`. */
export function connectPortArgv(nsenterPath: string, pid: number, port: number, isRoot: boolean): string[] {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new OrcError('invalid', `port must be 1..65535, got ${port}`)
  // An unprivileged agent owns the sandbox's user namespace: it enters it first, keeping its ids.
  const ns = isRoot ? ['--net'] : ['--user', '--net', '--preserve-credentials']
  return [resolveBinary(nsenterPath), `--target=${pid}`, ...ns, '--', process.execPath, '-e', CONNECT_PORT_SCRIPT, String(port)]
}
