/**
 * WireGuard interface driver: `set(fullConfig)` makes one interface (kernel module, else the
 * wireguard-go daemon), its keys and peers (`wg syncconf`), addresses and per-peer routes (`ip`)
 * match the config, touching only what differs, and says whether anything did.
 */
import type { Logger } from 'pino'
import type { Clock } from '../effects/index.ts'
import { OrcError, wrapError } from '../model/index.ts'
import { type Host, ip, ipCommand, ipJson, nsCommand, type ProcessTable, pollUntil, runChecked } from './exec.ts'
import { canonicalIp, canonicalPrefix, formatPrefix, parsePrefix, prefixNetwork } from './ip.ts'
import { isWireGuardKey } from './keys.ts'
import { defaultNetComponents, type NetComponents, WIREGUARD_DEFAULTS, type WireGuardDriverOptions } from './options.ts'
import { diffRoutes, type IpRouteJson, isEmptyDiff, type Route, routeArgs, routesFromIpJson } from './routes.ts'

export type WireGuardMode = 'kernel' | 'wireguard-go'

export interface WireGuardPeer {
  publicKey: string
  /** `ip:port` or `[ipv6]:port` (an IP literal: the store holds observed addresses, not names). */
  endpoint?: string
  allowedIps: string[]
  /** Seconds; 0 or undefined = off. */
  persistentKeepalive?: number
}

export interface WireGuardConfig {
  iface: string
  privateKey: string
  listenPort: number
  /** Interface address(es) with prefix length, e.g. the node's `prefix::1/64`. */
  address: string | string[]
  peers: WireGuardPeer[]
  mtu?: number
}

export interface WireGuardSetResult {
  changed: boolean
  mode: WireGuardMode
  /** What was done, in order (empty when nothing changed): for logs and dry-run style output. */
  actions: string[]
}

export interface WireGuardPeerStatus {
  publicKey: string
  endpoint?: string
  allowedIps: string[]
  /** Unix time in ms of the latest handshake; undefined = never. */
  latestHandshakeMs?: number
  rxBytes: number
  txBytes: number
  persistentKeepalive?: number
}

export interface WireGuardStatus {
  iface: string
  publicKey: string
  listenPort: number
  peers: WireGuardPeerStatus[]
}

export interface WireGuardDriver {
  set(config: WireGuardConfig): Promise<WireGuardSetResult>
  /** Undefined when the interface does not exist. */
  status(): Promise<WireGuardStatus | undefined>
  /** Remove the interface (and its routes), stop its wireguard-go. Safe to repeat. */
  down(): Promise<{ changed: boolean }>
}

// ---- pure helpers -------------------------------------------------------------------------------

export interface WgDump {
  privateKey: string
  publicKey: string
  listenPort: number
  peers: WireGuardPeerStatus[]
}

/** Parse `wg show IFACE dump` (tab-separated; first line the interface, then one per peer). */
export function parseWgDump(text: string): WgDump {
  const lines = text.split('\n').filter((l) => l.trim() !== '')
  const head = lines[0]?.split('\t')
  if (head === undefined || head.length < 4) throw new OrcError('parse', 'parse wg dump: no interface line')
  const peers: WireGuardPeerStatus[] = []
  for (const line of lines.slice(1)) {
    const f = line.split('\t')
    if (f.length < 8) throw new OrcError('parse', 'parse wg dump: short peer line')
    const [publicKey, , endpoint, allowed, handshake, rx, tx, keepalive] = f as [string, string, string, string, string, string, string, string]
    const p: WireGuardPeerStatus = {
      publicKey,
      allowedIps: allowed === '(none)' ? [] : allowed.split(','),
      rxBytes: Number(rx),
      txBytes: Number(tx),
    }
    if (endpoint !== '(none)') p.endpoint = endpoint
    if (handshake !== '0') p.latestHandshakeMs = Number(handshake) * 1000
    if (keepalive !== 'off' && keepalive !== '0') p.persistentKeepalive = Number(keepalive)
    peers.push(p)
  }
  return { privateKey: head[0]!, publicKey: head[1]!, listenPort: Number(head[2]), peers }
}

