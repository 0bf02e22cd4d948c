/**
 * Service virtual addresses ("ClusterIP"): every ClusterIP service gets a stable IPv6 address in
 * `PREFIX:0:1::/80` (subnet 0 of the cluster /48, which no node ever gets), a hash of its namespace
 * and name, so every node derives the same address and nothing is written. Each node load-balances
 * connections to it with nftables: DNAT to a random ready endpoint (`numgen random mod N` into a
 * verdict map, one chain per endpoint, port → targetPort), for pods (from their veths) and for the
 * node's own processes (the output hook). Connections to a virtual address with no ready endpoint
 * are refused at once (TCP reset, ICMPv6 for UDP) instead of timing out.
 */
import { createHash } from 'node:crypto'
import { type EndpointPod, type EndpointService, OrcError, serviceEndpoints } from '../model/index.ts'
import { type Host, ip, ipJson } from './exec.ts'
import { formatIPv6, formatPrefix, type IpPrefix, parseIPv6, parsePrefix } from './ip.ts'
import { applyNftRuleset, deleteNftTable, listNftTable } from './nft.ts'

/** The /80 of subnet 0 that holds service virtual addresses: `PREFIX:0:1::/80`. */
export function serviceVirtualRange(cluster: IpPrefix): IpPrefix {
  if (cluster.family !== 6 || cluster.len !== 48) throw new OrcError('invalid', `cluster prefix must be an IPv6 /48, got ${formatPrefix(cluster)}`)
  const base = cluster.addr & ~((1n << 80n) - 1n)
  return { family: 6, addr: base | (1n << 48n), len: 80 }
}

/**
 * The /80 that holds the virtual addresses of a federation's shared services: `PREFIX:0:1::/80` of
 * a ULA /48 derived from the federation id (as a cluster's is from its id), so every node of every
 * member cluster derives the same addresses, and none lies in a member cluster's /48 unless the
 * 40-bit hashes collide (the planner then leaves the federation's services out).
 */
export function federationVirtualRange(federationId: string): IpPrefix {
  if (federationId.length === 0) throw new OrcError('invalid', 'federation id is empty')
  const h = createHash('sha256').update(`orc-federation-vip\0${federationId}`, 'utf8').digest()
  let gid = 0n
  for (let i = 0; i < 5; i++) gid = (gid << 8n) | BigInt(h[i]!)
  return serviceVirtualRange({ family: 6, addr: (0xfdn << 120n) | (gid << 80n), len: 48 })
}

/** What the address is derived from (a stored Service fits). */
export interface VirtualAddressService {
  metadata: { name: string; namespace?: string }
  spec?: { type?: string }
}

/** Whether a service gets a virtual address: `spec.type` ClusterIP (the default), not Headless. */
export function hasVirtualAddress(svc: VirtualAddressService): boolean {
  return (svc.spec?.type ?? 'ClusterIP') === 'ClusterIP'
}

/**
 * The service's virtual address (canonical text), or undefined for a Headless service. 48 bits of
 * sha256(namespace, name) in the range (never its `::` network address): two services of a cluster
 * share one with a probability of about n²/2⁴⁹ (2·10⁻⁷ for 10 000 services); should it happen, the
 * ruleset keeps the first by namespace/name and `servicesWithSharedAddress` names the other.
 */
export function serviceVirtualAddress(svc: VirtualAddressService, cluster: IpPrefix): string | undefined {
  return hasVirtualAddress(svc) ? addressInRange(svc, serviceVirtualRange(cluster)) : undefined
}

/** A shared service's virtual address (canonical text) in its federation's range, or undefined for a Headless service. */
export function sharedServiceVirtualAddress(svc: VirtualAddressService, federationId: string): string | undefined {
  return hasVirtualAddress(svc) ? addressInRange(svc, federationVirtualRange(federationId)) : undefined
}

