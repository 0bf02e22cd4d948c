/**
 * The network-namespace testbed: N hosts as Linux network namespaces on a shared "internet" bridge
 * (198.18.0.0/24, the benchmarking range: nothing outside the testbed is ever addressed), optional
 * hosts in NAT'd "home" subnets (10.77.0.0/24, 10.78.0.0/24, …) behind router namespaces, an "external" host for
 * egress checks, latency/loss with `tc netem`; real `orc` agents (bin/orc.mjs) run in the hosts.
 *
 * Everything is torn down by `destroy()`, also after a failure: agents stopped (SIGTERM, then
 * SIGKILL), every process left in a testbed namespace or in a pod namespace of its agents killed,
 * the namespaces deleted, the work dir removed. Agents are started with `nsenter --net` (not
 * `ip netns exec`) so the pod namespaces they create are visible to the teardown.
 */
import { randomBytes } from 'node:crypto'
import { chmodSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, type WriteStream } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { execa, type ResultPromise } from 'execa'
import { type BundleOptionsModule, NODE_FLAGS } from '../../src/agent/ops/index.ts'

const ROOT = new URL('../..', import.meta.url).pathname
export const ORC_BIN = join(ROOT, 'bin/orc.mjs')

let bundle: Promise<string> | undefined

/**
 * One bundle of the current sources for every agent and CLI call of this process (under dist/, so
 * the native npm packages resolve): bin/orc.mjs falls back to tsx whenever any source is newer than
 * dist/orc.mjs, and tsx start-up on a loaded machine costs seconds per CLI call. Built with the
 * options of dist/orc.mjs (scripts/bundle-options.mjs): npm packages inside, split at dynamic
 * imports. With the npm packages left outside, as it was until 2026-12-05, every CLI call loaded
 * them as ~700 modules: ~1.1 s of CPU a call instead of ~0.25 s.
 */
export function testbedBin(): Promise<string> {
  bundle ??= (async () => {
    try {
      const { build } = await import('esbuild')
      const { bundleOptions } = (await import(pathToFileURL(join(ROOT, 'scripts', 'bundle-options.mjs')).href)) as BundleOptionsModule
      const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }
      const outdir = join(ROOT, 'dist', 'testbed', String(process.pid))
      await build({ ...bundleOptions({ root: ROOT, outdir, version: pkg.version }), logLevel: 'silent' })
      process.once('exit', () => rmSync(outdir, { recursive: true, force: true }))
      return join(outdir, 'orc.mjs')
    } catch {
      return ORC_BIN
    }
  })()
  return bundle
}

export interface HostSpec {
  name: string
  /** `internet` (default): on the shared bridge with a public address; `home`: behind a NAT router. */
  site?: 'internet' | 'home'
  /** Which home router (default `rtr`, the first); each router has its own LAN. Only with `site: 'home'`. */
  router?: string
  /** Added to the host's uplink with tc netem. */
  netem?: { delayMs?: number; jitterMs?: number; lossPct?: number }
  /**
   * `udp`: a stateful host firewall on the uplink that drops inbound UDP the host did not start
   * (established/related pass; TCP is open), like a cloud security group that admits only SSH and
   * the agent's TCP port.
   */
  firewall?: 'udp'
  /**
   * A global IPv6 address as well (2001:db8:18::N on the internet bridge; 2001:db8:RR::N behind a
   * home router, which routes its LAN's /64 without NAT or filter), and the agent listens on it
   * too. The IPv4 side is unchanged (behind a router: still NAT'd).
   */
  ipv6?: boolean
}

/**
 * A home router's NAT: `preserve` (Linux masquerade's default: the source port is kept when free,
 * so a mapping looks the same to every destination and hole punching can work) or `random` (a
 * random port per connection, like a symmetric NAT: what one peer sees is useless to another).
 */
export type NatKind = 'preserve' | 'random'

export interface RouterSpec {
  name: string
  nat?: NatKind
}

export interface TestbedRouter {
  name: string
  ns: string
  wanIp: string
  lanIp: string
  lanPrefix: string
  nat: NatKind
}

