/**
 * Helpers for tests on real interfaces: skip checks, namespaces with unique names, underlay veths,
 * TCP probes run inside namespaces (plain node scripts via `ip netns exec`), ping with a deadline.
 * Only addresses inside namespaces created here are used (198.18.0.0/15 underlay, fdXX ULA).
 */
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { execa, type ResultPromise } from 'execa'
import { seededBytes } from '../helpers/random.ts'

export function missingPrerequisite(bins: string[]): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces)'
  for (const b of bins) {
    if (!['/usr/bin', '/usr/sbin', '/bin', '/sbin'].some((d) => existsSync(`${d}/${b}`))) {
      return `needs ${b} (Debian package; scripts/setup.sh installs it)`
    }
  }
  if (bins.includes('wireguard-go') && !existsSync('/dev/net/tun')) return 'needs /dev/net/tun for wireguard-go'
  return undefined
}

/** Short random suffix so parallel runs never share names (interface names max 15 chars). */
export function runSuffix(): string {
  return randomBytes(2).toString('hex')
}

export { seededBytes as seededRandom } from '../helpers/random.ts'

/**
 * The start of a test on real interfaces: undefined (the test skipped, with the reason) when a tool
 * of `bins` or root is missing; else a seeded random (the seed in the test's diagnostics, to replay
 * a run) and a run suffix for unique names.
 */
export function netTest(
  t: { skip(msg: string): void; diagnostic(msg: string): void },
  bins: string[],
): { random: ReturnType<typeof seededBytes>; s: string } | undefined {
  const missing = missingPrerequisite(bins)
  if (missing) {
    t.skip(`skipped: ${missing}`)
    return undefined
  }
  const seed = Date.now() % 1_000_000
  t.diagnostic(`seed ${seed}`)
  return { random: seededBytes(seed), s: runSuffix() }
}

export async function sh(cmd: string, args: string[], opts: { input?: string } = {}): Promise<string> {
  const r = await execa(cmd, args, { input: opts.input, reject: false })
  if (r.exitCode !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`)
  return r.stdout
}

export async function inNs(ns: string, cmd: string, args: string[]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const r = await execa('ip', ['netns', 'exec', ns, cmd, ...args], { reject: false, timeout: 20_000 })
  return { exitCode: r.exitCode ?? 1, stdout: String(r.stdout), stderr: String(r.stderr) }
}

export async function addNetns(name: string): Promise<void> {
  await sh('ip', ['netns', 'add', name])
  await sh('ip', ['-n', name, 'link', 'set', 'lo', 'up'])
}

export async function delNetns(name: string): Promise<void> {
  await execa('ip', ['netns', 'del', name], { reject: false })
}

/** Connect two namespaces with a veth pair and IPv4 /30 addresses (underlay). */
export async function linkNetns(a: { ns: string; dev: string; addr: string }, b: { ns: string; dev: string; addr: string }): Promise<void> {
  await sh('ip', ['-n', a.ns, 'link', 'add', a.dev, 'type', 'veth', 'peer', 'name', b.dev, 'netns', b.ns])
  for (const s of [a, b]) {
    await sh('ip', ['-n', s.ns, 'addr', 'add', s.addr, 'dev', s.dev])
    await sh('ip', ['-n', s.ns, 'link', 'set', s.dev, 'up'])
  }
}

const pingCmd = existsSync('/usr/bin/ping') || existsSync('/bin/ping') ? ['ping'] : ['busybox', 'ping']

export async function pingOnce(ns: string, addr: string): Promise<boolean> {
  const [cmd, ...pre] = pingCmd as [string, ...string[]]
  const r = await inNs(ns, cmd, [...pre, ...(addr.includes(':') ? ['-6'] : []), '-c', '1', '-W', '1', addr])
  return r.exitCode === 0
}

/** Ping until one reply arrives or the deadline passes (WireGuard needs a handshake first). */
export async function pingUntil(ns: string, addr: string, timeoutMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) if (await pingOnce(ns, addr)) return true
  return false
}

const SERVER = `
const net = require('node:net')
const [host, port, mode] = process.argv.slice(1)
const srv = net.createServer((s) => {
  if (mode === 'sink') {
    let n = 0
    s.on('data', (d) => { n += d.length })
    s.on('end', () => s.end(String(n)))
  } else {
    s.end(s.remoteAddress.replace(/^::ffff:/, ''))
  }
})
srv.listen(Number(port), host, () => process.stdout.write('listening\\n'))
`

const CLIENT = `
const net = require('node:net')
const [host, port, bytes] = process.argv.slice(1)
const s = net.connect({ host, port: Number(port), timeout: 5000 })
let out = ''
let t0 = 0n
s.on('data', (d) => { out += d })
// The server answers after it has read everything, so connect→end covers the whole transfer.
s.on('end', () => { process.stderr.write('ns=' + (process.hrtime.bigint() - t0) + '\\n'); process.stdout.write(out); process.exit(0) })
s.on('timeout', () => { console.error('timeout'); process.exit(2) })
s.on('error', (e) => { console.error(e.message); process.exit(1) })
s.on('connect', () => {
  t0 = process.hrtime.bigint()
  const n = Number(bytes || 0)
  if (n === 0) return s.end()
  const chunk = Buffer.alloc(1 << 16)
  let left = n
  const pump = () => {
    while (left > 0) {
      const c = left >= chunk.length ? chunk : chunk.subarray(0, left)
      left -= c.length
      if (!s.write(c)) return s.once('drain', pump)
    }
    s.end()
  }
  pump()
})
`

export interface TcpServer {
  stop(): Promise<void>
}

/** A process in `ns` (`node ARGS…` by default) that prints `listening` once it serves; stop() ends it. */
export async function startListening(ns: string, args: string[], what: string): Promise<TcpServer> {
  const child: ResultPromise = execa('ip', ['netns', 'exec', ns, process.execPath, ...args], { reject: false })
  await new Promise<void>((resolve, reject) => {
    let buf = ''
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString()
      if (buf.includes('listening')) resolve()
    })
    child.once('exit', () => reject(new Error(`${what} in ${ns} exited before listening`)))
  })
  return {
    async stop() {
      if (child.pid !== undefined) {
        try {
          process.kill(child.pid, 'SIGTERM')
        } catch {}
      }
      await child
    },
  }
}

/** A TCP server inside `ns`: answers each connection with the peer's address (or counts bytes). */
export function startTcpServer(ns: string, host: string, port: number, mode: 'whoami' | 'sink' = 'whoami'): Promise<TcpServer> {
  return startListening(ns, ['-e', SERVER, host, String(port), mode], 'tcp server')
}

/** Connect from `ns`; returns what the server said (the address it saw, or the byte count). */
export async function tcpRequest(ns: string, host: string, port: number, sendBytes = 0): Promise<{ reply: string; ns?: bigint }> {
  const r = await execa('ip', ['netns', 'exec', ns, process.execPath, '-e', CLIENT, host, String(port), String(sendBytes)], {
    reject: false,
    timeout: 60_000,
  })
  if (r.exitCode !== 0) throw new Error(`tcp from ${ns} to [${host}]:${port}: ${r.stderr}`)
  const m = /ns=([0-9]+)/.exec(String(r.stderr))
  return { reply: String(r.stdout), ...(m ? { ns: BigInt(m[1]!) } : {}) }
}
