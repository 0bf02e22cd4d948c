/**
 * The node network plan (pure): from a snapshot of the replicated store (every Node's published
 * network status, the removal tombstones) and what this node's mesh observes, decide this node's
 * subnet, its WireGuard peers (allowed-ips = each peer's /64) and the endpoint of each. Everything
 * read from the store was written by peers and is untrusted: malformed entries are skipped.
 */
import { createHash } from 'node:crypto'
import { isPlainObject, type OrcObject } from '../../model/index.ts'
import {
  canonicalEndpoint,
  chooseNodeSubnet,
  clusterPrefix,
  EGRESS_IPV4_PREFIX,
  formatPrefix,
  type IpPrefix,
  isWireGuardKey,
  nodePrefix,
  type SubnetId,
  settleSubnetClaims,
  type WireGuardPeer,
} from '../../net/index.ts'
import type { PeerPath } from '../api-types.ts'

export type { PeerPath } from '../api-types.ts'

/** What a node publishes about its network in `Node.status.network` (validated). */
export interface PublishedNetwork {
  name: string
  peerId: string
  publicKey?: string
  subnet?: SubnetId
  listenPort?: number
  /** `ip:port` / `[ipv6]:port` where its WireGuard listens. */
  endpoints: string[]
  removed: boolean
  /** Subnets of the peers it has a fresh direct WireGuard handshake with (relay candidates use it). */
  reach?: ReadonlySet<SubnetId>
  /** Subnet → the `ip:port` it sees a peer behind NAT at (what that peer's NAT maps it to). */
  seen?: ReadonlyMap<SubnetId, string>
  /**
   * It reports that nothing reaches its endpoints unless it sent first (a firewall that drops
   * unsolicited UDP): peers that must dial it have waited in vain (`judgeInbound`). For relaying it
   * counts as behind NAT.
   */
  firewalled?: boolean
}

/** Names this node uses on its host: unique per node, so several agents can share one machine. */
export interface NetworkNames {
  iface: string
  podNetnsPrefix: string
  vethPrefix: string
  nftTable: string
}

export function networkNamesFor(peerId: string): NetworkNames {
  const tag = createHash('sha256').update(`orc-net\0${peerId}`).digest('hex').slice(0, 8)
  return { iface: `orc${tag}`, podNetnsPrefix: `orc-${tag}-`, vethPrefix: `ov${tag.slice(0, 4)}`, nftTable: `orc_${tag}` }
}

function str(v: unknown, max = 256): string | undefined {
  return typeof v === 'string' && v.length > 0 && v.length <= max ? v : undefined
}

/** Read a Node object's published network (untrusted: every field checked, bad ones dropped). */
export function readPublishedNetwork(node: OrcObject, removedPeers: ReadonlySet<string>): PublishedNetwork | undefined {
  const st = isPlainObject(node.status) ? node.status : {}
  const peerId = str(st.peerId, 128)
  if (peerId === undefined) return undefined
  const net = isPlainObject(st.network) ? st.network : {}
  const out: PublishedNetwork = {
    name: node.metadata.name,
    peerId,
    endpoints: [],
    removed: removedPeers.has(peerId) || st.state === 'Removed',
  }
  const key = str(net.publicKey, 64)
  if (key !== undefined && isWireGuardKey(key)) out.publicKey = key
  if (isSubnetId(net.subnet)) out.subnet = net.subnet
  if (typeof net.listenPort === 'number' && Number.isInteger(net.listenPort) && net.listenPort > 0 && net.listenPort < 65536) out.listenPort = net.listenPort
  if (Array.isArray(net.endpoints)) {
    for (const e of net.endpoints.slice(0, 16)) {
      if (typeof e !== 'string' || e.length > 64) continue
      try {
        out.endpoints.push(canonicalEndpoint(e))
      } catch {
        // a peer's garbage endpoint: skipped
      }
    }
  }
  if (net.firewalled === true) out.firewalled = true
  if (Array.isArray(net.reach)) out.reach = new Set(net.reach.slice(0, MAX_REACH).filter(isSubnetId))
  if (isPlainObject(net.seen)) {
    const seen = new Map<SubnetId, string>()
    out.seen = seen
    for (const [k, v] of Object.entries(net.seen).slice(0, MAX_SEEN)) {
      const s = Number(k)
      if (!isSubnetId(s) || String(s) !== k || typeof v !== 'string' || v.length > 64) continue
      try {
        seen.set(s, canonicalEndpoint(v))
      } catch {
        // garbage: skipped
      }
    }
  }
  return out
}

