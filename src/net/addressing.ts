/**
 * Cluster addressing plan (pure). The cluster's ULA /48 comes from its id, each node a /64 within
 * it from its peer id, each pod a random address in its node's /64; IPv4 is only the node-local
 * egress range 10.88.0.0/16. Every function here is deterministic given its arguments (randomness
 * is passed in), so every node computes the same answers from the same store snapshot.
 */
import { createHash } from 'node:crypto'
import type { Random } from '../effects/index.ts'
import { byCodeUnits as compareIds, OrcError } from '../model/index.ts'
import { formatIPv4, formatIPv6, formatPrefix, type IpPrefix, parseIPv4, parseIPv6, prefixContains } from './ip.ts'

/** A 16-bit subnet id within the cluster /48 (RFC 4193 "Subnet ID"). */
export type SubnetId = number

/** Subnet 0 is kept for cluster-wide services (anycast, DNS) later; nodes never get it. */
export const RESERVED_SUBNETS: ReadonlySet<SubnetId> = new Set([0])
const SUBNET_COUNT = 0x10000

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest()
}

/**
 * RFC 4193 prefix fdXX:XXXX:XXXX::/48: L=1 (fd00::/8) plus a 40-bit global id. The RFC's
 * suggested algorithm hashes time and a MAC; we hash the cluster id instead so every node derives
 * the same prefix with no coordination (the id is random, which is what the RFC asks of the 40 bits).
 */
export function clusterPrefix(clusterId: string): IpPrefix {
  if (clusterId.length === 0) throw new OrcError('invalid', 'cluster id is empty')
  const h = sha256(`orc-cluster-ula\0${clusterId}`)
  let gid = 0n
  for (let i = 0; i < 5; i++) gid = (gid << 8n) | BigInt(h[i]!)
  return { family: 6, addr: (0xfdn << 120n) | (gid << 80n), len: 48 }
}

function checkCluster(cluster: IpPrefix): void {
  if (cluster.family !== 6 || cluster.len !== 48) {
    throw new OrcError('invalid', `cluster prefix must be an IPv6 /48, got ${formatPrefix(cluster)}`)
  }
}

/** The node /64 for a subnet id inside the cluster /48. */
export function nodePrefix(cluster: IpPrefix, subnet: SubnetId): IpPrefix {
  checkCluster(cluster)
  if (!Number.isInteger(subnet) || subnet < 0 || subnet >= SUBNET_COUNT) {
    throw new OrcError('invalid', `subnet id out of range: ${subnet}`)
  }
  const base = cluster.addr & ~((1n << 80n) - 1n)
  return { family: 6, addr: base | (BigInt(subnet) << 64n), len: 64 }
}

/** The subnet id of a node /64 (inverse of nodePrefix). */
export function subnetOf(node: IpPrefix): SubnetId {
  return Number((node.addr >> 64n) & 0xffffn)
}

/** The i-th candidate subnet for a peer: a hash of (peer id, i). Candidate 0 is its natural home. */
export function candidateSubnet(peerId: string, attempt: number): SubnetId {
  const h = sha256(`orc-node-subnet\0${peerId}\0${attempt}`)
  return (h[0]! << 8) | h[1]!
}

/**
 * Choose the node's subnet given the settled claims in the store (subnet → owning peer, as
 * settleSubnetClaims returns them, so a contested subnet already names its one winner).
 * A peer that already holds a claim keeps it (lowest if several), so a node's prefix never moves
 * while it is uncontested. Otherwise the first free candidate in hash order wins; after 64 hash
 * tries we scan linearly from the natural candidate so the search ends even in a nearly full /48.
 */
export function chooseNodeSubnet(cluster: IpPrefix, peerId: string, claimed: ReadonlyMap<SubnetId, string>): { subnet: SubnetId; prefix: IpPrefix } {
  checkCluster(cluster)
  const own = [...claimed].filter(([s, p]) => p === peerId && !RESERVED_SUBNETS.has(s)).map(([s]) => s)
  if (own.length > 0) {
    const subnet = Math.min(...own)
    return { subnet, prefix: nodePrefix(cluster, subnet) }
  }
  const free = (s: SubnetId) => !RESERVED_SUBNETS.has(s) && !claimed.has(s)
  for (let i = 0; i < 64; i++) {
    const s = candidateSubnet(peerId, i)
    if (free(s)) return { subnet: s, prefix: nodePrefix(cluster, s) }
  }
  const start = candidateSubnet(peerId, 0)
  for (let k = 1; k < SUBNET_COUNT; k++) {
    const s = (start + k) % SUBNET_COUNT
    if (free(s)) return { subnet: s, prefix: nodePrefix(cluster, s) }
  }
  throw new OrcError('conflict', 'no free node subnet left in the cluster /48', { claimed: claimed.size })
}

/**
 * Who keeps a subnet claimed by several peers (a collision found after concurrent claims merged):
 * the lowest peer id by code-unit order. Every node applies the same rule to the same store
 * contents, so they all agree without talking; the losers call chooseNodeSubnet again.
 */
