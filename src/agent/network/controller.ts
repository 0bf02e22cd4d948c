/**
 * The node network (written as controller:node, in `Node.status.network`): one WireGuard interface
 * per node with a key kept in the data dir, the node's /64 claimed through the store, every other
 * member a peer with its /64 as allowed-ips, and each pod of this node a network namespace with an
 * address in the /64 plus masqueraded IPv4 egress.
 *
 * Bring-up is a workflow (targets `network-online` → `ready`), so `orc why node/NAME` shows which
 * unit holds a node back. After that a reconcile loop re-applies the whole desired state on every
 * store change and every few seconds (drift: an interface or route deleted by hand comes back; a
 * removed node's peer and routes go). When root or WireGuard is missing and the mode is `auto`, the
 * node runs with loopback-only pods and says so.
 */
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { type Clock, every, execaRunner, type Random, sleep, type TimerHandle, unrefTimers } from '../../effects/index.ts'
import { isPlainObject, OrcError, type OrcObject } from '../../model/index.ts'
import {
  addressInPrefix,
  clusterDnsAddress,
  clusterPrefix,
  federatedIngressAddress,
  formatIPv6,
  formatPrefix,
  generateKeyPair,
  host128,
  type IpPrefix,
  isWireGuardKey,
  NetnsPodNetworkDriver,
  NftServiceNatDriver,
  nodeGateway,
  type PodNetworkDriver,
  type PodNetworkState,
  planVirtualServices,
  publicKeyOf,
  randomPodAddress,
  type ServiceNatDriver,
  serviceVirtualRange,
  type WireGuardDriver,
  type WireGuardKeyPair,
  WireGuardLinkDriver,
  type WireGuardStatus,
} from '../../net/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { addNodeTargets, WorkflowGraph, WorkflowRun, type WorkflowSnapshot } from '../../workflow/index.ts'
import type { DownPlan, FederatedTunnelReport, NetworkReport, NetworkState, TunnelReport } from '../api-types.ts'
import { NODE_CONTROLLER } from '../node-info.ts'
import { planSharedServices } from './federated-services.ts'
import { type ClusterPeerRelay, type FederatedPeer, type FederatedPlan, type FederationRouteSource, planFederatedPeers } from './federation.ts'
import {
  NETWORK_DEFAULTS,
  NETWORK_DOWN_FILE,
  NETWORK_NAMES_FILE,
  NETWORK_PODS_FILE,
  type NetworkMode,
  type NetworkSetup,
  WIREGUARD_KEY_FILE,
} from './options.ts'
import {
  decideSubnet,
  endpointsFromMultiaddrs,
  ipv6Probes,
  isPublicEndpoint,
  judgeInbound,
  MAX_REACH,
  MAX_SEEN,
  type NetworkNames,
  networkNamesFor,
  type ObservedIps,
  type PlannedPeer,
  type PublishedNetwork,
  planPeers,
  readPublishedNetwork,
  type SubnetDecision,
} from './plan.ts'
import { probeNetwork } from './probe.ts'

export type { DownPlan, FederatedTunnelReport, NetworkReport, NetworkState, TunnelReport } from '../api-types.ts'

/** What the node network needs of the mesh. */
export interface MeshView {
  peerId: string
  clusterId: string
  /** This node's listen multiaddrs. */
  addresses(): string[]
  /** Peer id → the IP libp2p sees that peer at (an open connection's remote address; each one's when several). */
  observedIps(): Map<string, string | string[]>
  /** Peer ids of members believed alive (not this node). */
  alivePeers(): Set<string>
  /** Open another mesh connection to a member, at its mesh address on `ip`; whether it worked. */
  connectOver?(peerId: string, ip: string): Promise<boolean>
}

export interface NodeNetworkComponents {
  store: ObjectStore
  nodeName: string
  dataDir: string
  logger: Logger
  /** Time and timers: store writes, the node workflow's timeouts, the reconcile loop. */
  clock: Clock
  mesh?: MeshView
  random: Random
  /** Drivers; the real ones (ip/wg/nft via execa) unless a test injects fakes. */
  wireguard?: (names: NetworkNames) => WireGuardDriver
  podNetwork?: (names: NetworkNames) => PodNetworkDriver
  /** The services' virtual addresses (nftables DNAT, docs/services.md). */
  serviceNat?: (names: NetworkNames) => ServiceNatDriver
  /** Why networking cannot run here, or undefined. Default: root, ip, wg, WireGuard present. */
  probe?: () => Promise<string | undefined>
}

/** What the lifecycle controller gets for a pod. */
export type PodAttachment =
  /** `ipv4`: the pod's node-local egress address (10.88.0.0/16, masqueraded by the node), which a VM guest takes itself. */
  { mode: 'ipv6'; ipv6: string; ipv4?: string; netnsPath: string } | { mode: 'loopback'; reason: string }

/** The pod side of the node network, as the lifecycle controller uses it. */
export interface PodNetworkHooks {
  /** Give the pod (by uid) its netns and address; `hint` is the address it had (kept if still valid). */
  attachPod(uid: string, hint?: string): Promise<PodAttachment>
  /** The pod left this node: remove its netns. */
  detachPod(uid: string): Promise<void>
}

const PORT_IN_USE = /address already in use|in use/i

