/**
 * Pod network driver: each pod gets a network namespace and a veth pair to the node, its IPv6
 * address (routed: a /128 on the pod, a /128 route on the node, the node's fe80::1 as next hop) and
 * a node-local IPv4 address for egress, masqueraded by the node. `set` takes the full list of pods.
 */
import { createHash } from 'node:crypto'
import type { Logger } from 'pino'
import type { Clock } from '../effects/index.ts'
import { OrcError, wrapError } from '../model/index.ts'
import { chooseEgressIPv4, EGRESS_IPV4_GATEWAY, EGRESS_IPV4_PREFIX } from './addressing.ts'
import { type Host, ip, ipJson, nsCommand, type ProcessTable, pollUntil, runChecked } from './exec.ts'
import { canonicalIp, formatPrefix, parseIPv4, prefixContains } from './ip.ts'
import { applyNftRuleset, deleteNftTable, listNftTable, renderEgressRuleset, renderHostGuardRuleset } from './nft.ts'
import { defaultNetComponents, type NetComponents, PODNET_DEFAULTS, type PodNetworkDriverOptions } from './options.ts'
import { diffRoutes, type IpRouteJson, normalizeRoute, type Route, routeArgs, routesFromIpJson } from './routes.ts'

export interface PodNetwork {
  /** Pod id, unique on the node: letters, digits, `_.-`, at most 48 chars. */
  id: string
  /** The pod's IPv6 address (in the node's /64). */
  ipv6: string
  /** Node-local egress IPv4; chosen by the allocator when absent (and kept while the pod lives). */
  ipv4?: string
}

export interface PodNetworkConfig {
  pods: PodNetwork[]
  /** Masquerade pods' IPv4 egress (default true). */
  egress?: boolean
}

export interface PodNetworkState {
  id: string
  /** Network namespace name (in /var/run/netns): what the runtime starts the pod in. */
  netns: string
  hostVeth: string
  ipv6: string
  ipv4: string
}

export interface PodNetworkSetResult {
  changed: boolean
  pods: PodNetworkState[]
  actions: string[]
}

export interface PodNetworkDownOptions {
  /** Stop processes still in the pod namespaces first (SIGTERM, then SIGKILL): `orc down`. */
  stopProcesses?: boolean
}

export interface PodNetworkDriver {
  set(config: PodNetworkConfig): Promise<PodNetworkSetResult>
  /** Remove every pod namespace, the NAT table, and forwarding settings this driver turned on. */
  down(opts?: PodNetworkDownOptions): Promise<{ changed: boolean; removed?: string[] }>
}

/** Host-side veth name for a pod: prefix + 8 hex of a hash of the id (names max 15 chars). */
export function hostVethName(vethPrefix: string, podId: string): string {
  return `${vethPrefix}${createHash('sha256').update(podId).digest('hex').slice(0, 8)}`
}

interface LinkAddrJson {
  ifname: string
  flags?: string[]
  addr_info?: { family: string; local: string; prefixlen: number; scope: string }[]
}

const FORWARDING_SYSCTLS = ['net.ipv6.conf.all.forwarding', 'net.ipv4.ip_forward'] as const

export class NetnsPodNetworkDriver implements PodNetworkDriver {
  private readonly host: Host
  private readonly base: Host
  private readonly log: Logger
  private readonly processes: ProcessTable
  private readonly clock: Clock
  private readonly o: Required<Omit<PodNetworkDriverOptions, 'netns' | 'allocateIPv4' | 'podServices'>> & Pick<PodNetworkDriverOptions, 'netns' | 'podServices'>
  private readonly allocate: (podId: string, taken: ReadonlySet<string>) => string
  private readonly ipv4s = new Map<string, string>()
  private nftListing: string | undefined
  private guardListing: string | undefined
  /** Forwarding sysctls this driver switched on, with their previous values, for down(). */
  private readonly sysctlsChanged = new Map<string, string>()

  constructor(components: Partial<NetComponents> = {}, options: PodNetworkDriverOptions = {}) {
    const c = defaultNetComponents(components)
    this.host = { run: c.run, netns: options.netns }
    this.base = { run: c.run }
    this.processes = c.processes
    this.clock = c.clock
    this.log = c.logger.child({ module: 'net/podnet' })
    this.o = {
      netns: options.netns,
      podNetnsPrefix: options.podNetnsPrefix ?? PODNET_DEFAULTS.podNetnsPrefix,
      vethPrefix: options.vethPrefix ?? PODNET_DEFAULTS.vethPrefix,
      nftTable: options.nftTable ?? PODNET_DEFAULTS.nftTable,
      routeProtocol: options.routeProtocol ?? PODNET_DEFAULTS.routeProtocol,
      random: options.random ?? PODNET_DEFAULTS.random,
      podServices: options.podServices,
    }
    if (this.o.vethPrefix.length + 8 > 15) throw new OrcError('invalid', `veth prefix ${this.o.vethPrefix} too long`)
    const random = this.o.random
    this.allocate = options.allocateIPv4 ?? ((_id, taken) => chooseEgressIPv4(taken, random))
  }