/** Bounds on what a node publishes about its peers (and on what is read from others). */
export const MAX_REACH = 4096
export const MAX_SEEN = 1024

function isSubnetId(v: unknown): v is SubnetId {
  return typeof v === 'number' && Number.isInteger(v) && v > 0 && v < 0x10000
}

export interface SubnetDecision {
  subnet: SubnetId
  prefix: IpPrefix
  /** Whether this node must (re)write its claim: it had none, or lost a collision. */
  claimChanged: boolean
  /** The settled owner of every claimed subnet (removed nodes' claims are released). */
  owners: Map<SubnetId, string>
}

/**
 * This node's subnet: its own claim if it survives settlement (lowest peer id wins a collision),
 * else the next free candidate. Every node settles the same claims the same way.
 */
export function decideSubnet(cluster: IpPrefix, selfPeerId: string, nodes: readonly PublishedNetwork[]): SubnetDecision {
  const claims = nodes.filter((n) => !n.removed && n.subnet !== undefined).map((n) => ({ peerId: n.peerId, subnet: n.subnet! }))
  const { owners } = settleSubnetClaims(claims)
  const mine = [...owners].find(([, p]) => p === selfPeerId)
  if (mine !== undefined) return { subnet: mine[0], prefix: nodePrefix(cluster, mine[0]), claimChanged: false, owners }
  const chosen = chooseNodeSubnet(cluster, selfPeerId, owners)
  return { ...chosen, claimChanged: true, owners }
}

/**
 * Where libp2p sees a peer: the remote IP of its open connection, or of each when it has several
 * (one over IPv4 and one over IPv6, say). Both ends of a pair see the same connections.
 */
export type ObservedIps = ReadonlyMap<string, string | readonly string[]>

/** The IPs of one peer's entry of ObservedIps, as a list (none when it has no open connection). */
function observedList(observed: string | readonly string[] | undefined): readonly string[] {
  return observed === undefined ? [] : typeof observed === 'string' ? [observed] : observed
}

/**
 * Which published endpoint to configure for a peer. libp2p's view decides: when we have a
 * connection to the peer from/to one of its published addresses, that one works; when its
 * connection comes from an address it does not publish, it is behind NAT and we configure no
 * endpoint (its own keepalives through its NAT tell WireGuard where it is). With no connection,
 * the first published endpoint is the best guess. When connections reach several published
 * addresses, an IPv6 one is preferred (no NAT on the way, and both ends, seeing the same
 * connections, choose the same family); the same rule serves cluster and federated peers.
 */
export function chooseEndpoint(endpoints: readonly string[], observed: string | readonly string[] | undefined): { endpoint?: string; path: PeerPath } {
  const ips = observedList(observed)
  if (ips.length > 0) {
    const matches = endpoints.filter((e) => ips.includes(endpointHost(e)))
    const match = matches.find((e) => e.startsWith('[')) ?? matches[0]
    if (match !== undefined) return { endpoint: match, path: 'direct' }
    return { path: 'peer-dials' }
  }
  return endpoints.length > 0 ? { endpoint: endpoints[0]!, path: 'direct' } : { path: 'unknown' }
}

/** How long after an IPv6 connection attempt to a peer the next one may be made (it failed, or the connection closed). */
export const IPV6_PROBE_EVERY_MS = 5 * 60_000

