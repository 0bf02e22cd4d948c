/**
 * The composition root of a node: opens the store, records this node (and, on a fresh data dir,
 * the cluster), serves the local API. Its parts are components (component.ts) listed once, in
 * dependency order: they start in that order and stop in the reverse one.
 */
import { chmodSync, existsSync, mkdirSync, statSync, unlinkSync, writeFileSync } from 'node:fs'
import { availableParallelism, cpus, hostname, totalmem } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import type { Logger } from 'pino'
import { type Clock, every, execaRunner, type Random, sleep, systemClock, systemRandom, unrefTimers } from '../effects/index.ts'
import { loadOrCreateIdentity, type MemberDirectory, peerKeyVerifier, recordSigner, verifySignedRequest } from '../mesh/index.ts'
import {
  ADMIN_USER,
  API_VERSION,
  errorOfResponse,
  isPlainObject,
  type NodeStatus,
  nodeRootUser,
  type ObjectRef,
  OrcError,
  type OrcObject,
  type Pod,
  type RbacSource,
  type Secret,
  type SecurityPolicy,
  wrapError,
} from '../model/index.ts'
import { QemuRuntime } from '../runtime/index.ts'
import { DEFAULT_SCHED_OPTIONS } from '../sched/index.ts'
import { type ObjectStore, openStore, type StoreOptions, type UserEvidenceOptions } from '../store/index.ts'
import { type NodeInfo, objectRoutes, routeNotFound } from './api.ts'
import { createAuthorizer, userMayOnReceipt } from './authz.ts'
import { ADMIN_CREDENTIAL_FILE, type ClusterNode, prepareJoin, startClusterMesh } from './cluster.ts'
import { type Component, type StartedComponents, startComponents } from './component.ts'
import { AGENT_CONTROLLERS, checkAgentControllers } from './controllers.ts'
import { DeploymentController, type LeaderlessComponents, rolloutRoutes } from './deployments/index.ts'
import { ClusterDns } from './dns/index.ts'
import {
  FederationManager,
  federationRouteSource,
  federationRoutes,
  routedStore,
  sharedPodLogs,
  sharedPodNode,
  sharedPodStreams,
  withoutShared,
} from './federation/index.ts'
import { compactHeap, keepHeapCompact } from './heap.ts'
import { type SocketServer, serveOnSocket } from './http.ts'
import { imageRoutes } from './images/api.ts'
import { imageBlobMetrics, LateBlobProvider, MeshBlobSource, StoreBlobProvider } from './images/peers.ts'
import { pinImagesOnRollback } from './images/rollback.ts'
import { IngressController } from './ingress/index.ts'
import { JobController } from './jobs/index.ts'
import { createLogger } from './logger.ts'
import { meshViewOf, NodeNetwork, networkRoutes } from './network/index.ts'
import { NODE_CONTROLLER, nodeNameFromHostname, ORC_VERSION } from './node-info.ts'
import { type InstallListener, installListener } from './ops/install-listener.ts'
import { MetricsRegistry } from './ops/metrics.ts'
import { nodeDoctor } from './ops/node-doctor.ts'
import { nodeMetrics } from './ops/node-metrics.ts'
import type { NodeOps } from './ops/node-ops.ts'
import { peerRows } from './ops/peers.ts'
import { type OpsRoutesComponents, opsRoutes, opsStatusFields } from './ops/routes.ts'
import { type AgentOptions, DEFAULT_CLUSTER_NAME, PID_FILE, readPid, socketPathOf } from './options.ts'
import { podRoutes } from './pods/api.ts'
import { PodLifecycle } from './pods/controller.ts'
import { admitPodData } from './pods/refs.ts'
import { adminByRole, admitPod, admitPolicy, asksOf, type IsAdmin, podAuthorsOf, runtimeRefusal } from './pods/security.ts'
import { PodStreams, podStreamRoutes } from './pods/streams.ts'
import { PodTop, topRoutes } from './pods/top.ts'
import { previousUserRevision } from './rollback.ts'
import { type ApiHandler, combineHandlers, createRouter, Passthrough } from './router.ts'
import { pathOf } from './routes.ts'
import { schedOptionsOf, schedRoutes } from './sched/index.ts'
import { ClusterKeyring, createKeyringFile, KEYRING_FILE } from './secrets.ts'
import { admitSealedKeys, sealAppliedSecret, secretRoutes } from './secrets-api.ts'
import { pruneClusterTombstones, type StabilityDeps, stabilityRoutes } from './stability.ts'
import { userRoutes } from './users.ts'
import { secretValueOf, VmController, vmConsoleRoutes, vmRoutes } from './vms/index.ts'
import { admitVolumeChange, admitVolumeDelete, VolumeService, volumeRoutes } from './volumes/index.ts'

export type OpenStore = (opts: {
  dir: string
  logger?: Logger
  randomBytes?: Random
  trust?: Pick<StoreOptions, 'signer' | 'verifier' | 'userMay' | 'userEvidence'>
}) => Promise<ObjectStore>

export interface AgentComponents {
  /** Opens the store; the real one unless a test injects another. */
  openStore?: OpenStore
  logger?: Logger
}

export interface Agent {
  readonly info: NodeInfo
  readonly store: ObjectStore
  readonly handler: ApiHandler
  readonly socketPath: string
  readonly logger: Logger
  /** The node's mesh, when started with `opts.mesh`. */
  readonly cluster?: ClusterNode
  /** controller:lifecycle, running this node's pods. */
  readonly lifecycle: PodLifecycle
  /** Metrics, events, doctor and the HTTP listener (install script, /metrics). */
  readonly ops: NodeOps
  /** The federations this node takes part in (docs/federation.md). */
  readonly federation: FederationManager
  /** This node's copy of the cluster keyring (Secrets): loaded at start; empty on a joiner until delivered. */
  readonly keyring: ClusterKeyring
  /** Orderly stop: API first (no new writes), then the store. Safe to call twice. */
  stop(): Promise<void>
  /** Resolves when the agent has stopped. */
  readonly stopped: Promise<void>
}

function ensureDataDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    if (!statSync(dir).isDirectory()) throw new Error('not a directory')
    mkdirSync(join(dir, 'db'), { recursive: true, mode: 0o700 })
    chmodSync(join(dir, 'db'), 0o700)
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    if (e.code === 'EACCES' || e.code === 'EPERM') {
      throw new OrcError('forbidden', `create data dir ${dir}: permission denied (run as root, or pass --data-dir)`, { dataDir: dir }, err)
    }
    throw wrapError(`create data dir ${dir}`, err)
  }
}

function defaultOpenStore(opts: Parameters<OpenStore>[0]): Promise<ObjectStore> {
  return openStore({ dir: opts.dir, randomBytes: opts.randomBytes, logger: opts.logger as StoreOptions['logger'], ...opts.trust })
}

async function openStoreIn(dataDir: string, open: OpenStore, logger: Logger, random: Random, trust?: StoreTrust): Promise<ObjectStore> {
  try {
    // The system's randomness: the store's own pool of it (one 4 KiB draw instead of ~7 µs per uid,
    // ~5 % of an API write); an injected source (tests) is used as given.
    const randomBytes = random === systemRandom ? undefined : random
    return await open({ dir: join(dataDir, 'db'), logger: logger.child({ module: 'store' }), randomBytes, ...(trust ? { trust } : {}) })
  } catch (err) {
    if (err instanceof OrcError && err.code === 'locked') {
      const pid = readPid(dataDir)
      throw new OrcError(
        'locked',
        `data dir ${dataDir} is in use by another orc agent${pid ? ` (pid ${pid})` : ''}; stop it first or pass another --data-dir`,
        { dataDir, ...(pid ? { pid } : {}) },
        err,
      )
    }
    if (err instanceof OrcError && err.code === 'corrupt') {
      // The store's message already names the database and what to do about it.
      throw new OrcError('corrupt', err.message, { dataDir, ...err.details }, err)
    }
    throw wrapError(`open store in ${dataDir}`, err)
  }
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('hex')
}

/** On a fresh data dir, create the Cluster object with a random id; afterwards, read it. */
async function ensureCluster(
  store: ObjectStore,
  name: string,
  clock: Clock,
  random: Random,
  mesh?: { id: string; joined: boolean },
): Promise<{ name: string; id: string }> {
  const existing = store.list('Cluster')[0]
  if (existing) return { name: existing.metadata.name, id: String(existing.spec?.id ?? '') }
  // A joiner receives the Cluster object from its peers; it never creates a second one.
  if (mesh?.joined) return { name, id: mesh.id }
  const id = mesh?.id ?? hex(random(16))
  const manifest: OrcObject = { apiVersion: API_VERSION, kind: 'Cluster', metadata: { name }, spec: { id } }
  await store.apply(manifest, { author: NODE_CONTROLLER, reason: 'new cluster', now: clock.now() })
  return { name, id }
}

/** Record this node: its labels (when given) via apply, what it is and has via a status patch. */
async function registerNode(
  store: ObjectStore,
  name: string,
  labels: Record<string, string> | undefined,
  clock: Clock,
  mesh?: { peerId: string; addresses: string[] },
  state: 'Ready' | 'NotReady' = 'Ready',
  capacity: { cpu?: string; memory?: string } = {},
): Promise<void> {
  const ref = { kind: 'Node', namespace: '', name }
  const existing = store.get(ref)
  if (!existing || labels !== undefined) {
    const metadata: OrcObject['metadata'] = { name }
    const merged = labels ?? existing?.metadata.labels
    if (merged && Object.keys(merged).length > 0) metadata.labels = merged
    if (existing?.metadata.annotations) metadata.annotations = existing.metadata.annotations
    const manifest: OrcObject = { apiVersion: API_VERSION, kind: 'Node', metadata, spec: existing?.spec ?? {} }
    await store.apply(manifest, { author: NODE_CONTROLLER, reason: existing ? 'node labels from orc up' : 'node joined', now: clock.now() })
  }
  const cpu = typeof availableParallelism === 'function' ? availableParallelism() : cpus().length
  await store.patch(
    ref,
    [
      { path: ['status', 'state'], value: state },
      { path: ['status', 'addresses'], value: mesh?.addresses ?? [] },
      // `orc node forget` holds until the node comes back: a started agent is back.
      ...(store.get(ref)?.status?.forgotten !== undefined ? [{ path: ['status', 'forgotten'], value: undefined }] : []),
      ...(mesh ? [{ path: ['status', 'peerId'], value: mesh.peerId }] : []),
      { path: ['status', 'version'], value: ORC_VERSION },
      {
        path: ['status', 'capacity'],
        value: { cpu: capacity.cpu ?? String(cpu), memory: capacity.memory ?? `${Math.floor(totalmem() / (1024 * 1024))}Mi` },
      },
    ],
    { author: NODE_CONTROLLER, reason: 'node started', now: clock.now() },
  )
}

