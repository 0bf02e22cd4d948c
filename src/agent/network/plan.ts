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
  formatPrefix,
  isWireGuardKey,
  nodePrefix,
  settleSubnetClaims,
  type IpPrefix,
  type SubnetId,
  type WireGuardPeer,
} from '../../net/index.ts'

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
  if (typeof net.subnet === 'number' && Number.isInteger(net.subnet) && net.subnet > 0 && net.subnet < 0x10000) out.subnet = net.subnet
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
  return out
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

export type PeerPath = 'direct' | 'peer-dials' | 'unknown'

/**
 * Which published endpoint to configure for a peer. libp2p's view decides: when we have a
 * connection to the peer from/to one of its published addresses, that one works; when its
 * connection comes from an address it does not publish, it is behind NAT and we configure no
 * endpoint (its own keepalives through its NAT tell WireGuard where it is). With no connection,
 * the first published endpoint is the best guess.
 */
export function chooseEndpoint(endpoints: readonly string[], observedIp: string | undefined): { endpoint?: string; path: PeerPath } {
  if (observedIp !== undefined) {
    const match = endpoints.find((e) => endpointHost(e) === observedIp)
    if (match !== undefined) return { endpoint: match, path: 'direct' }
    return { path: 'peer-dials' }
  }
  return endpoints.length > 0 ? { endpoint: endpoints[0]!, path: 'direct' } : { path: 'unknown' }
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
  wg: WireGuardPeer
}

/** Keepalive on every tunnel: a node behind NAT keeps its mapping open, and handshakes start at once. */
export const PERSISTENT_KEEPALIVE_S = 25

/**
 * The WireGuard peers of this node: every other node that is not removed, publishes a key, and
 * owns (after settlement) the subnet it claims; allowed-ips its /64.
 */
export function planPeers(
  cluster: IpPrefix,
  selfPeerId: string,
  nodes: readonly PublishedNetwork[],
  owners: ReadonlyMap<SubnetId, string>,
  observedIps: ReadonlyMap<string, string>,
): PlannedPeer[] {
  const out: PlannedPeer[] = []
  const seenKeys = new Set<string>()
  for (const n of [...nodes].sort((a, b) => (a.peerId < b.peerId ? -1 : a.peerId > b.peerId ? 1 : 0))) {
    if (n.peerId === selfPeerId || n.removed || n.publicKey === undefined || n.subnet === undefined) continue
    if (owners.get(n.subnet) !== n.peerId) continue // lost a collision: not routed until it re-claims
    if (seenKeys.has(n.publicKey)) continue // two nodes publishing one key: only the first gets it
    seenKeys.add(n.publicKey)
    const prefix = formatPrefix(nodePrefix(cluster, n.subnet))
    const { endpoint, path } = chooseEndpoint(n.endpoints, observedIps.get(n.peerId))
    const wg: WireGuardPeer = { publicKey: n.publicKey, allowedIps: [prefix], persistentKeepalive: PERSISTENT_KEEPALIVE_S }
    if (endpoint !== undefined) wg.endpoint = endpoint
    out.push({ name: n.name, peerId: n.peerId, prefix, path, wg })
  }
  return out
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