/**
 * Which peers to open a second mesh connection to over IPv6 (docs/networking.md, "NAT paths"):
 * libp2p dials a peer's addresses in the peer's order and keeps the first connection that works,
 * often an IPv4 one. A peer that publishes an IPv6 endpoint, is connected, but over none of its
 * published IPv6 addresses, gets one attempt per `everyMs` at the first of them (a TCP connection
 * to the address is the proof it works); when it succeeds, both ends see the IPv6 connection and
 * `chooseEndpoint` moves the tunnel there. Only when this node publishes an IPv6 endpoint itself.
 * `last` (peer → time of the latest attempt) is updated in place; peers no longer listed leave it.
 */
export function ipv6Probes(
  peers: ReadonlyArray<{ id: string; endpoints: readonly string[]; observed: string | readonly string[] | undefined }>,
  selfEndpoints: readonly string[],
  last: Map<string, number>,
  now: number,
  everyMs = IPV6_PROBE_EVERY_MS,
): Array<{ id: string; ip: string }> {
  const listed = new Set(peers.map((p) => p.id))
  for (const id of last.keys()) if (!listed.has(id)) last.delete(id)
  if (!selfEndpoints.some((e) => e.startsWith('['))) return []
  const out: Array<{ id: string; ip: string }> = []
  for (const p of peers) {
    const ips = observedList(p.observed)
    if (ips.length === 0) continue // not connected at all: the mesh's own dialing comes first
    const v6 = p.endpoints.filter((e) => e.startsWith('[')).map(endpointHost)
    if (v6.length === 0 || v6.some((ip) => ips.includes(ip))) continue
    const at = last.get(p.id)
    if (at !== undefined && now - at < everyMs) continue
    last.set(p.id, now)
    out.push({ id: p.id, ip: v6[0]! })
  }
  return out
}

/**
 * Whether an endpoint's address can be reached from the internet at large, i.e. is not private
 * (RFC 1918, shared 100.64/10, loopback, link-local, ULA): a node with no such endpoint is taken to
 * be behind NAT (docs/federation.md, "Relays between clusters").
 */
export function isPublicEndpoint(endpoint: string): boolean {
  const h = endpointHost(endpoint).toLowerCase()
  const v4 = /^(\d+)\.(\d+)\.\d+\.\d+$/.exec(h)
  if (v4) {
    const a = Number(v4[1])
    const b = Number(v4[2])
    return !(
      a === 10 ||
      a === 127 ||
      a === 0 ||
      (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b < 32) ||
      (a === 192 && b === 168) ||
      (a === 100 && b >= 64 && b < 128)
    )
  }
  return h.includes(':') && !/^(f[cd]|fe[89ab])[0-9a-f]*:/.test(h) && h !== '::1' && h !== '::'
}

export function endpointHost(endpoint: string): string {
  const m = /^\[([^\]]+)\]:[0-9]+$/.exec(endpoint) ?? /^([^:]+):[0-9]+$/.exec(endpoint)
  return m ? m[1]! : endpoint
}

export interface PlannedPeer {
  name: string
  peerId: string
  prefix: string
  path: PeerPath
  /** When relayed: the member whose tunnel carries this peer's /64. */
  via?: { name: string; peerId: string }
  /** The endpoint is where another member sees this peer's NAT map it (a hole-punching attempt). */
  punched?: boolean
  wg: WireGuardPeer
}

/** Keepalive on every tunnel: a node behind NAT keeps its mapping open, and handshakes start at once. */
export const PERSISTENT_KEEPALIVE_S = 25

/**
 * The WireGuard peers of this node: every other node that is not removed, publishes a key, and
 * owns (after settlement) the subnet it claims; allowed-ips its /64.
 *
 * NAT: when libp2p observes no address of a peer but a member publishes where it sees that peer's
 * NAT (`seen`), the peer is behind NAT. A public node then waits for it to dial (`peer-dials`); a
 * node itself behind NAT configures that mapping: both sides of a NAT'd pair then send to each
 * other's mapping, which can open a path through NATs that keep one mapping per source port (hole
 * punching). When neither side of a pair reaches the other (per their published `reach`), and both
 * are known to be behind NAT, the peer's /64 moves to the allowed-ips of a relay: a member
 * that reaches both, the same one on both sides (lowest hash of the pair and the candidate). The
 * direct peer stays configured without allowed-ips, so its keepalives keep trying; once a
 * handshake succeeds and is published, the pair goes direct again.
 */