/** Canonical `ip:port` / `[ipv6]:port`; throws OrcError 'invalid' for names or bad ports. */
export function canonicalEndpoint(text: string): string {
  const m = /^\[([^\]]+)\]:([0-9]{1,5})$/.exec(text) ?? /^([0-9.]+):([0-9]{1,5})$/.exec(text)
  const port = m ? Number(m[2]) : NaN
  if (!m || port < 1 || port > 65535) {
    throw new OrcError('invalid', `invalid WireGuard endpoint ${JSON.stringify(text)}: want ip:port or [ipv6]:port`)
  }
  const host = canonicalIp(m[1]!)
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
}

function addresses(config: WireGuardConfig): string[] {
  const list = Array.isArray(config.address) ? config.address : [config.address]
  return list.map((a) => {
    const p = parsePrefix(a)
    return `${canonicalIp(a.split('/')[0]!)}/${p.len}`
  })
}

/** Validate and normalise a config; throws OrcError 'invalid' with the offending field. */
export function normalizeWireGuardConfig(config: WireGuardConfig): WireGuardConfig {
  if (!/^[A-Za-z0-9_.-]{1,15}$/.test(config.iface)) {
    throw new OrcError('invalid', `invalid interface name ${JSON.stringify(config.iface)}`)
  }
  if (!isWireGuardKey(config.privateKey)) throw new OrcError('invalid', `invalid private key for ${config.iface}`)
  if (!Number.isInteger(config.listenPort) || config.listenPort < 0 || config.listenPort > 65535) {
    throw new OrcError('invalid', `invalid listen port ${config.listenPort}`)
  }
  const seen = new Set<string>()
  const peers = config.peers.map((p) => {
    if (!isWireGuardKey(p.publicKey)) throw new OrcError('invalid', `invalid peer public key ${JSON.stringify(p.publicKey)}`)
    if (seen.has(p.publicKey)) throw new OrcError('invalid', `duplicate peer ${p.publicKey}`)
    seen.add(p.publicKey)
    const out: WireGuardPeer = {
      publicKey: p.publicKey,
      allowedIps: [...new Set(p.allowedIps.map((a) => canonicalPrefix(a)))].sort(),
    }
    if (p.endpoint !== undefined) out.endpoint = canonicalEndpoint(p.endpoint)
    if (p.persistentKeepalive) out.persistentKeepalive = p.persistentKeepalive
    return out
  })
  peers.sort((a, b) => (a.publicKey < b.publicKey ? -1 : a.publicKey > b.publicKey ? 1 : 0))
  return { ...config, address: addresses(config).sort(), peers, mtu: config.mtu ?? WIREGUARD_DEFAULTS.mtu }
}

/** `wg setconf`/`syncconf` text. Goes to stdin so the private key never shows in argv. */
export function renderWgConfig(config: WireGuardConfig): string {
  const lines = ['[Interface]', `PrivateKey = ${config.privateKey}`]
  if (config.listenPort) lines.push(`ListenPort = ${config.listenPort}`)
  for (const p of config.peers) {
    lines.push('', '[Peer]', `PublicKey = ${p.publicKey}`)
    if (p.allowedIps.length > 0) lines.push(`AllowedIPs = ${p.allowedIps.join(', ')}`)
    if (p.endpoint !== undefined) lines.push(`Endpoint = ${p.endpoint}`)
    if (p.persistentKeepalive) lines.push(`PersistentKeepalive = ${p.persistentKeepalive}`)
  }
  return `${lines.join('\n')}\n`
}