/** A tunnel's state from its latest WireGuard handshake: fresh, never yet, or stale. */
function handshakeState(latestHandshakeMs: number | undefined, now: number): TunnelReport['state'] {
  if (latestHandshakeMs === undefined) return 'waiting'
  return now - latestHandshakeMs < NETWORK_DEFAULTS.handshakeFreshMs ? 'up' : 'down'
}
export class NodeNetwork implements PodNetworkHooks {
  private state: NetworkState = 'Starting'
  private reason: string | undefined
  private names: NetworkNames | undefined
  private key: WireGuardKeyPair | undefined
  private cluster: IpPrefix | undefined
  private decision: SubnetDecision | undefined
  private wg: WireGuardDriver | undefined
  private podnet: PodNetworkDriver | undefined
  private svcnat: ServiceNatDriver | undefined
  /** The last service configuration applied (JSON), so pod status churn costs no command. */
  private svcApplied = ''
  private svcPending = false
  private svcError: string | undefined
  /** Ids of the federations whose shared services the applied table balances. */
  private svcFederations: ReadonlySet<string> = new Set()
  /** The shared-services plan's skipped entries last logged (JSON). */
  private svcSkippedJson = '[]'
  private listenPort: number
  private peers: PlannedPeer[] = []
  private fedPeers: FederatedPeer[] = []
  /** Other clusters' pod /128s carried by a relay of this cluster (added to that cluster peer's allowed-ips). */
  private fedRelays: ClusterPeerRelay[] = []
  /** Whether this node is in a federation (then it publishes what cross-cluster relays need). */
  private fedActive = false
  private federation: FederationRouteSource | undefined
  private offFederation: (() => void) | undefined
  private fedPlanJson = ''
  /** Peers that must dial this node → since when they wait for a handshake (`judgeInbound`). */
  private dialWaits = new Map<string, number>()
  /** Nothing reaches this node unless it sent first (published as `firewalled`). */
  private firewalled = false
  /** Peer → when this node last tried to connect to it over IPv6 (`ipv6Probes`): cluster peers, other clusters' nodes. */
  private readonly ipv6Tried = new Map<string, number>()
  private readonly ipv6TriedFederated = new Map<string, number>()
  private fedSkippedJson = '[]'
  /** Whether the tcp-proxy serves a shared service here (then the node has its federated ingress address). */
  private ingressWanted = false
  /** The federated ingress address while it is on the interface. */
  private ingressApplied: string | undefined
  private ifaceUp = false
  private egressError: string | undefined
  private readonly pods = new Map<string, { ipv6: string; confirmed: boolean }>()
  private podStates = new Map<string, PodNetworkState>()
  private chain: Promise<unknown> = Promise.resolve()
  private readonly prefixKnown = deferred()
  private stopReconcile: (() => void) | undefined
  private retryTimer: TimerHandle | undefined
  private retryMs = 10_000
  private run: WorkflowRun | undefined
  private snapshot: WorkflowSnapshot | undefined
  private unsubscribe: (() => void) | undefined
  private pendingChange = false
  private stopped = false
  private teardown = false
  private readonly removed: string[] = []
  private published: Record<string, unknown> = {}
  private publishedJson = ''
  private writes: Promise<void> = Promise.resolve()
  private readonly log: Logger
  private readonly setup: Required<Omit<NetworkSetup, 'wireguard'>> & Pick<NetworkSetup, 'wireguard'>

  constructor(
    private readonly c: NodeNetworkComponents,
    setup: NetworkSetup,
  ) {
    this.log = c.logger.child({ module: 'network' })
    this.setup = {
      mode: setup.mode,
      listenPort: setup.listenPort ?? NETWORK_DEFAULTS.listenPort,
      reconcileMs: setup.reconcileMs ?? NETWORK_DEFAULTS.reconcileMs,
      handshakeTimeoutMs: setup.handshakeTimeoutMs ?? NETWORK_DEFAULTS.handshakeTimeoutMs,
      wireguard: setup.wireguard,
    }
    this.listenPort = this.setup.listenPort
    this.prefixKnown.promise.catch(() => {})
  }

  get nodeName(): string {
    return this.c.nodeName
  }

  get mode(): NetworkMode {
    return this.setup.mode
  }

  /**
   * The cluster DNS address this node's pods reach its resolver at (on the WireGuard interface,
   * allowed through the host guard), or undefined when pods have no network here.
   */
  get dnsAddress(): string | undefined {
    if (this.cluster === undefined || this.state === 'Off' || this.state === 'Unavailable' || this.state === 'Stopped') return undefined
    return formatIPv6(clusterDnsAddress(this.cluster))
  }

  /**
   * Whether this node load-balances the services' virtual addresses (pod network up, the nftables
   * table applied): only then does its DNS answer a ClusterIP service with its virtual address.
   */
  get servicesBalanced(): boolean {
    return this.dnsAddress !== undefined && this.svcnat !== undefined && this.svcApplied !== undefined && this.svcError === undefined
  }

  /**
   * The federations (ids) whose shared services this node load-balances on their virtual addresses
   * (docs/federation.md): DNS answers a shared ClusterIP service with its address only for these.
   */
  get balancedFederations(): ReadonlySet<string> {
    return this.servicesBalanced ? this.svcFederations : new Set()
  }

  /** Whether the node's readiness waits for this network (false when off or unavailable). */
  get gatesReadiness(): boolean {
    return this.state === 'Starting' || this.state === 'Degraded'
  }

