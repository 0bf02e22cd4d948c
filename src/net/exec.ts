/**
 * The I/O edge of the net drivers: an injected command runner (execa in production, a fake in unit
 * tests), helpers to aim `ip`/`wg`/`nft` at a network namespace, and a tiny process table for
 * finding the wireguard-go daemon (which forks away from whoever started it).
 */
import { readdir, readFile } from 'node:fs/promises'
import { execa } from 'execa'
import { OrcError } from '../model/index.ts'

export interface CommandResult {
  stdout: string
  stderr: string
  exitCode: number
}

export interface CommandOptions {
  /** Written to the command's stdin (configs carrying private keys go here, never in argv). */
  input?: string
  /** Added to the inherited environment; `undefined` removes a variable. */
  env?: Record<string, string | undefined>
  timeoutMs?: number
}

/** Runs a command to completion. Resolves with a non-zero exitCode rather than rejecting. */
export type CommandRunner = (cmd: string, args: readonly string[], opts?: CommandOptions) => Promise<CommandResult>

/** The production runner: execa, no shell, bounded time, never rejects on exit status. */
export function createExecaRunner(defaults: { timeoutMs?: number } = {}): CommandRunner {
  return async (cmd, args, opts = {}) => {
    let env: Record<string, string> | undefined
    if (opts.env !== undefined) {
      env = {}
      for (const [k, v] of Object.entries({ ...process.env, ...opts.env })) if (v !== undefined) env[k] = v
    }
    const r = await execa(cmd, [...args], {
      reject: false,
      input: opts.input,
      env,
      extendEnv: env === undefined,
      timeout: opts.timeoutMs ?? defaults.timeoutMs ?? 30_000,
      stripFinalNewline: true,
      // wireguard-go daemonises; its child must not hold our pipes open.
      stdin: opts.input === undefined ? 'ignore' : 'pipe',
    })
    const exitCode = typeof r.exitCode === 'number' ? r.exitCode : r.failed ? 127 : 0
    const stderr = typeof r.stderr === 'string' ? r.stderr : ''
    return {
      stdout: typeof r.stdout === 'string' ? r.stdout : '',
      stderr: r.exitCode === undefined && r.message ? `${stderr}${stderr ? '\n' : ''}${r.shortMessage}` : stderr,
      exitCode,
    }
  }
}

/** Where commands run: the current network namespace, or a named one (`ip netns`). */
export interface Host {
  run: CommandRunner
  /** Named network namespace (as in /var/run/netns), or undefined for the current one. */
  netns?: string
}

/** `ip …` in the host's namespace; `ip -n NS` switches namespace without a mount namespace. */
export function ipCommand(host: Host, args: readonly string[]): [string, string[]] {
  return host.netns === undefined ? ['ip', [...args]] : ['ip', ['-n', host.netns, ...args]]
}

/** Any other command in the host's namespace (`ip netns exec NS cmd …`). */
export function nsCommand(host: Host, cmd: string, args: readonly string[]): [string, string[]] {
  return host.netns === undefined ? [cmd, [...args]] : ['ip', ['netns', 'exec', host.netns, cmd, ...args]]
}

function firstLine(s: string): string {
  return s.split('\n').find((l) => l.trim() !== '')?.trim() ?? ''
}

/** Run and throw OrcError(`action: <first stderr line>`) on a non-zero exit. */
export async function runChecked(
  run: CommandRunner,
  [cmd, args]: [string, string[]],
  action: string,
  opts?: CommandOptions,
): Promise<CommandResult> {
  const r = await run(cmd, args, opts)
  if (r.exitCode !== 0) {
    const why = firstLine(r.stderr) || firstLine(r.stdout) || `exit status ${r.exitCode}`
    throw new OrcError('internal', `${action}: ${why}`, { cmd, args, exitCode: r.exitCode })
  }
  return r
}

export async function ip(host: Host, args: readonly string[], action: string, opts?: CommandOptions): Promise<CommandResult> {
  return runChecked(host.run, ipCommand(host, args), action, opts)
}

/** `ip -j …` parsed; undefined when the command fails (e.g. the device does not exist). */
export async function ipJson<T>(host: Host, args: readonly string[]): Promise<T | undefined> {
  const [cmd, a] = ipCommand(host, ['-j', ...args])
  const r = await host.run(cmd, a)
  if (r.exitCode !== 0) return undefined
  const text = r.stdout.trim()
  if (text === '') return [] as unknown as T
  try {
    return JSON.parse(text) as T
  } catch (err) {
    throw new OrcError('parse', `parse output of ip ${args.join(' ')}: ${(err as Error).message}`)
  }
}

/** Processes, looked up by exact argv (wireguard-go re-executes itself as `wireguard-go IFACE`). */
export interface ProcessTable {
  /** Live (non-zombie) pids whose argv equals `argv`. */
  find(argv: readonly string[]): Promise<number[]>
  kill(pid: number, signal: NodeJS.Signals): void
}

export const procfsProcessTable: ProcessTable = {
  async find(argv) {
    const want = argv.join('\0')
    const out: number[] = []
    for (const name of await readdir('/proc')) {
      if (!/^[0-9]+$/.test(name)) continue
      try {
        const cmdline = (await readFile(`/proc/${name}/cmdline`, 'utf8')).replace(/\0$/, '')
        if (cmdline !== want) continue
        const stat = await readFile(`/proc/${name}/stat`, 'utf8')
        const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3)
        if (state !== 'Z' && state !== 'X') out.push(Number(name))
      } catch {
        // Exited while we looked.
      }
    }
    return out
  },
  kill(pid, signal) {
    try {
      process.kill(pid, signal)
    } catch {
      // Already gone.
    }
  },
}

/** Poll `check` until it returns true or `timeoutMs` passes; returns the last result. */
export async function pollUntil(check: () => Promise<boolean>, timeoutMs: number, intervalMs = 20): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await check()) return true
    if (Date.now() >= deadline) return false
    await new Promise((r) => setTimeout(r, intervalMs))
  }
}