export function planPeers(
  cluster: IpPrefix,
  selfPeerId: string,
  nodes: readonly PublishedNetwork[],
  owners: ReadonlyMap<SubnetId, string>,
  observedIps: ObservedIps,
): PlannedPeer[] {
  const out: PlannedPeer[] = []
  const eligible: PublishedNetwork[] = []
  const seenKeys = new Set<string>()
  const sorted = [...nodes].sort((a, b) => (a.peerId < b.peerId ? -1 : a.peerId > b.peerId ? 1 : 0))
  for (const n of sorted) {
    if (n.peerId === selfPeerId || n.removed || n.publicKey === undefined || n.subnet === undefined) continue
    if (owners.get(n.subnet) !== n.peerId) continue // lost a collision: not routed until it re-claims
    if (seenKeys.has(n.publicKey)) continue // two nodes publishing one key: only the first gets it
    seenKeys.add(n.publicKey)
    eligible.push(n)
  }
  // Where members see NAT'd nodes (the lowest peer id's report wins, so every node picks the same).
  const seenAt = new Map<SubnetId, string>()
  for (const m of sorted) {
    if (m.removed || m.subnet === undefined || owners.get(m.subnet) !== m.peerId) continue
    for (const [s, e] of m.seen ?? []) if (s !== m.subnet && !seenAt.has(s)) seenAt.set(s, e)
  }
  const self = sorted.find((n) => n.peerId === selfPeerId && n.subnet !== undefined && owners.get(n.subnet) === selfPeerId)
  const selfNatted = self !== undefined && seenAt.has(self.subnet!)
  const byId = new Map<string, PlannedPeer>()
  for (const n of eligible) {
    const prefix = formatPrefix(nodePrefix(cluster, n.subnet!))
    const observed = observedIps.get(n.peerId)
    let { endpoint, path } = chooseEndpoint(n.endpoints, observed)
    let punched = false
    const natted = seenAt.get(n.subnet!)
    if (observed === undefined && natted !== undefined) {
      if (selfNatted) {
        // Both behind NAT: send to its mapping (and it to ours) and hope the NATs let it through.
        endpoint = natted
        path = 'direct'
        punched = true
      } else {
        // It dials us; a configured mapping would fight the one WireGuard learns from it.
        endpoint = undefined
        path = 'peer-dials'
      }
    }
    const wg: WireGuardPeer = { publicKey: n.publicKey!, allowedIps: [prefix], persistentKeepalive: PERSISTENT_KEEPALIVE_S }
    if (endpoint !== undefined) wg.endpoint = endpoint
    const p: PlannedPeer = { name: n.name, peerId: n.peerId, prefix, path, wg, ...(punched ? { punched } : {}) }
    byId.set(n.peerId, p)
    out.push(p)
  }
  if (self === undefined) return out
  for (const n of eligible) {
    const relay = chooseRelay(self, n, eligible, seenAt)
    if (relay === undefined) continue
    const p = byId.get(n.peerId)!
    const r = byId.get(relay.peerId)!
    p.path = 'relayed'
    p.via = { name: relay.name, peerId: relay.peerId }
    p.wg.allowedIps = []
    r.wg.allowedIps.push(p.prefix)
  }
  return out
}

/**
 * The member that carries traffic between `a` and `b`, or undefined when they should talk
 * directly. Only published facts are used, so both ends decide the same: the pair is relayed when
 * neither reports a handshake with the other and neither can be dialled (seen behind NAT, or
 * reporting itself `firewalled`); the relay is,
 * among members that report handshakes with both, the one with the lowest hash of (pair, member).
 */