  /**
   * Decide whether networking runs here and start bringing it up (not awaited: handshakes may
   * take a while; `orc why node/NAME` shows progress). Throws only in mode `on` when impossible.
   */
  async start(): Promise<void> {
    if (this.setup.mode === 'off') return this.unavailable('Off', 'networking is off (--network off): pods have loopback only')
    if (this.c.mesh === undefined) {
      if (this.setup.mode === 'on') throw new OrcError('unavailable', '--network on needs the mesh (a cluster to build tunnels in)')
      return this.unavailable('Unavailable', 'the mesh is off: pods have loopback only')
    }
    const why = await (this.c.probe ?? (() => probeNetwork(this.setup.wireguard)))()
    if (why !== undefined) {
      if (this.setup.mode === 'on') throw new OrcError('unavailable', `--network on: ${why}`)
      this.log.warn({ reason: why }, 'pod network unavailable: pods get loopback only')
      return this.unavailable('Unavailable', `${why}: pods have loopback only`)
    }
    const mesh = this.c.mesh
    this.names = networkNamesFor(mesh.peerId)
    // For cleanup tools (the testbed): the host names this node uses.
    writeFileSync(join(this.c.dataDir, NETWORK_NAMES_FILE), JSON.stringify(this.names) + '\n', { mode: 0o644 })
    this.cluster = clusterPrefix(mesh.clusterId)
    this.wg =
      this.c.wireguard?.(this.names) ?? new WireGuardLinkDriver({ logger: this.c.logger }, { iface: this.names.iface, mode: this.setup.wireguard ?? 'auto' })
    this.podnet =
      this.c.podNetwork?.(this.names) ??
      new NetnsPodNetworkDriver(
        { logger: this.c.logger },
        {
          podNetnsPrefix: this.names.podNetnsPrefix,
          vethPrefix: this.names.vethPrefix,
          nftTable: this.names.nftTable,
          random: this.c.random,
          podServices: [{ address: formatIPv6(clusterDnsAddress(this.cluster)), port: 53 }],
        },
      )
    this.svcnat =
      this.c.serviceNat?.(this.names) ??
      new NftServiceNatDriver({ run: execaRunner }, { table: `${this.names.nftTable}_svc`, vethPrefix: this.names.vethPrefix })
    // Pods a previous agent left running keep their address (and their namespace) until the
    // lifecycle controller has re-adopted them; see podsAdopted().
    for (const p of this.c.store.list('Pod')) {
      const st = isPlainObject(p.status) ? p.status : {}
      const net = isPlainObject(st.network) ? st.network : {}
      const here = st.node === this.c.nodeName || (isPlainObject(p.spec) && isPlainObject(p.spec.placement) && p.spec.placement.node === this.c.nodeName)
      if (here && typeof net.ipv6 === 'string' && p.metadata.uid) this.pods.set(p.metadata.uid, { ipv6: net.ipv6, confirmed: false })
    }
    // Pods of federations are not in this store (their documents open later): the last known table.
    for (const [uid, ipv6] of this.readPodsFile()) if (!this.pods.has(uid)) this.pods.set(uid, { ipv6, confirmed: false })
    this.unsubscribe = this.c.store.onChange((keys) => {
      if (keys.some((k) => k.startsWith('Node/') || k.startsWith('Cluster/'))) this.changed()
      else if (keys.some((k) => k.startsWith('Service/') || k.startsWith('Pod/'))) this.servicesChanged()
    })
    this.startRun()
  }

  /**
   * Route the federated pods of other clusters (docs/federation.md, "Routing"): peers for the
   * nodes of other member clusters that run federated pods, allowed-ips their pods' /128s only.
   * Re-planned on every change of the federations; re-applied only when the plan changes.
   */
  useFederation(source: FederationRouteSource): () => void {
    this.offFederation?.()
    this.federation = source
    const off = source.onChange(() => {
      if (this.stopped || !this.ifaceUp || this.decision === undefined || this.key === undefined) return
      const p = this.planFederation()
      if (JSON.stringify({ peers: p.peers, relays: p.clusterRelays }) !== this.fedPlanJson) this.changed()
      // Shared services and their endpoints (re-applied only when the plan differs).
      else this.servicesChanged()
    })
    this.offFederation = off
    this.changed()
    // Stop following the source (the routes already planned stay until the next change).
    return off
  }

  /**
   * The tcp-proxy serves a shared service on this node (true) or no longer does (false): the node's
   * federated ingress address goes on its WireGuard interface and into its node summary, which
   * makes the other member clusters route it like a shared pod's /128 (docs/federation.md,
   * "Ingress"); nothing may open a connection to it (the services table's `send_only` chain).
   */
  wantFederatedIngress(on: boolean): void {
    if (on === this.ingressWanted) return
    this.ingressWanted = on
    this.changed()
  }

  /** The federated ingress address while it is on the interface: the tcp-proxy's source towards other clusters. */
  get federatedIngress(): string | undefined {
    return this.ingressApplied
  }

  /** Whether this node routes `address` to another cluster (a /128 of its federated peers or relays). */
  routesFederated(address: string): boolean {
    const dst = host128(address)
    return dst !== undefined && this.federatedRoutes().has(dst)
  }

  /** The /128s this node routes to other clusters: its federated peers' and relays' routes. */
  private federatedRoutes(): Set<string> {
    return new Set([...this.fedPeers.flatMap((p) => p.routes), ...this.fedRelays.flatMap((r) => r.routes)])
  }

  private planFederation(): FederatedPlan {
    if (this.federation === undefined || this.cluster === undefined || this.key === undefined) return { peers: [], skipped: [], clusterRelays: [] }
    const ownKeys = new Set([this.key.publicKey, ...this.peers.map((p) => p.wg.publicKey)])
    const clusterPeers = new Map(this.peers.map((p) => [p.name, p.wg.publicKey]))
    try {
      const scopes = this.federation.scopes()
      this.fedActive = scopes.length > 0
      return planFederatedPeers(scopes, { node: this.c.nodeName, ownCluster: this.cluster, ownKeys, clusterPeers })
    } catch (err) {
      // A bug here must not take the cluster's own tunnels down with it.
      this.log.warn({ err: String(err) }, 'plan federated routes')
      return { peers: this.fedPeers, skipped: [], clusterRelays: this.fedRelays }
    }
  }

  /** The lifecycle controller has re-adopted what it will: namespaces of other pods go. */
  podsAdopted(): void {
    let dropped = false
    for (const [uid, p] of this.pods) {
      if (!p.confirmed) {
        this.pods.delete(uid)
        dropped = true
      }
    }
    if (dropped && this.ifaceUp) void this.enqueue(() => this.applyPods())
  }

  async attachPod(uid: string, hint?: string): Promise<PodAttachment> {
    if (this.state === 'Off' || this.state === 'Unavailable' || this.state === 'Stopped') return { mode: 'loopback', reason: this.reason ?? 'no pod network' }
    await this.prefixKnown.promise
    return this.enqueue(async () => {
      const prefix = this.decision!.prefix
      const taken = new Set([...this.pods].filter(([u]) => u !== uid).map(([, p]) => p.ipv6))
      const cur = this.pods.get(uid)?.ipv6 ?? hint
      const ipv6 = cur !== undefined && validIn(cur, prefix) && !taken.has(cur) ? cur : randomPodAddress(prefix, this.c.random, taken)
      this.pods.set(uid, { ipv6, confirmed: true })
      await this.applyPods()
      const st = this.podStates.get(uid)
      if (st === undefined) throw new OrcError('internal', `pod network for ${uid} missing after set`)
      return { mode: 'ipv6' as const, ipv6: st.ipv6, ipv4: st.ipv4, netnsPath: `/var/run/netns/${st.netns}` }
    })
  }