function addressInRange(svc: VirtualAddressService, range: IpPrefix): string {
  const h = createHash('sha256')
    .update(`orc-service-vip\0${svc.metadata.namespace ?? 'default'}\0${svc.metadata.name}`, 'utf8')
    .digest()
  let v = 0n
  for (let i = 0; i < 6; i++) v = (v << 8n) | BigInt(h[i]!)
  if (v === 0n) v = 1n
  return formatIPv6(range.addr | v)
}

/** One load-balanced port of a virtual address. */
export interface VirtualPort {
  protocol: 'TCP' | 'UDP'
  port: number
  /** Ready endpoints: pod address and the port it listens on. */
  backends: { address: string; port: number }[]
  /**
   * When set, only connections from these addresses are balanced (the rest are refused): a shared
   * service whose endpoints are all in other clusters, reachable only from this node's shared pods.
   */
  sources?: string[]
}

export interface VirtualService {
  /** `NS/NAME`, for comments in the ruleset. */
  key: string
  address: string
  ports: VirtualPort[]
}

export interface ServiceRulesetOptions {
  /** nftables table (family ip6), replaced whole. */
  table: string
  /** Host-side pod veths match `<vethPrefix>*`: connections from pods are load-balanced in prerouting. */
  vethPrefix: string
  /** The virtual range (serviceVirtualRange): what is not DNATed there is refused. */
  range: IpPrefix
  /** The ranges of the federations whose shared services this node balances (federationVirtualRange), treated alike. */
  federatedRanges?: readonly IpPrefix[]
  /** The node's own address (its /64 `::1`): the source of a pod's connection that lands back on itself. */
  gateway: string
  services: readonly VirtualService[]
  /**
   * Addresses of this node that only send (its federated ingress address): nothing may open a
   * connection to them, only the replies to the connections the node opened from them come in.
   */
  sendOnly?: readonly string[]
}

function ip6(text: string): string {
  return formatIPv6(parseIPv6(text))
}

/**
 * The whole ruleset, replaced atomically (`table / delete table / table {…}`, as nft.ts does).
 * Chains per service port (`svc_I_J`) pick an endpoint chain (`ep_I_J_K`) at random; conntrack keeps
 * a connection on the endpoint its first packet chose. A pod that reaches itself through its
 * service's address (hairpin) is SNATed to the node's address, so the reply goes through the node
 * and is translated back; otherwise the pod would answer itself directly and the client would drop it.
 */