export async function startAgent(opts: AgentOptions, components: AgentComponents = {}): Promise<Agent> {
  const clock = opts.clock ?? systemClock
  const random = opts.random ?? systemRandom
  const logger = components.logger ?? createLogger({ level: opts.logLevel, pretty: opts.prettyLogs })
  const log = logger.child({ module: 'agent' })
  const dataDir = opts.dataDir
  // Grants count only from users bound to `admin` (read from the store once it is open).
  let rbacSource: RbacSource | undefined
  const isAdmin = opts.isAdmin ?? ((author: string) => rbacSource !== undefined && adminByRole(rbacSource)(author))
  const socketPath = opts.socketPath ?? socketPathOf(dataDir)
  const nodeName = opts.nodeName ?? nodeNameFromHostname(hostname())
  // Refuse to start with controllers whose reads and writes form a loop.
  checkAgentControllers(AGENT_CONTROLLERS)

  // A join that fails leaves no half-initialised data dir behind.
  const joinPrep = opts.mesh?.join ? prepareJoin(dataDir, opts.mesh.join.token, clock.now()) : undefined
  ensureDataDir(dataDir)

  // Each part is set by its component's start, which runs after the parts it reads.
  let store!: ObjectStore
  let cluster: ClusterNode | undefined
  // The mesh's member directory, from before the mesh's first sync: the store's verifier reads it.
  let directory: Pick<MemberDirectory, 'get'> | undefined
  let clusterRef!: { name: string; id: string }
  let network!: NodeNetwork
  // The node's DNS resolver (docs/services.md); pods get their resolv.conf and hosts from it.
  let dns: ClusterDns | undefined
  let federation!: FederationManager
  let handler!: ApiHandler
  let streams: PodStreams | undefined
  let podTopRef: PodTop | undefined
  // `orc top` and the per-pod metrics: readings of the pods' cgroups through the lifecycle's runtimes.
  const podTop = (): PodTop => (podTopRef ??= new PodTop({ store, nodeName, runtime: (k) => pods().runtime(k), clock, vms: () => vmsRef?.usage() ?? [] }))
  let server: SocketServer | undefined
  // `orc down` asks over the API for the stop SIGTERM gives (signals.ts), plus host cleanup.
  let stopSelf: (() => void) | undefined
  const info: NodeInfo = { name: nodeName, version: ORC_VERSION, dataDir, socket: socketPath, pid: process.pid, startedAt: 0 }
  // The cluster data key (Secrets, docs/secrets.md): one instance, loaded at start; the API seals
  // and opens with it, pods open what they use, delivery and rotation save into it.
  const keyring = new ClusterKeyring(dataDir, logger.child({ module: 'secrets' }))
  const members = (): MemberView[] => (cluster ? cluster.mesh.members() : [{ name: nodeName, state: 'alive' as const, self: true }])
  // What the cluster-wide controllers without a leader (deployments, jobs) run on.
  // The cluster's own objects in namespaces a federation shares here are dormant (docs/federation.md).
  let ownView: ObjectStore | undefined
  const ownStore = (): ObjectStore => (ownView ??= withoutShared(store, (ns) => (federation as FederationManager | undefined)?.scopeOf(ns) !== undefined))
  const leaderless = (module: string): LeaderlessComponents => ({
    store: ownStore(),
    nodeName,
    members,
    now: () => clock.now(),
    setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
    clearTimeout: (h) => clock.clearTimeout(h),
    log: logger.child({ module }),
  })
  // Image blobs the mesh serves to members (/orc/blobs/1.0.0): nothing until the lifecycle's blob
  // store exists and a StoreBlobProvider is set (below, with the lifecycle; docs/images.md, "Peer distribution").
  const blobProvider = new LateBlobProvider()
  let listener: InstallListener | undefined
  const ops: NodeOps = {
    metrics: new MetricsRegistry(),
    httpAddress: () => listener?.address(),
    httpPin: () => listener?.pin(),
    peers: () => peerRows({ store, nodeName, version: ORC_VERSION, now: () => clock.now(), mesh: cluster?.mesh }),
  }
  // Members first, then the registry: where this node's pulls look for a blob.
  const imagesLog = logger.child({ module: 'images' })
  const peerBlobs = new MeshBlobSource({ mesh: () => cluster?.mesh, log: imagesLog, metrics: ops.metrics })
  const pulledBytes = imageBlobMetrics(ops.metrics)
  // Refused peer updates become `UpdateRefused` events (orc events): an entry in this node's
  // status.refusedUpdates, at most one write per 10 s whatever the rate of refusals.
  let refusals: { at: number; count: number; reason: string; detail: string } | undefined
  let refusalWrite: number | undefined
  const reportRefusal = async (reason: string, detail: string): Promise<void> => {
    const now = clock.now()
    refusals = { at: now, count: (refusals?.count ?? 0) + 1, reason, detail: detail.slice(0, 300) }
    if (refusalWrite !== undefined && now - refusalWrite < 10_000) return
    const ref = { kind: 'Node', namespace: '', name: nodeName }
    const cur = store.get(ref)
    if (cur === undefined) return
    refusalWrite = now
    const e = refusals
    refusals = undefined
    const entry = { at: new Date(e.at).toISOString(), reason: e.reason, detail: e.detail, count: e.count }
    try {
      await store.patch(
        ref,
        [{ path: ['status', 'refusedUpdates'], value: [...((cur.status as NodeStatus | undefined)?.refusedUpdates ?? []), entry].slice(-20) }],
        {
          author: NODE_CONTROLLER,
          reason: `refused a peer update (${e.reason})`,
          now,
        },
      )
    } catch (err) {
      logger.debug({ err }, 'could not record a refused update')
    }
  }
  // emptyDir, hostPath and persistent Volumes of the pods on this node, and the Volumes kept here.
  let volumesRef: VolumeService | undefined
  // Built on first use: the store is opened by a component.
  const volumes = (): VolumeService =>
    (volumesRef ??= new VolumeService({
      store,
      nodeName,
      dataDir,
      clock: unrefTimers(clock),
      log: logger.child({ module: 'volumes' }),
      run: execaRunner,
      isRoot: process.getuid?.() === 0,
      ...(opts.volumes?.driverDir !== undefined ? { driverDir: opts.volumes.driverDir } : {}),
      ...(opts.volumes?.graceMs !== undefined ? { graceMs: opts.volumes.graceMs } : {}),
      ...(opts.volumes?.driverTimeoutMs !== undefined ? { driverTimeoutMs: opts.volumes.driverTimeoutMs } : {}),
      ...(opts.volumes?.noLoop ? { noLoop: true } : {}),
      caughtUp: () => pods().fence.caughtUp(),
      // A VM's running qemu here: its Volume disks are replicated at block level through it.
      vmBlockQmp: (namespace, name) => {
        const vm = store.get({ kind: 'VirtualMachine', namespace, name })
        if (vm === undefined || qemu().running(vm.metadata.uid) === undefined) return undefined
        const sock = qemu().blockQmpSocketOf(vm.metadata.uid)
        return existsSync(sock) ? sock : undefined
      },
      peer: {
        request: async (node, req, timeoutMs) => {
          if (cluster === undefined) throw new OrcError('unavailable', 'this node is not in a cluster')
          const r = await cluster.requestNode(node, { ...req, query: req.query ?? {} }, timeoutMs)
          if (r.status >= 400) throw errorOfResponse(r.status, r.body, `node ${node} answered ${r.status}`)
          return r.body
        },
        aliveNodes: () =>
          members()
            .filter((m) => m.state === 'alive')
            .map((m) => m.name),
        nodeOfPeer: (peerId) => store.list('Node').find((n) => n.status?.peerId === peerId)?.metadata.name,
      },
    }))
  // Built on first use: the federation hands its pod scopes to it before the lifecycle starts.
  let lifecycle: PodLifecycle | undefined
  const pods = (): PodLifecycle =>
    (lifecycle ??= new PodLifecycle({
      store: ownStore(),
      nodeName,
      dataDir,
      clock,
      random,
      logger,
      tunables: opts.pods?.tunables ?? {},
      aliveNodes: () =>
        members()
          .filter((m) => m.self || m.state === 'alive')
          .map((m) => m.name),
      members,
      heardWindowMs: () => cluster?.mesh.heardWindowMs() ?? 4_000,
      network,
      isAdmin,
      ...(opts.imageStores ? { imageStores: opts.imageStores } : {}),
      // The agent's one keyring: pods open the Secrets they use with it.
      keyring,
      imagePeers: () => peerBlobs,
      onPulled: (bytes) => pulledBytes.pulled(bytes),
      storage: volumes(),
      dnsFiles: (ns, pod, address) => dns?.podFiles(ns, pod, address),
    }))
  // VirtualMachines pinned or bound to this node (docs/runtimes.md, "Virtual machines").
  let qemuRef: QemuRuntime | undefined
  const qemu = (): QemuRuntime =>
    (qemuRef ??= new QemuRuntime({ stateDir: join(dataDir, 'runtime'), logger, ...(opts.vms?.accel ? { accel: opts.vms.accel } : {}) }))
  let vmsRef: VmController | undefined
  const vms = (): VmController =>
    (vmsRef ??= new VmController({
      store,
      nodeName,
      clock,
      log: logger.child({ module: 'vms' }),
      runtime: qemu(),
      network,
      run: execaRunner,
      vmDir: (uid) => join(dataDir, 'vms', uid),
      imageStores: [join(dataDir, 'images'), ...(opts.imageStores ?? [])],
      volumes: volumes(),
      secretValue: secretValueOf(store, () => keyring.get()),
      // Unpinned ha VMs are fenced by the pods' fence (same quorum, same lease).
      fence: pods().fence,
      haAfterSeconds: () => schedOptionsOf(store.list('Cluster')).haAfterSeconds ?? DEFAULT_SCHED_OPTIONS.haAfterSeconds,
    }))
  // What this node serves to members: the blobs it holds, and — as a blob's owner — a blob fetched
  // from its registry on the cluster's behalf, with the credentials of the asker's namespace.
  const servedBlobs = (): StoreBlobProvider => {
    const svc = pods().imageService
    return new StoreBlobProvider({
      store: svc.blobs,
      fetchThrough: (ref, desc, ns) => svc.fetchThrough(ref, desc, ns, pods().clusterDataLookup(ns), store.list('Secret', ns)),
      log: imagesLog,
      metrics: ops.metrics,
    })
  }

  // The node's parts in dependency order: each starts after what it reads and stops before it.
  const parts: Component[] = [
    {
      name: 'store',
      start: async () => {
        // In a cluster, records are signed with the node key and peers' updates are checked on
        // receipt against the members' keys (docs/security.md, "Signed history and checks on receipt").
        const trust = opts.mesh
          ? await storeTrust(
              dataDir,
              random,
              () => directory,
              () => store,
              () => cluster?.mesh.cluster.adminKeys ?? [],
              nodeName,
            )
          : undefined
        store = await openDataDir(dataDir, components.openStore ?? defaultOpenStore, logger, random, trust)
        rbacSource = store
        const refused = ops.metrics.counter('orc_store_refused_updates_total', 'Updates from peers the store refused on receipt (nothing merged), by reason.')
        store.onRefused((reason, detail) => {
          refused.inc({ reason })
          logger.warn({ reason, detail }, 'peer update refused')
          void reportRefusal(reason, detail)
        })
      },
      // The pid file goes last: while it is there, the data dir is in use.
      stop: () => closeDataDir(store, dataDir),
    },
    ...(opts.mesh
      ? [
          {
            name: 'mesh',
            start: async () =>
              void (cluster = await startClusterMesh({
                dataDir,
                nodeName,
                store,
                logger,
                setup: opts.mesh!,
                clock,
                random,
                onDirectory: (d) => (directory = d),
                keyring,
                blobs: blobProvider,
              })),
            stop: () => cluster!.stop(),
          },
        ]
      : []),
    {
      // After the mesh: the node that creates a cluster writes the keyring file there (cluster.ts).
      name: 'keyring',
      async start() {
        // An agent without the mesh is a cluster of its own: it holds its own keyring.
        if (!opts.mesh && !existsSync(join(dataDir, KEYRING_FILE))) await createKeyringFile(dataDir, random, clock.now())
        const ring = await keyring.load()
        log.info({ held: ring !== undefined, keys: ring?.ids().length ?? 0 }, 'cluster keyring loaded')
      },
      stop() {},
    },
    {
      name: 'node',
      async start() {
        clusterRef = await recordNode(store, cluster, opts, nodeName, clock, random)
        info.cluster = clusterRef
      },
      stop() {},
    },
    {
      // The node network: tunnels, the node /64, pod namespaces (docs/networking.md).
      name: 'network',
      async start() {
        network = new NodeNetwork(
          { store, nodeName, dataDir, logger, clock, random, ...(cluster ? { mesh: meshViewOf(cluster.mesh) } : {}) },
          opts.network ?? { mode: 'off' },
        )
        await network.start()
        info.startedAt = clock.now()
      },
      stop: () => network.stop(),
    },
    {
      // Federations: objects in a federated namespace live in the federation's document (the API
      // reads and writes them there); everything else stays in the cluster's own scope.
      name: 'federation',
      async start() {
        federation = new FederationManager({
          dataDir,
          nodeName,
          store,
          cluster: () => clusterRef,
          clusterMesh: cluster?.mesh,
          listen: opts.mesh?.listen,
          // The federation mesh keeps the cluster mesh's timers (heartbeats, suspicion).
          tunables: opts.mesh?.tunables,
          logger,
          clock,
          pruneIntervalMs: opts.pruneIntervalMs ?? 120_000,
          keyring: () => keyring.get(),
        })
        // The shared namespaces' pods are scheduled across the member clusters and run here like ours.
        // Before start(): federations reopened after a restart announce their pod scopes as they open
        // (announce() runs once per federation; with no pod host yet their pods would never run again
        // and the lifecycle would reap their containers as orphans).
        await federation.runPodsWith(pods())
        await federation.start()
      },
      stop: () => federation.stop(),
    },
    later(
      'dns',
      () =>
        (dns = new ClusterDns(
          {
            // The routed store: Services and Pods of shared namespaces resolve from the federation's document.
            store: routedStore(store, federation),
            clock,
            random,
            logger,
            clusterId: () => clusterRef.id,
            dnsAddress: () => network.dnsAddress,
            servicesBalanced: () => network.servicesBalanced,
            federationOf: (ns) => {
              const scope = federation.scopeOf(ns)
              return scope === undefined ? undefined : (federation.get(scope.federation)?.id ?? '')
            },
            balancedFederations: () => network.balancedFederations,
          },
          opts.dns ?? { enabled: false },
        )),
    ),
    federationRouteLink(
      () => network,
      () => federation,
    ),
    // Its metrics exist before the API can be asked for them.
    later('node-metrics', () =>
      nodeMetrics({
        metrics: ops.metrics,
        store,
        nodeName,
        dataDir,
        version: ORC_VERSION,
        clusterId: () => clusterRef.id,
        now: () => clock.now(),
        mesh: cluster?.mesh,
        peers: ops.peers,
        podUsage: () => podTop(),
      }),
    ),
    {
      name: 'api',
      async start() {
        const opsRoutes: OpsRoutesComponents = {
          store,
          now: () => clock.now(),
          metrics: ops.metrics,
          doctor: () =>
            nodeDoctor({
              dataDir,
              nodeName,
              version: ORC_VERSION,
              now: () => clock.now(),
              mesh: cluster?.mesh,
              peers: ops.peers,
              httpAddress: ops.httpAddress,
            }),
          peers: ops.peers,
          httpAddress: ops.httpAddress,
          httpPin: ops.httpPin,
        }
        streams = new PodStreams({
          store,
          nodeName,
          scopeOf: (ns) => {
            const scope = federation.scopeOf(ns)
            return scope === undefined ? undefined : { store: scope.store, nodeName: `${nodeName}@${scope.cluster}` }
          },
          runtime: (k) => pods().runtime(k),
          clock,
          random,
          log: logger.child({ module: 'streams' }),
        })
        handler = buildApiHandler({
          streams,
          top: podTop(),
          store,
          nodeName,
          clock,
          logger,
          info: () => info,
          pods,
          volumes,
          members,
          network,
          federation,
          cluster,
          opsRoutes,
          dataDir,
          isAdmin,
          imageStores: opts.imageStores ?? [],
          random,
          keyring,
          shutdown: () => stopSelf?.(),
        })
        const user = opts.socketUser ?? socketUserOf(dataDir, nodeName, cluster !== undefined)
        server = await serveOnSocket(handler, socketPath, {
          logger: logger.child({ module: 'http' }),
          principal: () => ({ kind: 'user', name: user, via: 'socket' }),
        })
      },
      // First of all: no new writes while the parts behind the API stop.
      beforeStop: () => {
        streams?.stop()
        return server?.close()
      },
      stop() {},
    },
    // The install script and /metrics over HTTP; closes with the API (beforeStop).
    later(
      'install-listener',
      () =>
        (listener = installListener({
          nodeName,
          dataDir,
          version: ORC_VERSION,
          now: () => clock.now(),
          mesh: cluster?.mesh,
          metrics: ops.metrics,
          logger,
          http: opts.http,
          run: execaRunner,
        })),
    ),
    // Before the pods: the guests it re-adopts keep their network namespaces (network.podsAdopted below).
    { name: 'vms', start: () => vms().start(), stop: () => vmsRef?.stop() },
    {
      // Re-adopts the containers still running, then reconciles every pod.
      name: 'pods',
      async start() {
        await pods().start()
        blobProvider.set(servedBlobs())
        network.podsAdopted()
      },
      stop: () => pods().stop(),
    },
    { name: 'volumes', start: () => volumes().start(), stop: () => volumesRef?.stop() },
    later('deployments', () => new DeploymentController(leaderless('deployments'))),
    later('jobs', () => new JobController(leaderless('jobs'))),
    // Ingresses naming tcp-proxy and this node (docs/services.md); idle while there are none.
    // The routed store: a backend may be a Service of a shared namespace (its pods in this cluster serve it).
    later(
      'ingress',
      () =>
        new IngressController({
          store: routedStore(store, federation),
          nodeName,
          clock,
          random,
          log: logger.child({ module: 'ingress' }),
          clusterOf: (ns) => federation.scopeOf(ns)?.cluster,
          federatedIngress: {
            want: (on) => network.wantFederatedIngress(on),
            source: () => network.federatedIngress,
            routed: (a) => network.routesFederated(a),
          },
        }),
    ),
    tombstonePruning(
      () => store,
      () => cluster,
      () => ops.metrics,
      log,
      clock,
      opts.pruneIntervalMs ?? 120_000,
    ),
    heapKeeper(logger),
  ]

  let running: StartedComponents
  try {
    running = await startComponents(parts, { onStopError: (name, err) => log.warn({ err, component: name }, 'stop component') })
  } catch (err) {
    joinPrep?.undo()
    throw err
  }
  log.info({ node: nodeName, cluster: clusterRef.name, clusterId: clusterRef.id, socket: socketPath, dataDir, version: ORC_VERSION }, 'agent started')

  let resolveStopped!: () => void
  const stopped = new Promise<void>((r) => (resolveStopped = r))
  let stopping: Promise<void> | undefined
  const agent: Agent = {
    info,
    store,
    handler,
    socketPath,
    logger,
    cluster,
    lifecycle: pods(),
    ops,
    federation,
    keyring,
    stopped,
    stop() {
      stopping ??= (async () => {
        log.info({ node: nodeName }, 'agent stopping')
        await running.stop()
        log.info({ node: nodeName }, 'agent stopped')
        resolveStopped()
      })()
      return stopping
    },
  }
  stopSelf = () => void agent.stop()
  return agent
}

