/**
 * The composition root of a node: opens the store, records this node (and, on a fresh data dir,
 * the cluster), serves the local API, and stops all of it in reverse order.
 */
import { mkdirSync, readFileSync, unlinkSync, writeFileSync, chmodSync, statSync } from 'node:fs'
import { availableParallelism, cpus, hostname, totalmem } from 'node:os'
import { NODE_CONTROLLER, ORC_VERSION, nodeNameFromHostname } from './node-info.ts'
import { dirname, join, resolve } from 'node:path'
import type { Logger } from 'pino'
import { API_VERSION, OrcError, wrapError, type OrcObject } from '../model/index.ts'
import { openStore, type ObjectStore, type StoreOptions } from '../store/index.ts'
import { compactHeap, keepHeapCompact } from './heap.ts'
import { createApiHandler, type ApiHandler, type NodeInfo } from './api.ts'
import { serveOnSocket, type SocketServer } from './http.ts'
import { createLogger } from './logger.ts'
import { prepareJoin, startClusterMesh, type ClusterNode } from './cluster.ts'
import { checkAgentControllers, AGENT_CONTROLLERS } from './controllers.ts'
import { withSchedulingRoutes } from './sched/index.ts'
import { DeploymentController, withRolloutRoutes } from './deployments/index.ts'
import { PodLifecycle } from './pods/controller.ts'
import { createPodApi } from './pods/api.ts'
import { admitPod } from './pods/security.ts'
import { previousUserRevision } from './rollback.ts'
import { STABILITY_PATH, pruneClusterTombstones, withStabilityRoute } from './stability.ts'
import { createNodeOps, type NodeOps } from './ops/node-ops.ts'
import { NodeNetwork, meshViewOf, withNetworkRoutes } from './network/index.ts'
import { FederationManager, federationRouteSource, routedStore, withFederationRoutes } from './federation/index.ts'
import { every, systemClock, unrefTimers, systemRandom, type Clock, type Random } from '../effects/index.ts'
import {
  DEFAULT_CLUSTER_NAME,
  PID_FILE,
  readPid,
  socketPathOf,
  type AgentOptions,
} from './options.ts'

export type OpenStore = (opts: { dir: string; logger?: Logger; randomBytes?: Random }) => Promise<ObjectStore>

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
  return openStore({ dir: opts.dir, randomBytes: opts.randomBytes, logger: opts.logger as StoreOptions['logger'] })
}