export interface TestbedOptions {
  hosts: HostSpec[]
  /** Home routers (default: one, `rtr`, when any host is at home). Router i: WAN 198.18.0.(253-i), LAN 10.(77+i).0.0/24. */
  routers?: RouterSpec[]
  /** Extra environment for the agents (e.g. ORC_POD_TUNABLES). */
  env?: Record<string, string>
  /** Log lines of agents go to `<workDir>/<host>.log`; kept when `keepWorkDir`. */
  keepWorkDir?: boolean
}

export interface TestbedHost {
  name: string
  site: 'internet' | 'home'
  ns: string
  ip: string
  /** Its IPv6 address, with `ipv6`. */
  ip6?: string
  dataDir: string
  socket: string
  log: string
  agent?: ResultPromise
  logStream?: WriteStream
}

/** Reasons the testbed cannot run here, or undefined. */
export function testbedUnavailable(): string | undefined {
  if (process.platform !== 'linux') return 'needs Linux network namespaces'
  if (process.getuid?.() !== 0) return 'needs root (network namespaces, WireGuard)'
  for (const b of ['ip', 'wg', 'wireguard-go', 'nsenter', 'nft', 'tc', 'busybox']) {
    if (!['/usr/bin', '/usr/sbin', '/bin', '/sbin'].some((d) => existsSync(`${d}/${b}`))) return `needs ${b} (Debian packages: scripts/setup.sh)`
  }
  if (!existsSync('/dev/net/tun')) return 'needs /dev/net/tun for wireguard-go'
  return undefined
}

let netemProbe: Promise<string | undefined> | undefined

/** Why `tc netem` (latency/loss) cannot be used here (no sch_netem in the kernel), or undefined. */
export function netemUnavailable(): Promise<string | undefined> {
  netemProbe ??= (async () => {
    const ns = `orctbprobe${randomBytes(2).toString('hex')}`
    try {
      await sh('ip', ['netns', 'add', ns])
      await sh('ip', ['-n', ns, 'link', 'add', 'd0', 'type', 'veth', 'peer', 'name', 'd1'])
      await sh('tc', ['-n', ns, 'qdisc', 'add', 'dev', 'd0', 'root', 'netem', 'delay', '1ms'])
      return undefined
    } catch (err) {
      return `tc netem unavailable (${String((err as Error).message)
        .split('\n')[0]!
        .split(': ')
        .pop()}; the kernel lacks sch_netem)`
    } finally {
      await shQuiet('ip', ['netns', 'del', ns])
    }
  })()
  return netemProbe
}

