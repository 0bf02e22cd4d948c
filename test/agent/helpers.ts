/** Start real agents (`orc up` as a child process) and drive the real CLI against them. */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { execa, type ResultPromise } from 'execa'
import { NODE_ENV, NODE_FLAGS } from '../../src/agent/ops/node-flags.ts'
import { ApiClient } from '../../src/cli/client.ts'
import { pollDelay } from '../helpers/wait.ts'

export const ROOT = new URL('../..', import.meta.url).pathname
const BIN = join(ROOT, 'bin/orc.mjs')

export interface CliResult {
  stdout: string
  stderr: string
  exitCode: number
}

export function tempDir(prefix = 'orc-test-'): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix))
  return { path, remove: () => rmSync(path, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 }) }
}

/** Run `orc ARGS…` as a user would, with ORC_SOCKET pointing at `socket`. */
export async function orc(socket: string | undefined, args: string[], opts: { input?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
  const r = await execa(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    reject: false,
    input: opts.input ?? '',
    env: { ORC_SOCKET: socket ?? '', USER: 'tester', ...opts.env },
    timeout: 30_000,
    stripFinalNewline: false,
  })
  return { stdout: String(r.stdout), stderr: String(r.stderr), exitCode: r.exitCode ?? -1 }
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    const t0 = Date.now()
    try {
      const v = await fn()
      if (v !== undefined) return v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`)
    await new Promise((r) => setTimeout(r, pollDelay(Date.now() - t0)))
  }
}

export interface RunningAgent {
  dataDir: string
  socket: string
  proc: ResultPromise
  client: ApiClient
  output: () => { stdout: string; stderr: string }
  /** SIGTERM and wait for exit; returns the exit code. */
  stop(): Promise<number>
}

/** `orc up --data-dir DIR …` in a child process; resolves once its API answers. `env` adds to its environment (benchmarks' profilers). */
export async function startAgentProcess(dataDir: string, extra: string[] = [], env: Record<string, string> = {}): Promise<RunningAgent> {
  const socket = join(dataDir, 'orc.sock')
  // Loopback, any free port: test agents must not collide on the default port 7419.
  const proc = execa(process.execPath, [...NODE_FLAGS, BIN, 'up', '--data-dir', dataDir, '--listen', '127.0.0.1:0', ...extra], {
    cwd: ROOT,
    reject: false,
    env: { ...NODE_ENV, ORC_LOG_LEVEL: 'warn', USER: 'tester', ...env },
    buffer: true,
    all: false,
  })
  let stdout = ''
  let stderr = ''
  proc.stdout?.on('data', (d: Buffer) => (stdout += d.toString()))
  proc.stderr?.on('data', (d: Buffer) => (stderr += d.toString()))
  let exited = false
  void proc.then(() => (exited = true))
  const client = new ApiClient(socket)
  await waitFor('agent to answer on its socket', async () => {
    if (exited) throw new Error(`agent exited early: ${stderr}`)
    await client.call('GET', '/v1/status')
    return true
  })
  return {
    dataDir,
    socket,
    proc,
    client,
    output: () => ({ stdout, stderr }),
    async stop() {
      if (!exited) proc.kill('SIGTERM')
      const r = await proc
      return r.exitCode ?? -1
    },
  }
}
