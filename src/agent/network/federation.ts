/**
 * Routes between federated clusters (pure; docs/federation.md, "Routing").
 *
 * Each cluster keeps its own ULA /48. Across clusters only the pods of shared namespaces are
 * routed: a node that runs federated pods peers over WireGuard with every node of another member
 * cluster that runs federated pods too, and the allowed-ips of that peer are exactly the /128s of
 * the federated pods bound there — never the other cluster's /64s or /48. Both ends decide the same
 * way from the same federation document, so each accepts the other's pod addresses as sources.
 *
 * Everything here comes from other clusters (their `Cluster` objects and pod statuses in the
 * federation document): untrusted. Every field is checked; a pod address must lie in the /64 its
 * node publishes, which must lie in the /48 of that node's cluster (from the cluster id), and that
 * /48 must be neither ours nor another member's. What fails a check is skipped and counted.
 */

import { createHash } from 'node:crypto'
import { DNS_LABEL, isPlainObject } from '../../model/index.ts'
import {
  addressInPrefix,
  canonicalEndpoint,
  clusterPrefix,
  federatedIngressAddress,
  formatIPv6,
  formatPrefix,
  host128,
  type IpPrefix,
  isWireGuardKey,
  parseIPv6,
  parsePrefix,
  prefixCovers,
  type WireGuardPeer,
} from '../../net/index.ts'
import { chooseEndpoint, type ObservedIps, PERSISTENT_KEEPALIVE_S, type PeerPath } from './plan.ts'

/** One federation as the node network needs it (raw objects from the federation document). */
export interface FederatedScopeInput {
  /** Federation name (for `orc get routes`). */
  federation: string
  /** This cluster's name in the federation. */
  cluster: string
  /** `Cluster` objects of the federation document: `{ metadata.name, spec.id, status.nodes }`. */
  clusters: readonly unknown[]
  /** Pod objects of the shared namespaces: `status.node` (`node@cluster`), `status.network.ipv6`, `status.phase`. */
  pods: readonly unknown[]
  /** Federation member name (`node@cluster`) → the IP the federation mesh sees it at (each connection's when several). */
  observedIps: ObservedIps
  /** The federation id (its shared services' virtual range); absent while a join is in progress. */
  id?: string
  /** The namespaces it shares now. */
  namespaces?: readonly string[]
  /** Service objects of the federation document (federated-services.ts reads those of `namespaces`). */
  services?: readonly unknown[]
}

/** Where the node network gets its federations (the federation manager, in the agent). */
export interface FederationRouteSource {
  scopes(): FederatedScopeInput[]
  /** Called when a federation starts or stops, or its document's clusters, pods or services change. */
  onChange(listener: () => void): () => void
  /** Open another federation-mesh connection to a member (`node@cluster`) at its address on `ip`; whether it worked. */
  connectOver?(federation: string, member: string, ip: string): Promise<boolean>
}

export interface FederatedPeer {
  /** `node@cluster`. */
  name: string
  cluster: string
  federations: string[]
  /** The node's /64 in its cluster (informational: it is **not** routed). */
  nodePrefix: string
  /** The /128s of its federated pods (routed on this peer unless relayed: then on `via`'s). */
  routes: string[]
  path: PeerPath
  /** When relayed: the node whose tunnel carries `routes` (`node` of this cluster, or `node@cluster`). */
  via?: { name: string; publicKey: string }
  /**
   * On a relay (or relay candidate): the nodes of this cluster it carries (or probes) this peer's
   * traffic for. A candidate that is not the chosen relay keeps the peer without allowed-ips.
   */
  relayFor?: string[]
  wg: WireGuardPeer
}

/** Other clusters' pod /128s this node routes through a relay of its own cluster (added to that cluster peer's allowed-ips). */
export interface ClusterPeerRelay {
  /** The cluster peer's name and WireGuard key. */
  name: string
  publicKey: string
  /** The far end (`node@cluster`) and its pods' /128s. */
  for: string
  routes: string[]
}