/** Whether the running device already has this (normalised) config's keys, port and peers. */
export function wgDumpMatches(dump: WgDump, config: WireGuardConfig): boolean {
  if (dump.privateKey !== config.privateKey) return false
  if (config.listenPort !== 0 && dump.listenPort !== config.listenPort) return false
  if (dump.peers.length !== config.peers.length) return false
  const byKey = new Map(dump.peers.map((p) => [p.publicKey, p]))
  for (const want of config.peers) {
    const have = byKey.get(want.publicKey)
    if (have === undefined) return false
    const haveIps = have.allowedIps.map((a) => canonicalPrefix(a)).sort()
    if (haveIps.join(',') !== want.allowedIps.join(',')) return false
    // A peer without a configured endpoint learns one when it hears from the other side: not drift.
    if (want.endpoint !== undefined && (have.endpoint === undefined || canonicalEndpoint(have.endpoint) !== want.endpoint)) return false
    if ((have.persistentKeepalive ?? 0) !== (want.persistentKeepalive ?? 0)) return false
  }
  return true
}

/** Routes the interface needs: each peer's allowed-ips, except those its own addresses cover. */
export function desiredWireGuardRoutes(config: WireGuardConfig): Route[] {
  const connected = new Set((config.address as string[]).map((a) => formatPrefix(prefixNetwork(parsePrefix(a)))))
  const out: Route[] = []
  for (const p of config.peers) {
    for (const a of p.allowedIps) if (!connected.has(a)) out.push({ dst: a, dev: config.iface })
  }
  return out
}

// ---- the driver ---------------------------------------------------------------------------------

interface LinkJson {
  ifname: string
  flags?: string[]
  mtu?: number
  linkinfo?: { info_kind?: string }
}
interface AddrJson {
  addr_info?: { family: string; local: string; prefixlen: number; scope: string }[]
}

export class WireGuardLinkDriver implements WireGuardDriver {
  private readonly host: Host
  private readonly log: Logger
  private readonly processes: ProcessTable
  private readonly clock: Clock
  private readonly proto: number
  private readonly timeoutMs: number
  private mode: WireGuardMode | undefined
  private iface: string | undefined

  constructor(
    components: Partial<NetComponents> = {},
    private readonly options: WireGuardDriverOptions = {},
  ) {
    const c = defaultNetComponents(components)
    this.host = { run: c.run, netns: options.netns }
    this.log = c.logger.child({ module: 'net/wireguard' })
    this.processes = c.processes
    this.clock = c.clock
    this.proto = options.routeProtocol ?? WIREGUARD_DEFAULTS.routeProtocol
    this.timeoutMs = options.processTimeoutMs ?? WIREGUARD_DEFAULTS.processTimeoutMs
    this.mode = options.mode === 'kernel' || options.mode === 'wireguard-go' ? options.mode : undefined
    this.iface = options.iface
  }

  async set(input: WireGuardConfig): Promise<WireGuardSetResult> {
    const config = normalizeWireGuardConfig(input)
    const { iface } = config
    const actions: string[] = []
    try {
      if (this.iface !== undefined && this.iface !== iface) {
        await this.downIface(this.iface)
        actions.push(`remove old interface ${this.iface}`)
      }
      this.iface = iface

      let link = await this.link(iface)
      if (link !== undefined && !this.isWireGuard(link)) {
        throw new OrcError('conflict', `interface ${iface} exists and is not WireGuard (${link.linkinfo?.info_kind ?? 'unknown kind'})`)
      }
      if (link === undefined) {
        await this.createLink(iface)
        actions.push(`create interface (${this.mode})`)
        link = await this.link(iface)
        if (link === undefined) throw new OrcError('internal', `interface ${iface} missing right after creation`)
      } else if (this.mode === undefined) {
        this.mode = link.linkinfo?.info_kind === 'wireguard' ? 'kernel' : 'wireguard-go'
      }

      const dump = parseWgDump((await runChecked(this.host.run, nsCommand(this.host, 'wg', ['show', iface, 'dump']), `read wireguard ${iface}`)).stdout)
      if (!wgDumpMatches(dump, config)) {
        // The config (with the private key) goes through stdin, never argv. `cat |` because wg
        // fopen()s /dev/stdin, which fails on the socket node gives a child as stdin.
        await runChecked(this.host.run, nsCommand(this.host, 'sh', ['-c', 'cat | wg syncconf "$1" /dev/stdin', 'sh', iface]), `configure wireguard ${iface}`, {
          input: renderWgConfig(config),
        })
        actions.push('sync keys and peers')
      }

      if (link.mtu !== config.mtu) {
        await ip(this.host, ['link', 'set', 'dev', iface, 'mtu', String(config.mtu)], `set mtu of ${iface}`)
        actions.push(`set mtu ${config.mtu}`)
      }

      actions.push(...(await this.syncAddresses(iface, config.address as string[])))

      if (!(link.flags ?? []).includes('UP')) {
        await ip(this.host, ['link', 'set', 'dev', iface, 'up'], `bring up ${iface}`)
        actions.push('link up')
      }

      actions.push(...(await this.syncRoutes(iface, desiredWireGuardRoutes(config))))
    } catch (err) {
      throw wrapError(`set wireguard ${iface}`, err)
    }
    const changed = actions.length > 0
    if (changed) this.log.info({ iface, netns: this.options.netns, mode: this.mode, actions }, 'wireguard interface updated')
    return { changed, mode: this.mode!, actions }
  }