type StoreTrust = NonNullable<Parameters<OpenStore>[0]['trust']>

/**
 * The store's signer (this node's key, from the data dir: the mesh uses the same one) and verifier:
 * a signer is a current member, or a removed peer for what it signed before its removal (the
 * replicated Cluster.status.removedPeers).
 */
async function storeTrust(
  dataDir: string,
  random: Random,
  directoryOf: () => Pick<MemberDirectory, 'get'> | undefined,
  storeOf: () => ObjectStore,
  clusterAdminKeys: () => readonly string[],
  nodeName: string,
): Promise<StoreTrust> {
  const key = await loadOrCreateIdentity(dataDir, random)
  const verifier = peerKeyVerifier((id) => {
    const m = directoryOf()?.get(id)
    if (m !== undefined) return { node: m.name }
    for (const c of storeOf().list('Cluster')) {
      const r = (c.status as Record<string, unknown> | undefined)?.removedPeers
      const e = isPlainObject(r) ? r[id] : undefined
      if (isPlainObject(e)) return { node: typeof e.name === 'string' ? e.name : undefined, removedAt: Date.parse(String(e.at)) || 0 }
    }
    return undefined
  })
  // Users' signatures on their writes: the cluster's first admin key (cluster.json) is the user
  // admin's until a User admin exists (as keyOwner decides for the remote API; the store bounds it
  // by the time of the first User admin revision, so older records still verify after a rotation).
  const userEvidence: UserEvidenceOptions = {
    verify: verifySignedRequest,
    bootstrapKeys: (user) => (user === ADMIN_USER ? clusterAdminKeys() : []),
    self: () => nodeName,
  }
  return { signer: recordSigner(key), verifier, userMay: userMayOnReceipt, userEvidence }
}