  async detachPod(uid: string): Promise<void> {
    if (!this.pods.delete(uid) || this.podnet === undefined) return
    await this.enqueue(() => this.applyPods())
  }

  /** Live view for `orc get routes` (reads the interface now). */
  async report(): Promise<NetworkReport> {
    const out: NetworkReport = { node: this.c.nodeName, state: this.state, tunnels: [], pods: [] }
    if (this.reason !== undefined) out.reason = this.reason
    if (this.names === undefined) return out
    const wg = this.ifaceUp ? await this.wg!.status().catch(() => undefined) : undefined
    const mode = (this.wg as { currentMode?: string }).currentMode
    Object.assign(out, {
      iface: this.names.iface,
      ...(mode ? { mode } : {}),
      ...(this.key ? { publicKey: this.key.publicKey } : {}),
      ...(this.decision ? { prefix: formatPrefix(this.decision.prefix) } : {}),
      listenPort: wg?.listenPort ?? this.listenPort,
      endpoints: this.endpoints(wg?.listenPort ?? this.listenPort),
      egress: this.egressError === undefined ? 'masquerade' : `off: ${this.egressError}`,
    })
    out.tunnels = this.tunnelReports(wg)
    if (this.fedPeers.length > 0) out.federated = this.federatedReports(wg)
    out.pods = [...this.podStates.values()].map((p) => ({ uid: p.id, ipv6: p.ipv6, netns: p.netns }))
    return out
  }

  /**
   * `orc down`: make the coming stop remove everything this node made on the host — also the pod
   * namespaces (stopping what still runs in them), the NAT table and the forwarding sysctls — and
   * say what that is. What stop() removed is then in `removedOnStop`.
   */
  prepareDown(): DownPlan {
    this.teardown = true
    const plan: DownPlan = { pods: [...this.podStates.values()].map((p) => p.netns).sort() }
    if (this.names !== undefined && this.ifaceUp) plan.iface = this.names.iface
    if (this.names !== undefined && this.podnet !== undefined) plan.nftTable = this.names.nftTable
    if (this.names !== undefined) plan.podNetnsPrefix = this.names.podNetnsPrefix
    return plan
  }

  /** What the last stop removed (descriptions, for logs and `orc down`). */
  get removedOnStop(): readonly string[] {
    return this.removed
  }

