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

import { DNS_LABEL, isPlainObject } from '../../model/index.ts'
import {
  addressInPrefix,
  canonicalEndpoint,
  clusterPrefix,
  formatPrefix,
  type IpPrefix,
  isWireGuardKey,
  parsePrefix,
  prefixCovers,
  type WireGuardPeer,
} from '../../net/index.ts'
import { chooseEndpoint, PERSISTENT_KEEPALIVE_S, type PeerPath } from './plan.ts'

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
  /** Federation member name (`node@cluster`) → the IP the federation mesh sees it at. */
  observedIps: ReadonlyMap<string, string>
}

/** Where the node network gets its federations (the federation manager, in the agent). */
export interface FederationRouteSource {
  scopes(): FederatedScopeInput[]
  /** Called when a federation starts or stops, or its document's clusters or pods change. */
  onChange(listener: () => void): () => void
}

export interface FederatedPeer {
  /** `node@cluster`. */
  name: string
  cluster: string
  federations: string[]
  /** The node's /64 in its cluster (informational: it is **not** routed). */
  nodePrefix: string
  /** The /128s of its federated pods: the allowed-ips and routes. */
  routes: string[]
  path: PeerPath
  wg: WireGuardPeer
}

export interface FederatedPlan {
  peers: FederatedPeer[]
  /** Entries skipped as malformed or conflicting (for logs). */
  skipped: string[]
}

/** Bounds on what is read from other clusters. */
export const MAX_FEDERATED_NODES = 4096
export const MAX_FEDERATED_ROUTES = 16_384
const MAX_ENDPOINTS = 16

interface PublishedFedNode {
  node: string
  cluster: string
  publicKey: string
  prefix: IpPrefix
  endpoints: string[]
}

function get(o: unknown, ...path: string[]): unknown {
  let v = o
  for (const k of path) {
    if (!isPlainObject(v)) return undefined
    v = v[k]
  }
  return v
}

/** The `network` part of a node summary (`Cluster.status.nodes.<node>.network`), checked. */
export function readSummaryNetwork(raw: unknown, clusterNet: IpPrefix): { publicKey: string; prefix: IpPrefix; endpoints: string[] } | string {
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
  return { publicKey: key, prefix, endpoints }
}

/**
 * The WireGuard peers this node adds for other clusters. `self` is this node's plain name,
 * `ownCluster` its cluster's /48, `ownKeys` the public keys already in use on the interface (its
 * own and its cluster's peers: a key can be one peer only).
 */
export function planFederatedPeers(
  scopes: readonly FederatedScopeInput[],
  self: { node: string; ownCluster: IpPrefix; ownKeys: ReadonlySet<string> },
): FederatedPlan {
  const skipped: string[] = []
  const byKey = new Map<string, FederatedPeer>()
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
      if (name === s.cluster) continue
      const k = formatPrefix(net)
      if (k === formatPrefix(self.ownCluster)) {
        skipped.push(`${s.federation}: cluster ${name} claims this cluster's prefix ${k}`)
        nets.delete(name)
      } else if ((claims.get(k) ?? []).length > 1) {
        skipped.push(`${s.federation}: clusters ${claims.get(k)!.join(', ')} share prefix ${k}`)
        nets.delete(name)
      }
    }
    // The nodes of other clusters that publish a network.
    const nodes = new Map<string, PublishedFedNode>()
    for (const c of s.clusters) {
      const cluster = get(c, 'metadata', 'name')
      if (typeof cluster !== 'string' || cluster === s.cluster) continue
      const net = nets.get(cluster)
      const entries = get(c, 'status', 'nodes')
      if (net === undefined || !isPlainObject(entries)) continue
      for (const [node, raw] of Object.entries(entries).slice(0, MAX_FEDERATED_NODES)) {
        if (!DNS_LABEL.test(node)) continue
        const r = readSummaryNetwork(get(raw, 'network'), net)
        if (typeof r === 'string') {
          if (get(raw, 'network') !== undefined) skipped.push(`${s.federation}: ${node}@${cluster}: ${r}`)
          continue
        }
        nodes.set(`${node}@${cluster}`, { node, cluster, ...r })
      }
    }
    // Federated pods by node: ours (do we need peers at all?) and theirs (the routes).
    let selfRuns = false
    const routes = new Map<string, string[]>()
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
        continue
      }
      const n = nodes.get(node)
      if (n === undefined) continue
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
      const dst = `${formatPrefix({ ...parsePrefix(ipv6, 6), len: 128 })}`
      if (usedRoutes.has(dst)) {
        skipped.push(`${s.federation}: pod ${key} on ${node}: address ${dst} already routed`)
        continue
      }
      if (routeCount >= MAX_FEDERATED_ROUTES) {
        skipped.push(`${s.federation}: more than ${MAX_FEDERATED_ROUTES} federated pod routes`)
        break
      }
      usedRoutes.add(dst)
      routeCount++
      routes.set(node, [...(routes.get(node) ?? []), dst])
    }
    // Peers only where both ends run federated pods: nothing else can use the routes (the other
    // end accepts only federated pods' addresses), and both ends then agree to peer.
    if (!selfRuns) continue
    for (const [name, dsts] of [...routes].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      const n = nodes.get(name)!
      if (self.ownKeys.has(n.publicKey)) {
        skipped.push(`${s.federation}: ${name}: its WireGuard key is already a peer here`)
        for (const d of dsts) usedRoutes.delete(d)
        continue
      }
      const have = byKey.get(n.publicKey)
      if (have !== undefined) {
        // The same node through another federation (its cluster is in both): one peer.
        if (have.name !== name) {
          skipped.push(`${s.federation}: ${name}: publishes the key of ${have.name}`)
          continue
        }
        have.routes.push(...dsts)
        have.wg.allowedIps.push(...dsts)
        if (!have.federations.includes(s.federation)) have.federations.push(s.federation)
        continue
      }
      const { endpoint, path } = chooseEndpoint(n.endpoints, s.observedIps.get(name))
      const wg: WireGuardPeer = { publicKey: n.publicKey, allowedIps: [...dsts], persistentKeepalive: PERSISTENT_KEEPALIVE_S }
      if (endpoint !== undefined) wg.endpoint = endpoint
      byKey.set(n.publicKey, { name, cluster: n.cluster, federations: [s.federation], nodePrefix: formatPrefix(n.prefix), routes: [...dsts], path, wg })
    }
  }
  const peers = [...byKey.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  return { peers, skipped }
}