/** Open the store in the data dir, then mark the data dir in use (pid file) and open it to sandboxes. */
async function openDataDir(dataDir: string, open: OpenStore, logger: Logger, random: Random, trust?: StoreTrust): Promise<ObjectStore> {
  const store = await openStoreIn(dataDir, open, logger, random, trust)
  try {
    // The load's garbage sits between the document's objects: give the fragmented pages back once.
    const compacted = compactHeap()
    if (compacted !== undefined) logger.debug(compacted, 'heap compacted after the store loaded')
    writePidFile(dataDir, logger)
  } catch (err) {
    await closeDataDir(store, dataDir)
    throw err
  }
  return store
}

/** Record the cluster (on a fresh data dir) and this node; returns the cluster's name and id. */
async function recordNode(
  store: ObjectStore,
  cluster: ClusterNode | undefined,
  opts: AgentOptions,
  nodeName: string,
  clock: Clock,
  random: Random,
): Promise<{ name: string; id: string }> {
  // Tombstone pruning is proven safe only while no other replica holds the document: a node
  // that is its cluster's only member and knows no other Node (docs/architecture.md).
  store.setStability(() =>
    (cluster === undefined || cluster.mesh.members().every((m) => m.peerId === cluster.peerId)) && store.list('Node').length <= 1 ? [] : null,
  )
  const clusterRef = await ensureCluster(
    store,
    opts.clusterName ?? DEFAULT_CLUSTER_NAME,
    clock,
    random,
    cluster ? { id: cluster.clusterId, joined: opts.mesh?.join !== undefined } : undefined,
  )
  const networkMode = opts.network?.mode ?? 'off'
  await registerNode(
    store,
    nodeName,
    opts.labels,
    clock,
    cluster ? { peerId: cluster.peerId, addresses: cluster.mesh.addresses() } : undefined,
    cluster && networkMode !== 'off' ? 'NotReady' : 'Ready',
    opts.capacity,
  )
  return clusterRef
}