  /** Remove the interface (tunnels and routes). Pod namespaces stay while their containers run. */
  async stop(): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    this.unsubscribe?.()
    this.offFederation?.()
    this.stopReconcile?.()
    if (this.retryTimer !== undefined) this.c.clock.clearTimeout(this.retryTimer)
    this.run?.cancel('agent stopping')
    this.prefixKnown.reject(new OrcError('unavailable', 'agent stopping'))
    await this.chain.catch(() => {})
    if (this.wg !== undefined) {
      const r = await this.wg.down().catch((err) => this.log.warn({ err: String(err) }, 'remove wireguard interface'))
      if (r?.changed) this.removed.push(`wireguard interface ${this.names?.iface ?? ''} with its routes`)
    }
    if (this.podnet !== undefined && (this.pods.size === 0 || this.teardown)) {
      const r = await this.podnet.down({ stopProcesses: this.teardown }).catch((err) => this.log.warn({ err: String(err) }, 'remove pod network'))
      if (r) this.removed.push(...(r.removed ?? []))
      // The services' table goes with the pods it balances to (it outlives a plain restart, so pods keep reaching services).
      const v = await this.svcnat?.down().catch((err) => this.log.warn({ err: String(err) }, 'remove service load balancing'))
      if (v) this.removed.push(...v.removed)
    }
    if (this.removed.length > 0) this.log.info({ removed: this.removed }, 'node network removed')
    if (this.teardown && this.names !== undefined) {
      // For `orc down`, which waits for this process to exit and then says what went.
      try {
        writeFileSync(join(this.c.dataDir, NETWORK_DOWN_FILE), JSON.stringify({ removed: this.removed }) + '\n', { mode: 0o644 })
      } catch (err) {
        this.log.warn({ err: String(err) }, 'write network down report')
      }
    }
    this.state = 'Stopped'
    await this.writes.catch(() => {})
  }

  // ---- bring-up workflow ----

  private startRun(): void {
    if (this.stopped) return
    const g = addNodeTargets(new WorkflowGraph())
    g.addUnit({
      name: 'wireguard-key',
      description: `WireGuard key pair in ${WIREGUARD_KEY_FILE} (created once, 0600)`,
      wantedBy: ['network-online'],
      timeoutMs: 5_000,
      run: async () => {
        this.key ??= this.loadOrCreateKey()
      },
    })
    g.addUnit({
      name: 'node-subnet',
      description: "this node's /64 claimed in the store (collisions settled: lowest peer id keeps it)",
      requires: ['wireguard-key'],
      wantedBy: ['network-online'],
      timeoutMs: 15_000,
      run: async () => {
        await this.enqueue(() => this.settleSubnet())
      },
    })
    g.addUnit({
      name: 'wireguard-interface',
      description: 'WireGuard interface up with every member as a peer, routes to their /64s',
      requires: ['node-subnet'],
      wantedBy: ['network-online'],
      timeoutMs: 30_000,
      retry: { attempts: 3, backoffMs: 1000 },
      run: async () => {
        await this.enqueue(() => this.reconcileNow())
        if (this.stopReconcile === undefined && !this.stopped) {
          this.stopReconcile = every(unrefTimers(this.c.clock), this.setup.reconcileMs, () => this.changed())
        }
      },
    })
    g.addUnit({
      name: 'tunnels',
      description: 'a WireGuard handshake with every alive member',
      requires: ['wireguard-interface'],
      wantedBy: ['network-online'],
      timeoutMs: this.setup.handshakeTimeoutMs,
      retry: { attempts: 2, backoffMs: 1000 },
      run: async ({ signal }) => {
        let missing: string[] = []
        // Give up just before the unit's timeout, so the error names the silent peers.
        const clock = this.c.clock
        const deadline = clock.now() + Math.max(this.setup.handshakeTimeoutMs - 1000, this.setup.handshakeTimeoutMs * 0.8)
        while (!signal.aborted && clock.now() < deadline) {
          const wg = await this.wg!.status()
          missing = this.tunnelReports(wg)
            .filter((t) => t.alive && t.state !== 'up')
            .map((t) => `${t.node} (${t.endpoint ?? 'waiting for it to dial'})`)
          if (missing.length === 0) return
          await sleep(clock, 200)
        }
        throw new OrcError('unavailable', `no handshake yet from ${missing.join(', ')}`)
      },
    })
    const run = new WorkflowRun(g, { clock: this.c.clock, id: `node/${this.c.nodeName}`, log: this.log })
    this.run = run
    run.onChange(() => {
      if (this.run !== run) return
      this.snapshot = run.snapshot()
      this.writeNodeStatus()
    })
    this.snapshot = run.snapshot()
    void run.reach('ready').then((res) => {
      if (this.run !== run || this.stopped) return
      this.snapshot = run.snapshot()
      if (res.reached) {
        this.state = 'Ready'
        this.reason = undefined
        this.retryMs = 10_000
        this.log.info({ prefix: this.decision && formatPrefix(this.decision.prefix), peers: this.peers.length }, 'node network ready')
      } else {
        this.state = 'Degraded'
        this.reason = res.reason
        this.log.warn({ reason: res.reason }, 'node network not ready; retrying')
        const delay = this.retryMs
        this.retryMs = Math.min(this.retryMs * 2, 120_000)
        this.retryTimer = this.c.clock.setTimeout(() => {
          this.retryTimer = undefined
          this.startRun()
        }, delay)
      }
      this.writeNodeStatus()
    })
  }

  private loadOrCreateKey(): WireGuardKeyPair {
    const file = join(this.c.dataDir, WIREGUARD_KEY_FILE)
    if (existsSync(file)) {
      const text = readFileSync(file, 'utf8').trim()
      if (!isWireGuardKey(text)) throw new OrcError('corrupt', `${file} does not hold a WireGuard private key (remove it to make a new one)`)
      return { privateKey: text, publicKey: publicKeyOf(text) }
    }
    const k = generateKeyPair(this.c.random)
    writeFileSync(file, k.privateKey + '\n', { mode: 0o600 })
    chmodSync(file, 0o600)
    this.log.info({ publicKey: k.publicKey }, 'wireguard key created')
    return k
  }

  // ---- reconcile ----

  private enqueue<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.chain.then(fn)
    this.chain = next.catch(() => {})
    return next
  }

  /** A store change or the periodic tick: re-apply everything, coalesced. */
  private changed(): void {
    if (this.stopped || !this.ifaceUp || this.pendingChange) return
    this.pendingChange = true
    setImmediate(() => {
      this.pendingChange = false
      if (this.stopped) return
      void this.enqueue(() => this.reconcileNow()).catch((err) => {
        this.log.warn({ err: String(err) }, 'network reconcile failed')
        this.reason = String((err as Error).message ?? err)
        this.writeNodeStatus()
      })
    })
  }

  private publishedNodes(): PublishedNetwork[] {
    const removed = new Set<string>()
    for (const c of this.c.store.list('Cluster')) {
      const rp = isPlainObject(c.status) ? c.status.removedPeers : undefined
      if (isPlainObject(rp)) for (const k of Object.keys(rp)) removed.add(k)
    }
    const out: PublishedNetwork[] = []
    for (const n of this.c.store.list('Node')) {
      const p = readPublishedNetwork(n as OrcObject, removed)
      if (p !== undefined) out.push(p)
    }
    return out
  }

  private async settleSubnet(): Promise<void> {
    const mesh = this.c.mesh!
    const d = decideSubnet(this.cluster!, mesh.peerId, this.publishedNodes())
    const old = this.decision
    this.decision = d
    if (old !== undefined && old.subnet !== d.subnet) {
      this.log.warn({ from: formatPrefix(old.prefix), to: formatPrefix(d.prefix) }, 'node subnet lost a collision; pods are re-addressed')
      for (const p of this.pods.values())
        if (!validIn(p.ipv6, d.prefix)) p.ipv6 = randomPodAddress(d.prefix, this.c.random, new Set([...this.pods.values()].map((x) => x.ipv6)))
    }
    this.published = {
      ...this.published,
      iface: this.names!.iface,
      publicKey: this.key!.publicKey,
      subnet: d.subnet,
      prefix: formatPrefix(d.prefix),
    }
    if (d.claimChanged || old === undefined || old.subnet !== d.subnet) await this.writeNodeStatus()
    this.prefixKnown.resolve()
  }

  private async reconcileNow(): Promise<void> {
    if (this.stopped) return
    await this.settleSubnet()
    const mesh = this.c.mesh!
    const d = this.decision!
    const published = this.publishedNodes()
    const observed = mesh.observedIps()
    this.peers = planPeers(this.cluster!, mesh.peerId, published, d.owners, observed)
    this.tryIpv6(published, observed)
    const fed = this.planFederation()
    this.fedPeers = fed.peers
    this.fedRelays = fed.clusterRelays
    this.tryIpv6Federated(fed)
    this.fedPlanJson = JSON.stringify({ peers: fed.peers, relays: fed.clusterRelays })
    // Other clusters' pods relayed by a member of ours: on that member's tunnel (WireGuard accepts
    // an address on one peer only; the far end's own peer has none of them).
    for (const r of fed.clusterRelays) {
      const p = this.peers.find((x) => x.wg.publicKey === r.publicKey)
      if (p === undefined) continue
      for (const d of r.routes) if (!p.wg.allowedIps.includes(d)) p.wg.allowedIps.push(d)
    }
    const skippedJson = JSON.stringify(fed.skipped)
    if (skippedJson !== this.fedSkippedJson) {
      this.fedSkippedJson = skippedJson
      if (fed.skipped.length > 0)
        this.log.warn(
          { skipped: fed.skipped.slice(0, 20), count: fed.skipped.length },
          'federated routes skipped (malformed or conflicting entries from other clusters)',
        )
    }
    const ingress = this.ingressWanted ? federatedIngressAddress(d.prefix) : undefined
    const config = () => ({
      iface: this.names!.iface,
      privateKey: this.key!.privateKey,
      listenPort: this.listenPort,
      // The cluster DNS address (subnet 0, never a peer's) is local on every node: its resolver (agent/dns).
      address: [`${nodeGateway(d.prefix)}/64`, `${formatIPv6(clusterDnsAddress(this.cluster!))}/128`, ...(ingress !== undefined ? [`${ingress}/128`] : [])],
      peers: [...this.peers.map((p) => p.wg), ...this.fedPeers.map((p) => p.wg)],
    })
    let res
    try {
      res = await this.wg!.set(config())
    } catch (err) {
      if (this.listenPort === 0 || !PORT_IN_USE.test(String((err as Error).message))) throw err
      this.log.warn({ port: this.listenPort }, 'wireguard port in use; using a free one')
      this.listenPort = 0
      res = await this.wg!.set(config())
    }
    this.ifaceUp = true
    this.ingressApplied = ingress
    const wg = await this.wg!.status()
    if (this.listenPort === 0 && wg !== undefined && wg.listenPort > 0) this.listenPort = wg.listenPort
    if (res.changed) this.log.info({ actions: res.actions, peers: this.peers.length, federated: this.fedPeers.length }, 'tunnels updated')
    await this.applyPods()
    await this.applyServices(true)
    const port = wg?.listenPort ?? this.listenPort
    const tunnels = this.tunnelReports(wg)
    this.judgeInbound(tunnels, wg)
    const { reach, seen } = this.reachability(tunnels)
    const fedReach = this.fedActive ? this.federatedReachability(tunnels, wg) : {}
    delete this.published.reachPrefixes
    delete this.published.behindNat
    delete this.published.federatedIngress
    delete this.published.firewalled
    this.published = {
      ...this.published,
      ...fedReach,
      // Published (so routed to by other clusters) only with the guard that refuses new connections to it in place.
      ...(ingress !== undefined && this.svcError === undefined ? { federatedIngress: ingress } : {}),
      mode: res.mode,
      listenPort: port,
      endpoints: this.endpoints(port),
      tunnels: { up: tunnels.filter((t) => t.state === 'up').length, total: tunnels.length },
      reach,
      seen,
      ...(this.firewalled ? { firewalled: true } : {}),
      ...(this.egressError !== undefined ? { egress: `off: ${this.egressError}` } : { egress: 'masquerade' }),
      services: this.svcError === undefined ? 'load-balanced' : `off: ${this.svcError}`,
    }
    await this.writeNodeStatus()
  }

  /** Connect to peers over IPv6 where only IPv4 is connected (`ipv6Probes`); a success re-plans. */
  private tryIpv6(nodes: readonly PublishedNetwork[], observed: ObservedIps): void {
    const mesh = this.c.mesh!
    if (mesh.connectOver === undefined) return
    const self = nodes.find((n) => n.peerId === mesh.peerId)
    const planned = new Set(this.peers.map((p) => p.peerId))
    const peers = nodes.filter((n) => planned.has(n.peerId)).map((n) => ({ id: n.peerId, endpoints: n.endpoints, observed: observed.get(n.peerId) }))
    this.probeIpv6(peers, self?.endpoints ?? [], this.ipv6Tried, (id, ip) => mesh.connectOver!(id, ip))
  }

  /** The same for peers of other clusters, over the federation's mesh. */
  private tryIpv6Federated(fed: FederatedPlan): void {
    const src = this.federation
    if (src?.connectOver === undefined || fed.meshPaths === undefined) return
    const byId = new Map(fed.meshPaths.map((m) => [`${m.federation}\0${m.name}`, m]))
    const peers = [...byId].map(([id, m]) => ({ id, endpoints: m.endpoints, observed: m.observed }))
    this.probeIpv6(peers, this.endpoints(this.listenPort), this.ipv6TriedFederated, (id, ip) => {
      const m = byId.get(id)!
      return src.connectOver!(m.federation, m.name, ip)
    })
  }

  /** Open the connections `ipv6Probes` picks (not awaited); each that works re-plans. */
  private probeIpv6(
    peers: Parameters<typeof ipv6Probes>[0],
    selfEndpoints: readonly string[],
    tried: Map<string, number>,
    connect: (id: string, ip: string) => Promise<boolean>,
  ): void {
    for (const p of ipv6Probes(peers, selfEndpoints, tried, this.c.clock.now()))
      void connect(p.id, p.ip).then((ok) => {
        if (ok && !this.stopped) this.changed()
      })
  }

  /** A Service or Pod changed: re-plan the virtual addresses (coalesced; applied only when the plan differs). */
  private servicesChanged(): void {
    if (this.stopped || !this.ifaceUp || this.svcPending) return
    this.svcPending = true
    setImmediate(() => {
      this.svcPending = false
      if (!this.stopped) void this.enqueue(() => this.applyServices(false))
    })
  }

  /**
   * Load-balance every ClusterIP service's virtual address to its ready endpoints. `force` (the
   * reconcile tick) re-applies even an unchanged plan, which repairs a table deleted by hand.
   */
  private async applyServices(force: boolean): Promise<void> {
    if (this.svcnat === undefined || this.decision === undefined || this.cluster === undefined || this.names === undefined) return
    try {
      // No Service, no endpoints to find: the pods are not listed (every pod change lands here).
      const services = this.c.store.list('Service')
      const plan = planVirtualServices(services, services.length === 0 ? [] : this.c.store.list('Pod'), this.cluster)
      const shared = this.planShared()
      const range = serviceVirtualRange(this.cluster)
      const config = {
        iface: this.names.iface,
        range,
        gateway: nodeGateway(this.decision.prefix),
        services: [...plan.services, ...shared.services],
        federatedRanges: shared.federations.map((f) => f.range),
        ...(this.ingressApplied !== undefined ? { sendOnly: [this.ingressApplied] } : {}),
      }
      const json = JSON.stringify({ ...config, range: formatPrefix(range), federatedRanges: config.federatedRanges.map(formatPrefix) })
      if (!force && json === this.svcApplied) return
      const res = await this.svcnat.set(config)
      this.svcApplied = json
      this.svcFederations = new Set(shared.federations.map((f) => f.id))
      if (res.changed)
        this.log.info(
          { services: plan.services.length, federated: shared.services.length, shared: plan.shared, actions: res.actions },
          'service addresses updated',
        )
      if (this.svcError !== undefined) {
        this.svcError = undefined
        this.log.info('service load balancing restored')
      }
    } catch (err) {
      const why = String((err as Error).message ?? err)
      if (why !== this.svcError) this.log.warn({ err: why }, 'service load balancing unavailable')
      this.svcError = why
    }
  }

  /**
   * The federations' shared services this node balances (federated-services.ts): over its own
   * cluster's endpoints, else over the other clusters' that its federated plan routes.
   */
  private planShared(): ReturnType<typeof planSharedServices> {
    if (this.federation === undefined || this.cluster === undefined) return { federations: [], services: [], skipped: [] }
    try {
      const plan = planSharedServices(this.federation.scopes(), { node: this.c.nodeName, ownCluster: this.cluster, routed: this.federatedRoutes() })
      const skippedJson = JSON.stringify(plan.skipped)
      if (skippedJson !== this.svcSkippedJson) {
        this.svcSkippedJson = skippedJson
        if (plan.skipped.length > 0) this.log.warn({ skipped: plan.skipped.slice(0, 20), count: plan.skipped.length }, 'shared services skipped')
      }
      return plan
    } catch (err) {
      // A bug here must not take the cluster's own services down with it.
      this.log.warn({ err: String(err) }, 'plan shared services')
      return { federations: [], services: [], skipped: [] }
    }
  }

  private async applyPods(): Promise<void> {
    if (this.podnet === undefined || this.decision === undefined) return
    const pods = [...this.pods].map(([id, p]) => ({ id, ipv6: p.ipv6 }))
    let res
    if (this.egressError === undefined) {
      try {
        res = await this.podnet.set({ pods })
      } catch (err) {
        // Egress is a convenience: without nftables, pods still get their IPv6.
        if (!/nft/i.test(String((err as Error).message))) throw err
        this.egressError = String((err as Error).message)
        this.log.warn({ err: this.egressError }, 'pod IPv4 egress unavailable')
      }
    }
    res ??= await this.podnet.set({ pods, egress: false })
    this.podStates = new Map(res.pods.map((p) => [p.id, p]))
    this.writePodsFile()
  }

  private podsFileJson = ''

  private readPodsFile(): Map<string, string> {
    const out = new Map<string, string>()
    try {
      const raw = JSON.parse(readFileSync(join(this.c.dataDir, NETWORK_PODS_FILE), 'utf8')) as unknown
      if (isPlainObject(raw))
        for (const [uid, ipv6] of Object.entries(raw))
          if (/^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$/.test(uid) && typeof ipv6 === 'string' && ipv6.length <= 64) out.set(uid, ipv6)
    } catch {
      // none yet, or unreadable: only the store's pods are kept
    }
    return out
  }

  private writePodsFile(): void {
    const json = JSON.stringify(Object.fromEntries([...this.podStates.values()].map((p) => [p.id, p.ipv6]).sort()))
    if (json === this.podsFileJson) return
    this.podsFileJson = json
    try {
      writeFileSync(join(this.c.dataDir, NETWORK_PODS_FILE), json + '\n', { mode: 0o600 })
    } catch (err) {
      this.log.warn({ err: String(err) }, 'write pod address table')
    }
  }

  private endpoints(port: number): string[] {
    return port > 0 ? endpointsFromMultiaddrs(this.c.mesh!.addresses(), port) : []
  }

  private tunnelReports(wg: WireGuardStatus | undefined): TunnelReport[] {
    const byKey = new Map((wg?.peers ?? []).map((p) => [p.publicKey, p]))
    const alive = this.c.mesh?.alivePeers() ?? new Set<string>()
    const now = this.c.clock.now()
    const stateOf = (publicKey: string) => handshakeState(byKey.get(publicKey)?.latestHandshakeMs, now)
    const keyOf = new Map(this.peers.map((p) => [p.peerId, p.wg.publicKey]))
    return this.peers.map((p) => {
      const s = byKey.get(p.wg.publicKey)
      const hs = s?.latestHandshakeMs
      const direct = stateOf(p.wg.publicKey)
      const relayKey = p.via !== undefined ? keyOf.get(p.via.peerId) : undefined
      const endpoint = s?.endpoint ?? p.wg.endpoint
      return {
        node: p.name,
        peerId: p.peerId,
        prefix: p.prefix,
        publicKey: p.wg.publicKey,
        ...(endpoint !== undefined ? { endpoint } : {}),
        path: p.path,
        ...(p.via !== undefined ? { via: p.via.name } : {}),
        ...(p.punched ? { punched: true } : {}),
        state: relayKey !== undefined ? stateOf(relayKey) : direct,
        ...(relayKey !== undefined ? { direct } : {}),
        ...(hs !== undefined ? { latestHandshakeMs: hs } : {}),
        rxBytes: s?.rxBytes ?? 0,
        txBytes: s?.txBytes ?? 0,
        alive: alive.has(p.peerId),
      }
    })
  }

  private federatedReports(wg: WireGuardStatus | undefined): FederatedTunnelReport[] {
    const byKey = new Map((wg?.peers ?? []).map((p) => [p.publicKey, p]))
    const now = this.c.clock.now()
    return this.fedPeers.map((p) => {
      const s = byKey.get(p.wg.publicKey)
      const hs = s?.latestHandshakeMs
      const endpoint = s?.endpoint ?? p.wg.endpoint
      const direct = handshakeState(hs, now)
      return {
        node: p.name,
        cluster: p.cluster,
        federations: p.federations,
        routes: p.routes,
        nodePrefix: p.nodePrefix,
        publicKey: p.wg.publicKey,
        ...(endpoint !== undefined ? { endpoint } : {}),
        path: p.path,
        ...(p.via !== undefined ? { via: p.via.name } : {}),
        ...(p.relayFor !== undefined ? { relayFor: p.relayFor } : {}),
        // A relayed peer's path is the relay's tunnel; `direct` is its own.
        state: p.via !== undefined ? handshakeState(byKey.get(p.via.publicKey)?.latestHandshakeMs, now) : direct,
        ...(p.via !== undefined ? { direct } : {}),
        ...(hs !== undefined ? { latestHandshakeMs: hs } : {}),
        rxBytes: s?.rxBytes ?? 0,
        txBytes: s?.txBytes ?? 0,
      }
    })
  }

  /**
   * Whether peers that must dial this node get through (docs/networking.md, "A public node behind
   * a firewall"): the alive cluster peers and the federated peers it has no endpoint for (they are
   * behind NAT and dial it), their direct tunnels' state.
   */
  private judgeInbound(tunnels: TunnelReport[], wg: WireGuardStatus | undefined): void {
    const now = this.c.clock.now()
    const endpointless = new Set(this.peers.filter((p) => p.wg.endpoint === undefined).map((p) => p.wg.publicKey))
    const dialled = tunnels
      .filter((t) => t.alive && endpointless.has(t.publicKey) && (t.path === 'peer-dials' || t.path === 'relayed'))
      .map((t) => ({ key: t.publicKey, up: (t.direct ?? t.state) === 'up' }))
    const hs = new Map((wg?.peers ?? []).map((p) => [p.publicKey, p.latestHandshakeMs]))
    for (const f of this.fedPeers)
      if (f.wg.endpoint === undefined && (f.path === 'peer-dials' || f.path === 'relayed'))
        dialled.push({ key: f.wg.publicKey, up: handshakeState(hs.get(f.wg.publicKey), now) === 'up' })
    const j = judgeInbound(this.dialWaits, dialled, now, this.setup.handshakeTimeoutMs)
    this.dialWaits = j.waits
    if (j.firewalled !== this.firewalled)
      this.log.warn(
        { waiting: j.waits.size },
        j.firewalled
          ? 'no peer that must dial this node gets through (a firewall drops unsolicited UDP?): pairs with peers behind NAT are relayed'
          : 'a peer that dials this node got through: no longer taken as firewalled',
      )
    this.firewalled = j.firewalled
  }

  /**
   * What this node publishes for relay decisions (sorted, so an unchanged view writes nothing):
   * the subnets it has a fresh direct handshake with, and where it sees peers behind NAT.
   */
  private reachability(tunnels: TunnelReport[]): { reach: number[]; seen: Record<string, string> } {
    const subnetOf = new Map([...(this.decision?.owners ?? [])].map(([s, p]) => [p, s]))
    const reach: number[] = []
    const seen: Record<string, string> = {}
    for (const t of tunnels) {
      const s = subnetOf.get(t.peerId)
      const up = (t.direct ?? t.state) === 'up'
      if (s === undefined || !up) continue
      reach.push(s)
      if (t.path === 'peer-dials' && t.endpoint !== undefined && Object.keys(seen).length < MAX_SEEN) seen[String(s)] = t.endpoint
    }
    reach.sort((a, b) => a - b)
    return { reach: reach.slice(0, MAX_REACH), seen: Object.fromEntries(Object.entries(seen).sort(([a], [b]) => Number(a) - Number(b))) }
  }

  /**
   * What the node summary in a federation carries for cross-cluster relays (docs/federation.md,
   * "Relays between clusters"): the /64s of every peer (cluster and federated) it has a fresh
   * direct handshake with, and whether it is behind NAT (a member of its cluster sees it so, or
   * none of its endpoints is a public address) or behind a firewall that drops unsolicited UDP
   * (`firewalled`: it cannot be dialled either).
   */
  private federatedReachability(tunnels: TunnelReport[], wg: WireGuardStatus | undefined): { reachPrefixes: string[]; behindNat: boolean } {
    const out = new Set<string>()
    for (const t of tunnels) if ((t.direct ?? t.state) === 'up') out.add(t.prefix)
    const hs = new Map((wg?.peers ?? []).map((p) => [p.publicKey, p.latestHandshakeMs]))
    const now = this.c.clock.now()
    for (const f of this.fedPeers) if (handshakeState(hs.get(f.wg.publicKey), now) === 'up') out.add(f.nodePrefix)
    const subnet = this.decision?.subnet
    const seen = subnet !== undefined && this.publishedNodes().some((n) => n.peerId !== this.c.mesh?.peerId && n.seen?.has(subnet))
    const endpoints = this.endpoints(wg?.listenPort ?? this.listenPort)
    return { reachPrefixes: [...out].sort().slice(0, MAX_REACH), behindNat: seen || this.firewalled || !endpoints.some(isPublicEndpoint) }
  }

  // ---- status ----

  private unavailable(state: 'Off' | 'Unavailable', reason: string): Promise<void> {
    this.state = state
    this.reason = reason
    this.prefixKnown.reject(new OrcError('unavailable', reason))
    return this.writeNodeStatus()
  }

  /** The Node status fields this controller owns: `network`, `workflow`, and `state` (Ready or not). */
  private writeNodeStatus(): Promise<void> {
    const ref = { kind: 'Node', namespace: '', name: this.c.nodeName }
    const network: Record<string, unknown> = { ...this.published, state: this.state }
    if (this.reason !== undefined) network.reason = this.reason
    const body = { network, workflow: this.snapshot }
    const json = JSON.stringify(body)
    if (json === this.publishedJson) return this.writes
    this.publishedJson = json
    const gated = this.state === 'Starting' || this.state === 'Degraded'
    this.writes = this.writes.then(async () => {
      const cur = this.c.store.get(ref)
      if (cur === undefined || (isPlainObject(cur.status) && cur.status.state === 'Removed')) return
      const fields = [
        { path: ['status', 'network'], value: network },
        { path: ['status', 'workflow'], value: this.snapshot },
        { path: ['status', 'state'], value: gated ? 'NotReady' : 'Ready' },
      ]
      await this.c.store
        .patch(ref, fields, { author: NODE_CONTROLLER, reason: `network ${this.state.toLowerCase()}`, now: this.c.clock.now() })
        .catch((err) => this.log.debug({ err: String(err) }, 'write node network status'))
    })
    return this.writes
  }
}

function deferred(): { promise: Promise<void>; resolve(): void; reject(err: unknown): void } {
  let resolve!: () => void
  let reject!: (err: unknown) => void
  const promise = new Promise<void>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

function validIn(addr: string, prefix: IpPrefix): boolean {
  try {
    return addressInPrefix(addr, prefix)
  } catch {
    return false
  }
}