  async status(): Promise<WireGuardStatus | undefined> {
    const iface = this.iface
    if (iface === undefined) return undefined
    const [cmd, args] = nsCommand(this.host, 'wg', ['show', iface, 'dump'])
    const r = await this.host.run(cmd, args)
    if (r.exitCode !== 0) return undefined
    const d = parseWgDump(r.stdout)
    return { iface, publicKey: d.publicKey, listenPort: d.listenPort, peers: d.peers }
  }

  /** The mode in use (known after the first `set`, or detected from an existing interface). */
  get currentMode(): WireGuardMode | undefined {
    return this.mode
  }

  async down(): Promise<{ changed: boolean }> {
    const iface = this.iface
    if (iface === undefined) return { changed: false }
    try {
      const changed = await this.downIface(iface)
      if (changed) this.log.info({ iface, netns: this.options.netns }, 'wireguard interface removed')
      return { changed }
    } catch (err) {
      throw wrapError(`remove wireguard ${iface}`, err)
    }
  }

  // ---- internals ----

  private isWireGuard(link: LinkJson): boolean {
    const kind = link.linkinfo?.info_kind
    return kind === 'wireguard' || kind === 'tun' || kind === undefined
  }

  private async link(iface: string): Promise<LinkJson | undefined> {
    const links = await ipJson<LinkJson[]>(this.host, ['-d', 'link', 'show', 'dev', iface])
    return links?.[0]
  }

  private wgGoArgv(iface: string): string[] {
    return ['wireguard-go', iface]
  }