type MemberView = { name: string; state: 'alive' | 'suspect' | 'dead'; self: boolean }

interface ApiHandlerComponents {
  /** exec and port-forward sessions of the pods this node runs. */
  streams: PodStreams
  /** CPU and memory of this node and its pods (`orc top`). */
  top: PodTop
  store: ObjectStore
  nodeName: string
  dataDir: string
  clock: Clock
  logger: Logger
  info: () => NodeInfo
  pods: () => PodLifecycle
  volumes: () => VolumeService
  members: () => MemberView[]
  network: NodeNetwork
  federation: FederationManager
  cluster: ClusterNode | undefined
  opsRoutes: OpsRoutesComponents
  isAdmin: IsAdmin
  imageStores: readonly string[]
  random: Random
  keyring: ClusterKeyring
  shutdown: () => void
}

/**
 * Who the local socket is: `admin` on the node that created the cluster (its root holds
 * admin.credential, so it is the admin anyway) or on an agent without the mesh; on a node that
 * joined, its own root `root.NODE` with the role node-admin — a joined machine's root must not own
 * the cluster (docs/security.md, "Identities and roles").
 */
export function socketUserOf(dataDir: string, nodeName: string, clustered: boolean): string {
  if (!clustered || existsSync(join(dataDir, ADMIN_CREDENTIAL_FILE))) return ADMIN_USER
  return nodeRootUser(nodeName)
}

