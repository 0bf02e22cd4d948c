/** Real agents (`orc up` child processes) with real sandboxes, driven through the real CLI. */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { execa, type ResultPromise } from 'execa'
import { ApiClient } from '../../src/cli/client.ts'
import { busyboxUnavailable } from '../../src/runtime/index.ts'
import { waitFor } from '../helpers/wait.ts'

export const ROOT = new URL('../..', import.meta.url).pathname
const BIN = join(ROOT, 'bin/orc.mjs')

/** Fast timers so restarts, retries and timeouts happen within a test. */
export const TEST_TUNABLES = {
  restartBackoffMs: 100,
  maxRestartBackoffMs: 400,
  runRetryMs: 500,
  resolveImageTimeoutMs: 1500,
  resolveImageRetry: { attempts: 2, backoffMs: 200 },
}

export function skipReason(opts: { runc?: boolean; runsc?: boolean } = {}): string | undefined {
  const bb = busyboxUnavailable()
  if (bb) return bb
  for (const bin of ['bwrap', ...(opts.runc ? ['runc'] : []), ...(opts.runsc ? ['runsc'] : [])]) {
    try {
      execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'ignore' })
    } catch {
      return `${bin} not installed`
    }
  }
  if (opts.runc && process.getuid?.() !== 0) return 'runc needs root'
  if (opts.runsc && process.getuid?.() !== 0) return 'runsc needs root'
  return undefined
}

export interface CliResult {
  stdout: string
  stderr: string
  exitCode: number
}

export async function orc(socket: string, args: string[], input = ''): Promise<CliResult> {
  const r = await execa(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    reject: false,
    input,
    env: { ORC_SOCKET: socket, USER: 'tester' },
    timeout: 30_000,
    stripFinalNewline: false,
  })
  return { stdout: String(r.stdout), stderr: String(r.stderr), exitCode: r.exitCode ?? -1 }
}

export { waitFor }

export interface TestAgent {
  dataDir: string
  socket: string
  client: ApiClient
  image: string
  /** The CLI on the local socket: `user:admin` (this agent created its cluster). */
  orc(args: string[], input?: string): Promise<CliResult>
  /** Add a user with this role (`orc user add`) and return the CLI acting as it, over the mesh (`orc --node --credential`). */
  asUser(name: string, role: string): Promise<(args: string[], input?: string) => Promise<CliResult>>
  pod(name: string): Promise<Record<string, any> | undefined>
  start(): Promise<void>
  stop(): Promise<void>
  remove(): void
  output(): string
}

export async function startTestAgent(name = 'n1', opts: { env?: Record<string, string> } = {}): Promise<TestAgent> {
  const dataDir = mkdtempSync(join(tmpdir(), 'orc-pods-'))
  const socket = join(dataDir, 'orc.sock')
  const client = new ApiClient(socket)
  let proc: ResultPromise | undefined
  let out = ''
  const r = await orc(socket, ['image', 'import-busybox', '--data-dir', dataDir])
  if (r.exitCode !== 0) throw new Error(`import-busybox: ${r.stderr}`)
  const agent: TestAgent = {
    dataDir,
    socket,
    client,
    image: join(dataDir, 'images', 'busybox'),
    orc: (args, input) => orc(socket, args, input),
    async asUser(user, role) {
      const add = await orc(socket, ['user', 'add', user, '--role', role])
      if (add.exitCode !== 0) throw new Error(`user add ${user}: ${add.stderr}`)
      const cred = add.stdout.trim()
      const status = (await client.call('GET', '/v1/status')) as { mesh?: { addresses: string[] } }
      const addr = status.mesh?.addresses.find((x) => x.startsWith('/ip4/127.0.0.1/tcp/'))
      if (!addr) throw new Error(`the agent listens on no 127.0.0.1 mesh address: ${JSON.stringify(status.mesh)}`)
      const as = (args: string[], input?: string) => orc(socket, ['--node', addr, '--credential', cred, ...args], input)
      await waitFor(`the remote API to know user:${user}`, async () => (await as(['whoami'])).stdout.startsWith(`user:${user} `))
      return as
    },
    async pod(n) {
      try {
        return ((await client.call('GET', `/v1/objects/Pod/default/${n}`)) as { object: Record<string, any> }).object
      } catch {
        return undefined
      }
    },
    async start() {
      let exited = false
      proc = execa(process.execPath, [BIN, 'up', '--data-dir', dataDir, '--name', name, '--listen', '127.0.0.1:0'], {
        cwd: ROOT,
        reject: false,
        env: { ORC_LOG_LEVEL: 'info', USER: 'tester', ORC_POD_TUNABLES: JSON.stringify(TEST_TUNABLES), ...opts.env },
      })
      proc.stderr?.on('data', (d: Buffer) => (out += d.toString()))
      void proc.then(() => (exited = true))
      await waitFor('agent to answer', async () => {
        if (exited) throw new Error(`agent exited early: ${out.slice(-2000)}`)
        await client.call('GET', '/v1/status')
        return true
      })
    },
    async stop() {
      if (!proc) return
      proc.kill('SIGTERM')
      await proc
      proc = undefined
    },
    remove() {
      // A container's wrapper outlives the agent and writes its exit record as its process is
      // killed: a removal racing it meets ENOTEMPTY, which the retries wait out.
      rmSync(dataDir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 })
    },
    output: () => out,
  }
  await agent.start()
  return agent
}

/** Pod manifest (YAML is JSON) with one busybox container running `script`. */
export function podManifest(name: string, image: string, script: string, spec: Record<string, unknown> = {}, labels?: Record<string, string>): string {
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name, ...(labels ? { labels } : {}) },
    spec: { terminationGracePeriodSeconds: 2, containers: [{ name: 'main', image, command: ['/bin/sh', '-c', script] }], ...spec },
  })
}

/** Host pids whose command line is exactly `argv` (a marker such as sleep 4711). */
export function pidsRunning(argv: string[]): number[] {
  const want = argv.join('\0') + '\0'
  const out: number[] = []
  for (const d of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(d)) continue
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8') === want) out.push(Number(d))
    } catch {}
  }
  return out
}

/** Kill what a test's `sleep MARKER` pods left running on the host (after the agents are gone). */
export function killSleeps(markers: readonly string[]): void {
  for (const m of markers)
    for (const pid of pidsRunning(['sleep', m]))
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
}