export interface FederatedPlan {
  peers: FederatedPeer[]
  /** Entries skipped as malformed or conflicting (for logs). */
  skipped: string[]
  /** Relayed /128s carried by this cluster's own members (empty when nothing is relayed that way). */
  clusterRelays: ClusterPeerRelay[]
  /** Each peer's published endpoints and where the federation mesh sees it (for `ipv6Probes`). */
  meshPaths?: Array<{ federation: string; name: string; endpoints: string[]; observed: string | readonly string[] | undefined }>
}

/** Bounds on what is read from other clusters. */
export const MAX_FEDERATED_NODES = 4096
export const MAX_FEDERATED_ROUTES = 16_384
const MAX_ENDPOINTS = 16
/** At most this many /64s are read from a summary's `reach`. */
export const MAX_FEDERATED_REACH = 4096
/** At most this many NAT'd pairs per federation are considered for relaying (a bound on work per plan). */
export const MAX_RELAY_PAIRS = 1024
/** At most this many nodes per cluster (not behind NAT, by name) are considered as relays: a cluster publishing thousands crowds out only its own. */
export const MAX_RELAYS_PER_CLUSTER = 64
/** How many relay candidates per pair keep a tunnel to the far end (the chosen one, and a spare that can take over). */
export const RELAY_CANDIDATES = 2

interface PublishedFedNode {
  node: string
  cluster: string
  publicKey: string
  prefix: IpPrefix
  endpoints: string[]
  /** Canonical /64s it reports a fresh direct WireGuard handshake with. */
  reach: ReadonlySet<string>
  /** It reports itself behind NAT (seen so by its own cluster, or no public endpoint). */
  nat: boolean
  /** Its federated ingress address (`::2` of its /64), when it publishes it: routed like a shared pod's. */
  ingress?: string
}

/** The value at `path` in a raw (untrusted) object, or undefined. */
export function get(o: unknown, ...path: string[]): unknown {
  let v = o
  for (const k of path) {
    if (!isPlainObject(v)) return undefined
    v = v[k]
  }
  return v
}

/** The `network` part of a node summary (`Cluster.status.nodes.<node>.network`), checked. */
export function readSummaryNetwork(
  raw: unknown,
  clusterNet: IpPrefix,
): { publicKey: string; prefix: IpPrefix; endpoints: string[]; reach: ReadonlySet<string>; nat: boolean; ingress?: string } | string {
  if (!isPlainObject(raw)) return 'no network published'
  const key = raw.publicKey
  if (typeof key !== 'string' || key.length > 64 || !isWireGuardKey(key)) return 'bad publicKey'
  if (typeof raw.prefix !== 'string' || raw.prefix.length > 64) return 'bad prefix'
  let prefix: IpPrefix
  try {
    prefix = parsePrefix(raw.prefix, 6)
  } catch {
    return 'bad prefix'
  }
  if (prefix.len !== 64 || !prefixCovers(clusterNet, prefix)) return `prefix ${raw.prefix} is not a /64 of its cluster's ${formatPrefix(clusterNet)}`
  const endpoints: string[] = []
  if (Array.isArray(raw.endpoints)) {
    for (const e of raw.endpoints.slice(0, MAX_ENDPOINTS)) {
      if (typeof e !== 'string' || e.length > 64) continue
      try {
        endpoints.push(canonicalEndpoint(e))
      } catch {
        // garbage endpoint: skipped
      }
    }
  }
  const reach = new Set<string>()
  if (Array.isArray(raw.reach)) {
    for (const r of raw.reach.slice(0, MAX_FEDERATED_REACH)) {
      if (typeof r !== 'string' || r.length > 64) continue
      try {
        const p = parsePrefix(r, 6)
        if (p.len === 64) reach.add(formatPrefix(p))
      } catch {
        // garbage: skipped
      }
    }
  }
  // Only the one address a node may use as its federated ingress source, derived from its /64: a
  // summary cannot make other clusters accept any other address of it.
  const ingress = federatedIngressAddress(prefix)
  let ingressOk = false
  try {
    ingressOk = typeof raw.ingress === 'string' && raw.ingress.length <= 64 && formatIPv6(parseIPv6(raw.ingress)) === ingress
  } catch {
    ingressOk = false
  }
  return { publicKey: key, prefix, endpoints, reach, nat: raw.nat === true, ...(ingressOk ? { ingress } : {}) }
}

