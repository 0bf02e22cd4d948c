/**
 * The I/O edge of the net drivers: helpers over the injected command runner (src/effects; execa in
 * production, a fake in unit tests) to aim `ip`/`wg`/`nft` at a network namespace, and a tiny process table for
 * finding the wireguard-go daemon (which forks away from whoever started it).
 */
import { readdir, readFile } from 'node:fs/promises'
import { type Clock, type CommandOptions, type CommandResult, type CommandRunner, sleep } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'

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
  return (
    s
      .split('\n')
      .find((l) => l.trim() !== '')
      ?.trim() ?? ''
  )
}

/** Run and throw OrcError(`action: <first stderr line>`) on a non-zero exit. */
export async function runChecked(run: CommandRunner, [cmd, args]: [string, string[]], action: string, opts?: CommandOptions): Promise<CommandResult> {
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
export async function pollUntil(clock: Clock, check: () => Promise<boolean>, timeoutMs: number, intervalMs = 20): Promise<boolean> {
  const deadline = clock.now() + timeoutMs
  for (;;) {
    if (await check()) return true
    if (clock.now() >= deadline) return false
    await sleep(clock, intervalMs)
  }
}