async function sh(cmd: string, args: string[], opts: { input?: string; timeoutMs?: number } = {}): Promise<string> {
  const r = await execa(cmd, args, { input: opts.input, reject: false, timeout: opts.timeoutMs ?? 30_000 })
  if (r.exitCode !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${String(r.stderr || r.stdout).trim()}`)
  return String(r.stdout)
}

async function shQuiet(cmd: string, args: string[]): Promise<void> {
  await execa(cmd, args, { reject: false, timeout: 30_000 })
}

/** Home router i's IPv6 WAN address and LAN /64 (prefix text ending in `::`). */
const routerWan6 = (i: number) => `2001:db8:18::${(253 - i).toString(16)}`
const routerLan6 = (i: number) => `2001:db8:${(0x77 + i).toString(16)}::`

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export class Testbed {
  readonly id: string
  readonly prefix: string
  readonly workDir: string
  readonly hosts = new Map<string, TestbedHost>()
  /** A host on the internet bridge outside the cluster (egress target). */
  readonly external: { ns: string; ip: string }
  readonly inet: string
  /** The first home router (`rtr`). */
  readonly router: TestbedRouter
  readonly routers = new Map<string, TestbedRouter>()
  private readonly namespaces: string[] = []
  /** Home LANs with routed IPv6, and the router's WAN address to reach them by. */
  private readonly v6Lans: Array<{ prefix: string; via: string }> = []
  private destroyed = false
  private bin = ORC_BIN

  private constructor(private readonly opts: TestbedOptions) {
    this.id = randomBytes(3).toString('hex')
    this.prefix = `orctb${this.id}`
    this.workDir = mkdtempSync(join(tmpdir(), `orc-testbed-${this.id}-`))
    // Pods run unprivileged and must reach their image; data dirs are 0711 themselves.
    chmodSync(this.workDir, 0o755)
    this.inet = `${this.prefix}-inet`
    this.external = { ns: `${this.prefix}-ext`, ip: '198.18.0.254' }
    const specs = opts.routers ?? [{ name: 'rtr' }]
    if (specs.length === 0 || specs.length > 8) throw new Error('testbed: 1 to 8 routers')
    for (const [i, r] of specs.entries()) {
      if (!/^[a-z][a-z0-9]{0,5}$/.test(r.name) || this.routers.has(r.name)) throw new Error(`testbed: bad or duplicate router name ${r.name}`)
      this.routers.set(r.name, {
        name: r.name,
        ns: `${this.prefix}-${r.name}`,
        wanIp: `198.18.0.${253 - i}`,
        lanIp: `10.${77 + i}.0.1`,
        lanPrefix: `10.${77 + i}.0.0/24`,
        nat: r.nat ?? 'preserve',
      })
    }
    this.router = [...this.routers.values()][0]!
    for (const h of opts.hosts) {
      if (h.router !== undefined && (h.site !== 'home' || !this.routers.has(h.router))) throw new Error(`testbed: host ${h.name}: no home router ${h.router}`)
    }
  }

  /** Build the namespaces and links (no agents yet). Tears down what it built if a step fails. */
  static async create(opts: TestbedOptions): Promise<Testbed> {
    const tb = new Testbed(opts)
    try {
      tb.bin = await testbedBin()
      await tb.build()
    } catch (err) {
      await tb.destroy()
      throw err
    }
    return tb
  }

  private async addNs(name: string): Promise<void> {
    await sh('ip', ['netns', 'add', name])
    this.namespaces.push(name)
    await sh('ip', ['-n', name, 'link', 'set', 'lo', 'up'])
  }

  /** veth from `ns` (as `dev`) to the bridge `br` in `brNs`. */
  private async plug(ns: string, dev: string, brNs: string, br: string, port: string, addr: string): Promise<void> {
    await sh('ip', ['-n', brNs, 'link', 'add', port, 'type', 'veth', 'peer', 'name', dev, 'netns', ns])
    await sh('ip', ['-n', brNs, 'link', 'set', port, 'master', br, 'up'])
    await sh('ip', ['-n', ns, 'addr', 'add', addr, 'dev', dev])
    await sh('ip', ['-n', ns, 'link', 'set', dev, 'up'])
  }

  private async build(): Promise<void> {
    await this.addNs(this.inet)
    await sh('ip', ['-n', this.inet, 'link', 'add', 'br0', 'type', 'bridge'])
    await sh('ip', ['-n', this.inet, 'link', 'set', 'br0', 'up'])
    await this.addNs(this.external.ns)
    await this.plug(this.external.ns, 'eth0', this.inet, 'br0', 'pext', `${this.external.ip}/24`)

    const home = this.opts.hosts.filter((h) => h.site === 'home')
    for (const [i, r] of [...this.routers.values()].entries()) {
      if (!home.some((h) => (h.router ?? this.router.name) === r.name)) continue
      await this.addNs(r.ns)
      await this.plug(r.ns, 'wan', this.inet, 'br0', `pr${i}`, `${r.wanIp}/24`)
      await sh('ip', ['-n', r.ns, 'link', 'add', 'lan', 'type', 'bridge'])
      await sh('ip', ['-n', r.ns, 'addr', 'add', `${r.lanIp}/24`, 'dev', 'lan'])
      await sh('ip', ['-n', r.ns, 'link', 'set', 'lan', 'up'])
      await sh('ip', ['netns', 'exec', r.ns, 'sysctl', '-qw', 'net.ipv4.ip_forward=1'])
      if (home.some((h) => h.ipv6 && (h.router ?? this.router.name) === r.name)) {
        // IPv6 routed, not NAT'd (the forward filter below is IPv4's only).
        await sh('ip', ['-n', r.ns, 'addr', 'add', `${routerWan6(i)}/64`, 'dev', 'wan', 'nodad'])
        await sh('ip', ['-n', r.ns, 'addr', 'add', `${routerLan6(i)}1/64`, 'dev', 'lan', 'nodad'])
        await sh('ip', ['netns', 'exec', r.ns, 'sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1'])
        this.v6Lans.push({ prefix: `${routerLan6(i)}/64`, via: routerWan6(i) })
      }
      // A home router: masquerade the LAN, let nothing in that the LAN did not start.
      await sh('ip', ['netns', 'exec', r.ns, 'nft', '-f', '-'], {
        input: [
          'table ip nat {',
          `  chain postrouting { type nat hook postrouting priority srcnat; policy accept; oifname "wan" ip saddr ${r.lanPrefix} masquerade${r.nat === 'random' ? ' random,fully-random' : ''}; }`,
          '}',
          'table ip filter {',
          '  chain forward { type filter hook forward priority filter; policy drop; ct state established,related accept; iifname "lan" accept; }',
          '}',
          '',
        ].join('\n'),
      })
    }

    let pub = 0
    const lan = new Map<string, number>()
    for (const [i, h] of this.opts.hosts.entries()) {
      const site = h.site ?? 'internet'
      const ns = `${this.prefix}-${h.name}`
      await this.addNs(ns)
      let ip: string
      if (site === 'internet') {
        ip = `198.18.0.${++pub}`
        await this.plug(ns, 'eth0', this.inet, 'br0', `p${i}`, `${ip}/24`)
      } else {
        const r = this.routers.get(h.router ?? this.router.name)!
        const n = (lan.get(r.name) ?? 1) + 1
        lan.set(r.name, n)
        ip = `${r.lanIp.replace(/\.1$/, '')}.${n}`
        await this.plug(ns, 'eth0', r.ns, 'lan', `p${i}`, `${ip}/24`)
        await sh('ip', ['-n', ns, 'route', 'add', 'default', 'via', r.lanIp])
      }
      if (h.firewall === 'udp') {
        await sh('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], {
          input: [
            'table inet orc_testbed_fw {',
            '  chain input { type filter hook input priority filter; policy accept; iifname "eth0" meta l4proto udp ct state new drop; }',
            '}',
            '',
          ].join('\n'),
        })
      }
      if (h.netem) {
        const args = ['-n', ns, 'qdisc', 'add', 'dev', 'eth0', 'root', 'netem']
        if (h.netem.delayMs) args.push('delay', `${h.netem.delayMs}ms`, ...(h.netem.jitterMs ? [`${h.netem.jitterMs}ms`] : []))
        if (h.netem.lossPct) args.push('loss', `${h.netem.lossPct}%`)
        await sh('tc', args)
      }
      let ip6: string | undefined
      if (h.ipv6) {
        if (site === 'internet') {
          ip6 = `2001:db8:18::${pub.toString(16)}`
          await sh('ip', ['-n', ns, 'addr', 'add', `${ip6}/64`, 'dev', 'eth0', 'nodad'])
          for (const l of this.v6Lans) await sh('ip', ['-n', ns, '-6', 'route', 'add', l.prefix, 'via', l.via])
        } else {
          const i = [...this.routers.keys()].indexOf(h.router ?? this.router.name)
          ip6 = `${routerLan6(i)}${lan.get(h.router ?? this.router.name)!.toString(16)}`
          await sh('ip', ['-n', ns, 'addr', 'add', `${ip6}/64`, 'dev', 'eth0', 'nodad'])
          await sh('ip', ['-n', ns, '-6', 'route', 'add', 'default', 'via', `${routerLan6(i)}1`])
        }
      }
      const dataDir = join(this.workDir, h.name)
      this.hosts.set(h.name, {
        name: h.name,
        site,
        ns,
        ip,
        ...(ip6 !== undefined ? { ip6 } : {}),
        dataDir,
        socket: join(dataDir, 'orc.sock'),
        log: join(this.workDir, `${h.name}.log`),
      })
    }
  }

  host(name: string): TestbedHost {
    const h = this.hosts.get(name)
    if (h === undefined) throw new Error(`no testbed host ${name}`)
    return h
  }

  /** Run a command inside a host's namespace. */
  async exec(name: string, cmd: string, args: string[], opts: { timeoutMs?: number } = {}): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    const ns = this.hosts.get(name)?.ns ?? name
    const r = await execa('ip', ['netns', 'exec', ns, cmd, ...args], { reject: false, timeout: opts.timeoutMs ?? 30_000 })
    return { exitCode: r.exitCode ?? 1, stdout: String(r.stdout), stderr: String(r.stderr) }
  }

  /** `orc ARGS` against a host's agent (its socket); throws with stderr on a non-zero exit. */
  async orc(name: string, args: string[], opts: { input?: string; timeoutMs?: number } = {}): Promise<string> {
    const h = this.host(name)
    const r = await execa(process.execPath, [this.bin, '--socket', h.socket, ...args], {
      input: opts.input,
      reject: false,
      timeout: opts.timeoutMs ?? 60_000,
      env: { ...process.env, ORC_SOCKET: h.socket },
    })
    if (r.exitCode !== 0) throw new Error(`orc ${args.join(' ')} on ${name}: ${String(r.stderr || r.stdout).trim()}`)
    return String(r.stdout)
  }

  /**
   * `orc ARGS` run inside a host's network namespace (like an operator's shell on that machine:
   * `orc down` also inspects and cleans the host), with the host's socket; never throws.
   */
  async orcOnHost(name: string, args: string[], opts: { timeoutMs?: number } = {}): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    const h = this.host(name)
    const r = await execa('nsenter', [`--net=/var/run/netns/${h.ns}`, '--', process.execPath, this.bin, '--socket', h.socket, ...args], {
      reject: false,
      timeout: opts.timeoutMs ?? 120_000,
      env: { ...process.env, ORC_SOCKET: h.socket },
    })
    return { exitCode: r.exitCode ?? 1, stdout: String(r.stdout), stderr: String(r.stderr) }
  }

  /** Kill a host's agent with SIGKILL (a crash: nothing is cleaned up). */
  async killAgent(name: string): Promise<void> {
    const h = this.host(name)
    h.agent?.kill('SIGKILL')
    await h.agent
    h.agent = undefined
    h.logStream?.end()
  }

  /** Wait until a host's agent process has exited on its own (e.g. after `orc down`). */
  async agentExited(name: string, timeoutMs = 60_000): Promise<number | undefined> {
    const h = this.host(name)
    const p = h.agent
    if (p === undefined) return undefined
    const done = await Promise.race([p.then((r) => r.exitCode ?? -1), sleep(timeoutMs).then(() => undefined)])
    if (done === undefined) throw new Error(`agent ${name} still running after ${timeoutMs}ms`)
    h.agent = undefined
    h.logStream?.end()
    return done
  }

  async orcJson<T = any>(name: string, args: string[]): Promise<T> {
    return JSON.parse(await this.orc(name, [...args, '-o', 'json'])) as T
  }

  private spawnAgent(h: TestbedHost, args: string[], extraEnv: Record<string, string> = {}): void {
    mkdirSync(h.dataDir, { recursive: true, mode: 0o711 })
    const log = createWriteStream(h.log, { flags: 'a' })
    const proc = execa('nsenter', [`--net=/var/run/netns/${h.ns}`, '--', process.execPath, ...NODE_FLAGS, this.bin, ...args], {
      reject: false,
      // Every host's socket is the cluster's admin: tests join through any host (token create) and
      // remove nodes from any; by default a joined node's root is only node-admin (docs/security.md).
      env: { ...process.env, ORC_NETWORK: 'on', ORC_SOCKET_USER: 'admin', ...this.opts.env, ...extraEnv },
      stdin: 'ignore',
      // nsenter execs node: the pid is the agent's.
    })
    proc.stdout?.pipe(log, { end: false })
    proc.stderr?.pipe(log, { end: false })
    h.agent = proc
    h.logStream = log
  }

  private common(h: TestbedHost): string[] {
    return [
      '--data-dir',
      h.dataDir,
      '--name',
      h.name,
      '--listen',
      `${h.ip}:7419`,
      ...(h.ip6 !== undefined ? ['--listen', `[${h.ip6}]:7419`] : []),
      '--network',
      'on',
      '--log-level',
      'info',
    ]
  }

  private async waitAgent(h: TestbedHost, timeoutMs = 300_000): Promise<void> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      if (h.agent?.exitCode !== null && h.agent?.exitCode !== undefined) throw new Error(`agent ${h.name} exited (${h.agent.exitCode}); log: ${this.tail(h)}`)
      if (existsSync(h.socket)) {
        try {
          await this.orc(h.name, ['status'], { timeoutMs: 60_000 })
          return
        } catch {
          // not yet
        }
      }
      if (Date.now() > deadline) throw new Error(`agent ${h.name} not up after ${timeoutMs}ms; log: ${this.tail(h)}`)
      await sleep(200)
    }
  }

  tail(h: TestbedHost, lines = 20): string {
    try {
      return readFileSync(h.log, 'utf8').split('\n').slice(-lines).join('\n')
    } catch {
      return '<no log>'
    }
  }

  /** How many times a host's log says `msg`, by the entries' `reason` ('' when none). */
  countLogged(h: TestbedHost, msg: string): Map<string, number> {
    const out = new Map<string, number>()
    let text: string
    try {
      text = readFileSync(h.log, 'utf8')
    } catch {
      return out
    }
    const needle = `"msg":${JSON.stringify(msg)}`
    for (const line of text.split('\n')) {
      if (!line.includes(needle)) continue
      try {
        const e = JSON.parse(line) as { msg?: string; reason?: unknown }
        if (e.msg !== msg) continue
        const r = typeof e.reason === 'string' ? e.reason : ''
        out.set(r, (out.get(r) ?? 0) + 1)
      } catch {}
    }
    return out
  }

  /**
   * The warnings and errors of a host's log (pino level 40 and above), for a failed test's report:
   * each distinct message (with its reason) once, with how many times it came and its first and
   * last time — a tail alone misses what went wrong a minute before the end.
   */
  warnings(h: TestbedHost, max = 40): string {
    let text: string
    try {
      text = readFileSync(h.log, 'utf8')
    } catch {
      return '<no log>'
    }
    const seen = new Map<string, { n: number; first: number; last: number; line: string }>()
    for (const line of text.split('\n')) {
      if (!line.startsWith('{')) continue
      let e: { level?: number; time?: number; msg?: string; reason?: unknown; peer?: unknown }
      try {
        e = JSON.parse(line)
      } catch {
        continue
      }
      if ((e.level ?? 0) < 40) continue
      const key = `${e.msg} ${typeof e.reason === 'string' ? e.reason : ''} ${typeof e.peer === 'string' ? e.peer : ''}`
      const t = e.time ?? 0
      const s = seen.get(key)
      if (s === undefined) seen.set(key, { n: 1, first: t, last: t, line: line.slice(0, 600) })
      else {
        s.n++
        s.last = t
      }
    }
    const at = (t: number) => new Date(t).toISOString().slice(11, 23)
    const out = [...seen.values()].slice(0, max).map((s) => `${s.n}× ${at(s.first)}–${at(s.last)} ${s.line}`)
    if (seen.size > max) out.push(`… ${seen.size - max} more distinct warnings`)
    return out.length > 0 ? out.join('\n') : '<no warnings>'
  }

  /** `orc up` on the first host of a cluster (`extra`: more flags, e.g. `--cluster home`); also restarts a stopped node. */
  async up(name: string, extra: string[] = []): Promise<void> {
    const h = this.host(name)
    this.spawnAgent(h, ['up', ...this.common(h), ...extra])
    await this.waitAgent(h)
  }

  /**
   * Cut every packet between two groups of hosts (both ways, IPv4 and IPv6) on the internet bridge,
   * with an nftables bridge filter in the bridge's namespace; each group still reaches itself and
   * the rest. Hosts behind a home router are cut by the router's WAN address (so the whole LAN).
   * `oneWay`: only packets from `a` to `b` are dropped (an asymmetric partition: `b` still reaches
   * `a`, whose answers are lost). `heal()` removes every cut.
   */
  async partition(a: string[], b: string[], opts: { oneWay?: boolean } = {}): Promise<void> {
    const addr = (n: string) => {
      const h = this.host(n)
      return h.site === 'internet' ? h.ip : this.routers.get(this.opts.hosts.find((x) => x.name === n)?.router ?? this.router.name)!.wanIp
    }
    const set = (names: string[]) => `{ ${[...new Set(names.map(addr))].join(', ')} }`
    const table = 'orc_testbed_partition'
    const exists = (await execa('ip', ['netns', 'exec', this.inet, 'nft', 'list', 'table', 'bridge', table], { reject: false })).exitCode === 0
    const lines = exists ? [] : [`table bridge ${table} {`, '  chain forward {', '    type filter hook forward priority 0; policy accept;', '  }', '}']
    lines.push(`add rule bridge ${table} forward ip saddr ${set(a)} ip daddr ${set(b)} drop`)
    if (!opts.oneWay) lines.push(`add rule bridge ${table} forward ip saddr ${set(b)} ip daddr ${set(a)} drop`)
    lines.push('')
    await sh('ip', ['netns', 'exec', this.inet, 'nft', '-f', '-'], { input: lines.join('\n') })
  }

  /** Undo every `partition()`. */
  async heal(): Promise<void> {
    await shQuiet('ip', ['netns', 'exec', this.inet, 'nft', 'delete', 'table', 'bridge', 'orc_testbed_partition'])
  }

  /** `orc join <via>` on `name`, with a one-use token from `via` (in ORC_TOKEN: never in argv). */
  async join(name: string, via: string): Promise<void> {
    const h = this.host(name)
    const token = (await this.orc(via, ['token', 'create'])).trim()
    this.spawnAgent(h, ['join', `${this.host(via).ip}:7419`, ...this.common(h)], { ORC_TOKEN: token })
    await this.waitAgent(h)
  }

  /** Stop a host's agent (SIGTERM, then SIGKILL after `graceMs`). */
  async stopAgent(name: string, graceMs = 20_000): Promise<void> {
    const h = this.host(name)
    const p = h.agent
    if (p === undefined) return
    if (p.exitCode === null || p.exitCode === undefined) {
      p.kill('SIGTERM')
      const done = await Promise.race([p.then(() => true), sleep(graceMs).then(() => false)])
      if (!done) {
        p.kill('SIGKILL')
        await p
      }
    }
    h.agent = undefined
    h.logStream?.end()
  }

  /** Pod namespaces an agent created (from the names file it keeps in its data dir). */
  private podNamespaces(all: string[]): string[] {
    const out: string[] = []
    for (const h of this.hosts.values()) {
      try {
        const names = JSON.parse(readFileSync(join(h.dataDir, 'network.json'), 'utf8')) as { podNetnsPrefix?: string }
        if (names.podNetnsPrefix) out.push(...all.filter((n) => n.startsWith(names.podNetnsPrefix!)))
      } catch {
        // that agent never brought its network up
      }
    }
    return out
  }

  private async killNamespace(ns: string): Promise<void> {
    const r = await execa('ip', ['netns', 'pids', ns], { reject: false })
    const pids = String(r.stdout)
      .split('\n')
      .map(Number)
      .filter((n) => Number.isInteger(n) && n > 0 && n !== process.pid)
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL')
      } catch {
        // gone already
      }
    }
    await shQuiet('ip', ['netns', 'del', ns])
  }

  /** Tear everything down; safe to call twice and after a failed create. */
  async destroy(): Promise<void> {
    if (this.destroyed) return
    this.destroyed = true
    await Promise.all([...this.hosts.keys()].map((n) => this.stopAgent(n).catch(() => {})))
    const list = String((await execa('ip', ['netns', 'list'], { reject: false })).stdout)
      .split('\n')
      .map((l) => l.split(' ')[0]!)
      .filter(Boolean)
    for (const ns of [...this.podNamespaces(list), ...[...this.namespaces].reverse()]) await this.killNamespace(ns)
    if (!this.opts.keepWorkDir) rmSync(this.workDir, { recursive: true, force: true })
  }
}
