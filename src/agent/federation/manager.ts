/**
 * Federations of this node (docs/federation.md): each is its own libp2p host (the federation's PSK,
 * a gater admitting only the federated clusters' nodes) replicating one document, the federation's
 * shared namespaces, kept in `<data>/federations/<id>/`. The cluster's own scope never goes there.
 *
 * Which federations the cluster is in is recorded in the cluster's private scope (a Federation
 * object naming the id and this cluster's name in it); every node of the cluster follows that
 * record: it joins with an invite minted by a node already in, and detaches when it goes.
 */

import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile, rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { type Clock, every, type Random, sleep, systemRandom, type TimerHandle, unrefTimers } from '../../effects/index.ts'
import {
  createCluster,
  decodeToken,
  joinMesh,
  loadOrCreateIdentity,
  type MemberInfo,
  type Mesh,
  type MeshOptions,
  type MeshTunables,
  peerIdOf,
  peerKeyVerifier,
  recordSigner,
  resolvePeerAddress,
  startMesh,
  writeFileAtomic,
} from '../../mesh/index.ts'
import {
  API_VERSION,
  type ApiRequest,
  type ApiResponse,
  byCodeUnits,
  DNS_LABEL,
  errorResponse,
  type Node,
  type ObjectRef,
  OrcError,
  type OrcObject,
  type Secret,
  wrapError,
} from '../../model/index.ts'
import { type Keyring, keyIdsOf } from '../../secrets/index.ts'
import { type ObjectStore, openStore, type Stored } from '../../store/index.ts'
import type { FederationClusterView, FederationGovernanceView, FederationProposalView, FederationState, FederationView } from '../api-types.ts'
import { DeploymentController, type LeaderlessComponents, type LeaderlessController } from '../deployments/index.ts'
import { JobController } from '../jobs/index.ts'
import { unadvertisedRanges } from '../network/index.ts'
import type { PodScope } from '../pods/controller.ts'
import { pruneClusterTombstones, type StabilityDeps, stabilityAnswer } from '../stability.ts'
import {
  approveReason,
  type Governance,
  governanceOf,
  isNamespaceAction,
  isProposalAction,
  namespacesReason,
  newProposalId,
  PROPOSAL_ACTIONS,
  PROPOSAL_ID,
  PROPOSAL_TTL_MS,
  type Proposal,
  type ProposalAction,
  proposalState,
  proposeReason,
  removalReason,
  required,
  sharedNamespaces,
  targetsNamespace,
  withdrawReason,
  writersAt,
  writersProposal,
} from './governance.ts'
import { keptObjects } from './keep.ts'
import { clusterOfAuthor, clusterOfMemberName, FederationDirectory, isClusterName, replicaOfPeer, tagAuthor } from './membership.ts'
import { verifiedReplica } from './replica.ts'
import { type FederatedScope, type ScopeRouter, withoutShared } from './routed-store.ts'
import { buildFederatedSchedView, clusterOwnership, federationAuthorize, federationNodesOf, NodeSummaryPublisher, taggedStore } from './scheduling.ts'

export type { FederationClusterView, FederationGovernanceView, FederationProposalView, FederationState, FederationView } from '../api-types.ts'

export const FEDERATION_CONTROLLER = 'controller:federation'
/** The replication scope name of a federation document on its mesh. */
export const FEDERATION_SCOPE = 'federation'
/** Federation tokens and invites: a join token of the federation host (no PSK inside), `orcfed2.<claims>`. */
const FED_TOKEN_PREFIX = 'orcfed2.'
/** Before: the claims held the federation's PSK (refused, decodeFederationToken). */
const OLD_FED_TOKEN_PREFIX = 'orcfed1.'
/** On the cluster's private Federation object: when the cluster last created or joined it. */
const JOINED_ANNOTATION = 'orc/joined-at'
const JOIN_TOKEN_PREFIX = 'orcjoin1.'
const STATE_FILE = 'federation.json'

export interface FederationComponents {
  dataDir: string
  nodeName: string
  /** The cluster's own (private) store. */
  store: ObjectStore
  cluster: () => { name: string; id: string }
  /** The cluster mesh, to ask another node of this cluster for an invite. */
  clusterMesh?: Pick<Mesh, 'members' | 'memberRequest' | 'peerId'>
  /** Listen multiaddrs of the cluster mesh: the federation host listens on the same hosts. */
  listen?: string[]
  logger: Logger
  clock: Clock
  /** Keys of the federation hosts (the system's randomness unless given). */
  random?: Random
  tunables?: Partial<MeshTunables>
  /** How often a node retries following a federation its cluster is in (default 3 s). */
  followRetryMs?: number
  /** How often the federation documents' tombstones are pruned (default 120 s, as the cluster store's; 0: never). */
  pruneIntervalMs?: number
  /** The cluster keyring: a shared Secret is kept on leaving only when this cluster can open it (sealed here). */
  keyring?: () => Keyring | undefined
}

interface LocalState {
  id: string
  name: string
  /** This cluster's name in the federation. */
  cluster: string
  namespaces: string[]
  /**
   * The shared namespaces as this cluster learned them when it created or joined the federation
   * (a following node: from the cluster's record). Passed share and unshare proposals apply on top
   * (governance.ts sharedNamespaces): what `namespaces` is; never the document's `spec.namespaces`
   * after that.
   */
  base?: string[]
  state: FederationState
  /** TCP port the federation host listens on (kept across restarts so peers find it again). */
  port?: number
  /** TCP port of the federation host's join host (what its tokens and invites name; kept across restarts too). */
  joinPort?: number
  /** When this node left or was removed (ms): a later join of its cluster (JOINED_ANNOTATION) is followed. */
  detachedAt?: number
}

interface Running {
  cfg: LocalState
  dir: string
  mesh: Mesh
  store: ObjectStore
  directory: FederationDirectory
  off: () => void
  publisher?: NodeSummaryPublisher
  /** The shared namespaces' PinnedDeployments, Jobs and CronJobs: their pods, rollouts and runs. */
  workloads?: LeaderlessController[]
  announced?: boolean
  /** The membership governance as last read from the document (governance.ts; refreshed on change). */
  gov: Governance
  /** When each cluster's object was last deleted (ms), read with gov. */
  went?: Map<string, number>
}

/** Who runs the pods of the federations' shared namespaces (the pod lifecycle controller). */
export interface FederationPodHost {
  addScope(scope: PodScope): Promise<void>
  removeScope(id: string, why: string): Promise<void>
  /** The scope holds other namespaces now (one shared or unshared after it started). */
  setScopeNamespaces(id: string, namespaces: readonly string[], why: string): Promise<void>
}

export function encodeFederationToken(joinToken: string): string {
  return FED_TOKEN_PREFIX + joinToken.slice(JOIN_TOKEN_PREFIX.length)
}

/** A federation token or invite as the node join token it wraps (`orcjoin1.…`, checked by decodeToken). */
export function decodeFederationToken(token: string): string {
  const s = token.trim()
  if (s.startsWith(JOIN_TOKEN_PREFIX))
    throw new OrcError(
      'invalid',
      'this is a node join token (orcjoin1.…) for `orc join`; `orc federation join` takes a federation token (orcfed2.…) from `orc federation token`',
    )
  if (s.startsWith(OLD_FED_TOKEN_PREFIX))
    throw new OrcError(
      'invalid',
      'federation token from an older orc (orcfed1.…, it carries the federation key): ask for a new one (orcfed2.…) with orc federation token on a member cluster',
      { reason: 'old_token' },
    )
  if (!s.startsWith(FED_TOKEN_PREFIX)) throw new OrcError('invalid', 'federation token is malformed (expected orcfed2.…)')
  return JOIN_TOKEN_PREFIX + s.slice(FED_TOKEN_PREFIX.length)
}

function checkName(what: string, v: unknown): string {
  if (typeof v !== 'string' || !DNS_LABEL.test(v))
    throw new OrcError('invalid', `${what}: must be a DNS label (lowercase letters, digits and -, at most 63), got ${JSON.stringify(v ?? null)}`)
  return v
}

/** The creating cluster as the document says: `spec.creator`, else the cluster that wrote the Federation object (it is written once, at create). */
function creatorOf(store: ObjectStore): string | undefined {
  const f = store.list('Federation')[0]
  if (f === undefined) return undefined
  const c = f.spec?.creator
  return typeof c === 'string' && isClusterName(c) ? c : clusterOfAuthor(f.metadata.updatedBy)
}

function proposalView(p: Proposal, now: number): FederationProposalView {
  return {
    id: p.id,
    action: p.action,
    target: p.target,
    proposer: p.proposer,
    author: p.author,
    at: p.at,
    members: p.members,
    ...(p.writers !== undefined ? { writers: p.writers } : {}),
    required: p.required,
    approvals: p.approvals,
    state: proposalState(p, now),
    ...(p.passedAt !== undefined ? { passedAt: p.passedAt } : {}),
    ...(p.withdrawnAt !== undefined ? { withdrawnAt: p.withdrawnAt } : {}),
  }
}

const fedRef = (name: string): ObjectRef => ({ kind: 'Federation', namespace: '', name })

/** The namespaces a cluster's record of a federation says it shares: `status.namespaces` once one was shared or unshared after, else `spec.namespaces`. */
function recordedNamespaces(o: OrcObject): string[] {
  const v = Array.isArray(o.status?.namespaces) ? o.status.namespaces : o.spec?.namespaces
  return Array.isArray(v) ? [...v].filter((n): n is string => typeof n === 'string').sort() : []
}
const clusterRef = (name: string): ObjectRef => ({ kind: 'Cluster', namespace: '', name })