  netnsOf(podId: string): string {
    return `${this.o.podNetnsPrefix}${podId}`
  }

  async set(config: PodNetworkConfig): Promise<PodNetworkSetResult> {
    const actions: string[] = []
    const ids = new Set<string>()
    for (const p of config.pods) {
      if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$/.test(p.id)) throw new OrcError('invalid', `invalid pod id ${JSON.stringify(p.id)}`)
      if (ids.has(p.id)) throw new OrcError('invalid', `duplicate pod id ${p.id}`)
      ids.add(p.id)
    }
    try {
      actions.push(...(await this.enableForwarding()))

      const existing = await this.listPodNetns()
      for (const ns of existing) {
        const id = ns.slice(this.o.podNetnsPrefix.length)
        if (ids.has(id)) continue
        await runChecked(this.base.run, ['ip', ['netns', 'del', ns]], `delete pod netns ${ns}`)
        this.ipv4s.delete(id)
        actions.push(`remove pod ${id}`)
      }

      const states: PodNetworkState[] = []
      for (const pod of config.pods) {
        const { state, actions: a } = await this.ensurePod(pod, existing.includes(this.netnsOf(pod.id)))
        states.push(state)
        actions.push(...a)
      }

      if (await this.syncGuard()) actions.push('apply host guard')
      if (config.egress ?? true) {
        if (await this.syncNft()) actions.push('apply egress nat')
      } else if (await deleteNftTable(this.host, this.o.nftTable)) {
        this.nftListing = undefined
        actions.push('remove egress nat')
      }
      const changed = actions.length > 0
      if (changed) this.log.info({ netns: this.o.netns, pods: states.length, actions }, 'pod network updated')
      return { changed, pods: states, actions }
    } catch (err) {
      throw wrapError('set pod network', err)
    }
  }

  async down(opts: PodNetworkDownOptions = {}): Promise<{ changed: boolean; removed: string[] }> {
    const removed: string[] = []
    try {
      for (const ns of await this.listPodNetns()) {
        if (opts.stopProcesses) {
          const n = await this.stopProcessesIn(ns)
          if (n > 0) removed.push(`${n} process(es) in ${ns}`)
        }
        await runChecked(this.base.run, ['ip', ['netns', 'del', ns]], `delete pod netns ${ns}`)
        removed.push(`pod namespace ${ns}`)
      }
      this.ipv4s.clear()
      if (await deleteNftTable(this.host, this.o.nftTable)) removed.push(`nftables table ip ${this.o.nftTable}`)
      this.nftListing = undefined
      if (await deleteNftTable(this.host, this.guardTable(), 'inet')) removed.push(`nftables table inet ${this.guardTable()}`)
      this.guardListing = undefined
      for (const [key, old] of this.sysctlsChanged) {
        await runChecked(this.host.run, nsCommand(this.host, 'sysctl', ['-qw', `${key}=${old}`]), `restore ${key}`)
        removed.push(`${key}=1 (restored to ${old})`)
      }
      this.sysctlsChanged.clear()
    } catch (err) {
      throw wrapError('remove pod network', err)
    }
    if (removed.length > 0) this.log.info({ netns: this.o.netns, removed }, 'pod network removed')
    return { changed: removed.length > 0, removed }
  }

  /** SIGTERM every process in a pod namespace, SIGKILL what is left after a grace period. */
  private async stopProcessesIn(ns: string): Promise<number> {
    const pids = async () => {
      const r = await this.base.run('ip', ['netns', 'pids', ns])
      return r.exitCode === 0
        ? r.stdout
            .split('\n')
            .map(Number)
            .filter((n) => Number.isInteger(n) && n > 1 && n !== process.pid)
        : []
    }
    const first = await pids()
    for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
      for (const pid of await pids()) {
        try {
          this.processes.kill(pid, signal)
        } catch {
          // gone already
        }
      }
      if (await pollUntil(this.clock, async () => (await pids()).length === 0, signal === 'SIGTERM' ? 5000 : 2000, 100)) break
    }
    return first.length
  }

  // ---- internals ----

  private async listPodNetns(): Promise<string[]> {
    const list = (await ipJson<{ name: string }[]>(this.base, ['netns', 'list'])) ?? []
    return list.map((n) => n.name).filter((n) => n.startsWith(this.o.podNetnsPrefix))
  }

  private async enableForwarding(): Promise<string[]> {
    const r = await runChecked(this.host.run, nsCommand(this.host, 'sysctl', ['-n', ...FORWARDING_SYSCTLS]), 'read forwarding sysctls')
    const values = r.stdout.split('\n').map((s) => s.trim())
    const actions: string[] = []
    for (const [i, key] of FORWARDING_SYSCTLS.entries()) {
      if (values[i] === '1') continue
      await runChecked(this.host.run, nsCommand(this.host, 'sysctl', ['-qw', `${key}=1`]), `enable ${key}`)
      if (!this.sysctlsChanged.has(key)) this.sysctlsChanged.set(key, values[i] ?? '0')
      actions.push(`enable ${key}`)
    }
    return actions
  }

  /** The host guard's table (nft.ts renderHostGuardRuleset): `<nftTable>_guard`, family inet. */
  private guardTable(): string {
    return `${this.o.nftTable}_guard`
  }

  private async syncGuard(): Promise<boolean> {
    const current = await listNftTable(this.host, this.guardTable(), 'inet')
    if (current !== undefined && current === this.guardListing) return false
    const ruleset = renderHostGuardRuleset({ table: this.guardTable(), vethPrefix: this.o.vethPrefix, services: this.o.podServices ?? [] })
    await applyNftRuleset(this.host, ruleset, `apply nftables table inet ${this.guardTable()}`)
    this.guardListing = await listNftTable(this.host, this.guardTable(), 'inet')
    return true
  }

  private async syncNft(): Promise<boolean> {
    const current = await listNftTable(this.host, this.o.nftTable)
    if (current !== undefined && current === this.nftListing) return false
    const ruleset = renderEgressRuleset({ table: this.o.nftTable, podRange: formatPrefix(EGRESS_IPV4_PREFIX), vethPrefix: this.o.vethPrefix })
    await applyNftRuleset(this.host, ruleset, `apply nftables table ${this.o.nftTable}`)
    this.nftListing = await listNftTable(this.host, this.o.nftTable)
    return true
  }

  private async ensurePod(pod: PodNetwork, nsExists: boolean): Promise<{ state: PodNetworkState; actions: string[] }> {
    const actions: string[] = []
    const netns = this.netnsOf(pod.id)
    const hostVeth = hostVethName(this.o.vethPrefix, pod.id)
    const ipv6 = canonicalIp(pod.ipv6)
    if (ipv6.includes('.') || !pod.ipv6.includes(':')) throw new OrcError('invalid', `pod ${pod.id}: ipv6 must be an IPv6 address`)
    const podHost: Host = { run: this.host.run, netns }
    const podIf = PODNET_DEFAULTS.podIface

    if (!nsExists) {
      await runChecked(this.base.run, ['ip', ['netns', 'add', netns]], `create pod netns ${netns}`)
      actions.push(`create netns ${netns}`)
    }
    let links = (await ipJson<LinkAddrJson[]>(podHost, ['addr', 'show'])) ?? []
    let eth = links.find((l) => l.ifname === podIf)
    if (eth === undefined) {
      // A lone host end (its pod end is gone) would block the name.
      const stale = await ipJson<unknown[]>(this.host, ['link', 'show', 'dev', hostVeth])
      if (stale !== undefined) await ip(this.host, ['link', 'del', 'dev', hostVeth], `delete stale veth ${hostVeth}`)
      await ip(this.host, ['link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', podIf, 'netns', netns], `create veth ${hostVeth} for pod ${pod.id}`)
      actions.push(`create veth ${hostVeth}`)
      links = (await ipJson<LinkAddrJson[]>(podHost, ['addr', 'show'])) ?? []
      eth = links.find((l) => l.ifname === podIf)
    }

    const global = (eth?.addr_info ?? []).filter((a) => a.scope !== 'link' && a.scope !== 'host')
    const haveV4 = global.find((a) => a.family === 'inet' && prefixContains(EGRESS_IPV4_PREFIX, parseIPv4(a.local)))?.local
    let ipv4 = pod.ipv4 ?? this.ipv4s.get(pod.id) ?? haveV4
    if (ipv4 === undefined) {
      const taken = new Set([...this.ipv4s.values(), EGRESS_IPV4_GATEWAY])
      ipv4 = this.allocate(pod.id, taken)
    }
    ipv4 = canonicalIp(ipv4)
    if (!prefixContains(EGRESS_IPV4_PREFIX, parseIPv4(ipv4))) throw new OrcError('invalid', `pod ${pod.id}: egress IPv4 ${ipv4} is outside 10.88.0.0/16`)
    this.ipv4s.set(pod.id, ipv4)

    // Inside the pod.
    const wantAddrs = [`${ipv6}/128`, `${ipv4}/32`]
    const haveAddrs = new Set(global.map((a) => `${canonicalIp(a.local)}/${a.prefixlen}`))
    const podLines: string[] = []
    const lo = links.find((l) => l.ifname === 'lo')
    if (!(lo?.flags ?? []).includes('UP')) podLines.push('link set lo up')
    if (!(eth?.flags ?? []).includes('UP')) podLines.push(`link set ${podIf} up`)
    for (const a of wantAddrs) if (!haveAddrs.has(a)) podLines.push(`addr replace ${a} dev ${podIf}${a.includes(':') ? ' nodad' : ''}`)
    for (const a of haveAddrs) if (!wantAddrs.includes(a)) podLines.push(`addr del ${a} dev ${podIf}`)
    const podRoutes: Route[] = [
      { dst: '::/0', dev: podIf, via: PODNET_DEFAULTS.hostLinkLocal },
      { dst: `${EGRESS_IPV4_GATEWAY}/32`, dev: podIf },
      { dst: '0.0.0.0/0', dev: podIf, via: EGRESS_IPV4_GATEWAY },
    ]
    const havePodRoutes = [
      ...routesFromIpJson((await ipJson<IpRouteJson[]>(podHost, ['-4', 'route', 'show'])) ?? [], 4),
      ...routesFromIpJson((await ipJson<IpRouteJson[]>(podHost, ['-6', 'route', 'show', 'default'])) ?? [], 6),
    ]
    const podDiff = diffRoutes(podRoutes, havePodRoutes)
    // Order matters: the gateway's /32 before the default route through it.
    for (const r of podRoutes) {
      if ([...podDiff.add, ...podDiff.replace].some((x) => x.dst === normalizeRoute(r).dst)) {
        podLines.push(`route replace ${routeArgs(r).join(' ')}${r.via === undefined ? ' scope link' : ''}`)
      }
    }
    if (podLines.length > 0) {
      await ip(podHost, ['-batch', '-'], `configure pod ${pod.id} network`, { input: `${podLines.join('\n')}\n` })
      actions.push(`configure pod ${pod.id} (${podLines.length} changes)`)
    }

    // On the node.
    const hostLink = (await ipJson<LinkAddrJson[]>(this.host, ['addr', 'show', 'dev', hostVeth]))?.[0]
    const hostLines: string[] = []
    if (!(hostLink?.flags ?? []).includes('UP')) hostLines.push(`link set ${hostVeth} up`)
    const hostAddrs = new Set((hostLink?.addr_info ?? []).map((a) => `${canonicalIp(a.local)}/${a.prefixlen}`))
    if (!hostAddrs.has(`${PODNET_DEFAULTS.hostLinkLocal}/64`)) hostLines.push(`addr replace ${PODNET_DEFAULTS.hostLinkLocal}/64 dev ${hostVeth} nodad`)
    if (!hostAddrs.has(`${EGRESS_IPV4_GATEWAY}/32`)) hostLines.push(`addr replace ${EGRESS_IPV4_GATEWAY}/32 dev ${hostVeth}`)
    const hostRoutes: Route[] = [
      { dst: `${ipv6}/128`, dev: hostVeth },
      { dst: `${ipv4}/32`, dev: hostVeth },
    ]
    const haveHostRoutes: Route[] = []
    for (const family of [4, 6] as const) {
      const e = await ipJson<IpRouteJson[]>(this.host, [`-${family}`, 'route', 'show', 'dev', hostVeth, 'proto', String(this.o.routeProtocol)])
      haveHostRoutes.push(...routesFromIpJson(e ?? [], family, hostVeth))
    }
    const hostDiff = diffRoutes(hostRoutes, haveHostRoutes)
    for (const r of hostDiff.remove) hostLines.push(`route del ${routeArgs(r, this.o.routeProtocol).join(' ')}`)
    for (const r of [...hostDiff.add, ...hostDiff.replace]) hostLines.push(`route replace ${routeArgs(r, this.o.routeProtocol).join(' ')}`)
    if (hostLines.length > 0) {
      await ip(this.host, ['-batch', '-'], `configure node side of pod ${pod.id}`, { input: `${hostLines.join('\n')}\n` })
      actions.push(`configure ${hostVeth} (${hostLines.length} changes)`)
    }
    return { state: { id: pod.id, netns, hostVeth, ipv6, ipv4 }, actions }
  }
}