async function openStoreIn(dataDir: string, open: OpenStore, logger: Logger, random: Random): Promise<ObjectStore> {
  try {
    return await open({ dir: join(dataDir, 'db'), logger: logger.child({ module: 'store' }), randomBytes: random })
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
      { path: ['status', 'capacity'], value: { cpu: String(cpu), memory: `${Math.floor(totalmem() / (1024 * 1024))}Mi` } },
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
  const socketPath = opts.socketPath ?? socketPathOf(dataDir)
  const nodeName = opts.nodeName ?? nodeNameFromHostname(hostname())
  // Refuse to start with controllers whose reads and writes form a loop.
  checkAgentControllers(AGENT_CONTROLLERS)

  // A join that fails leaves no half-initialised data dir behind.
  const joinPrep = opts.mesh?.join ? prepareJoin(dataDir, opts.mesh.join.token, clock.now()) : undefined
  ensureDataDir(dataDir)
  let store: ObjectStore
  try {
    store = await openStoreIn(dataDir, components.openStore ?? defaultOpenStore, logger, random)
  } catch (err) {
    joinPrep?.undo()
    throw err
  }
  // The load's garbage sits between the document's objects: give the fragmented pages back once.
  const compacted = compactHeap()
  if (compacted !== undefined) logger.debug(compacted, 'heap compacted after the store loaded')
  const stopHeapKeeper = keepHeapCompact({ onCompact: (r) => logger.debug(r, 'heap compacted (idle slack)') })
  const pidFile = join(dataDir, PID_FILE)
  let server: SocketServer | undefined
  let cluster: ClusterNode | undefined
  let lifecycle: PodLifecycle | undefined
  let deployments: DeploymentController | undefined
  let network: NodeNetwork | undefined
  let ops: NodeOps | undefined
  let federation: FederationManager | undefined
  let stopPruning: (() => void) | undefined
  const cleanup = async (): Promise<void> => {
    stopPruning?.()
    stopHeapKeeper()
    await ops?.stop().catch((err) => log.warn({ err }, 'stop ops listener'))
    await server?.close().catch((err) => log.warn({ err }, 'close API'))
    await deployments?.stop().catch((err) => log.warn({ err }, 'stop deployments'))
    await lifecycle?.stop().catch((err) => log.warn({ err }, 'stop pod lifecycle'))
    await network?.stop().catch((err) => log.warn({ err }, 'stop node network'))
    await federation?.stop().catch((err) => log.warn({ err }, 'stop federations'))
    await cluster?.stop().catch((err) => log.warn({ err }, 'stop mesh'))
    await store.close().catch((err) => log.warn({ err }, 'close store'))
    if (readPid(dataDir) === process.pid) {
      try {
        unlinkSync(pidFile)
      } catch {
        // already gone
      }
    }
  }
  try {
    writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o644 })
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
    if (opts.mesh) cluster = await startClusterMesh({ dataDir, nodeName, store, logger, setup: opts.mesh, clock, random })
    // Tombstone pruning is proven safe only while no other replica holds the document: a node
    // that is its cluster's only member and knows no other Node (docs/architecture.md).
    const meshOf = cluster
    store.setStability(() =>
      (meshOf === undefined || meshOf.mesh.members().every((m) => m.peerId === meshOf.peerId)) && store.list('Node').length <= 1 ? [] : null,
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
    )
    // The node network: tunnels, the node /64, pod namespaces (docs/networking.md).
    network = new NodeNetwork(
      {
        store,
        nodeName,
        dataDir,
        logger,
        clock,
        random,
        ...(cluster ? { mesh: meshViewOf(cluster.mesh) } : {}),
      },
      opts.network ?? { mode: 'off' },
    )
    await network.start()
    const nodeNetwork = network
    const info: NodeInfo = {
      name: nodeName,
      version: ORC_VERSION,
      dataDir,
      socket: socketPath,
      pid: process.pid,
      startedAt: clock.now(),
      cluster: clusterRef,
    }
    const meshNode = cluster
    lifecycle = new PodLifecycle({
      store,
      nodeName,
      dataDir,
      clock,
      random,
      logger,
      tunables: opts.pods?.tunables ?? {},
      aliveNodes: () => (meshNode ? meshNode.mesh.members().filter((m) => m.self || m.state === 'alive').map((m) => m.name) : [nodeName]),
      members: () => (meshNode ? meshNode.mesh.members() : [{ name: nodeName, state: 'alive' as const, self: true }]),
      network: nodeNetwork,
    })
    const pods = lifecycle
    // Federations: objects in a federated namespace live in the federation's document (the API
    // reads and writes them there); everything else stays in the cluster's own scope.
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
      random,
    })
    // The shared namespaces' pods are scheduled across the member clusters and run here like ours.
    // Before start(): federations reopened after a restart announce their pod scopes as they open
    // (announce() runs once per federation; with no pod host yet their pods would never run again
    // and the lifecycle would reap their containers as orphans).
    await federation.runPodsWith(pods)
    await federation.start()
    // Their pods are routed to and from the other member clusters (/128s only, docs/federation.md).
    nodeNetwork.useFederation(federationRouteSource(federation))
    const apiStore = routedStore(store, federation)
    const baseHandler = createApiHandler({
      store: apiStore,
      node: () => info,
      clock,
      logger: logger.child({ module: 'api' }),
      admit: (obj, batch) => {
        if (obj.kind !== 'Pod') return
        const ns = obj.metadata.namespace ?? 'default'
        const inBatch = batch.filter((o) => o.kind === 'SecurityPolicy' && (o.metadata.namespace ?? 'default') === ns)
        const names = new Set(inBatch.map((o) => o.metadata.name))
        admitPod(obj, [...store.list('SecurityPolicy', ns).filter((p) => !names.has(p.metadata.name)), ...inBatch])
      },
      rollbackTarget: (ref) => previousUserRevision(apiStore, ref),
    })
    const podHandler = createPodApi({ store, nodeName, clock, controllers: AGENT_CONTROLLERS, logDirOf: (ref, uid, c) => pods.logDirOf(ref, uid, c) })(baseHandler)
    const schedHandler = withSchedulingRoutes(podHandler, {
      store,
      nodeName,
      now: () => clock.now(),
      members: () => (meshNode ? meshNode.mesh.members() : [{ name: nodeName, state: 'alive' as const, self: true }]),
      schedView: () => pods.schedView(),
      scopeView: (ns) => pods.schedViewFor(ns),
    })
    const rolloutHandler = withRolloutRoutes(schedHandler, { store, nodeName, now: () => clock.now() })
    // `orc down` asks over the API for the stop SIGTERM gives (signals.ts), plus host cleanup.
    let stopSelf: (() => void) | undefined
    const netHandler = withNetworkRoutes(rolloutHandler, nodeNetwork, { pid: process.pid, dataDir, shutdown: () => stopSelf?.() })
    ops = createNodeOps({
      store,
      nodeName,
      dataDir,
      version: ORC_VERSION,
      clusterId: () => clusterRef.id,
      mesh: cluster?.mesh,
      logger,
      now: () => clock.now(),
      http: opts.http,
    })
    // Tombstone pruning across members (stability.ts); alone, the store's own source suffices.
    const stability = cluster
      ? {
          store,
          selfPeerId: cluster.peerId,
          members: () => cluster!.mesh.members().map((m) => m.peerId),
          ask: async (peer: string) => {
            const r = await cluster!.mesh.memberRequest(peer, { method: 'GET', path: STABILITY_PATH }, { timeoutMs: 5000 })
            if (r.status !== 200) throw new Error(`HTTP ${r.status}`)
            return r.body
          },
        }
      : undefined
    const stabilityHandler = withStabilityRoute(netHandler, stability)
    const pruneEvery = opts.pruneIntervalMs ?? 120_000
    const structsGauge = ops.metrics.gauge('orc_store_document_structs', 'Structs (items and GC ranges) the in-memory replicated document holds; pruning keeps it proportional to live data.')
    ops.metrics.onCollect(() => structsGauge.set({}, store.docStats().structs))
    const prunePasses = ops.metrics.counter('orc_store_prune_passes_total', 'Tombstone pruning passes, by outcome (pruned, nothing, waiting: a member did not vouch).')
    const prunedTotal = ops.metrics.counter('orc_store_pruned_tombstones_total', 'Tombstones of overwritten fields pruned from the replicated document.')
    let pruning = false
    let lastWait: string | undefined
    // Unref'd: pruning is housekeeping and must not keep a stopping agent's process up.
    stopPruning = every(unrefTimers(clock), pruneEvery, () => {
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
    const opsHandler = ops.wrap(withFederationRoutes(stabilityHandler, federation))
    const handler = cluster ? cluster.wrap(opsHandler) : opsHandler
    server = await serveOnSocket(handler, socketPath, { logger: logger.child({ module: 'http' }) })
    await ops.start()
    await lifecycle.start()
    nodeNetwork.podsAdopted()
    deployments = new DeploymentController({
      store,
      nodeName,
      members: () => (meshNode ? meshNode.mesh.members() : [{ name: nodeName, state: 'alive' as const, self: true }]),
      now: () => clock.now(),
      setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
      clearTimeout: (h) => clock.clearTimeout(h),
      log: logger.child({ module: 'deployments' }),
    })
    deployments.start()
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
      lifecycle,
      ops,
      federation,
      stopped,
      stop() {
        stopping ??= (async () => {
          log.info({ node: nodeName }, 'agent stopping')
          await cleanup()
          log.info({ node: nodeName }, 'agent stopped')
          resolveStopped()
        })()
        return stopping
      },
    }
    stopSelf = () => void agent.stop()
    return agent
  } catch (err) {
    await cleanup()
    joinPrep?.undo()
    throw err
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