export function settleSubnetCollision(claimants: readonly string[]): string {
  if (claimants.length === 0) throw new OrcError('invalid', 'no claimants to settle')
  return [...claimants].sort(compareIds)[0]!
}

/**
 * Settle a whole set of claims (possibly with collisions and a peer holding several subnets):
 * returns the winning owner of each subnet and the peers left with no subnet, who must re-choose.
 * A peer holding several winning subnets keeps only its lowest (the others are released).
 */
export function settleSubnetClaims(claims: Iterable<{ peerId: string; subnet: SubnetId }>): {
  owners: Map<SubnetId, string>
  losers: string[]
} {
  const bySubnet = new Map<SubnetId, string[]>()
  const peers = new Set<string>()
  for (const c of claims) {
    peers.add(c.peerId)
    if (RESERVED_SUBNETS.has(c.subnet)) continue
    const l = bySubnet.get(c.subnet) ?? []
    l.push(c.peerId)
    bySubnet.set(c.subnet, l)
  }
  const kept = new Map<string, SubnetId>()
  for (const subnet of [...bySubnet.keys()].sort((a, b) => a - b)) {
    const winner = settleSubnetCollision(bySubnet.get(subnet)!)
    if (!kept.has(winner)) kept.set(winner, subnet)
  }
  const owners = new Map<SubnetId, string>()
  for (const [peer, subnet] of kept) owners.set(subnet, peer)
  const losers = [...peers].filter((p) => !kept.has(p)).sort(compareIds)
  return { owners, losers }
}

/** The node's own address in its /64 (`::1`): the WireGuard interface and pods' next hop. */
export function nodeGateway(node: IpPrefix): string {
  return formatIPv6(node.addr | 1n)
}

/**
 * The node's federated ingress address (`::2` of its /64): the source of its `tcp-proxy`'s
 * connections to a shared service's pods in other clusters, routed to it by those clusters like a
 * shared pod's /128 while its node summary publishes it (docs/federation.md). Never a pod's.
 */
export function federatedIngressAddress(node: IpPrefix): string {
  return formatIPv6(node.addr | 2n)
}

function randomBigInt(random: Random, bytes: number): bigint {
  const b = random(bytes)
  if (b.length < bytes) throw new OrcError('internal', 'random source returned too few bytes')
  let v = 0n
  for (let i = 0; i < bytes; i++) v = (v << 8n) | BigInt(b[i]!)
  return v
}

/**
 * A random pod address in the node /64, never `::0` (subnet-router anycast) nor `::1` (the node's
 * gateway), nor `::2` (its federated ingress address), nor one in `taken` (canonical text). 64 random bits make a clash vanishingly rare; the
 * retry bound only guards a broken random source.
 */
export function randomPodAddress(node: IpPrefix, random: Random, taken: ReadonlySet<string> = new Set()): string {
  if (node.family !== 6 || node.len !== 64) {
    throw new OrcError('invalid', `node prefix must be an IPv6 /64, got ${formatPrefix(node)}`)
  }
  const base = node.addr & ~((1n << 64n) - 1n)
  for (let i = 0; i < 100; i++) {
    const iid = randomBigInt(random, 8)
    if (iid === 0n || iid === 1n || iid === 2n) continue
    const text = formatIPv6(base | iid)
    if (!taken.has(text)) return text
  }
  throw new OrcError('internal', 'could not draw a free pod address (random source stuck?)')
}

/** Node-local IPv4 range for pod egress; never routed between nodes. */
export const EGRESS_IPV4_PREFIX: IpPrefix = { family: 4, addr: parseIPv4('10.88.0.0'), len: 16 }
/** Address the node answers on every pod veth; pods' IPv4 default route points at it. */
export const EGRESS_IPV4_GATEWAY = '10.88.0.1'

/**
 * Choose a free egress IPv4 address in 10.88.0.0/16 (not .0.0, the gateway .0.1, nor broadcast
 * .255.255): a random start, then the next free address, so it terminates when the range is full.
 */
export function chooseEgressIPv4(taken: ReadonlySet<string>, random: Random): string {
  const base = EGRESS_IPV4_PREFIX.addr
  const size = 1n << 16n
  const start = randomBigInt(random, 2)
  const gw = parseIPv4(EGRESS_IPV4_GATEWAY)
  for (let k = 0n; k < size; k++) {
    const v = base | ((start + k) % size)
    if (v === base || v === gw || v === base + size - 1n) continue
    const text = formatIPv4(v)
    if (!taken.has(text)) return text
  }
  throw new OrcError('conflict', 'egress IPv4 range 10.88.0.0/16 is full', { taken: taken.size })
}

/** Whether `address` (canonical or not) lies in `prefix`. */
export function addressInPrefix(address: string, prefix: IpPrefix): boolean {
  return prefix.family === 6 ? prefixContains(prefix, parseIPv6(address)) : prefixContains(prefix, parseIPv4(address))
}