export class FederationManager implements ScopeRouter {
  private readonly running = new Map<string, Running>()
  private readonly log: Logger
  private readonly root: string
  private queue: Promise<unknown> = Promise.resolve()
  private offOwn: (() => void) | undefined
  private followTimer: TimerHandle | undefined
  private stopPruning: (() => void) | undefined
  /** Why pruning last waited, per federation id (said once in the log). */
  private readonly pruneWait = new Map<string, string | undefined>()
  private stopped = false
  /** Invites minted for nodes of this cluster, per federation id (see vetJoiner). */
  private readonly invites = new Map<string, number>()
  /** Per federation id: the admin who last issued a token here (an admission it implies is written as theirs). */
  private readonly tokenAuthors = new Map<string, string>()
  /** `<federation id>/<namespace>`: a share this cluster keeps in another federation (said once in the log). */
  private readonly heldElsewhere = new Set<string>()
  /** Federation ids whose local state is being set up or torn down right now. */
  private readonly busy = new Set<string>()
  private podHost: FederationPodHost | undefined
  /** This node's own logs of a shared pod it runs (the agent's pod routes), served to the other clusters' nodes. */
  private podLogs: ((ns: string, name: string, query: Record<string, string>) => Promise<unknown>) | undefined
  /** Told when a federation starts, is announced or stops here (the node network re-plans its routes). */
  private readonly runningListeners = new Set<() => void>()

  constructor(private readonly c: FederationComponents) {
    this.log = c.logger.child({ module: 'federation' })
    this.root = join(c.dataDir, 'federations')
  }

  // ---- routing (ScopeRouter) ------------------------------------------------------------------

  scopeOf(ns: string): FederatedScope | undefined {
    for (const r of this.running.values()) {
      if (r.cfg.namespaces.includes(ns)) return this.scopeOfRun(r)
    }
    return undefined
  }

  scopes(): Array<{ namespaces: readonly string[]; scope: FederatedScope }> {
    return [...this.running.values()].map((r) => ({ namespaces: r.cfg.namespaces, scope: this.scopeOfRun(r) }))
  }

  private scopeOfRun(r: Running): FederatedScope {
    return {
      store: r.store,
      cluster: r.cfg.cluster,
      federation: r.cfg.name,
      writers: (ns) => writersAt(r.gov, ns, this.c.clock.now()),
      writersState: (ns) => writersProposal(r.gov, ns, this.c.clock.now())?.id,
    }
  }

  /** Listen for federations starting or stopping on this node (routes-export.ts). */
  onRunningChange(listener: () => void): () => void {
    this.runningListeners.add(listener)
    return () => this.runningListeners.delete(listener)
  }

  /** ScopeRouter: the API's and the resolver's watches follow federations starting and stopping. */
  onScopesChange(listener: () => void): () => void {
    return this.onRunningChange(listener)
  }

  private runningChanged(): void {
    for (const l of this.runningListeners) {
      try {
        l()
      } catch (err) {
        this.log.warn({ err: String(err) }, 'federation change listener')
      }
    }
  }

  /** The running federation by name (tests, status). */
  get(name: string): { mesh: Mesh; store: ObjectStore; cluster: string; id: string } | undefined {
    const r = this.byName(name)
    return r && { mesh: r.mesh, store: r.store, cluster: r.cfg.cluster, id: r.cfg.id }
  }

  /**
   * Schedule and run the shared namespaces' pods on this node: each running federation becomes a
   * pod scope of `host` (now, and whenever one starts or stops).
   */
  async runPodsWith(host: FederationPodHost): Promise<void> {
    this.podHost = host
    for (const r of this.running.values()) await this.announce(r)
  }

  private podScopeId(r: Running): string {
    return `federation/${r.cfg.id}`
  }

  /** Start scheduling a running federation's pods here (once its namespaces are known). */
  private async announce(r: Running): Promise<void> {
    if (r.cfg.name === '' || r.announced || !this.running.has(r.cfg.id)) return
    r.announced = true
    this.runningChanged()
    const cluster = r.cfg.cluster
    const store = this.sharedView(r)
    r.publisher = new NodeSummaryPublisher({
      own: this.c.store,
      fed: store,
      nodeName: this.c.nodeName,
      cluster,
      clock: this.c.clock,
      log: this.log.child({ federation: r.cfg.name }),
    })
    r.publisher.start()
    await this.podHost
      ?.addScope({
        id: this.podScopeId(r),
        store,
        nodeName: `${this.c.nodeName}@${cluster}`,
        namespaces: r.cfg.namespaces,
        members: () => r.mesh.members(),
        nodes: () => this.nodesOfRun(r),
        buildView: buildFederatedSchedView,
      })
      .catch((err) => this.log.error({ err, federation: r.cfg.name }, 'federated pods will not run on this node'))
    if (!this.running.has(r.cfg.id)) return
    this.startWorkloads(r)
  }

  /**
   * The federation's document as this node's controllers of it see it: written as this cluster,
   * and objects of namespaces it does not share (any more) hidden — an unshared namespace's objects
   * stay in the document, inert, and come back if it is shared again.
   */
  private sharedView(r: Running): ObjectStore {
    return taggedStore(
      withoutShared(r.store, (ns) => !r.cfg.namespaces.includes(ns)),
      r.cfg.cluster,
    )
  }

  /**
   * The shared namespaces' PinnedDeployments, Jobs and CronJobs, over every member cluster's
   * nodes: one writer for the whole federation, chosen alike by every node of every cluster
   * (deployments/leaderless.ts).
   */
  private startWorkloads(r: Running): void {
    const cluster = r.cfg.cluster
    const store = this.sharedView(r)
    const leaderless = (module: string): LeaderlessComponents => ({
      store,
      nodeName: `${this.c.nodeName}@${cluster}`,
      members: () => r.mesh.members(),
      nodes: () => this.nodesOfRun(r),
      now: () => this.c.clock.now(),
      setTimeout: (fn, ms) => this.c.clock.setTimeout(fn, ms),
      clearTimeout: (h) => this.c.clock.clearTimeout(h),
      log: this.log.child({ module, federation: r.cfg.name }),
    })
    r.workloads = [new DeploymentController(leaderless('deployments')), new JobController(leaderless('jobs'))]
    for (const w of r.workloads) w.start()
  }

  /** The nodes of every member cluster (`node@cluster`), from their summaries in the document. */
  private nodesOfRun(r: Running): Stored<Node>[] {
    const bound = r.store
      .list('Pod')
      .map((p) => p.status?.node)
      .filter((n): n is string => typeof n === 'string')
    return federationNodesOf(r.store.list('Cluster'), bound, r.directory.removedClusters())
  }

  /** The nodes of the federation sharing namespace `ns` here (`node@cluster`); undefined if `ns` is not shared. */
  nodesOf(ns: string): Stored<Node>[] | undefined {
    for (const r of this.running.values()) if (r.cfg.namespaces.includes(ns)) return this.nodesOfRun(r)
    return undefined
  }

  // ---- logs of shared pods across clusters ---------------------------------------------------

  /** Answer other clusters' nodes asking for the logs of a shared pod this node runs. */
  serveLogsWith(fn: (ns: string, name: string, query: Record<string, string>) => Promise<unknown>): void {
    this.podLogs = fn
  }

  /**
   * `orc logs` of a shared pod that runs in another cluster: asked of that node over the
   * federation's mesh (its member API serves only this, see serveMember).
   */
  async forwardLogs(ns: string, pod: string, node: string, query: Record<string, string>, timeoutMs: number): Promise<ApiResponse> {
    const r = [...this.running.values()].find((x) => x.cfg.namespaces.includes(ns))
    if (r === undefined) throw new OrcError('not_found', `namespace ${ns} is not shared with a federation here`, { namespace: ns })
    const m = r.mesh.members().find((x) => !x.self && x.name === node)
    if (m === undefined)
      throw new OrcError(
        'unavailable',
        `pod/${pod} runs on node ${node}, which is not a member of federation ${r.cfg.name} this node knows; its logs are not reachable from here`,
        {
          node,
        },
      )
    if (m.state === 'dead')
      throw new OrcError('unavailable', `pod/${pod} runs on node ${node} (federation ${r.cfg.name}), which is dead`, { node, state: 'dead' })
    const path = `/v1/pods/${encodeURIComponent(ns)}/${encodeURIComponent(pod)}/logs`
    try {
      return await r.mesh.memberRequest(m.peerId, { method: 'GET', path, query }, { timeoutMs })
    } catch (err) {
      throw new OrcError(
        'unavailable',
        `pod/${pod} runs on node ${node} (federation ${r.cfg.name}), which did not answer: ${(err as Error).message}`,
        { node },
        err,
      )
    }
  }

  /**
   * The member API of a federation host: the other clusters' nodes may read the logs of the
   * federation's pods that run on this node, and the document's stability report, nothing else. No user travels with the request (the
   * other cluster's users mean nothing here): that cluster already holds and may edit every shared
   * object, so its logs give it nothing more (docs/decisions.md).
   */
  private async serveMember(cfg: LocalState, req: ApiRequest<Record<string, string>>, peer: string): Promise<ApiResponse> {
    const m = /^\/v1\/pods\/([^/?]+)\/([^/?]+)\/logs$/.exec(req.path)
    try {
      // The document's durable state, for the members' tombstone pruning (stabilityOf).
      const r = this.running.get(cfg.id)
      if (req.method.toUpperCase() === 'GET' && req.path === '/v1/stability' && r !== undefined)
        return { status: 200, body: stabilityAnswer(this.stabilityOf(r)) }
      // Which cluster each replica ever admitted belongs to: a member that joined after some left needs them (learnBindings).
      if (req.method.toUpperCase() === 'GET' && req.path === '/v1/federation-bindings' && r !== undefined)
        return { status: 200, body: { replicas: r.directory.bindings() } }
      if (req.method.toUpperCase() !== 'GET' || m === null)
        throw new OrcError('forbidden', 'federation members may only read the logs of shared pods and the stability report')
      const ns = decodeURIComponent(m[1]!)
      const name = decodeURIComponent(m[2]!)
      if (!cfg.namespaces.includes(ns)) throw new OrcError('forbidden', `namespace ${ns} is not shared in federation ${cfg.name}`, { namespace: ns })
      if (this.podLogs === undefined) throw new OrcError('unavailable', 'this node serves no logs yet')
      this.log.debug({ federation: cfg.name, peer, ns, name }, 'serving shared pod logs')
      return { status: 200, body: await this.podLogs(ns, name, req.query ?? {}) }
    } catch (err) {
      return errorResponse(err)
    }
  }