export function chooseRelay(
  a: PublishedNetwork,
  b: PublishedNetwork,
  members: readonly PublishedNetwork[],
  seenAt: ReadonlyMap<SubnetId, string>,
): PublishedNetwork | undefined {
  const sa = a.subnet
  const sb = b.subnet
  if (sa === undefined || sb === undefined) return undefined
  if (a.reach?.has(sb) || b.reach?.has(sa)) return undefined
  // A public node is dialled by a NAT'd one: only two nodes that cannot be dialled need a third
  // (behind NAT, or behind a firewall that drops what they did not ask for).
  const undialled = (n: PublishedNetwork, s: SubnetId) => seenAt.has(s) || n.firewalled === true
  if (!undialled(a, sa) || !undialled(b, sb)) return undefined
  const [lo, hi] = a.peerId < b.peerId ? [a.peerId, b.peerId] : [b.peerId, a.peerId]
  let best: { node: PublishedNetwork; hash: string } | undefined
  for (const m of members) {
    if (m.peerId === a.peerId || m.peerId === b.peerId || m.removed || m.subnet === undefined) continue
    if (!m.reach?.has(sa) || !m.reach.has(sb)) continue
    const hash = createHash('sha256').update(`orc-relay\0${lo}\0${hi}\0${m.peerId}`).digest('hex')
    if (best === undefined || hash < best.hash) best = { node: m, hash }
  }
  return best?.node
}

/** A peer that must dial this node (no endpoint configured for it), as this node sees it now. */
export interface DialledPeer {
  /** Its WireGuard public key. */
  key: string
  /** A fresh direct handshake with it. */
  up: boolean
}

/**
 * Whether this node's endpoints take handshakes it did not start (docs/networking.md, "A public
 * node behind a firewall"). A peer behind NAT has no endpoint here: it dials, and only its
 * handshakes open the tunnel. When such peers wait longer than `afterMs` and none of them gets
 * through, something drops unsolicited UDP on the way in (a host or cloud firewall that allows
 * established/related only), and the node reports itself `firewalled`: for relaying it is then
 * like a node behind NAT. One dialled peer getting through is proof of the opposite. `waits` is
 * when each dialled peer began waiting (kept by the caller between rounds; peers not dialled any
 * more are dropped, a peer with a fresh handshake is not waiting).
 */
export function judgeInbound(
  waits: ReadonlyMap<string, number>,
  dialled: readonly DialledPeer[],
  now: number,
  afterMs: number,
): { waits: Map<string, number>; firewalled: boolean } {
  const out = new Map<string, number>()
  let reached = false
  let waitedOut = false
  for (const d of dialled) {
    if (d.up) {
      reached = true
      continue
    }
    const since = waits.get(d.key) ?? now
    out.set(d.key, since)
    if (now - since >= afterMs) waitedOut = true
  }
  return { waits: out, firewalled: waitedOut && !reached }
}

/**
 * Address ranges on this node that no other node reaches it at, so its mesh never advertises them:
 * the pod egress IPv4 network (10.88.0.1 is on every node) and the cluster's ULA /48, which holds
 * the pods, their gateways and orc's WireGuard interface address.
 */
export function unadvertisedRanges(clusterId: string): string[] {
  const egress = formatPrefix(EGRESS_IPV4_PREFIX)
  return clusterId === '' ? [egress] : [egress, formatPrefix(clusterPrefix(clusterId))]
}

/** This node's endpoints: the IPs it listens on (from libp2p's multiaddrs) with the WireGuard port. */
export function endpointsFromMultiaddrs(addrs: readonly string[], port: number): string[] {
  const out = new Set<string>()
  for (const a of addrs) {
    const m = /^\/(ip4|ip6)\/([^/]+)\//.exec(a)
    if (!m) continue
    const ip = m[2]!
    if (ip === '0.0.0.0' || ip === '::' || /^fe80:/i.test(ip)) continue
    try {
      out.add(canonicalEndpoint(m[1] === 'ip6' ? `[${ip}]:${port}` : `${ip}:${port}`))
    } catch {
      // not an address we can publish
    }
  }
  return [...out]
}

/** The IP of a multiaddr (`/ip4/198.18.0.2/tcp/7419` → `198.18.0.2`), if it has one. */
export function ipOfMultiaddr(addr: string): string | undefined {
  const m = /^\/(ip4|ip6)\/([^/]+)/.exec(addr)
  return m ? m[2] : undefined
}
