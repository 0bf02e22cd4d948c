/**
 * Real agents as separate OS processes on 127.0.0.1 (`orc up` / `orc join`), driven by the real
 * CLI. Each node keeps its port across restarts so its peers find it again.
 */
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { execa, type ResultPromise } from 'execa'
import { NODE_ENV, NODE_FLAGS } from '../../src/agent/ops/node-flags.ts'
import { ApiClient } from '../../src/cli/client.ts'
import { waitFor } from '../helpers/wait.ts'

export const ROOT = new URL('../..', import.meta.url).pathname
export const BIN = join(ROOT, 'bin/orc.mjs')

/** Mesh timers for tests: everything on one machine, failures noticed in about a second. */
export const TEST_TUNABLES = JSON.stringify({
  dialTimeoutMs: 2000,
  inboundPerIpPerSecond: 10_000,
  maxProbationPerSource: 16,
  probationStartsPerSourcePerMinute: 10_000,
  joinTimeoutMs: 8000,
  probationMs: 5000,
  heartbeatIntervalMs: 200,
  suspectAfterMs: 1200,
  deadAfterMs: 3000,
  maintainIntervalMs: 300,
  // e.g. ORC_TEST_MESH_TUNABLES='{"failureDetector":"swim"}' runs the multi-agent tests (chaos) with the SWIM detector.
  ...JSON.parse(process.env.ORC_TEST_MESH_TUNABLES ?? '{}'),
})

export interface CliResult {
  stdout: string
  stderr: string
  exitCode: number
}

/** `orc ARGS…` against the agent at `socket` (or remote, when args say --node). */
export async function orc(socket: string | undefined, args: string[], env: Record<string, string> = {}, input = ''): Promise<CliResult> {
  const r = await execa(process.execPath, [...NODE_FLAGS, BIN, ...args], {
    cwd: ROOT,
    reject: false,
    input,
    env: { ORC_SOCKET: socket ?? '', USER: 'tester', ORC_CREDENTIAL: '', ORC_NODE: '', ...env },
    timeout: 30_000,
    stripFinalNewline: false,
  })
  return { stdout: String(r.stdout), stderr: String(r.stderr), exitCode: r.exitCode ?? -1 }
}

export { waitFor }

/** Ports this run's test processes hold (one file per port, holding the pid): see freePort. */
const PORT_RESERVATIONS = join(tmpdir(), 'orc-test-ports')
const reservedHere: string[] = []
process.once('exit', () => {
  for (const f of reservedHere) rmSync(f, { force: true })
})

/**
 * Hold `port` for this process until it exits, unless another live test process holds it: a free
 * port is only free until an agent binds it, which may be a second later, and test files run side
 * by side (two or three at once) each probe the same range.
 */
function reservePort(port: number): boolean {
  mkdirSync(PORT_RESERVATIONS, { recursive: true })
  const file = join(PORT_RESERVATIONS, String(port))
  const take = () => {
    writeFileSync(file, String(process.pid), { flag: 'wx' })
    reservedHere.push(file)
    return true
  }
  try {
    return take()
  } catch {
    // Held: by a live process, or left by one that was killed before it could clean up.
    try {
      const pid = Number(readFileSync(file, 'utf8'))
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && !processAlive(pid)) {
        rmSync(file, { force: true })
        return take()
      }
    } catch {}
    return false
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * A port free right now, below the kernel's ephemeral range (32768–60999 by default): a port the
 * kernel handed out for `listen(0)` can be taken by any outgoing connection on the machine before
 * the agent binds it, which showed as "address in use" when agents of other tests were dialing.
 * The agent's join host takes the port two below (`--join-listen` default): that one is free too,
 * and mesh ports are multiples of 4, so no agent's join port is another's mesh port. The port is
 * reserved for this test process (reservePort), so a test file running beside it cannot pick it
 * in the moment before its agent binds it.
 */
export async function freePort(): Promise<number> {
  const free = (port: number) =>
    new Promise<boolean>((resolve) => {
      const s = createServer()
      s.once('error', () => resolve(false))
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
    })
  for (let attempt = 0; ; attempt++) {
    const port = 20_004 + 4 * Math.floor(Math.random() * 3_000)
    if (reservePort(port) && (await free(port)) && (await free(port - 2))) return port
    if (attempt > 50) throw new Error('no free port found in 20000–31999')
  }
}

export class Workspace {
  readonly root = mkdtempSync(join(tmpdir(), 'orc-cluster-'))
  private nodes: NodeProcess[] = []
  dir(name: string): string {
    return join(this.root, name)
  }
  track(n: NodeProcess): NodeProcess {
    this.nodes.push(n)
    return n
  }
  async close(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.kill('SIGKILL')))
    rmSync(this.root, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 })
  }
}

/** Image stores every agent of a workspace trusts: the shared imports beside the data dirs. */
function workspaceImageStores(dataDir: string): string {
  return [join(dirname(dataDir), 'shared', 'images'), join(dirname(dataDir), 'images', 'images')].join(':')
}

export class NodeProcess {
  proc: ResultPromise | undefined
  stdout = ''
  stderr = ''
  exited = true
  exitCode: number | null = null
  readonly client: ApiClient
  readonly socket: string
  /** Extra environment of the agent process (benchmarks). */
  env: Record<string, string> = {}
  /** Called with every stderr line (benchmarks parse the agent's log). */
  onStderrLine?: (line: string) => void
  private partial = ''
  constructor(
    readonly name: string,
    readonly dataDir: string,
    readonly port: number,
  ) {
    this.socket = join(dataDir, 'orc.sock')
    this.client = new ApiClient(this.socket)
  }