/** The local API: one router over the route table's handlers (routes.ts), each part's by route name. */
function buildApiHandler(c: ApiHandlerComponents): ApiHandler {
  const { store, nodeName, clock } = c
  const apiStore = routedStore(store, c.federation)
  // Rotation re-seals, and retirement counts, the Secrets of the federations' shared namespaces too.
  c.cluster?.keys.useStore(apiStore)
  const apiLogger = c.logger.child({ module: 'api' })
  const secrets = { keyring: c.keyring, random: c.random, get: (ref: ObjectRef) => apiStore.get(ref), logger: c.logger }
  const { status: storeStatus, ...objectHandlers } = objectRoutes({
    store: apiStore,
    node: c.info,
    clock,
    sleep: (ms) => sleep(clock, ms),
    logger: apiLogger,
    // Secrets are sealed here, before validation: only sealed values reach the store.
    prepare: (raw, ns) => sealAppliedSecret(secrets, raw, ns),
    admit: async (obj, batch, author) => {
      admitPolicy(obj, author, c.isAdmin)
      if (obj.kind === 'Secret') admitSealedKeys(obj as Secret, c.keyring.get())
      if (obj.kind === 'Volume')
        admitVolumeChange(obj, apiStore.get({ kind: 'Volume', namespace: obj.metadata.namespace ?? 'default', name: obj.metadata.name }))
      if (obj.kind !== 'Pod') return
      const imageStores = [join(c.dataDir, 'images'), ...c.imageStores]
      // Most pods ask for nothing unsafe: then no history (a LevelDB scan) is read.
      if (asksOf(obj as Pod, imageStores).length > 0) await admitUnsafe(obj as Pod, batch, author, imageStores)
      else {
        const refusal = runtimeRefusal(obj as Pod, policiesFor(obj as Pod, batch))
        if (refusal) throw refusal
      }
      admitPodData(obj, batch, (kind, ns, name) => apiStore.get({ kind, namespace: ns, name }))
    },
    admitDelete: (ref) => {
      if (ref.kind === 'Volume') admitVolumeDelete(apiStore.list('Pod', ref.namespace), ref.namespace, ref.name, apiStore.list('VirtualMachine', ref.namespace))
    },
    rollbackTarget: (ref) => previousUserRevision(apiStore, ref),
    rollbackRewrite: (ref, to) => pinImagesOnRollback(apiStore, ref, to),
  })
  /** The two-party rule for a pod asking for unsafe features (docs/security.md). */
  /** The SecurityPolicies of the pod's namespace as they will be after this request (its batch wins). */
  function policiesFor(obj: Pod, batch: readonly OrcObject[]): SecurityPolicy[] {
    const ns = obj.metadata.namespace ?? 'default'
    const inBatch = batch.filter((o): o is SecurityPolicy => o.kind === 'SecurityPolicy' && (o.metadata.namespace ?? 'default') === ns)
    const names = new Set(inBatch.map((o) => o.metadata.name))
    return [...store.list('SecurityPolicy', ns).filter((p) => !names.has(p.metadata.name)), ...inBatch]
  }
  async function admitUnsafe(obj: Pod, batch: readonly OrcObject[], author: string, imageStores: string[]): Promise<void> {
    const ns = obj.metadata.namespace ?? 'default'
    const names = new Set(batch.filter((o) => o.kind === 'SecurityPolicy' && (o.metadata.namespace ?? 'default') === ns).map((o) => o.metadata.name))
    const policies = policiesFor(obj, batch)
    // A policy in this batch is written by this request's author; a stored one by its last writer.
    const podAuthors = await podAuthorsOf(store, obj, author)
    const policyAuthor = (p: SecurityPolicy) => (names.has(p.metadata.name) ? author : ((p.metadata as { updatedBy?: string }).updatedBy ?? ''))
    admitPod(obj, policies, { podAuthors, policyAuthor, isAdmin: c.isAdmin, imageStores })
  }
  const own = combineHandlers(
    objectHandlers,
    podRoutes({
      store: apiStore,
      nodeName,
      clock,
      controllers: AGENT_CONTROLLERS,
      logDirOf: (ref, uid, cn) => c.pods().logDirOf(ref, uid, cn),
      // A shared namespace's pod runs on `node@cluster`; this node is `nodeName@<its cluster there>`.
      sharedNode: (pod) => {
        const scope = c.federation.scopeOf(pod.metadata.namespace ?? 'default')
        return scope === undefined ? undefined : { node: sharedPodNode(pod), self: `${nodeName}@${scope.cluster}` }
      },
    }),
    sharedPodStreams(
      { nodeName, router: c.federation },
      podStreamRoutes(() => c.streams),
    ),
    topRoutes(
      () => c.top,
      () => c.cluster?.askMembers,
    ),
    imageRoutes({
      nodeName,
      images: () => c.pods().imageService,
      usedBy: (d) => c.pods().podsUsingImage(d),
      dataLookup: (ns) => c.pods().clusterDataLookup(ns),
      loadKeyring: () => c.pods().loadKeyring(),
      log: c.logger.child({ module: 'images' }),
    }),
    schedRoutes({
      store,
      nodeName,
      now: () => clock.now(),
      members: c.members,
      schedView: () => c.pods().schedView(),
      scopeView: (ns) => c.pods().schedViewFor(ns),
    }),
    // Shared namespaces' deployments are in the federation's document, over its clusters' nodes.
    rolloutRoutes({ store: apiStore, nodeName, now: () => clock.now(), nodes: (ns) => c.federation.nodesOf(ns) ?? store.list('Node') }),
    volumeRoutes({ store, nodeName, now: () => clock.now(), volumes: c.volumes }),
    vmRoutes({ store, nodeName, clock, vmDir: (uid) => join(c.dataDir, 'vms', uid) }),
    vmConsoleRoutes({ store, nodeName, streams: () => c.streams, vmDir: (uid) => join(c.dataDir, 'vms', uid) }),
    secretRoutes(secrets),
    networkRoutes(c.network, { pid: process.pid, dataDir: c.dataDir, shutdown: c.shutdown }),
    stabilityRoutes(clusterStability(store, c.cluster)),
    opsRoutes(c.opsRoutes),
    federationRoutes(c.federation),
    // The node's status: its store, then what ops and the mesh see of it.
    { status: () => ({ ...storeStatus(), ...opsStatusFields(c.opsRoutes), ...c.cluster?.statusFields() }) },
    userRoutes({
      store,
      now: () => clock.now(),
      random: c.random,
      cluster: c.cluster ? () => ({ clusterId: c.cluster!.mesh.cluster.clusterId, psk: c.cluster!.mesh.cluster.psk }) : undefined,
    }),
  )
  // Every request is checked against the principal's roles (authz.ts), on the socket, remote and member APIs.
  const routing = { logger: apiLogger, notFound: routeNotFound, authorize: createAuthorizer({ store }) }
  const local = createRouter(own, routing)
  // In a cluster, logs of a pod on another member are forwarded there, and the cluster routes join.
  const cluster = c.cluster
  if (!cluster) return local
  // Logs of a shared namespace's pods are on its node in whichever member cluster runs it.
  const podLogs = sharedPodLogs(
    { nodeName, router: c.federation, forwardLogs: (...a) => c.federation.forwardLogs(...a), clusterProxy: cluster.podProxy },
    own.podLogs!,
    cluster.logsRoute(own.podLogs!),
  )
  // Other clusters' nodes read the logs of the shared pods this node runs (the federation hosts' member API).
  c.federation.serveLogsWith(async (ns, name, query) => {
    const answer = await own.podLogs!({ params: { ns, name }, query, body: undefined, req: { method: 'GET', path: pathOf('podLogs', { ns, name }), query } })
    return answer instanceof Passthrough ? answer.response.body : answer
  })
  const handler = createRouter(
    combineHandlers(
      {
        ...own,
        podLogs,
        ...sharedPodStreams({ nodeName, router: c.federation, clusterProxy: cluster.podProxy }, own, cluster.streamRoutes(own)),
        ...cluster.volumeRoutes(own),
      },
      cluster.routes(),
    ),
    routing,
  )
  cluster.serve(handler, local)
  return handler
}

