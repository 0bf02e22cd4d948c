/**
 * Commands, as every component is given them: one runner shape for the net drivers (ip, wg, nft),
 * the runtimes (runc, bwrap probes) and the ops helpers; execa in production, fakes in tests.
 */
import { execa } from 'execa'

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

/**
 * Runs a command to completion. Resolves with a non-zero exitCode rather than rejecting (127 when
 * it could not be started, with the reason in stderr).
 */
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

export const execaRunner: CommandRunner = createExecaRunner()