export function renderServiceRuleset(o: ServiceRulesetOptions): string {
  const ranges = [o.range, ...(o.federatedRanges ?? [])].map(formatPrefix)
  const t = o.table
  const dispatch: string[] = []
  const chains: string[] = []
  const hairpin = new Set<string>()
  o.services.forEach((svc, i) => {
    const vip = ip6(svc.address)
    svc.ports.forEach((p, j) => {
      if (p.backends.length === 0 || p.sources?.length === 0) return
      const proto = p.protocol === 'UDP' ? 'udp' : 'tcp'
      const name = `svc_${i}_${j}`
      const from = p.sources === undefined ? '' : `ip6 saddr { ${p.sources.map(ip6).join(', ')} } `
      dispatch.push(`\t\t${from}ip6 daddr ${vip} ${proto} dport ${p.port} jump ${name} comment "${svc.key} ${p.port}/${p.protocol}"`)
      const eps = p.backends.map((b, k) => {
        const addr = ip6(b.address)
        // Backends behind a source filter are in other clusters: never this node's own pods.
        if (p.sources === undefined) hairpin.add(addr)
        chains.push(`\tchain ${name}_${k} {`, `\t\tmeta l4proto ${proto} dnat ip6 to [${addr}]:${b.port}`, `\t}`)
        return `${k} : jump ${name}_${k}`
      })
      chains.push(`\tchain ${name} {`, `\t\tnumgen random mod ${eps.length} vmap { ${eps.join(', ')} }`, `\t}`)
    })
  })
  const refuse = ranges.flatMap((range) => [
    `\t\tip6 daddr ${range} meta l4proto tcp reject with tcp reset`,
    `\t\tip6 daddr ${range} reject with icmpv6 type port-unreachable`,
  ])
  return [
    `table ip6 ${t}`,
    `delete table ip6 ${t}`,
    `table ip6 ${t} {`,
    `\tchain prerouting {`,
    `\t\ttype nat hook prerouting priority dstnat; policy accept;`,
    ...ranges.map((range) => `\t\tiifname "${o.vethPrefix}*" ip6 daddr ${range} jump services`),
    `\t}`,
    `\tchain output {`,
    // `dstnat` names a priority only in prerouting for older nft; -100 is its value.
    `\t\ttype nat hook output priority -100; policy accept;`,
    ...ranges.map((range) => `\t\tip6 daddr ${range} jump services`),
    `\t}`,
    `\tchain services {`,
    ...dispatch,
    `\t}`,
    ...chains,
    `\tchain postrouting {`,
    `\t\ttype nat hook postrouting priority srcnat; policy accept;`,
    ...[...hairpin].sort().map((a) => `\t\tct status dnat ip6 saddr ${a} ip6 daddr ${a} snat ip6 to ${ip6(o.gateway)}`),
    `\t}`,
    // Not translated above: no ready endpoint (or a port the service does not have).
    `\tchain forward {`,
    `\t\ttype filter hook forward priority filter; policy accept;`,
    ...refuse,
    `\t}`,
    ...((o.sendOnly ?? []).length === 0
      ? []
      : [
          `\tchain send_only {`,
          `\t\ttype filter hook input priority filter; policy accept;`,
          ...(o.sendOnly ?? []).map((a) => `\t\tip6 daddr ${ip6(a)} ct state new drop`),
          `\t}`,
        ]),
    `\tchain refuse_local {`,
    `\t\ttype filter hook output priority filter; policy accept;`,
    ...refuse,
    `\t}`,
    `}`,
    '',
  ].join('\n')
}

/**
 * Services whose address another one already has (`NS/NAME` of the later by namespace/name), and
 * the list without them: the input of renderServiceRuleset must have distinct addresses.
 */
export function servicesWithSharedAddress(services: readonly VirtualService[]): { kept: VirtualService[]; shared: string[] } {
  const seen = new Set<string>()
  const kept: VirtualService[] = []
  const shared: string[] = []
  for (const s of [...services].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))) {
    const a = ip6(s.address)
    if (seen.has(a)) shared.push(s.key)
    else {
      seen.add(a)
      kept.push(s)
    }
  }
  return { kept, shared }
}

/**
 * What every node load-balances: each ClusterIP service's address and, per port, its ready
 * endpoints (an endpoint whose named targetPort its pod does not declare is left out of that port).
 * `shared` names services left out because an earlier one has their address.
 */
export function planVirtualServices(
  services: readonly (EndpointService & VirtualAddressService)[],
  pods: readonly EndpointPod[],
  cluster: IpPrefix,
): { services: VirtualService[]; shared: string[] } {
  const out: VirtualService[] = []
  for (const svc of services) {
    const address = serviceVirtualAddress(svc, cluster)
    if (address === undefined) continue
    const eps = serviceEndpoints(svc, pods).endpoints.filter((e) => e.ready && e.address !== undefined)
    const ports: VirtualPort[] = (svc.spec?.ports ?? []).map((p) => ({
      protocol: p.protocol ?? 'TCP',
      port: p.port,
      backends: eps.flatMap((e) => {
        const ep = e.ports.find((x) => x.port === p.port && x.protocol === (p.protocol ?? 'TCP'))
        return ep === undefined ? [] : [{ address: e.address!, port: ep.targetPort }]
      }),
    }))
    out.push({ key: `${svc.metadata.namespace ?? 'default'}/${svc.metadata.name}`, address, ports })
  }
  const { kept, shared } = servicesWithSharedAddress(out)
  return { services: kept, shared }
}

