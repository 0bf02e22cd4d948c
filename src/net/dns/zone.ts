/**
 * The cluster's DNS records (pure): built from the replicated Services and Pods, the same on every
 * node. Names (docs/services.md):
 *
 *   SERVICE.NS.svc.DOMAIN             AAAA  the ready endpoints' addresses
 *   _PORT._tcp.SERVICE.NS.svc.DOMAIN  SRV   one per ready endpoint: its port, target POD.NS.pod.DOMAIN
 *   POD.NS.pod.DOMAIN                 AAAA  the pod's address (any phase, while it has one)
 *   reverse of a pod address          PTR   POD.NS.pod.DOMAIN
 *
 * Every name under DOMAIN that is an ancestor of one of these exists (an empty answer, not
 * NXDOMAIN). The structure keeps names from colliding: services live under `svc`, pods under `pod`,
 * port names start with `_` (which no object name can).
 */
import { type EndpointPod, type EndpointService, serviceEndpoints } from '../../model/index.ts'
import { parseIPv6 } from '../ip.ts'

export interface SrvTarget {
  priority: number
  weight: number
  port: number
  target: string
}

export interface ZoneRecords {
  aaaa: string[]
  srv: SrvTarget[]
  ptr: string[]
}

export interface DnsZone {
  /** Lowercase, no trailing dot (`cluster.local`). */
  domain: string
  /** Names (lowercase, no trailing dot) with records. */
  records: Map<string, ZoneRecords>
  /** Names that exist under the domain (with records, or ancestors of such). */
  names: Set<string>
}

export interface ZoneInput {
  domain: string
  services: Iterable<EndpointService>
  pods: Iterable<EndpointPod>
  /**
   * A service's virtual address when this node load-balances it (ClusterIP: docs/services.md);
   * undefined — Headless, or no balancing here — answers the ready pods' addresses instead.
   */
  virtualAddress?: (svc: EndpointService) => string | undefined
}

/** An IPv6 address → its reverse name `…ip6.arpa` (32 nibbles, lowercase). */
export function reverseName(ipv6: string): string {
  const hex = parseIPv6(ipv6).toString(16).padStart(32, '0')
  return `${[...hex].reverse().join('.')}.ip6.arpa`
}

/** The address a reverse name under ip6.arpa stands for (32 nibbles), or undefined. */
export function addressOfReverse(name: string): bigint | undefined {
  const m = /^((?:[0-9a-f]\.){32})ip6\.arpa$/.exec(name)
  if (!m) return undefined
  return BigInt(`0x${m[1]!.split('.').slice(0, 32).reverse().join('')}`)
}

export function normalizeDomain(domain: string): string {
  return domain.toLowerCase().replace(/\.+$/, '')
}

function recordsOf(zone: DnsZone, name: string): ZoneRecords {
  let r = zone.records.get(name)
  if (r === undefined) {
    r = { aaaa: [], srv: [], ptr: [] }
    zone.records.set(name, r)
  }
  return r
}

/** Add `name` and its ancestors down to the domain to the names that exist. */
function addName(zone: DnsZone, name: string): void {
  let n = name
  while (n.length > zone.domain.length) {
    zone.names.add(n)
    const dot = n.indexOf('.')
    if (dot < 0) break
    n = n.slice(dot + 1)
  }
  zone.names.add(zone.domain)
}

/** Build the zone from the stored services and pods. */
export function buildZone(input: ZoneInput): DnsZone {
  const domain = normalizeDomain(input.domain)
  const zone: DnsZone = { domain, records: new Map(), names: new Set([domain, `svc.${domain}`, `pod.${domain}`]) }
  const pods = [...input.pods]
  for (const pod of pods) {
    const ipv6 = (pod.status as { network?: { ipv6?: unknown } } | undefined)?.network?.ipv6
    if (typeof ipv6 !== 'string' || !ipv6.includes(':')) continue
    let rev: string
    try {
      rev = reverseName(ipv6)
    } catch {
      continue // a malformed address in a status (untrusted): no record
    }
    const ns = pod.metadata.namespace ?? 'default'
    const name = `${pod.metadata.name}.${ns}.pod.${domain}`
    recordsOf(zone, name).aaaa.push(ipv6)
    addName(zone, name)
    const ptr = recordsOf(zone, rev).ptr
    if (!ptr.includes(name)) ptr.push(name)
  }
  for (const svc of input.services) {
    const ns = svc.metadata.namespace ?? 'default'
    const base = `${svc.metadata.name}.${ns}.svc.${domain}`
    addName(zone, base)
    const vip = input.virtualAddress?.(svc)
    if (vip !== undefined) {
      // ClusterIP: one stable address (the node's nftables pick a ready pod per connection), SRV
      // records name the service itself on its own ports, and the address reverses to the name.
      recordsOf(zone, base).aaaa.push(vip)
      try {
        const ptr = recordsOf(zone, reverseName(vip)).ptr
        if (!ptr.includes(base)) ptr.push(base)
      } catch {}
      for (const p of svc.spec?.ports ?? []) {
        if (p.name === undefined) continue
        const srvName = `_${p.name}._${(p.protocol ?? 'TCP').toLowerCase()}.${base}`
        addName(zone, srvName)
        recordsOf(zone, srvName).srv.push({ priority: 0, weight: 100, port: p.port, target: base })
      }
      continue
    }
    const eps = serviceEndpoints(svc, pods).endpoints.filter((e) => e.ready)
    const r = recordsOf(zone, base)
    for (const e of eps) if (!r.aaaa.includes(e.address!)) r.aaaa.push(e.address!)
    for (const p of svc.spec?.ports ?? []) {
      if (p.name === undefined) continue
      const srvName = `_${p.name}._${(p.protocol ?? 'TCP').toLowerCase()}.${base}`
      addName(zone, srvName)
      const srv = recordsOf(zone, srvName).srv
      for (const e of eps) {
        const ep = e.ports.find((x) => x.name === p.name)
        if (ep !== undefined) srv.push({ priority: 0, weight: 100, port: ep.targetPort, target: `${e.pod}.${ns}.pod.${domain}` })
      }
    }
  }
  return zone
}