  // ---- lifecycle ------------------------------------------------------------------------------

  async start(): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o700 })
    for (const id of await readdir(this.root)) {
      const cfg = await this.readState(id)
      if (cfg?.state !== 'joined') continue
      try {
        await this.open(cfg, { mode: 'start' })
      } catch (err) {
        this.log.error({ err, federation: cfg.name, id }, 'federation did not start; the cluster runs without it')
      }
    }
    this.offOwn = this.c.store.onChange((keys) => {
      if (keys.some((k) => k.startsWith('Federation/'))) this.reconcileSoon(0)
    })
    this.reconcileSoon(0)
    const pruneMs = this.c.pruneIntervalMs ?? 120_000
    if (pruneMs > 0) this.stopPruning = every(unrefTimers(this.c.clock), pruneMs, () => void this.pruneAll())
  }

  // ---- tombstone pruning of federation documents ---------------------------------------------

  /**
   * Every replica of a federation document is a member of its mesh, in whichever cluster: the same
   * rule as the cluster store's (stability.ts) — prune only when every member in this node's
   * directory vouched with its durable state and knows no member this node does not. Members of
   * removed clusters are out of the directory: they never sync again, so their copies do not count.
   */
  private stabilityOf(r: Running): StabilityDeps {
    return {
      store: r.store,
      selfPeerId: r.mesh.peerId,
      members: () => r.directory.list().map((m) => m.peerId),
      ask: async (peer) => {
        const res = await r.mesh.memberRequest(peer, { method: 'GET', path: '/v1/stability' }, { timeoutMs: 5000 })
        if (res.status !== 200) throw new Error(`HTTP ${res.status}`)
        return res.body
      },
    }
  }

  /** One pruning pass of federation `name`'s document (tests; the timer runs pruneAll). */
  async pruneNow(name: string): Promise<{ pruned: number; skipped?: string }> {
    return pruneClusterTombstones(this.stabilityOf(this.mustRun(name)))
  }

  private pruning = false

  private async pruneAll(): Promise<void> {
    if (this.pruning || this.stopped) return
    this.pruning = true
    try {
      for (const r of [...this.running.values()]) {
        if (r.cfg.name === '') continue
        const res = await pruneClusterTombstones(this.stabilityOf(r)).catch((err) => ({ pruned: 0, skipped: String(err) }))
        if (res.skipped !== this.pruneWait.get(r.cfg.id))
          this.log.info(
            { federation: r.cfg.name, reason: res.skipped ?? null },
            res.skipped ? 'federation tombstone pruning waits' : 'federation tombstone pruning resumed',
          )
        this.pruneWait.set(r.cfg.id, res.skipped)
        if (res.pruned > 0) this.log.debug({ federation: r.cfg.name, pruned: res.pruned }, 'federation tombstones pruned')
      }
    } finally {
      this.pruning = false
    }
  }

  async stop(): Promise<void> {
    this.stopped = true
    this.stopPruning?.()
    if (this.followTimer !== undefined) this.c.clock.clearTimeout(this.followTimer)
    this.offOwn?.()
    await this.queue.catch(() => undefined)
    for (const r of [...this.running.values()]) await this.close(r)
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.queue.then(fn, fn)
    this.queue = p.catch(() => undefined)
    return p
  }

  // ---- operations -----------------------------------------------------------------------------

  list(): FederationView[] {
    const out: FederationView[] = []
    for (const o of this.c.store.list('Federation')) {
      const r = this.running.get(String(o.spec?.id ?? ''))
      out.push(
        r
          ? this.view(r)
          : {
              name: o.metadata.name,
              id: String(o.spec?.id ?? ''),
              cluster: String(o.spec?.cluster ?? ''),
              namespaces: recordedNamespaces(o),
              state: 'joined',
            },
      )
    }
    return out.sort((a, b) => byCodeUnits(a.name, b.name))
  }

  status(name: string): FederationView {
    const r = this.byName(name)
    if (r) return this.view(r)
    const v = this.list().find((f) => f.name === name)
    if (v) return v
    throw new OrcError('not_found', `federation ${name} not found on this node (orc federation list)`, { name })
  }

  create(req: { name: unknown; namespaces: unknown; as?: unknown; author: string }): Promise<FederationView> {
    return this.serial(async () => {
      const name = checkName('federation name', req.name)
      if (!Array.isArray(req.namespaces) || req.namespaces.length === 0)
        throw new OrcError('invalid', 'namespaces: name at least one namespace to share (--namespace NS)')
      const namespaces = [...new Set(req.namespaces.map((n) => checkName('namespace', n)))]
      const cluster = checkName('cluster name (--as)', req.as ?? this.c.cluster().name)
      this.checkFree(name, namespaces)
      const id = `pending-${this.c.clock.now()}`
      const cfg: LocalState = { id, name, cluster, namespaces, base: namespaces, state: 'joined' }
      const r = await this.open(cfg, { mode: 'create' })
      const now = this.c.clock.now()
      const author = `${FEDERATION_CONTROLLER}@${cluster}`
      await r.store.apply(
        { apiVersion: API_VERSION, kind: 'Federation', metadata: { name }, spec: { id: r.cfg.id, namespaces, creator: cluster } },
        { author, reason: 'federation created', now },
      )
      await r.directory.setCreator(cluster)
      await r.store.apply(
        { apiVersion: API_VERSION, kind: 'Cluster', metadata: { name: cluster }, spec: { id: this.c.cluster().id } },
        { author, reason: 'cluster joined the federation', now },
      )
      await this.recordMembership(r.cfg, req.author, 'federation created')
      this.log.info({ federation: name, id: r.cfg.id, cluster, namespaces }, 'federation created')
      return this.view(r)
    })
  }

  async token(
    name: string,
    opts: { ttlMs?: number; readmit?: string; author?: string } = {},
  ): Promise<{ token: string; expiresAt: number; federation: string; addresses: string[] }> {
    const r = this.mustRun(name)
    if (opts.author !== undefined) this.tokenAuthors.set(r.cfg.id, opts.author)
    // Any member cluster issues tokens; the joiner is checked against the governance when it
    // presents one (vetJoiner). `--readmit C`: propose the admission of a removed cluster first.
    if (opts.readmit !== undefined) {
      const c = checkName('readmit', opts.readmit)
      if (!r.directory.isRemovedCluster(c))
        throw new OrcError('invalid', `cluster ${c} was not removed from federation ${r.cfg.name}: a token admits it without --readmit`, { cluster: c })
      await this.refreshGovernance(r)
      if (!this.admissionOpen(r, c)) {
        const { proposal } = await this.propose(name, 'admit', c, opts.author ?? 'user:unknown')
        if (proposal.state !== 'passed')
          throw new OrcError(
            'forbidden',
            `re-admitting cluster ${c} needs ${proposal.required} approvals: proposal ${proposal.id} has ${proposal.approvals.length} (orc federation approve ${name} ${proposal.id} on another member cluster), then ask for a token again`,
            { proposal: proposal.id },
          )
      }
    }
    const ttlMs = opts.ttlMs ?? 3600_000
    if (!Number.isFinite(ttlMs) || ttlMs < 1000 || ttlMs > 7 * 86400_000) throw new OrcError('invalid', 'ttl: must be between 1s and 7d')
    const t = await r.mesh.createToken({ ttlMs, uses: 1 })
    return { token: encodeFederationToken(t.token), expiresAt: t.expiresAt, federation: name, addresses: r.mesh.addresses() }
  }

  join(req: { token: unknown; peer?: unknown; as?: unknown; author: string }): Promise<FederationView> {
    return this.serial(async () => {
      if (typeof req.token !== 'string') throw new OrcError('invalid', 'token: required (from orc federation token on the other cluster)')
      const joinToken = decodeFederationToken(req.token)
      const claims = decodeToken(joinToken)
      const cluster = checkName('cluster name (--as)', req.as ?? this.c.cluster().name)
      if (this.running.has(claims.cluster))
        throw new OrcError('conflict', `this cluster is already in federation ${this.running.get(claims.cluster)!.cfg.name}`)
      const peerAddrs = typeof req.peer === 'string' && req.peer !== '' ? await resolvePeerAddress(req.peer) : undefined
      const cfg: LocalState = { id: claims.cluster, name: '', cluster, namespaces: [], state: 'joined' }
      const r = await this.open(cfg, { mode: 'join', token: joinToken, peerAddrs })
      try {
        const fed = r.store.list('Federation')[0]
        if (fed === undefined)
          throw new OrcError('unavailable', 'joined, but the federation document holds no Federation object yet (did the issuer finish orc federation create?)')
        const other = r.store.get(clusterRef(cluster))
        if (other !== undefined && other.spec?.id !== this.c.cluster().id) {
          throw new OrcError('conflict', `a cluster named ${cluster} is already in federation ${fed.metadata.name}; join under another name with --as NAME`, {
            cluster,
          })
        }
        r.cfg.name = fed.metadata.name
        // What the document says now, with the passed shares and unshares applied (the same on every replica).
        r.cfg.base = (fed.spec?.namespaces as string[] | undefined) ?? []
        await this.refreshGovernance(r)
        r.cfg.namespaces = sharedNamespaces(r.cfg.base, r.gov)
        this.checkFree(r.cfg.name, r.cfg.namespaces, r.cfg.id)
        const now = this.c.clock.now()
        await r.store.apply(
          { apiVersion: API_VERSION, kind: 'Cluster', metadata: { name: cluster }, spec: { id: this.c.cluster().id } },
          { author: `${FEDERATION_CONTROLLER}@${cluster}`, reason: 'cluster joined the federation', now },
        )
        await this.saveState(r.cfg)
        await this.recordMembership(r.cfg, req.author, 'joined federation')
        await this.announce(r)
      } catch (err) {
        await this.close(r)
        await rm(r.dir, { recursive: true, force: true })
        throw err
      }
      this.log.info({ federation: r.cfg.name, id: r.cfg.id, cluster }, 'joined federation')
      return this.view(r)
    })
  }

  /** Leave: the other clusters stop accepting this one's nodes; local copies stay (in the cluster's own scope). */
  leave(name: string, author: string): Promise<FederationView> {
    return this.serial(async () => {
      const r = this.mustRun(name)
      const now = this.c.clock.now()
      const ref = clusterRef(r.cfg.cluster)
      if (r.store.get(ref) !== undefined) {
        await r.store.delete(ref, { author: `${FEDERATION_CONTROLLER}@${r.cfg.cluster}`, reason: 'cluster left the federation', now })
        // Hand the removal to the connected members before going (gossip already carries it).
        await Promise.race([r.mesh.syncNow(), sleep(unrefTimers(this.c.clock), 3000)]).catch(() => undefined)
      }
      const view = this.view(r)
      await this.detach(r, 'left')
      const own = this.c.store.get(fedRef(name))
      if (own !== undefined) await this.c.store.delete(fedRef(name), { author, reason: 'left federation', now: this.c.clock.now() })
      this.log.info({ federation: name }, 'left federation')
      return { ...view, state: 'left' }
    })
  }

  /** Remove another cluster: every member drops its nodes. */
  remove(name: string, cluster: string, author: string): Promise<FederationView> {
    return this.serial(async () => {
      const r = this.mustRun(name)
      checkName('cluster', cluster)
      if (cluster === r.cfg.cluster) throw new OrcError('invalid', `${cluster} is this cluster: use orc federation leave ${name}`)
      if (r.store.get(clusterRef(cluster)) === undefined || r.directory.isRemovedCluster(cluster))
        throw new OrcError('not_found', `cluster ${cluster} is not in federation ${name}`)
      await this.refreshGovernance(r)
      // At once only when this cluster's approval alone is the quorum; otherwise nothing is written.
      const need = required('remove', this.memberClusters(r).length, r.gov.quorum)
      if (need > 1)
        throw new OrcError(
          'forbidden',
          `removing a cluster from federation ${name} needs ${need} approvals of its ${this.memberClusters(r).length} member clusters: orc federation propose ${name} remove ${cluster}, then orc federation approve ${name} PROPOSAL on other member clusters`,
          { cluster, required: need },
        )
      return r
    }).then(async () => (await this.propose(name, 'remove', cluster, author)).federation)
  }

  /** Mint a single-use invite for another node of this cluster (served to cluster members only). */
  async invite(id: string): Promise<{ token: string; cluster: string }> {
    const r = this.running.get(id)
    if (r === undefined) throw new OrcError('not_found', `this node is not in federation ${id}`)
    const t = await r.mesh.createToken({ ttlMs: 120_000, uses: 1 })
    this.invites.set(id, (this.invites.get(id) ?? 0) + 1)
    return { token: encodeFederationToken(t.token), cluster: r.cfg.cluster }
  }

  // ---- internals ------------------------------------------------------------------------------

  // ---- governance of membership (governance.ts) ---------------------------------------------------

  /** The member clusters: those with a Cluster object in the document, removed ones left out. */
  private memberClusters(r: Running): string[] {
    return r.store
      .list('Cluster')
      .map((o) => o.metadata.name)
      .filter((c) => !r.directory.isRemovedCluster(c))
      .sort()
  }

  /** When cluster c's object was last deleted (it left or was removed), from the cache refreshGovernance keeps. */
  private wentAt(r: Running, c: string): number {
    return r.went?.get(c) ?? Number.NEGATIVE_INFINITY
  }

  /** Has an admission of `c` passed after `t`? */
  private admittedSince(r: Running, c: string, t: number): boolean {
    return r.gov.proposals.some((p) => p.action === 'admit' && p.target === c && p.passedAt !== undefined && p.passedAt > t)
  }

  /** May cluster c (not in the federation now) be admitted: an admission passed since it last went. */
  private admissionOpen(r: Running, c: string): boolean {
    return this.admittedSince(r, c, this.wentAt(r, c))
  }

  private async refreshGovernance(r: Running): Promise<void> {
    r.gov = await governanceOf(r.store)
    const went = new Map<string, number>()
    const names = new Set([...r.directory.knownClusters(), ...r.gov.proposals.map((p) => p.target)])
    for (const c of names) {
      if (!isClusterName(c)) continue
      const del = (await r.store.history(clusterRef(c)).catch(() => [])).filter((h) => h.op === 'delete').at(-1)
      if (del !== undefined) went.set(c, del.time)
    }
    r.went = went
  }

  /** On every change of the Cluster or Federation objects: re-read the governance, lift removals admitted again, act on removals. */
  private async applyGovernance(r: Running): Promise<void> {
    if (!this.running.has(r.cfg.id)) return
    await this.refreshGovernance(r)
    // Nodes of a newly admitted cluster introduced before its admission reached this node.
    for (const info of r.directory.retryDeferred()) await r.mesh.admit(info, { announce: false }).catch(() => undefined)
    // A removal that passed with this cluster's approval last but whose deletion was never written
    // (the approving node stopped in between): any node of this cluster writes it, as that approver.
    for (const p of r.gov.proposals) {
      const last = p.approvals.at(-1)
      if (p.action !== 'remove' || p.passedAt === undefined || last?.cluster !== r.cfg.cluster) continue
      if (r.store.get(clusterRef(p.target)) === undefined || this.wentAt(r, p.target) >= p.passedAt || this.admittedSince(r, p.target, p.passedAt)) continue
      await r.store
        .delete(clusterRef(p.target), { author: last.author, reason: removalReason(p.target, p.id), now: this.c.clock.now() })
        .catch((err) => this.log.warn({ err: (err as Error).message, proposal: p.id }, 'write a passed removal'))
    }
    for (const c of r.directory.removedClusters()) {
      if (c === r.cfg.cluster || !this.admissionOpen(r, c)) continue
      await r.directory.readmit(c)
      this.log.info({ federation: r.cfg.name, cluster: c }, 'cluster admitted to the federation again')
    }
    // Namespaces shared or unshared by passed proposals (governance.ts sharedNamespaces).
    if (r.cfg.name !== '') await this.changeNamespaces(r, this.namespacesOf(r))
    await this.applyClusterRemovals(r)
  }

  /**
   * Write a proposal as `author` of this cluster (it counts as this cluster's approval), and its
   * effect when that alone is the quorum.
   */
  private async proposeIn(r: Running, action: ProposalAction, target: string, author: string, writers?: string[]): Promise<Proposal> {
    const members = this.memberClusters(r)
    const id = newProposalId(action, target, this.c.random ?? systemRandom)
    const reason = proposeReason(id, action, target, members, writers, await this.newestJoin(r, members))
    // A revision's reason holds at most 1024 characters (store/codec.ts), and the member list is in it.
    if (reason.length > 1024)
      throw new OrcError(
        'too_large',
        `federation ${r.cfg.name} has too many member clusters (${members.length}, names ${reason.length} characters) for a proposal's record (1024)`,
      )
    const now = this.c.clock.now()
    await r.store.patch(
      fedRef(r.cfg.name),
      [{ path: ['spec', 'proposals', id], value: { action, target, members, ...(writers ? { writers } : {}), by: author, at: new Date(now).toISOString() } }],
      { author, reason, now },
    )
    return this.afterVote(r, id, author)
  }

  /**
   * The membership state a proposal is judged against (governance.ts, `seen`): the id of the newest
   * join among the member clusters, their objects' last creation (by time, then id).
   */
  private async newestJoin(r: Running, members: readonly string[]): Promise<string | undefined> {
    let newest: { id: string; time: number } | undefined
    for (const c of members) {
      const join = (await r.store.history(clusterRef(c)).catch(() => [])).filter((h) => h.op === 'create').at(-1)
      if (join !== undefined && (newest === undefined || join.time > newest.time || (join.time === newest.time && join.id > newest.id))) newest = join
    }
    return newest?.id
  }

  /** Re-read the governance after this cluster's vote on `id`; if the vote completed it, write its effect. */
  private async afterVote(r: Running, id: string, author: string): Promise<Proposal> {
    await this.refreshGovernance(r)
    const p = r.gov.proposals.find((x) => x.id === id)
    if (p === undefined) throw new OrcError('internal', `proposal ${id} was written but does not read back`)
    const mine = p.approvals.at(-1)?.cluster === r.cfg.cluster
    if (p.passedAt !== undefined && mine) {
      const now = this.c.clock.now()
      if (p.action === 'remove' && r.store.get(clusterRef(p.target)) !== undefined) {
        await r.store.delete(clusterRef(p.target), { author, reason: removalReason(p.target, p.id), now })
      } else if (p.action === 'quorum') {
        const value = p.target === 'default' ? undefined : Number(p.target)
        await r.store.patch(fedRef(r.cfg.name), [{ path: ['spec', 'quorum'], value }], { author, reason: `quorum ${p.target} (proposal ${p.id})`, now })
      } else if (isNamespaceAction(p.action)) {
        // The document's spec.namespaces mirrors it (what a cluster joining later starts from); every
        // replica checks this write names a passed proposal, and derives the namespaces from the proposals.
        const cur = (r.store.get(fedRef(r.cfg.name))?.spec?.namespaces as string[] | undefined) ?? []
        const value = p.action === 'share-namespace' ? [...new Set([...cur, p.target])].sort() : cur.filter((n) => n !== p.target)
        await r.store.patch(fedRef(r.cfg.name), [{ path: ['spec', 'namespaces'], value }], { author, reason: namespacesReason(p.action, p.target, p.id), now })
      }
      // Hand it to the connected members (the removed cluster too, so that it learns it) before
      // acting on it here, which cuts the removed cluster's connections.
      await Promise.race([r.mesh.syncNow(), sleep(unrefTimers(this.c.clock), 3000)]).catch(() => undefined)
      await this.applyGovernance(r)
    }
    return p
  }

  /** The other federation running here that shares `ns` (one federation per namespace), if any. */
  private sharingElsewhere(r: Running, ns: string): Running | undefined {
    return [...this.running.values()].find((x) => x !== r && x.cfg.namespaces.includes(ns))
  }

  /**
   * Why this node refuses to share or unshare `ns` in federation `r` now (undefined: it may). One
   * federation per namespace; `default` holds every object applied without -n in each member
   * cluster and is never shared after create; a federation shares at least one namespace and at
   * most 32.
   */
  private namespaceChangeProblem(r: Running, action: 'share-namespace' | 'unshare-namespace', ns: string): OrcError | undefined {
    const name = r.cfg.name
    if (action === 'unshare-namespace') {
      if (!r.cfg.namespaces.includes(ns))
        return new OrcError('not_found', `namespace ${ns} is not shared in federation ${name} (shared: ${r.cfg.namespaces.join(', ') || 'none'})`, {
          namespace: ns,
        })
      if (r.cfg.namespaces.length === 1)
        return new OrcError(
          'invalid',
          `namespace ${ns} is the only namespace federation ${name} shares: a federation shares at least one (orc federation leave ${name} to stop)`,
          {
            namespace: ns,
          },
        )
      return undefined
    }
    if (ns === 'default')
      return new OrcError(
        'invalid',
        `namespace default holds every object applied without -n in each member cluster: it is never shared after create (share a namespace of its own)`,
        { namespace: ns },
      )
    if (r.cfg.namespaces.includes(ns)) return new OrcError('conflict', `namespace ${ns} is already shared in federation ${name}`, { namespace: ns })
    const other = this.sharingElsewhere(r, ns)
    if (other !== undefined)
      return new OrcError('conflict', `namespace ${ns} is already shared in federation ${other.cfg.name}: a namespace is shared by one federation at most`, {
        namespace: ns,
        federation: other.cfg.name,
      })
    if (r.cfg.namespaces.length >= 32) return new OrcError('invalid', `federation ${name} shares 32 namespaces already, the most it may`, { namespace: ns })
    return undefined
  }

  /** `--writers a,b` of a share or a set-writers (which needs it): member clusters, at least one; refused with any other action. */
  private writersOption(r: Running, action: ProposalAction, v: unknown): string[] | undefined {
    if (v === undefined || v === null || (Array.isArray(v) && v.length === 0)) {
      if (action === 'set-writers')
        throw new OrcError('invalid', 'writers: set-writers names the member clusters whose users write in the namespace (--writers home,cloud)', {
          field: 'writers',
        })
      return undefined
    }
    if (action !== 'share-namespace' && action !== 'set-writers')
      throw new OrcError('invalid', `writers: only a share-namespace or set-writers proposal names the clusters whose users write in the namespace`, {
        field: 'writers',
      })
    const list = Array.isArray(v) ? v : typeof v === 'string' ? v.split(',') : undefined
    if (list === undefined) throw new OrcError('invalid', 'writers: a list of member clusters (--writers home,cloud)', { field: 'writers' })
    const writers = [...new Set(list.map((w) => checkName('writers', typeof w === 'string' ? w.trim() : w)))].sort()
    const members = this.memberClusters(r)
    const strangers = writers.filter((w) => !members.includes(w))
    if (strangers.length > 0)
      throw new OrcError(
        'invalid',
        `writers: ${strangers.join(', ')} ${strangers.length === 1 ? 'is' : 'are'} not a member cluster of federation ${r.cfg.name} (members: ${members.join(', ')})`,
        {
          field: 'writers',
          clusters: strangers,
        },
      )
    return writers
  }

  /** `orc federation propose NAME admit|remove|quorum|share-namespace|unshare-namespace|set-writers TARGET [--writers a,b]`. */
  propose(
    name: string,
    action: unknown,
    target: unknown,
    author: string,
    opts: { writers?: unknown } = {},
  ): Promise<{ federation: FederationView; proposal: FederationProposalView }> {
    return this.serial(async () => {
      const r = this.mustRun(name)
      if (!isProposalAction(action))
        throw new OrcError(
          'invalid',
          `action: must be ${PROPOSAL_ACTIONS.slice(0, -1).join(', ')} or ${PROPOSAL_ACTIONS.at(-1)}, got ${JSON.stringify(action ?? null)}`,
        )
      const t =
        action === 'quorum'
          ? (() => {
              if (typeof target === 'string' && (target === 'default' || /^[1-9][0-9]?$/.test(target))) return target
              throw new OrcError(
                'invalid',
                `quorum: a number of approvals from 1 to 99, or default (any one for two clusters, a majority beyond), got ${JSON.stringify(target ?? null)}`,
              )
            })()
          : checkName(targetsNamespace(action) ? 'namespace' : 'cluster', target)
      await this.refreshGovernance(r)
      if (isNamespaceAction(action)) {
        const problem = this.namespaceChangeProblem(r, action, t)
        if (problem !== undefined) throw problem
      }
      const writers = this.writersOption(r, action, opts.writers)
      if (action === 'set-writers') {
        if (!r.cfg.namespaces.includes(t))
          throw new OrcError(
            'not_found',
            `namespace ${t} is not shared in federation ${name} (shared: ${r.cfg.namespaces.join(', ') || 'none'}): share it with --writers instead`,
            { namespace: t },
          )
        const cur = writersAt(r.gov, t, this.c.clock.now())
        if (cur !== undefined && cur.join() === writers!.join())
          throw new OrcError('conflict', `namespace ${t} of federation ${name} is written by the users of ${cur.join(', ')} already`, { namespace: t })
      }
      const live = r.store.get(clusterRef(t)) !== undefined && !r.directory.isRemovedCluster(t)
      if (action === 'remove') {
        if (t === r.cfg.cluster) throw new OrcError('invalid', `${t} is this cluster: use orc federation leave ${name}`)
        if (!live) throw new OrcError('not_found', `cluster ${t} is not in federation ${name}`, { cluster: t })
      }
      if (action === 'admit') {
        if (live) throw new OrcError('conflict', `cluster ${t} is already in federation ${name}`, { cluster: t })
        if (this.admissionOpen(r, t))
          throw new OrcError('conflict', `an admission of cluster ${t} already passed; it may join (orc federation token ${name})`, { cluster: t })
      }
      const now = this.c.clock.now()
      const pending = r.gov.proposals.find((p) => proposalState(p, now) === 'pending' && p.action === action && p.target === t)
      if (pending !== undefined)
        throw new OrcError('conflict', `proposal ${pending.id} (${action} ${t}) is pending already: orc federation approve ${name} ${pending.id}`, {
          proposal: pending.id,
        })
      const tagged = tagAuthor(author, r.cfg.cluster)
      const proposal = await this.proposeIn(r, action, t, tagged, writers)
      this.log.info({ federation: name, proposal: proposal.id, by: tagged, passed: proposal.passedAt !== undefined }, 'membership proposal')
      return { federation: this.view(r), proposal: proposalView(proposal, this.c.clock.now()) }
    })
  }

  /** The proposal `id` names, with the governance re-read; errors name a malformed or unknown id. */
  private async proposalOf(r: Running, name: string, id: unknown): Promise<Proposal> {
    if (typeof id !== 'string' || !PROPOSAL_ID.test(id))
      throw new OrcError('invalid', `proposal: an id like remove-cloud-1a2b3c (orc federation status ${name}), got ${JSON.stringify(id ?? null)}`)
    await this.refreshGovernance(r)
    const p = r.gov.proposals.find((x) => x.id === id)
    if (p === undefined) throw new OrcError('not_found', `proposal ${id} not found in federation ${name} (orc federation status ${name})`, { proposal: id })
    return p
  }

  /** `orc federation approve NAME PROPOSAL`: this cluster's approval, by an admin of it. */
  approve(name: string, proposalId: unknown, author: string): Promise<{ federation: FederationView; proposal: FederationProposalView }> {
    return this.serial(async () => {
      const r = this.mustRun(name)
      const p = await this.proposalOf(r, name, proposalId)
      const id = p.id
      const state = proposalState(p, this.c.clock.now())
      if (state !== 'pending')
        throw new OrcError(
          'conflict',
          state === 'expired'
            ? `proposal ${id} lapsed unpassed ${PROPOSAL_TTL_MS / 86_400_000} days after it was made: propose the change again`
            : `proposal ${id} ${state === 'passed' ? 'passed' : 'was withdrawn'} already`,
          { proposal: id, state },
        )
      if (p.approvals.some((a) => a.cluster === r.cfg.cluster))
        throw new OrcError(
          'conflict',
          `cluster ${r.cfg.cluster} approved proposal ${id} already (${p.approvals.length} of ${p.required}); an admin of another member cluster approves next`,
          {
            proposal: id,
          },
        )
      if (!p.members.includes(r.cfg.cluster))
        throw new OrcError('forbidden', `cluster ${r.cfg.cluster} was not a member when proposal ${id} was made: it cannot approve it`, { proposal: id })
      // This cluster cannot take the namespace into the federation (it shares it in another, say): it does not approve.
      if (isNamespaceAction(p.action)) {
        const problem = this.namespaceChangeProblem(r, p.action, p.target)
        if (problem !== undefined) throw problem
      }
      const tagged = tagAuthor(author, r.cfg.cluster)
      const now = this.c.clock.now()
      await r.store.patch(
        fedRef(name),
        [{ path: ['spec', 'proposals', id, 'approvals', r.cfg.cluster], value: { by: tagged, at: new Date(now).toISOString() } }],
        { author: tagged, reason: approveReason(id), now },
      )
      const proposal = await this.afterVote(r, id, tagged)
      this.log.info({ federation: name, proposal: id, by: tagged, passed: proposal.passedAt !== undefined }, 'membership proposal approved')
      return { federation: this.view(r), proposal: proposalView(proposal, this.c.clock.now()) }
    })
  }

  /** `orc federation withdraw NAME PROPOSAL`: an admin of the proposing cluster takes back a pending proposal. */
  withdraw(name: string, proposalId: unknown, author: string): Promise<{ federation: FederationView; proposal: FederationProposalView }> {
    return this.serial(async () => {
      const r = this.mustRun(name)
      const p = await this.proposalOf(r, name, proposalId)
      const id = p.id
      const now = this.c.clock.now()
      const state = proposalState(p, now)
      if (state !== 'pending') throw new OrcError('conflict', `proposal ${id} is ${state}: only a pending one can be withdrawn`, { proposal: id, state })
      if (p.proposer !== r.cfg.cluster)
        throw new OrcError('forbidden', `proposal ${id} was made by cluster ${p.proposer}: only an admin of it may withdraw it`, { proposal: id })
      const tagged = tagAuthor(author, r.cfg.cluster)
      await r.store.patch(fedRef(name), [{ path: ['spec', 'proposals', id, 'withdrawn'], value: { by: tagged, at: new Date(now).toISOString() } }], {
        author: tagged,
        reason: withdrawReason(id),
        now,
      })
      await this.refreshGovernance(r)
      const after = r.gov.proposals.find((x) => x.id === id)!
      this.log.info({ federation: name, proposal: id, by: tagged }, 'membership proposal withdrawn')
      return { federation: this.view(r), proposal: proposalView(after, this.c.clock.now()) }
    })
  }

  private byName(name: string): Running | undefined {
    return [...this.running.values()].find((r) => r.cfg.name === name)
  }

  private mustRun(name: string): Running {
    const r = this.byName(name)
    if (r === undefined) throw new OrcError('not_found', `federation ${name} not found on this node (orc federation list)`, { name })
    return r
  }

  private checkFree(name: string, namespaces: string[], exceptId?: string): void {
    const own = this.c.store.get(fedRef(name))
    if (own !== undefined && own.spec?.id !== exceptId) throw new OrcError('conflict', `this cluster is already in a federation named ${name}`, { name })
    for (const r of this.running.values()) {
      if (r.cfg.id === exceptId) continue
      const shared = namespaces.filter((n) => r.cfg.namespaces.includes(n))
      if (shared.length > 0) throw new OrcError('conflict', `namespace ${shared[0]} is already shared in federation ${r.cfg.name}`, { namespace: shared[0] })
    }
  }

  private view(r: Running): FederationView {
    const connected = new Set(
      r.mesh
        .members()
        .filter((m) => m.self || m.state === 'alive')
        .map((m) => m.peerId),
    )
    const byCluster = new Map<string, { members: number; connected: number }>()
    for (const m of r.directory.list()) {
      const c = clusterOfMemberName(m.name) ?? '?'
      const e = byCluster.get(c) ?? { members: 0, connected: 0 }
      e.members++
      if (connected.has(m.peerId)) e.connected++
      byCluster.set(c, e)
    }
    const clusters: FederationClusterView[] = r.store
      .list('Cluster')
      .filter((o) => !r.directory.isRemovedCluster(o.metadata.name))
      .map((o) => ({
        name: o.metadata.name,
        id: String(o.spec?.id ?? ''),
        self: o.metadata.name === r.cfg.cluster,
        ...(byCluster.get(o.metadata.name) ?? { members: 0, connected: 0 }),
      }))
    return {
      name: r.cfg.name,
      id: r.cfg.id,
      cluster: r.cfg.cluster,
      namespaces: r.cfg.namespaces,
      ...this.writersView(r),
      state: r.cfg.state,
      peerId: r.mesh.peerId,
      addresses: r.mesh.addresses(),
      joinAddresses: r.mesh.joinAddresses(),
      clusters,
      objects: r.store.count(),
      ...(r.directory.creator() !== undefined ? { creator: r.directory.creator() } : {}),
      governance: this.governanceView(r),
    }
  }

  private writersView(r: Running): { writers?: Record<string, string[]> } {
    const now = this.c.clock.now()
    const entries = r.cfg.namespaces.flatMap((ns) => {
      const w = writersAt(r.gov, ns, now)
      return w === undefined ? [] : [[ns, [...w]] as [string, string[]]]
    })
    return entries.length === 0 ? {} : { writers: Object.fromEntries(entries) }
  }

  private governanceView(r: Running): FederationGovernanceView {
    const n = this.memberClusters(r).length
    return {
      quorum: r.gov.quorum ?? 'default',
      admit: required('admit', n, r.gov.quorum),
      remove: required('remove', n, r.gov.quorum),
      proposals: r.gov.proposals.map((p) => proposalView(p, this.c.clock.now())),
    }
  }

  private async recordMembership(cfg: LocalState, author: string, reason: string): Promise<void> {
    const manifest: OrcObject = {
      apiVersion: API_VERSION,
      kind: 'Federation',
      // When this cluster joined: the cluster's other nodes removed with it follow a join after their removal.
      metadata: { name: cfg.name, annotations: { [JOINED_ANNOTATION]: new Date(this.c.clock.now()).toISOString() } },
      spec: { id: cfg.id, namespaces: cfg.namespaces, cluster: cfg.cluster },
    }
    await this.c.store.apply(manifest, { author, reason, now: this.c.clock.now() })
    // A record kept from an earlier membership may say what was shared then (status.namespaces).
    const status = this.c.store.get(fedRef(cfg.name))?.status?.namespaces
    if (status !== undefined && [...(status as string[])].sort().join() !== [...cfg.namespaces].sort().join())
      await this.c.store.patch(fedRef(cfg.name), [{ path: ['status', 'namespaces'], value: cfg.namespaces }], {
        author: FEDERATION_CONTROLLER,
        reason: `shared namespaces: ${cfg.namespaces.join(', ')}`,
        now: this.c.clock.now(),
      })
  }

  private async readState(id: string): Promise<LocalState | undefined> {
    try {
      return JSON.parse(await readFile(join(this.root, id, STATE_FILE), 'utf8')) as LocalState
    } catch {
      return undefined
    }
  }

  private async saveState(cfg: LocalState): Promise<void> {
    await writeFileAtomic(join(this.root, cfg.id, STATE_FILE), JSON.stringify(cfg, null, 2) + '\n')
  }

  private listenAddrs(port: number): string[] {
    const base = this.c.listen ?? ['/ip4/0.0.0.0/tcp/0']
    const out = base.filter((a) => /\/tcp\/\d+/.test(a)).map((a) => a.replace(/\/tcp\/\d+/, `/tcp/${port}`))
    return out.length > 0 ? out : [`/ip4/0.0.0.0/tcp/${port}`]
  }

  /** Open the federation's store and host: a new federation, a restart, or a join. */
  private async open(cfg: LocalState, how: { mode: 'create' } | { mode: 'start' } | { mode: 'join'; token: string; peerAddrs?: string[] }): Promise<Running> {
    // A new federation's id is known only once its host state exists: build in a scratch dir.
    let dir = join(this.root, how.mode === 'create' ? `.new-${process.pid}-${this.c.clock.now()}` : cfg.id)
    const meshDir = () => join(dir, 'mesh')
    const storeDir = () => join(dir, 'store')
    if (how.mode !== 'start' && existsSync(dir)) {
      if ((await this.readState(cfg.id))?.state === 'joined') throw new OrcError('conflict', `federation ${cfg.id} is already set up here`)
      // A federation left before: its old copy stays aside, this join starts afresh.
      await rename(dir, `${dir}.left-${this.c.clock.now()}`)
    }
    await mkdir(meshDir(), { recursive: true, mode: 0o700 })
    this.busy.add(cfg.id)
    let store: ObjectStore | undefined
    let mesh: Mesh | undefined
    try {
      const key = await loadOrCreateIdentity(meshDir(), this.c.random ?? systemRandom)
      const directory = new FederationDirectory(meshDir())
      store = await openStore({
        // Every revision signed with this node's federation key and checked on receipt by every
        // replica, as in the cluster's store (docs/security.md, "Federation scopes").
        signer: recordSigner(key),
        verifier: federationVerifier(directory),
        authorize: federationAuthorize(),
        dir: storeDir(),
        // Controllers of this cluster write as `controller:<name>@<cluster>` (scheduling.ts).
        ownership: clusterOwnership(cfg.cluster),
        // Derived from the federation peer id, so the other clusters can tell which cluster made
        // each revision (membership.ts).
        replicaId: replicaOfPeer(peerIdOf(key)),
        logger: this.c.logger.child({ module: 'store', federation: cfg.name || cfg.id }) as never,
      })
      const ourStore = store
      const opts: MeshOptions = {
        dataDir: meshDir(),
        name: `${this.c.nodeName}@${cfg.cluster}`,
        listen: this.listenAddrs(cfg.port ?? 0),
        // Its own join host, as a cluster node's: tokens and invites carry no PSK; the joiner gets it
        // there over Noise from the host the token names, once the token is redeemed (join.ts).
        joinListen: this.listenAddrs(cfg.joinPort ?? 0),
        // The host's own pod and tunnel networks: those of this node's cluster, not the federation's.
        privateRanges: () => unadvertisedRanges(this.c.cluster().id),
        scopes: { [FEDERATION_SCOPE]: verifiedReplica(ourStore, directory, { store: ourStore, now: () => this.c.clock.now() }) },
        members: directory,
        logger: this.c.logger.child({ federation: cfg.name || cfg.id }),
        clock: this.c.clock,
        ...(this.c.random !== undefined ? { random: this.c.random } : {}),
        tunables: this.c.tunables,
        vetJoiner: (info) => this.vetJoiner(cfg, directory, info),
        vetAdmission: (info, via) => directory.vetAdmission(info, via),
        memberApiHandler: (req, ctx) => this.serveMember(cfg, req, ctx.peerId),
      }
      if (how.mode === 'create') {
        const made = await createCluster(opts)
        mesh = made.mesh
        cfg.id = mesh.clusterId
        await mesh.stop().catch(() => undefined)
        mesh = undefined
        await store.close()
        store = undefined
        const final = join(this.root, cfg.id)
        await rename(dir, final)
        dir = final
        return await this.open(cfg, { mode: 'start' })
      }
      mesh = how.mode === 'join' ? await joinMesh({ ...opts, token: how.token, peerAddrs: how.peerAddrs }) : await startMesh(opts)
      if (how.mode === 'join') await this.learnBindings(mesh, directory, decodeToken(how.token).issuer)
      const portOf = (addrs: string[]) => Number(/\/tcp\/(\d+)/.exec(addrs[0] ?? '')?.[1])
      const port = portOf(mesh.addresses())
      if (Number.isInteger(port) && port > 0) cfg.port = port
      const joinPort = portOf(mesh.joinAddresses())
      if (Number.isInteger(joinPort) && joinPort > 0) cfg.joinPort = joinPort
      // The creating cluster, from the document as first seen (a federation made before it was recorded, or a join).
      if (directory.creator() === undefined) {
        const c = creatorOf(store)
        if (c !== undefined) await directory.setCreator(c)
      }
      const r: Running = { cfg, dir, mesh, store, directory, off: () => {}, gov: await governanceOf(store) }
      // A new cluster may be introduced by any member once its admission passed (governance.ts).
      directory.admitsNew = (c) => this.admissionOpen(r, c)
      // Governance is re-read when the Federation object changes or a Cluster object comes or goes
      // (not on every node summary written to one).
      let clusters = ''
      r.off = store.onChange((keys) => {
        const now = keys.some((k) => k.startsWith('Cluster/'))
          ? ourStore
              .list('Cluster')
              .map((o) => o.metadata.name)
              .join()
          : clusters
        if (now === clusters && !keys.some((k) => k.startsWith('Federation/'))) return
        clusters = now
        void this.serial(() => this.applyGovernance(r))
      })
      this.running.set(cfg.id, r)
      this.runningChanged()
      // A federation set up before namespaces could be shared later: what it shares is its base.
      cfg.base ??= [...cfg.namespaces]
      if (cfg.name !== '') {
        await this.saveState(cfg)
        await this.announce(r)
        // Shares and unshares that passed while this node was away (or before it followed in).
        void this.serial(() => this.applyGovernance(r)).catch((err) => this.log.warn({ err: (err as Error).message }, 'federation governance'))
      }
      return r
    } catch (err) {
      await mesh?.stop().catch(() => undefined)
      await store?.close().catch(() => undefined)
      if (how.mode !== 'start') await rm(dir, { recursive: true, force: true }).catch(() => undefined)
      if (err instanceof OrcError) throw err
      throw wrapError(how.mode === 'join' ? 'join federation' : how.mode === 'create' ? 'create federation' : `start federation ${cfg.name}`, err)
    } finally {
      this.busy.delete(cfg.id)
    }
  }

  /**
   * A joiner cannot verify revisions of replicas that left before it came (their members are gone,
   * so it never learns their clusters) and refuses the updates holding them. It asks the node that
   * admitted it — the creator's, or for a node following its cluster, its own cluster's — for the
   * bindings, then syncs again.
   */
  private async learnBindings(mesh: Mesh, directory: FederationDirectory, issuer: string): Promise<void> {
    try {
      const res = await mesh.memberRequest(issuer, { method: 'GET', path: '/v1/federation-bindings' }, { timeoutMs: 10_000 })
      const replicas = res.status === 200 ? (res.body as { replicas?: unknown } | null)?.replicas : undefined
      if ((await directory.importBindings(replicas)) > 0) await Promise.race([mesh.syncNow(), sleep(unrefTimers(this.c.clock), 5000)])
    } catch (err) {
      this.log.info({ err: (err as Error).message }, 'could not learn the federation replicas from the issuer; waiting for the members')
    }
  }

  /**
   * Issuer side of a join. A federation token admits a new cluster; a node claiming this
   * cluster's name needs an invite minted for it; a node of another cluster already in joins
   * through its own cluster's members, and a removed cluster is refused.
   */
  private async vetJoiner(cfg: LocalState, directory: FederationDirectory, info: MemberInfo): Promise<void> {
    const c = clusterOfMemberName(info.name)
    if (c === undefined || !isClusterName(c)) throw new OrcError('invalid', `federation member name ${info.name} names no cluster (want node@cluster)`)
    if (c === cfg.cluster) {
      const n = this.invites.get(cfg.id) ?? 0
      if (n <= 0) throw new OrcError('conflict', `a cluster named ${c} is already in this federation; join under another name with --as NAME`, { cluster: c })
      this.invites.set(cfg.id, n - 1)
      return
    }
    const r = this.running.get(cfg.id)
    if (r === undefined) throw new OrcError('unavailable', `federation ${cfg.name} is not running here`)
    await this.refreshGovernance(r)
    if (directory.membersOf(c).length > 0 || r.store.get(clusterRef(c)) !== undefined) {
      throw new OrcError(
        'conflict',
        `a cluster named ${c} is already in this federation (its nodes join through its own members; another cluster joins with --as NAME)`,
        { cluster: c },
      )
    }
    // Admitting a cluster needs its admission to have passed (governance.ts).
    if (this.admissionOpen(r, c)) {
      if (directory.isRemovedCluster(c)) await directory.readmit(c)
      return
    }
    const propose = `orc federation propose ${cfg.name} admit ${c}`
    if (directory.isRemovedCluster(c))
      throw new OrcError('forbidden', `cluster ${c} was removed from this federation; it joins again once its admission passes (${propose})`, { cluster: c })
    // A new cluster (or one that left): when this cluster's approval alone is the quorum (two
    // clusters or fewer, by default), the token's issuer proposes it now and it passes at once.
    const need = required('admit', this.memberClusters(r).length, r.gov.quorum)
    if (need > 1)
      throw new OrcError(
        'forbidden',
        `cluster ${c} is not admitted to federation ${cfg.name}: admitting a cluster needs ${need} approvals of member clusters (${propose}, then orc federation approve on others)`,
        { cluster: c, required: need },
      )
    await this.proposeIn(r, 'admit', c, tagAuthor(this.tokenAuthors.get(cfg.id) ?? 'user:unknown', r.cfg.cluster))
  }

  /** Clusters whose Cluster object went: drop their nodes; if it is ours, we were removed. */
  private async applyClusterRemovals(r: Running): Promise<void> {
    if (!this.running.has(r.cfg.id)) return
    for (const c of r.directory.knownClusters()) {
      if (r.store.get(clusterRef(c)) !== undefined || r.directory.isRemovedCluster(c)) continue
      // A member known but whose Cluster object never arrived yet is not removed: only a deletion counts,
      // by the cluster itself (it left) or by the creating cluster (it removed it).
      const hist = await r.store.history(clusterRef(c)).catch(() => [])
      const deletion = hist.filter((h) => h.op === 'delete').at(-1)
      if (deletion === undefined) continue
      // Admitted again since: that removal is over (the cluster writes its object again when it joins).
      if (this.admittedSince(r, c, deletion.time)) continue
      const by = clusterOfAuthor(deletion.author)
      const removal = r.gov.proposals.find(
        (p) => p.action === 'remove' && p.target === c && p.passedAt !== undefined && deletion.reason === removalReason(c, p.id),
      )
      if (by !== c && removal === undefined) {
        // Refused on receipt by every replica (governance.ts); only a modified agent of this node's own cluster writes one here.
        this.log.warn({ federation: r.cfg.name, cluster: c, by: deletion.author }, 'a cluster removal without the approvals of a passed proposal is ignored')
        // Our own Cluster object: put it back (its nodes' summaries follow from the publishers).
        if (c === r.cfg.cluster)
          await r.store
            .apply(
              { apiVersion: API_VERSION, kind: 'Cluster', metadata: { name: c }, spec: { id: this.c.cluster().id } },
              {
                author: `${FEDERATION_CONTROLLER}@${c}`,
                reason: `restored: removed by ${deletion.author} without a passed removal proposal`,
                now: this.c.clock.now(),
              },
            )
            .catch((err) => this.log.warn({ err: (err as Error).message }, 'restore this cluster in the federation'))
        continue
      }
      if (c === r.cfg.cluster) {
        this.log.warn({ federation: r.cfg.name }, 'this cluster was removed from the federation; keeping local copies')
        await this.detach(r, 'removed')
        return
      }
      const gone = await r.directory.removeCluster(c)
      for (const m of gone) await r.mesh.removeMember(m.peerId).catch(() => undefined)
      this.log.info({ federation: r.cfg.name, cluster: c, nodes: gone.length }, 'cluster removed from the federation')
    }
  }

  /** Stop replicating; copy the shared namespaces into the cluster's own scope so they stay usable here. */
  private async detach(r: Running, state: 'left' | 'removed'): Promise<void> {
    const now = this.c.clock.now()
    const copied = await this.keepCopies(r, r.cfg.namespaces, state)
    r.cfg.state = state
    r.cfg.detachedAt = now
    await this.saveState(r.cfg)
    await this.close(r)
    this.log.info({ federation: r.cfg.name, state, copied }, 'federation detached')
  }

  /**
   * Copy the federation's objects of `namespaces` into the cluster's own scope (they run here from
   * then on, as this cluster alone may run them); `why` goes in the reason (`kept from federation
   * lab (left)`). Returns how many were written.
   */
  private async keepCopies(r: Running, namespaces: readonly string[], why: string): Promise<number> {
    const now = this.c.clock.now()
    const ring = this.c.keyring?.()
    const canOpen = (secret: OrcObject) => ring !== undefined && [...keyIdsOf(secret as Secret)].every((id) => ring.get(id) !== undefined)
    const { copies, left } = keptObjects((kind) => r.store.list(kind), namespaces, r.cfg.cluster, r.cfg.name, why, canOpen)
    for (const l of left) this.log.info({ federation: r.cfg.name, ...l.ref, why: l.why }, 'not keeping a federated object')
    let copied = 0
    for (const { copy, reason } of copies) {
      try {
        const res = await this.c.store.apply(copy, { author: FEDERATION_CONTROLLER, reason, now })
        if (res.revision) copied++
      } catch (err) {
        const { kind, metadata } = copy
        this.log.warn({ err: (err as Error).message, kind, namespace: metadata.namespace, name: metadata.name }, 'could not keep a federated object')
      }
    }
    return copied
  }

  /**
   * The namespaces the federation shares as this node reads its governance: what it learned at
   * create or join with the passed shares and unshares applied; less any namespace another
   * federation shares here already (one federation per namespace: this cluster keeps it there).
   */
  private namespacesOf(r: Running): string[] {
    const all = sharedNamespaces(r.cfg.base ?? r.cfg.namespaces, r.gov)
    return all.filter((ns) => {
      const other = this.sharingElsewhere(r, ns)
      if (other === undefined) return true
      const key = `${r.cfg.id}/${ns}`
      if (!this.heldElsewhere.has(key)) {
        this.heldElsewhere.add(key)
        this.log.warn(
          { federation: r.cfg.name, namespace: ns, other: other.cfg.name },
          'a namespace shared by this federation is shared by another federation here already: this cluster keeps it in the other one',
        )
      }
      return false
    })
  }

  /**
   * A share or unshare passed (or this node learned of it): the namespaces this node routes to the
   * federation, runs the pods of and keeps dormant in the cluster's own scope follow. An unshared
   * namespace's objects are copied into the cluster's own scope first, as a leave does.
   */
  private async changeNamespaces(r: Running, next: string[]): Promise<void> {
    const before = r.cfg.namespaces
    const gone = before.filter((n) => !next.includes(n))
    const added = next.filter((n) => !before.includes(n))
    if (gone.length === 0 && added.length === 0) return
    const copied = gone.length > 0 ? await this.keepCopies(r, gone, `namespace ${gone.join(', ')} unshared`) : 0
    r.cfg.namespaces = next
    await this.saveState(r.cfg)
    // The cluster's record of the federation, which its other nodes follow (and orc get federations
    // shows): status.namespaces, what is shared now (spec.namespaces stays what was asked at create or join).
    const own = this.c.store.get(fedRef(r.cfg.name))
    if (own !== undefined && own.spec?.id === r.cfg.id && recordedNamespaces(own).join() !== next.join())
      await this.c.store
        .patch(fedRef(r.cfg.name), [{ path: ['status', 'namespaces'], value: next }], {
          author: FEDERATION_CONTROLLER,
          reason: `shared namespaces: ${next.join(', ')}`,
          now: this.c.clock.now(),
        })
        .catch((err) => this.log.warn({ err: (err as Error).message }, 'record the shared namespaces'))
    const why = [...added.map((n) => `namespace ${n} shared`), ...gone.map((n) => `namespace ${n} unshared`)].join(', ')
    if (r.announced) {
      await this.podHost
        ?.setScopeNamespaces(this.podScopeId(r), next, `federation ${r.cfg.name}: ${why}`)
        .catch((err) => this.log.error({ err, federation: r.cfg.name }, 'federated pods of the changed namespaces'))
      // The workload controllers see the namespaces' objects come or go from their first pass.
      const old = r.workloads ?? []
      r.workloads = []
      await Promise.all(old.map((w) => w.stop()))
      if (this.running.has(r.cfg.id)) this.startWorkloads(r)
    }
    this.runningChanged()
    this.log.info({ federation: r.cfg.name, namespaces: next, added, gone, copied }, 'shared namespaces changed')
  }

  private async close(r: Running): Promise<void> {
    this.running.delete(r.cfg.id)
    this.runningChanged()
    r.off()
    r.publisher?.stop()
    await Promise.all((r.workloads ?? []).map((w) => w.stop()))
    if (r.announced)
      await this.podHost
        ?.removeScope(this.podScopeId(r), `federation ${r.cfg.name} ${r.cfg.state === 'joined' ? 'stopped' : r.cfg.state}`)
        .catch(() => undefined)
    await r.mesh.stop().catch((err) => this.log.warn({ err }, 'stop federation mesh'))
    await r.store.close().catch((err) => this.log.warn({ err }, 'close federation store'))
  }

  private reconcileSoon(ms: number): void {
    if (this.stopped) return
    if (this.followTimer !== undefined) this.c.clock.clearTimeout(this.followTimer)
    this.followTimer = unrefTimers(this.c.clock).setTimeout(() => {
      this.followTimer = undefined
      void this.serial(() => this.reconcile()).catch((err) => this.log.warn({ err: (err as Error).message }, 'federation follow failed; retrying'))
    }, ms)
  }

  /** Make this node's federations match the cluster's record of them. */
  private async reconcile(): Promise<void> {
    if (this.stopped) return
    const wanted = new Map<string, OrcObject>()
    for (const o of this.c.store.list('Federation')) wanted.set(String(o.spec?.id ?? ''), o)
    for (const r of [...this.running.values()]) {
      if (!wanted.has(r.cfg.id) && !this.busy.has(r.cfg.id)) {
        this.log.info({ federation: r.cfg.name }, 'the cluster left this federation; detaching')
        await this.detach(r, 'left')
      }
    }
    let pending = false
    for (const [id, o] of wanted) {
      if (this.running.has(id)) continue
      const local = await this.readState(id)
      // Removed: stay out, unless the cluster joined again since (a token with --readmit).
      const joined = Date.parse(o.metadata.annotations?.[JOINED_ANNOTATION] ?? '')
      if (local?.state === 'removed' && !(joined > (local.detachedAt ?? Number.POSITIVE_INFINITY))) continue
      if (!(await this.follow(id, o))) pending = true
    }
    if (pending) this.reconcileSoon(this.c.followRetryMs ?? 3000)
  }

  /** Join a federation the cluster is in, with an invite from a node that holds it. */
  private async follow(id: string, o: OrcObject): Promise<boolean> {
    const cm = this.c.clusterMesh
    if (cm === undefined) return true
    const cluster = String(o.spec?.cluster ?? '')
    const peers = cm.members().filter((m) => !m.self && m.state === 'alive')
    for (const p of peers) {
      const res = await cm.memberRequest(p.peerId, { method: 'GET', path: `/v1/federation-invites/${id}` }, { timeoutMs: 10_000 }).catch(() => undefined)
      if (res?.status !== 200) continue
      const token = (res.body as { token?: unknown } | null)?.token
      if (typeof token !== 'string') continue
      const namespaces = recordedNamespaces(o)
      const cfg: LocalState = { id, name: o.metadata.name, cluster, namespaces, base: namespaces, state: 'joined' }
      try {
        await this.open(cfg, { mode: 'join', token: decodeFederationToken(token) })
        this.log.info({ federation: cfg.name, via: p.name }, 'following the cluster into the federation')
        return true
      } catch (err) {
        this.log.info({ federation: cfg.name, via: p.name, err: (err as Error).message }, 'joining the federation with an invite failed')
      }
    }
    return false
  }
}

/**
 * Who may sign the federation document's revisions: a member of the federation's mesh (as
 * `node@cluster`), or a node whose replica the directory binds to a cluster (members that left, or
 * clusters removed since: their revisions stay in the history a joiner syncs). The key is the
 * peer id's own (Ed25519).
 */
export function federationVerifier(directory: Pick<FederationDirectory, 'get' | 'clusterOfReplica'>): ReturnType<typeof peerKeyVerifier> {
  return peerKeyVerifier((id) => {
    const m = directory.get(id)
    if (m !== undefined) return { node: m.name }
    return directory.clusterOfReplica(replicaOfPeer(id)) !== undefined ? {} : undefined
  })
}