/**
 * The WireGuard peers this node adds for other clusters. `self` is this node's plain name,
 * `ownCluster` its cluster's /48, `ownKeys` the public keys already in use on the interface (its
 * own and its cluster's peers: a key can be one peer only), `clusterPeers` this cluster's members
 * it has tunnels to (name → key, from its own store: a relay of its own cluster is one of them).
 *
 * Relays (docs/federation.md, "Relays between clusters"): two nodes of different clusters that run
 * federated pods, both behind NAT and neither reporting a handshake with the other, route each
 * other's pods through a node of **one of their two clusters** that is not behind NAT and reports a
 * handshake with the end of its own cluster — the same one on all three, chosen by hash from the
 * document. Every peer of another cluster still carries only addresses of that cluster's /48.
 */
export function planFederatedPeers(
  scopes: readonly FederatedScopeInput[],
  self: { node: string; ownCluster: IpPrefix; ownKeys: ReadonlySet<string>; clusterPeers?: ReadonlyMap<string, string> },
): FederatedPlan {
  const skipped: string[] = []
  const byKey = new Map<string, FederatedPeer>()
  const clusterRelays: ClusterPeerRelay[] = []
  const meshPaths: NonNullable<FederatedPlan['meshPaths']> = []
  const usedRoutes = new Set<string>()
  let routeCount = 0
  const scopesSorted = [...scopes].sort((a, b) => (a.federation < b.federation ? -1 : a.federation > b.federation ? 1 : 0))
  for (const s of scopesSorted) {
    const me = `${self.node}@${s.cluster}`
    // Member clusters and their /48s; a /48 that is ours or claimed twice is routed for nobody.
    const nets = new Map<string, IpPrefix>()
    const claims = new Map<string, string[]>()
    for (const c of s.clusters) {
      const name = get(c, 'metadata', 'name')
      const id = get(c, 'spec', 'id')
      if (typeof name !== 'string' || !DNS_LABEL.test(name)) continue
      if (typeof id !== 'string' || id.length === 0 || id.length > 256) {
        if (name !== s.cluster) skipped.push(`${s.federation}: cluster ${name}: no id`)
        continue
      }
      const net = clusterPrefix(id)
      nets.set(name, net)
      const k = formatPrefix(net)
      claims.set(k, [...(claims.get(k) ?? []), name])
    }
    for (const [name, net] of nets) {
      const k = formatPrefix(net)
      if (name === s.cluster) {
        // Our own nodes' summaries are read only as relay candidates, checked against our own /48.
        if (k !== formatPrefix(self.ownCluster) || (claims.get(k) ?? []).length > 1) nets.delete(name)
        continue
      }
      if (k === formatPrefix(self.ownCluster)) {
        skipped.push(`${s.federation}: cluster ${name} claims this cluster's prefix ${k}`)
        nets.delete(name)
      } else if ((claims.get(k) ?? []).length > 1) {
        skipped.push(`${s.federation}: clusters ${claims.get(k)!.join(', ')} share prefix ${k}`)
        nets.delete(name)
      }
    }
    // The nodes that publish a network: other clusters' (peers, relays) and ours (relays, ends).
    const nodes = new Map<string, PublishedFedNode>()
    for (const c of s.clusters) {
      const cluster = get(c, 'metadata', 'name')
      if (typeof cluster !== 'string') continue
      const net = nets.get(cluster)
      const entries = get(c, 'status', 'nodes')
      if (net === undefined || !isPlainObject(entries)) continue
      for (const [node, raw] of Object.entries(entries).slice(0, MAX_FEDERATED_NODES)) {
        if (!DNS_LABEL.test(node)) continue
        const r = readSummaryNetwork(get(raw, 'network'), net)
        if (typeof r === 'string') {
          if (get(raw, 'network') !== undefined && cluster !== s.cluster) skipped.push(`${s.federation}: ${node}@${cluster}: ${r}`)
          continue
        }
        nodes.set(`${node}@${cluster}`, { node, cluster, ...r })
      }
    }
    // Federated pods by node: ours (do we need peers at all?), who runs any, and theirs (the routes).
    let selfRuns = false
    const runs = new Set<string>()
    const routes = new Map<string, string[]>()
    /** Route `dst` to another cluster's `node` unless it is routed already (skipped); false when the bound is reached. */
    const addRoute = (node: string, dst: string, what: string): boolean => {
      if (usedRoutes.has(dst)) {
        skipped.push(`${s.federation}: ${what}: address ${dst} already routed`)
        return true
      }
      if (routeCount >= MAX_FEDERATED_ROUTES) {
        skipped.push(`${s.federation}: more than ${MAX_FEDERATED_ROUTES} federated pod routes`)
        return false
      }
      usedRoutes.add(dst)
      routeCount++
      runs.add(node)
      routes.set(node, [...(routes.get(node) ?? []), dst])
      return true
    }
    const sortedPods = [...s.pods]
      .map((p) => ({ p, key: `${String(get(p, 'metadata', 'namespace'))}/${String(get(p, 'metadata', 'name'))}` }))
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    for (const { p, key } of sortedPods) {
      const node = get(p, 'status', 'node')
      const ipv6 = get(p, 'status', 'network', 'ipv6')
      const phase = get(p, 'status', 'phase')
      if (typeof node !== 'string' || typeof ipv6 !== 'string' || ipv6.length > 64) continue
      if (phase === 'Succeeded' || phase === 'Failed') continue
      if (node === me) {
        selfRuns = true
        runs.add(node)
        continue
      }
      const n = nodes.get(node)
      if (n === undefined) continue
      if (n.cluster === s.cluster) {
        runs.add(node)
        continue
      }
      let ok = false
      try {
        ok = addressInPrefix(ipv6, n.prefix)
      } catch {
        ok = false
      }
      if (!ok) {
        skipped.push(`${s.federation}: pod ${key} on ${node}: ${ipv6.slice(0, 64)} is not in its node's ${formatPrefix(n.prefix)}`)
        continue
      }
      // ipv6 parsed above (in its node's prefix), so host128 gives its /128.
      if (!addRoute(node, host128(ipv6)!, `pod ${key} on ${node}`)) break
    }
    // Federated ingress addresses (a node whose tcp-proxy serves a shared service): routed like a
    // pod's /128 of that node, and a node publishing one takes part as if it ran a shared pod.
    for (const [name, n] of [...nodes].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      if (n.ingress === undefined) continue
      runs.add(name)
      if (name === me) selfRuns = true
      if (n.cluster !== s.cluster && !addRoute(name, `${n.ingress}/128`, `ingress address of ${name}`)) break
    }
    /** The peer for another cluster's node `name` (added once per key; undefined when its key cannot be a peer here). */
    const peerFor = (name: string): FederatedPeer | undefined => {
      const n = nodes.get(name)
      if (n === undefined || n.cluster === s.cluster) return undefined
      if (self.ownKeys.has(n.publicKey)) {
        skipped.push(`${s.federation}: ${name}: its WireGuard key is already a peer here`)
        return undefined
      }
      const have = byKey.get(n.publicKey)
      if (have !== undefined) {
        // The same node through another federation (its cluster is in both): one peer.
        if (have.name !== name) {
          skipped.push(`${s.federation}: ${name}: publishes the key of ${have.name}`)
          return undefined
        }
        if (!have.federations.includes(s.federation)) have.federations.push(s.federation)
        return have
      }
      const observed = s.observedIps.get(name)
      meshPaths.push({ federation: s.federation, name, endpoints: n.endpoints, observed })
      const { endpoint, path } = chooseEndpoint(n.endpoints, observed)
      const wg: WireGuardPeer = { publicKey: n.publicKey, allowedIps: [], persistentKeepalive: PERSISTENT_KEEPALIVE_S }
      if (endpoint !== undefined) wg.endpoint = endpoint
      const peer: FederatedPeer = { name, cluster: n.cluster, federations: [s.federation], nodePrefix: formatPrefix(n.prefix), routes: [], path, wg }
      byKey.set(n.publicKey, peer)
      return peer
    }
    const addAllowed = (peer: FederatedPeer, dsts: readonly string[]) => {
      for (const d of dsts) if (!peer.wg.allowedIps.includes(d)) peer.wg.allowedIps.push(d)
    }
    // Peers only where both ends run federated pods: nothing else can use the routes (the other
    // end accepts only federated pods' addresses), and both ends then agree to peer.
    if (selfRuns) {
      for (const [name, dsts] of [...routes].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
        const peer = peerFor(name)
        if (peer === undefined) {
          for (const d of dsts) usedRoutes.delete(d)
          continue
        }
        for (const d of dsts) if (!peer.routes.includes(d)) peer.routes.push(d)
        addAllowed(peer, dsts)
      }
    }
    // Relays: NAT'd pairs (one end of ours, one of another cluster) that this node is an end or a candidate relay of.
    const mine = nodes.get(me)
    if (mine === undefined) continue
    const pairs = relayPairs(me, mine, nodes, runs, routes, s.cluster, selfRuns)
    const relayable = pairs.length === 0 ? new Map<string, Array<[string, PublishedFedNode]>>() : relayableByCluster(nodes)
    for (const pair of pairs) {
      const { x, y } = pair // x: the end in our cluster; y: the end in the other one
      const relays = relayCandidates(x, y, nodes, relayable)
      if (relays.length === 0) continue
      const chosen = relays.find((r) => r.n.reach.has(formatPrefix(nodes.get(x)!.prefix)) && r.n.reach.has(formatPrefix(nodes.get(y)!.prefix))) ?? relays[0]!
      const yRoutes = routes.get(y) ?? []
      if (x === me) {
        // An end: y's pods go through the chosen relay; every candidate of y's cluster gets a tunnel (keepalives: that is how a spare shows it reaches y).
        const direct = byKey.get(nodes.get(y)!.publicKey)
        if (direct === undefined || direct.name !== y) continue
        for (const r of relays) {
          if (r.n.cluster === s.cluster || r.name === chosen.name) continue
          peerFor(r.name)
        }
        if (chosen.n.cluster === s.cluster) {
          const key = self.clusterPeers?.get(chosen.n.node)
          if (key === undefined || key !== chosen.n.publicKey) {
            skipped.push(`${s.federation}: relay ${chosen.name} for ${y} is not a tunnel of this node with that key`)
            continue
          }
          clusterRelays.push({ name: chosen.n.node, publicKey: key, for: y, routes: [...yRoutes] })
          direct.via = { name: chosen.n.node, publicKey: key }
        } else {
          const relay = peerFor(chosen.name)
          if (relay === undefined) continue
          addAllowed(relay, yRoutes)
          direct.via = { name: chosen.name, publicKey: relay.wg.publicKey }
        }
        direct.path = 'relayed'
        direct.wg.allowedIps = direct.wg.allowedIps.filter((a) => !yRoutes.includes(a))
        continue
      }
      // A candidate (of our cluster): a tunnel to y; its /128s on it only if we are the relay.
      if (!relays.some((r) => r.name === me)) continue
      const peer = peerFor(y)
      if (peer === undefined) continue
      // y is behind NAT and dials us (we are not): a configured endpoint would fight the one WireGuard learns.
      delete peer.wg.endpoint
      peer.path = 'peer-dials'
      peer.relayFor = [...new Set([...(peer.relayFor ?? []), nodes.get(x)!.node])].sort()
      if (chosen.name === me) {
        for (const d of yRoutes) if (!peer.routes.includes(d)) peer.routes.push(d)
        addAllowed(peer, yRoutes)
      }
    }
  }
  const peers = [...byKey.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  return { peers, skipped, clusterRelays, meshPaths }
}

/**
 * The NAT'd pairs this node takes part in: `x` of our cluster, `y` of another, both running
 * federated pods, both reporting NAT, neither reporting a handshake with the other. When this node
 * runs federated pods itself, the pairs with it as `x`; when it is not behind NAT, also the pairs
 * of the nodes of its cluster it reaches (it may be their relay).
 */
function relayPairs(
  me: string,
  mine: PublishedFedNode,
  nodes: ReadonlyMap<string, PublishedFedNode>,
  runs: ReadonlySet<string>,
  routes: ReadonlyMap<string, string[]>,
  ownCluster: string,
  selfRuns: boolean,
): Array<{ x: string; y: string }> {
  const out: Array<{ x: string; y: string }> = []
  const ends = [...runs].filter((n) => nodes.get(n)?.nat === true).sort()
  const far = ends.filter((n) => nodes.get(n)!.cluster !== ownCluster && (routes.get(n)?.length ?? 0) > 0)
  const near: string[] = []
  if (selfRuns && mine.nat) near.push(me)
  if (!mine.nat && mine.endpoints.length > 0)
    for (const n of ends) if (n !== me && nodes.get(n)!.cluster === ownCluster && mine.reach.has(formatPrefix(nodes.get(n)!.prefix))) near.push(n)
  for (const x of near) {
    const nx = nodes.get(x)!
    for (const y of far) {
      const ny = nodes.get(y)!
      if (nx.reach.has(formatPrefix(ny.prefix)) || ny.reach.has(formatPrefix(nx.prefix))) continue
      out.push({ x, y })
      if (out.length >= MAX_RELAY_PAIRS) return out
    }
  }
  return out
}

/** The nodes that may relay (not behind NAT, with an endpoint), per cluster, at most MAX_RELAYS_PER_CLUSTER each (by name). */
function relayableByCluster(nodes: ReadonlyMap<string, PublishedFedNode>): Map<string, Array<[string, PublishedFedNode]>> {
  const out = new Map<string, Array<[string, PublishedFedNode]>>()
  for (const [name, n] of [...nodes].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (n.nat || n.endpoints.length === 0) continue
    const list = out.get(n.cluster) ?? []
    if (list.length < MAX_RELAYS_PER_CLUSTER) list.push([name, n])
    out.set(n.cluster, list)
  }
  return out
}

/**
 * Who may carry a NAT'd pair's traffic, best first: nodes of the pair's two clusters (never a
 * third's), other than the ends, not behind NAT, with an endpoint, reporting a handshake with the
 * end of their own cluster; ordered by a hash of (pair, candidate), so every node ranks them alike.
 * The first that reports handshakes with both ends is the relay, else the first (a trial).
 */
function relayCandidates(
  x: string,
  y: string,
  nodes: ReadonlyMap<string, PublishedFedNode>,
  relayable: ReadonlyMap<string, ReadonlyArray<[string, PublishedFedNode]>>,
): Array<{ name: string; n: PublishedFedNode; hash: string }> {
  const nx = nodes.get(x)
  const ny = nodes.get(y)
  if (nx === undefined || ny === undefined) return []
  const [lo, hi] = x < y ? [x, y] : [y, x]
  const out: Array<{ name: string; n: PublishedFedNode; hash: string }> = []
  for (const own of [nx, ny]) {
    const end = formatPrefix(own.prefix)
    for (const [name, n] of relayable.get(own.cluster) ?? []) {
      if (name === x || name === y || !n.reach.has(end)) continue
      out.push({ name, n, hash: createHash('sha256').update(`orc-fed-relay\0${lo}\0${hi}\0${name}`).digest('hex') })
    }
  }
  out.sort((a, b) => (a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0))
  return out.slice(0, RELAY_CANDIDATES)
}