  /** Wait for wireguard-go daemons of `iface` to exit (they do once their tun goes), then kill. */
  private async reapWireGuardGo(iface: string): Promise<boolean> {
    const argv = this.wgGoArgv(iface)
    let pids = await this.processes.find(argv)
    if (pids.length === 0) return false
    if (await pollUntil(this.clock, async () => (await this.processes.find(argv)).length === 0, Math.min(this.timeoutMs, 2000))) return true
    for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
      pids = await this.processes.find(argv)
      for (const pid of pids) this.processes.kill(pid, signal)
      if (await pollUntil(this.clock, async () => (await this.processes.find(argv)).length === 0, this.timeoutMs)) return true
    }
    throw new OrcError('internal', `wireguard-go for ${iface} does not exit`, { pids })
  }

  private async createLink(iface: string): Promise<void> {
    if (this.mode !== 'wireguard-go') {
      const r = await this.host.run(...ipCommand(this.host, ['link', 'add', 'dev', iface, 'type', 'wireguard']))
      if (r.exitCode === 0) {
        this.mode = 'kernel'
        return
      }
      if (this.mode === 'kernel') throw new OrcError('unavailable', `create wireguard link ${iface}: ${r.stderr.trim()}`)
      this.log.debug({ iface, stderr: r.stderr.trim() }, 'no kernel wireguard, using wireguard-go')
    }
    this.mode = 'wireguard-go'
    // A daemon from a link deleted by hand may still be shutting down and holding the socket.
    await this.reapWireGuardGo(iface)
    await runChecked(this.host.run, nsCommand(this.host, 'wireguard-go', [iface]), `start wireguard-go ${iface}`, {
      // No LOG_LEVEL: the daemon then writes to /dev/null rather than holding our pipes open.
      // WG_PROCESS_FOREGROUND must be absent, not empty: wireguard-go appends its own "=1" for the
      // daemon child and Go reads the first duplicate, so an empty one makes it fork forever.
      env: { LOG_LEVEL: undefined, WG_PROCESS_FOREGROUND: undefined },
    })
    const [cmd, args] = nsCommand(this.host, 'wg', ['show', iface, 'dump'])
    const up = await pollUntil(this.clock, async () => (await this.host.run(cmd, args)).exitCode === 0, this.timeoutMs)
    if (!up) throw new OrcError('unavailable', `wireguard-go ${iface} did not come up`)
  }

  private async syncAddresses(iface: string, want: string[]): Promise<string[]> {
    const info = (await ipJson<AddrJson[]>(this.host, ['addr', 'show', 'dev', iface]))?.[0]?.addr_info ?? []
    const have = new Set(info.filter((a) => a.scope !== 'link').map((a) => `${canonicalIp(a.local)}/${a.prefixlen}`))
    const actions: string[] = []
    for (const a of want) {
      if (have.has(a)) continue
      const v6 = a.includes(':')
      // An IPv6 /128 is a service address (the cluster resolver's): deprecated at once (preferred_lft 0)
      // so the kernel never picks it as the source of the node's own connections. Every node has it,
      // so a pod's answer to it would stay on the pod's node.
      const service = v6 && a.endsWith('/128') ? ['preferred_lft', '0'] : []
      await ip(this.host, [v6 ? '-6' : '-4', 'addr', 'replace', a, 'dev', iface, ...(v6 ? ['nodad'] : []), ...service], `add address ${a} to ${iface}`)
      actions.push(`add address ${a}`)
    }
    for (const a of have) {
      if (want.includes(a)) continue
      await ip(this.host, ['addr', 'del', a, 'dev', iface], `remove address ${a} from ${iface}`)
      actions.push(`remove address ${a}`)
    }
    return actions
  }

  private async syncRoutes(iface: string, desired: Route[]): Promise<string[]> {
    const actual: Route[] = []
    for (const family of [4, 6] as const) {
      const entries = await ipJson<IpRouteJson[]>(this.host, [`-${family}`, 'route', 'show', 'dev', iface, 'proto', String(this.proto)])
      actual.push(...routesFromIpJson(entries ?? [], family, iface))
    }
    const diff = diffRoutes(desired, actual)
    if (isEmptyDiff(diff)) return []
    const lines: string[] = []
    const actions: string[] = []
    for (const r of diff.remove) {
      lines.push(`route del ${routeArgs(r, this.proto).join(' ')}`)
      actions.push(`remove route ${r.dst}`)
    }
    for (const r of [...diff.add, ...diff.replace]) {
      lines.push(`route replace ${routeArgs(r, this.proto).join(' ')}`)
      actions.push(`route ${r.dst} via ${iface}`)
    }
    await ip(this.host, ['-batch', '-'], `update routes of ${iface}`, { input: `${lines.join('\n')}\n` })
    return actions
  }

  private async downIface(iface: string): Promise<boolean> {
    let changed = false
    if ((await this.link(iface)) !== undefined) {
      await ip(this.host, ['link', 'del', 'dev', iface], `delete link ${iface}`)
      changed = true
    }
    if (await this.reapWireGuardGo(iface)) changed = true
    return changed
  }
}