  get addr(): string {
    return `127.0.0.1:${this.port}`
  }

  private spawn(args: string[], extraEnv: Record<string, string> = {}): void {
    this.stdout = ''
    this.stderr = ''
    this.exited = false
    this.exitCode = null
    const proc = execa(process.execPath, [...NODE_FLAGS, BIN, ...args], {
      cwd: ROOT,
      reject: false,
      // The workspace's shared busybox (sched/helpers.ts sharedBusybox, federation/placement.test.ts) is an image store.
      env: {
        ...NODE_ENV,
        ORC_LOG_LEVEL: 'info',
        USER: 'tester',
        ORC_MESH_TUNABLES: TEST_TUNABLES,
        ORC_IMAGE_STORES: workspaceImageStores(this.dataDir),
        ...this.env,
        ...extraEnv,
      },
      buffer: false,
    })
    proc.stdout?.on('data', (d: Buffer) => (this.stdout += d.toString()))
    proc.stderr?.on('data', (d: Buffer) => {
      const text = d.toString()
      if (this.onStderrLine === undefined) {
        this.stderr += text
        return
      }
      const lines = (this.partial + text).split('\n')
      this.partial = lines.pop()!
      for (const l of lines) this.onStderrLine(l)
    })
    void proc.then((r) => {
      this.exited = true
      this.exitCode = r.exitCode ?? null
    })
    this.proc = proc
  }

  /** Resolves when the API answers; rejects (with the output) if the process exits first. */
  async ready(): Promise<this> {
    await waitFor(
      `${this.name} to answer on its socket`,
      async () => {
        if (this.exited) throw new Error(`${this.name} exited (${this.exitCode}): ${this.stdout}\n${this.stderr}`)
        await this.client.call('GET', '/v1/status')
        return true
      },
      30_000,
    )
    return this
  }

  /** Resolves with the exit code once the process ends. */
  async ended(): Promise<number | null> {
    await this.proc
    return this.exitCode
  }

  up(extra: string[] = []): this {
    this.spawn(['up', '--data-dir', this.dataDir, '--name', this.name, '--listen', this.addr, ...extra])
    return this
  }

  join(peer: string, token: string, extra: string[] = []): this {
    // The token in the environment: `orc join` refuses one on its command line.
    this.spawn(['join', peer, '--data-dir', this.dataDir, '--name', this.name, '--listen', this.addr, ...extra], { ORC_TOKEN: token })
    return this
  }

  cli(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
    return orc(this.socket, args, env)
  }

  /** `orc get REF -o json` on this node, parsed; undefined when it fails (not found, agent down). */
  async getJson(ref: string): Promise<any> {
    const r = await this.cli(['get', ref, '-o', 'json'])
    return r.exitCode === 0 ? JSON.parse(r.stdout) : undefined
  }

  async kill(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    if (this.proc === undefined || this.exited) return
    this.proc.kill(signal)
    await this.proc
  }

  /** Pause / resume the whole process (a partition as the others see it). */
  signal(sig: NodeJS.Signals): void {
    if (this.proc?.pid !== undefined) process.kill(this.proc.pid, sig)
  }
}

/** Lazily unmount everything mounted under `dir` (the loop volumes agents killed with -9 left mounted), deepest first. */
export function unmountUnder(dir: string): void {
  const points = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((mp): mp is string => mp?.startsWith(dir) === true)
  for (const mp of points.reverse()) {
    try {
      execFileSync('umount', ['-l', mp])
    } catch {}
  }
}

export async function newNode(ws: Workspace, name: string, dirName = name): Promise<NodeProcess> {
  return ws.track(new NodeProcess(name, ws.dir(dirName), await freePort()))
}

/** A fresh join token from `node` (stdout of `orc token create`). */
export async function tokenFrom(node: NodeProcess, args: string[] = []): Promise<string> {
  const r = await node.cli(['token', 'create', ...args])
  if (r.exitCode !== 0) throw new Error(`token create failed: ${r.stderr}`)
  return r.stdout.trim()
}

/** Names in `orc get nodes -o name` on `node`. */
export async function nodeNames(node: NodeProcess): Promise<string[]> {
  const r = await node.cli(['get', 'nodes', '-o', 'name'])
  if (r.exitCode !== 0) throw new Error(r.stderr)
  return r.stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => l.replace(/^node\//, ''))
    .sort()
}

export function podManifest(name: string, image = 'busybox'): string {
  // No node carries the selector's label: the pod is only data here, never started.
  return `apiVersion: orc/v1\nkind: Pod\nmetadata:\n  name: ${name}\nspec:\n  nodeSelector:\n    orc-test: nowhere\n  containers:\n    - name: main\n      image: ${image}\n`
}

export async function applyPod(node: NodeProcess, name: string, image?: string): Promise<void> {
  const r = await execa(process.execPath, [BIN, 'apply', '-f', '-'], {
    cwd: ROOT,
    reject: false,
    input: podManifest(name, image),
    env: { ORC_SOCKET: node.socket, USER: 'tester' },
  })
  if (r.exitCode !== 0) throw new Error(`apply on ${node.name} failed: ${r.stderr}`)
}

/** True once `orc get pod NAME` on `node` answers (optionally with `image`). */
export async function hasPod(node: NodeProcess, name: string, image?: string): Promise<boolean> {
  try {
    const r = await node.client.call<{ object: { spec: { containers: Array<{ image: string }> } } }>('GET', `/v1/objects/Pod/default/${name}`)
    return image === undefined || r.object.spec.containers[0]?.image === image
  } catch {
    return false
  }
}