/** A component whose object is built when it starts: it reads parts that started before it. */
function later(name: string, build: () => Pick<Component, 'start' | 'stop' | 'beforeStop'>): Component {
  let built: ReturnType<typeof build> | undefined
  return {
    name,
    start: () => (built = build()).start(),
    beforeStop: () => built?.beforeStop?.(),
    stop: () => built?.stop(),
  }
}

/** Federated pods are routed to and from the other member clusters (/128s only, docs/federation.md). */
function federationRouteLink(network: () => NodeNetwork, federation: () => FederationManager): Component {
  let unlink: (() => void) | undefined
  return {
    name: 'federation-routes',
    start() {
      unlink = network().useFederation(federationRouteSource(federation()))
    },
    // Before the federations close: their routes going away must not reconfigure a network that is stopping next.
    stop: () => unlink?.(),
  }
}

/** Tombstone pruning across members (stability.ts); alone, the store's own source suffices. */
function clusterStability(store: ObjectStore, cluster: ClusterNode | undefined): StabilityDeps | undefined {
  if (cluster === undefined) return undefined
  return {
    store,
    selfPeerId: cluster.peerId,
    members: () => cluster.mesh.members().map((m) => m.peerId),
    ask: async (peer: string) => {
      const r = await cluster.mesh.memberRequest(peer, { method: 'GET', path: pathOf('stability', {}) }, { timeoutMs: 5000 })
      if (r.status !== 200) throw new Error(`HTTP ${r.status}`)
      return r.body
    },
  }
}

/** A pruning pass every `every` ms, counted on /metrics. */
function tombstonePruning(
  storeOf: () => ObjectStore,
  clusterOf: () => ClusterNode | undefined,
  metricsOf: () => NodeOps['metrics'],
  log: Logger,
  clock: Clock,
  everyMs: number,
): Component {
  let stopPruning: (() => void) | undefined
  return {
    name: 'tombstone-pruning',
    start() {
      const store = storeOf()
      const stability = clusterStability(store, clusterOf())
      const metrics = metricsOf()
      const structsGauge = metrics.gauge(
        'orc_store_document_structs',
        'Structs (items and GC ranges) the in-memory replicated document holds; pruning keeps it proportional to live data.',
      )
      metrics.onCollect(() => structsGauge.set({}, store.docStats().structs))
      const prunePasses = metrics.counter(
        'orc_store_prune_passes_total',
        'Tombstone pruning passes, by outcome (pruned, nothing, waiting: a member did not vouch).',
      )
      const prunedTotal = metrics.counter('orc_store_pruned_tombstones_total', 'Tombstones of overwritten fields pruned from the replicated document.')
      let pruning = false
      let lastWait: string | undefined
      // Unref'd: pruning is housekeeping and must not keep a stopping agent's process up.
      stopPruning = every(unrefTimers(clock), everyMs, () => {
        if (pruning) return
        pruning = true
        const pass = stability ? pruneClusterTombstones(stability) : Promise.resolve(store.pruneTombstones())
        pass
          .then((res) => {
            prunePasses.inc({ outcome: res.pruned > 0 ? 'pruned' : res.skipped ? 'waiting' : 'nothing' })
            if (res.pruned > 0) prunedTotal.inc({}, res.pruned)
            // Say once why pruning waits (memory grows meanwhile), and once when it stops waiting.
            if (res.skipped !== lastWait) log.info({ reason: res.skipped ?? null }, res.skipped ? 'tombstone pruning waits' : 'tombstone pruning resumed')
            lastWait = res.skipped
            log.debug({ ...res, structs: store.docStats().structs }, 'tombstone pruning pass')
          })
          .catch((err) => log.warn({ err }, 'tombstone pruning pass failed'))
          .finally(() => (pruning = false))
      })
    },
    stop() {
      stopPruning?.()
    },
  }
}

/** Gives idle heap slack back to the system while the agent runs. */
function heapKeeper(logger: Logger): Component {
  let stop: (() => void) | undefined
  return {
    name: 'heap-keeper',
    start() {
      stop = keepHeapCompact({ onCompact: (r) => logger.debug(r, 'heap compacted (idle slack or growth)') })
    },
    stop: () => stop?.(),
  }
}

function writePidFile(dataDir: string, logger: Logger): void {
  writeFileSync(join(dataDir, PID_FILE), `${process.pid}\n`, { mode: 0o644 })
  // 0711: others may pass through (pod sandboxes run unprivileged and must reach images/ and
  // runtime/), not list; everything private inside (db/, keys, socket) has its own 0700/0600.
  chmodSync(dataDir, 0o711)
  const closed = closedAncestor(dataDir)
  if (closed) {
    logger.warn(
      { dataDir, dir: closed },
      'pods cannot start: sandboxed pods run as an unprivileged user and cannot pass through this directory above the data dir (give it o+x, or use a data dir elsewhere)',
    )
  }
}

/** Close the store, then remove the pid file if it is this process's. */
async function closeDataDir(store: ObjectStore, dataDir: string): Promise<void> {
  try {
    await store.close()
  } finally {
    if (readPid(dataDir) === process.pid) {
      try {
        unlinkSync(join(dataDir, PID_FILE))
      } catch {
        // already gone
      }
    }
  }
}

/** The first directory above `dir` that others cannot pass through (mode lacks o+x), if any. */
export function closedAncestor(dir: string): string | undefined {
  let cur = dirname(resolve(dir))
  for (;;) {
    try {
      if ((statSync(cur).mode & 0o001) === 0) return cur
    } catch {
      return cur
    }
    const up = dirname(cur)
    if (up === cur) return undefined
    cur = up
  }
}