/** Routes of the virtual range carry this protocol (not the WireGuard driver's 79, which it prunes). */
export const SERVICE_ROUTE_PROTOCOL = 80

export interface ServiceNatConfig extends Omit<ServiceRulesetOptions, 'table' | 'vethPrefix'> {
  /** The node's WireGuard interface: the virtual range is routed there so the node's own connect() finds a route; DNAT then re-routes. */
  iface: string
}

export interface ServiceNatDriver {
  /** Apply the whole desired state; `changed` is false when the ruleset and route were already in place. */
  set(config: ServiceNatConfig): Promise<{ changed: boolean; actions: string[] }>
  down(): Promise<{ changed: boolean; removed: string[] }>
}

/** nftables + one route per virtual range, in the node's network namespace (`netns` for the testbed). */
export class NftServiceNatDriver implements ServiceNatDriver {
  private listing: string | undefined
  private rendered = ''

  constructor(
    private readonly host: Host,
    private readonly o: { table: string; vethPrefix: string },
  ) {}

  async set(config: ServiceNatConfig): Promise<{ changed: boolean; actions: string[] }> {
    const actions: string[] = []
    // `src`: the node's own address, never another one on the interface (the resolver's ::53 is on
    // every node, so a pod's answer to it would never come back).
    const src = ip6(config.gateway)
    const wanted = [config.range, ...(config.federatedRanges ?? [])].map(formatPrefix)
    const routes = await ipJson<{ dst: string; prefsrc?: string }[]>(this.host, [
      '-6',
      'route',
      'show',
      'dev',
      config.iface,
      'proto',
      String(SERVICE_ROUTE_PROTOCOL),
    ])
    const have = new Map<string, string | undefined>()
    for (const r of routes ?? []) {
      try {
        have.set(formatPrefix(parsePrefix(r.dst, 6)), r.prefsrc)
      } catch {
        // not a prefix of ours
      }
    }
    for (const range of wanted) {
      const prefsrc = have.get(range)
      if (prefsrc !== undefined && ip6(prefsrc) === src) continue
      await ip(
        this.host,
        ['-6', 'route', 'replace', range, 'dev', config.iface, 'proto', String(SERVICE_ROUTE_PROTOCOL), 'src', src],
        `route ${range} via ${config.iface}`,
      )
      actions.push(`route ${range} via ${config.iface} from ${src}`)
    }
    // A federation this node no longer balances (left, removed): its range goes.
    for (const dst of have.keys()) {
      if (wanted.includes(dst) || !dst.endsWith('/80')) continue
      await ip(this.host, ['-6', 'route', 'del', dst, 'dev', config.iface, 'proto', String(SERVICE_ROUTE_PROTOCOL)], `remove route ${dst}`)
      actions.push(`remove route ${dst}`)
    }
    const ruleset = renderServiceRuleset({ ...config, table: this.o.table, vethPrefix: this.o.vethPrefix })
    const current = await listNftTable(this.host, this.o.table, 'ip6')
    if (current === undefined || current !== this.listing || ruleset !== this.rendered) {
      await applyNftRuleset(this.host, ruleset, `apply nftables table ip6 ${this.o.table}`)
      this.listing = await listNftTable(this.host, this.o.table, 'ip6')
      this.rendered = ruleset
      actions.push(`apply service load balancing (${config.services.length} address(es))`)
    }
    return { changed: actions.length > 0, actions }
  }

  async down(): Promise<{ changed: boolean; removed: string[] }> {
    const removed: string[] = []
    if (await deleteNftTable(this.host, this.o.table, 'ip6')) removed.push(`nftables table ip6 ${this.o.table}`)
    this.listing = undefined
    this.rendered = ''
    return { changed: removed.length > 0, removed }
  }
}
