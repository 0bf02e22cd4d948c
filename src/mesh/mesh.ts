/**
 * The mesh: composes identity, PSK, gater, join, sync, gossip, membership and the remote API on a
 * libp2p host. The protocol decisions live in the modules it wires (pure or channel-based); this
 * file owns timers, connections and event plumbing.
 */
import { EventEmitter } from 'node:events'
import type { Libp2pOptions } from 'libp2p'
import type { Connection, PeerId, PrivateKey, Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { TopicValidatorResult, type GossipSub, type Message } from '@libp2p/gossipsub'
import type { Logger } from 'pino'
import { OrcError, wrapError } from '../model/index.ts'
import type { Replicable } from '../store/index.ts'
import { initCluster, loadCluster, saveCluster, decodeAdminCredential, type ClusterState } from './cluster.ts'
import { AntiEntropyPlanner, antiEntropyTunables } from './antientropy.ts'
import { advertisableAddresses } from './address.ts'
import { createGater, type GatePolicy } from './gater.ts'
import { HEARTBEAT_PROTOCOL, MAX_MEMBER_MESSAGE_BYTES, decodeMemberMessage, encodeMemberMessage, membersTopic, storeTopic, type MemberMessage } from './gossip.ts'
import { createHost, streamChannel, type MeshLibp2p } from './host.ts'
import type { FrameChannel } from './framing.ts'
import { loadOrCreateIdentity, peerIdOf } from './identity.ts'
import { JOIN_PROTOCOL, joinRequestFromToken, requestJoin, serveJoin, type JoinProgress, type JoinResponse } from './join.ts'
import { JsonFileMemberDirectory, type MemberDirectory } from './members.ts'
import { MembershipTable, chooseConnections, type MemberInfo, type MemberTransition, type MemberView } from './membership.ts'
import { systemClock, systemRandom, unrefTimers, type Clock, type Random } from '../effects/index.ts'
import { defaultLogger, resolveTunables, type MeshTunables } from './options.ts'
import { API_PROTOCOL, callApi, serveApi, type ApiHandler, type ApiRequest, type ApiResponse } from './rpc.ts'
import { MEMBER_API_PROTOCOL, MEMBER_API_SERVE_MS, callMemberApi, serveMemberApi, type MemberApiHandler } from './member-api.ts'
import { encodePsk } from './psk.ts'
import { PeerScores } from './score.ts'
import { SYNC_PROTOCOL, applyFromPeer, initiateSync, respondSync, type SyncResult } from './sync.ts'
import { JsonFileTokenBook, TokenAuthority, checkTokenFresh, decodeToken, type IssueTokenOptions, type TokenBook, type TokenRecord } from './token.ts'
import { isPeerFault } from './wire.ts'

/** Anti-entropy sessions tried in a row for updates that wait for missing ones (Mesh.repairSoon). */
const REPAIR_ATTEMPTS = 5

export interface MeshOptions {
  dataDir: string
  /** Human name of this node (hostname by default in the agent). */
  name: string
  /** Listen multiaddrs; default `/ip4/0.0.0.0/tcp/0`. */
  listen?: string[]
  /** Addresses to advertise instead of the listen addresses (NAT, public IP). */
  announce?: string[]
  /**
   * Address ranges (CIDRs) of this node that other nodes cannot reach it at — its pod and tunnel
   * networks — never advertised (advertisableAddresses). A function of the cluster id: a joining
   * node learns the id from its token.
   */
  privateRanges?: (clusterId: string) => string[]
  /** Replicated stores by scope name (e.g. `{ cluster: store }`). More can be added with addScope. */
  scopes?: Record<string, Replicable>
  /** Who is admitted. Default: `<dataDir>/members.json`. */
  members?: MemberDirectory
  /** Join-token state on this node. Default: `<dataDir>/tokens.json`. */
  tokens?: TokenBook
  /** Called on the issuing node when a joiner is admitted (the agent records it in the store). */
  admitMember?: (peerId: string, info: MemberInfo) => Promise<void>
  /** The agent's local API handler, served to remote callers holding the admin credential. */
  apiHandler?: ApiHandler
  /**
   * Node-to-node requests (`/orc/member-api/1.0.0`), served to current members only. The handler
   * decides which routes a member may call (the agent allows only read-only internal ones).
   */
  memberApiHandler?: MemberApiHandler
  /** Let non-members holding the PSK call the api on probation (remote CLI). Default false. */
  acceptApiFromStrangers?: boolean
  clock?: Clock
  random?: Random
  transports?: Libp2pOptions['transports']
  logger?: Logger
  tunables?: Partial<MeshTunables>
  /** Fault injection for tests and the simulator: return true to drop an incoming store gossip message. */
  dropStoreGossip?: (fromPeer: string, scope: string) => boolean
  /**
   * Issuer side: check a joiner before its token is consumed (e.g. its name is free). Throw an
   * OrcError to refuse; its message is what the joiner sees.
   */
  vetJoiner?: (info: MemberInfo) => void | Promise<void>
  /**
   * Check a member learnt from another member (an announcement, or a sync session's member list)
   * before admitting it; `via` is the peer that told us. Default: admit. A federation uses it so a
   * cluster can only introduce its own nodes (docs/federation.md).
   */
  vetAdmission?: (info: MemberInfo, via: string) => boolean
}

export interface JoinOptions extends MeshOptions {
  token: string
  onProgress?: (p: JoinProgress) => void
  /** Addresses of the issuer the user named (`orc join ADDR`), dialed before the token's own. */
  peerAddrs?: string[]
}

export interface MeshEvents {
  /** A member changed liveness state. */
  'member:state': [MemberTransition]
  /** A peer id was admitted (by us or announced by another member). */
  'member:admitted': [MemberInfo]
  'member:removed': [string]
  /** A peer sent garbage; `banned` when its score fell below the threshold. */
  'peer:misbehaved': [{ peerId: string; reason: string; score: number; banned: boolean }]
  'sync:done': [{ peerId: string } & SyncResult]
  /** A heartbeat received from a member or sent: straight on its connection, or by gossip. */
  heartbeat: [{ peerId: string; direction: 'in' | 'out'; path: 'direct' | 'gossip' }]
}

type Listener<K extends keyof MeshEvents> = (...args: MeshEvents[K]) => void

/** Create a cluster in `dataDir` (`orc up`) and start its first node. */
export async function createCluster(opts: MeshOptions & { clusterId?: string }): Promise<{ mesh: Mesh; adminCredential: string }> {
  const clock = unrefTimers(opts.clock ?? systemClock)
  const random = opts.random ?? systemRandom
  const { adminCredential } = await initCluster({ dataDir: opts.dataDir, random, now: clock.now(), clusterId: opts.clusterId })
  const mesh = await startMesh(opts)
  return { mesh, adminCredential }
}

/** Start a node of the cluster already recorded in `dataDir` (restart, or after createCluster). */
export async function startMesh(opts: MeshOptions): Promise<Mesh> {
  const cluster = await loadCluster(opts.dataDir)
  if (cluster === undefined) {
    throw new OrcError('not_found', `data dir ${opts.dataDir} belongs to no cluster (run orc up or orc join first)`, {
      dataDir: opts.dataDir,
    })
  }
  const mesh = await Mesh.create(opts, cluster)
  await mesh.start()
  return mesh
}

/** Join the cluster a token invites to (`orc join`): dial the issuer, present the token, sync. */
export async function joinMesh(opts: JoinOptions): Promise<Mesh> {
  const clock = unrefTimers(opts.clock ?? systemClock)
  const claims = decodeToken(opts.token)
  checkTokenFresh(claims, clock.now())
  const existing = await loadCluster(opts.dataDir)
  if (existing !== undefined) {
    throw new OrcError('conflict', `data dir ${opts.dataDir} already belongs to cluster ${existing.clusterId}`, {
      dataDir: opts.dataDir,
    })
  }
  const say = opts.onProgress ?? (() => {})
  const joinStarted = clock.now()
  let meshLog: Logger | undefined
  const progress = (p: JoinProgress): void => {
    meshLog?.debug({ phase: p.phase, ms: clock.now() - joinStarted }, 'join progress')
    say(p)
  }
  const pending: ClusterState = {
    clusterId: claims.cluster,
    createdAt: 0,
    adminKeys: [],
    psk: new Uint8Array(Buffer.from(claims.psk, 'hex')),
  }
  const mesh = await Mesh.create(opts, pending, claims.issuer)
  meshLog = mesh.log
  const t = mesh.tunables
  let res: JoinResponse
  try {
    await mesh.libp2p.start()
    const addrs = [...new Set([...(opts.peerAddrs ?? []), ...claims.addrs])]
    progress({ phase: 'connecting', peer: claims.issuer, addresses: addrs })
    const issuer = peerIdFromString(claims.issuer)
    await mesh.libp2p.peerStore.merge(issuer, { multiaddrs: addrs.map((a) => multiaddr(a)) })
    const signal = AbortSignal.timeout(t.joinTimeoutMs)
    let stream: Stream
    try {
      await mesh.libp2p.dial(issuer, { signal: AbortSignal.any([signal, AbortSignal.timeout(t.dialTimeoutMs)]) })
      stream = await mesh.libp2p.dialProtocol(issuer, JOIN_PROTOCOL, { signal })
    } catch (err) {
      const why = /EOF|reset|closed/i.test(shortError(err))
        ? 'the issuer refused the connection (it has no join open: token used up, expired or revoked — or the token is from another cluster)'
        : shortError(err)
      throw new OrcError('unavailable', `dial ${claims.issuer} at ${addrs.join(', ') || '(no address)'}: ${why}`, {
        peer: claims.issuer,
      }, err)
    }
    progress({ phase: 'joining', peer: claims.issuer })
    const ch = streamChannel(stream, t.maxFrameBytes)
    res = await withDeadline(requestJoin(ch, joinRequestFromToken(claims, opts.name, mesh.addresses())), signal, () => ch.abort(new Error('join timed out')))
    if (res.clusterId !== claims.cluster) throw new OrcError('invalid', `issuer answered for cluster ${res.clusterId}, token is for ${claims.cluster}`)
  } catch (err) {
    await Promise.resolve(mesh.libp2p.stop()).catch(() => undefined)
    if (err instanceof OrcError && err.details.remote === true) throw wrapError('join refused by issuer', err)
    throw err instanceof OrcError ? err : wrapError('join cluster', err)
  }
  const cluster: ClusterState = { ...pending, createdAt: res.createdAt, adminKeys: res.adminKeys }
  await saveCluster(opts.dataDir, cluster)
  mesh.cluster = cluster
  for (const m of res.members) await mesh.admit(m, { announce: false })
  await mesh.admit({ peerId: mesh.peerId, name: opts.name, addresses: mesh.addresses() }, { announce: false })
  progress({ phase: 'admitted', clusterId: cluster.clusterId, members: res.members.length })
  await mesh.start()
  let revisions = 0
  for (const scope of mesh.scopeNames()) {
    // Everything the first session brings is what this new node lacked, not news to pass on.
    const r = await mesh.syncWith(claims.issuer, scope, { relay: false }).catch((err) => {
      mesh.log.warn({ err: shortError(err), scope }, 'initial sync failed; anti-entropy will retry')
      return undefined
    })
    revisions += r?.revisions ?? 0
    progress({ phase: 'syncing', scope, peer: claims.issuer, revisions: r?.revisions ?? 0 })
  }
  progress({ phase: 'ready', clusterId: cluster.clusterId, members: mesh.members().length, revisions })
  return mesh
}

function shortError(err: unknown): string {
  if (err instanceof Error) {
    if (err.name === 'TimeoutError' || err.name === 'AbortError') return 'timed out'
    const agg = (err as any).errors
    if (Array.isArray(agg) && agg.length > 0) return agg.map(shortError).join('; ')
    return err.message
  }
  return String(err)
}

function withDeadline<T>(p: Promise<T>, signal: AbortSignal, onAbort: () => void): Promise<T> {
  if (signal.aborted) {
    onAbort()
    return Promise.reject(new OrcError('unavailable', 'timed out'))
  }
  return new Promise<T>((resolve, reject) => {
    const abort = () => {
      onAbort()
      reject(new OrcError('unavailable', 'timed out'))
    }
    signal.addEventListener('abort', abort, { once: true })
    p.then(
      (v) => {
        signal.removeEventListener('abort', abort)
        resolve(v)
      },
      (e) => {
        signal.removeEventListener('abort', abort)
        reject(e)
      },
    )
  })
}

export class Mesh {
  readonly peerId: string
  readonly tunables: MeshTunables
  readonly log: Logger
  readonly authority: TokenAuthority
  cluster: ClusterState
  private readonly events = new EventEmitter()
  private readonly clock: Clock
  private readonly random: Random
  private readonly directory: MemberDirectory
  private readonly table: MembershipTable
  private readonly scores: PeerScores
  /** Out-of-turn anti-entropy: recovered members first, and relaying what a session brought in. */
  private readonly planner: AntiEntropyPlanner
  private readonly scopes = new Map<string, { store: Replicable; unsubscribe: () => void }>()
  private readonly probation = new Map<string, number>()
  private readonly syncing = new Set<string>()
  private readonly dialBackoff = new Map<string, { until: number; failures: number }>()
  private readonly timers = new Set<unknown>()
  private hbSeq = 0
  private started = false
  private stopped = false

  private constructor(
    readonly opts: MeshOptions,
    readonly libp2p: MeshLibp2p,
    privateKey: PrivateKey,
    cluster: ClusterState,
    private readonly joiningIssuer: string | undefined,
    deps: { clock: Clock; random: Random; tunables: MeshTunables; directory: MemberDirectory; authority: TokenAuthority; log: Logger; scores: PeerScores },
  ) {
    this.peerId = peerIdOf(privateKey)
    this.cluster = cluster
    this.clock = deps.clock
    this.random = deps.random
    this.tunables = deps.tunables
    this.directory = deps.directory
    this.authority = deps.authority
    this.log = deps.log
    this.scores = deps.scores
    this.table = new MembershipTable(this.peerId, this.tunables)
    this.planner = new AntiEntropyPlanner(
      antiEntropyTunables(this.tunables),
      (n) => this.randomInt(n),
      this.clock.now(),
    )
    this.events.setMaxListeners(100)
  }

  static async create(opts: MeshOptions, cluster: ClusterState, joiningIssuer?: string): Promise<Mesh> {
    const clock = unrefTimers(opts.clock ?? systemClock)
    const random = opts.random ?? systemRandom
    const tunables = resolveTunables(opts.tunables)
    const log = (opts.logger ?? defaultLogger()).child({ module: 'mesh' })
    const privateKey = await loadOrCreateIdentity(opts.dataDir, random)
    const directory = opts.members ?? JsonFileMemberDirectory.inDataDir(opts.dataDir)
    await directory.load()
    const authority = new TokenAuthority(opts.tokens ?? JsonFileTokenBook.inDataDir(opts.dataDir), clock, random)
    const scores = new PeerScores(tunables)
    // The gater and gossip score need the Mesh, which needs the host: late-bind through `self`.
    let self: Mesh | undefined
    const policy: GatePolicy = {
      isMember: (p) => self?.isMember(p) ?? false,
      isBanned: (p) => scores.isBanned(p, clock.now()),
      mayDial: (p) => p === joiningIssuer && self?.started !== true,
      acceptsStrangers: async () => opts.acceptApiFromStrangers === true || (await authority.joinWindowOpen(tunables.tokenGraceMs)),
      startProbation: (p) => self?.startProbation(p) ?? false,
    }
    const libp2p = await createHost({
      privateKey,
      psk: encodePsk(cluster.psk),
      listen: opts.listen ?? ['/ip4/0.0.0.0/tcp/0'],
      announce: opts.announce,
      gater: createGater(policy),
      tunables,
      transports: opts.transports,
      // Strangers (probation) sit below the publish and gossip thresholds, so nothing of ours
      // reaches them, but above graylist so their subscriptions are still heard for when they are
      // admitted. Banned peers are graylisted outright.
      appSpecificScore: (p) => (scores.isBanned(p, clock.now()) ? -1000 : self?.isMember(p) === true ? 0 : -60),
    })
    self = new Mesh(opts, libp2p, privateKey, cluster, joiningIssuer, { clock, random, tunables, directory, authority, log, scores })
    for (const m of directory.list()) self.table.upsert(m, clock.now())
    await self.installHandlers()
    return self
  }

  // ---- public surface -------------------------------------------------------------------------

  get clusterId(): string {
    return this.cluster.clusterId
  }

  /** Addresses other nodes can dial this node at (multiaddrs without /p2p; advertisableAddresses). */
  addresses(): string[] {
    const out = new Set<string>()
    for (const ma of this.libp2p.getMultiaddrs()) out.add(ma.toString().replace(/\/p2p\/[^/]+$/, ''))
    const named = [...(this.opts.listen ?? []), ...(this.opts.announce ?? [])]
    return advertisableAddresses([...out], named, this.opts.privateRanges?.(this.clusterId) ?? [])
  }

  members(): MemberView[] {
    const connected = new Set(this.connectedMembers())
    return this.table.view(this.clock.now()).map((m) => (m.self ? m : { ...m, connected: connected.has(m.peerId) }))
  }

  isMember(peerId: string): boolean {
    return this.directory.has(peerId)
  }

  scopeNames(): string[] {
    return [...this.scopes.keys()]
  }

  on<K extends keyof MeshEvents>(event: K, fn: Listener<K>): () => void {
    this.events.on(event, fn as (...a: unknown[]) => void)
    return () => this.events.off(event, fn as (...a: unknown[]) => void)
  }

  async createToken(opts: IssueTokenOptions): Promise<{ token: string; id: string; expiresAt: number; uses: number }> {
    const { token, record } = await this.authority.issue(opts, {
      clusterId: this.clusterId,
      psk: this.cluster.psk,
      issuer: this.peerId,
      addrs: this.opts.announce ?? this.addresses(),
    })
    this.log.info({ id: record.id, expiresAt: record.expiresAt, uses: record.uses }, 'join token created')
    return { token, id: record.id, expiresAt: record.expiresAt, uses: record.uses }
  }

  revokeToken(id: string): Promise<TokenRecord> {
    return this.authority.revoke(id)
  }

  listTokens(): Promise<TokenRecord[]> {
    return this.authority.list()
  }

  /**
   * Admit a peer id (the agent calls this when the store gains a node; the mesh calls it on a
   * successful join and on announcements from other members).
   */
  async admit(info: MemberInfo, opts: { announce?: boolean } = {}): Promise<void> {
    const known = this.directory.has(info.peerId)
    await this.directory.add(info)
    this.table.upsert(info, this.clock.now())
    this.probation.delete(info.peerId)
    if (!known) {
      this.log.info({ peer: info.peerId, name: info.name }, 'member admitted')
      this.events.emit('member:admitted', info)
      if (this.started) this.forgetStrangerScore(info.peerId)
      // Gossip from it was ignored while it was unknown: catch up with it directly. (Only then: a
      // fresh joiner has no store yet, and syncs with everyone it connects to anyway.)
      if (this.ignoredSenders.delete(info.peerId) && this.started && this.libp2p.getConnections(peerIdFromString(info.peerId)).length > 0) {
        this.syncSoon(info.peerId)
      }
      if (opts.announce === true && this.started) await this.publishMembers({ t: 'admit', member: info })
    }
  }

  /** Remove a member: forget it, refuse its connections, close the open ones. */
  async removeMember(peerId: string): Promise<void> {
    if (peerId === this.peerId) throw new OrcError('invalid', 'a node cannot remove itself from the mesh')
    await this.directory.remove(peerId)
    // Its join tokens go too: a removed node replaying the token it joined with is refused.
    const revoked = await this.authority.revokeUsedBy(peerId)
    if (revoked.length > 0) this.log.info({ peer: peerId, tokens: revoked }, 'revoked the join tokens of a removed member')
    this.directHeartbeatAt.delete(peerId)
    if (this.table.remove(peerId)) this.events.emit('member:removed', peerId)
    await this.libp2p.hangUp(peerIdFromString(peerId)).catch(() => undefined)
  }

  addScope(scope: string, store: Replicable): void {
    if (this.scopes.has(scope)) throw new OrcError('conflict', `scope ${scope} is already replicated`)
    const topic = storeTopic(this.clusterId, scope)
    const pubsub = this.libp2p.services.pubsub
    const unsubscribe = store.onLocalUpdate((update) => void this.publishUpdate(scope, topic, update))
    this.scopes.set(scope, { store, unsubscribe })
    pubsub.topicValidators.set(topic, (peer, msg) => this.validateStoreMessage(scope, store, peer, msg))
    pubsub.subscribe(topic)
  }

  /** Run anti-entropy now with every connected member (or one peer), all scopes. */
  async syncNow(peerId?: string): Promise<SyncResult[]> {
    const peers = peerId !== undefined ? [peerId] : this.connectedMembers()
    const out: SyncResult[] = []
    for (const p of peers) {
      for (const scope of this.scopeNames()) {
        const r = await this.syncWith(p, scope).catch((err) => {
          this.log.debug({ peer: p, scope, err: shortError(err) }, 'sync failed')
          return undefined
        })
        if (r !== undefined) out.push(r)
      }
    }
    return out
  }

  /**
   * One anti-entropy session with `peerId` for `scope`, initiated by us. `relay: false` keeps what
   * it brings in from being passed on (a joiner's first session).
   */
  async syncWith(peerId: string, scope: string, opts: { relay?: boolean } = {}): Promise<SyncResult> {
    const entry = this.scopes.get(scope)
    if (entry === undefined) throw new OrcError('not_found', `scope ${scope} is not replicated here`)
    const key = `${peerId}\u0000${scope}`
    if (this.syncing.has(key)) throw new OrcError('conflict', `sync with ${peerId} for ${scope} already running`)
    this.syncing.add(key)
    const signal = AbortSignal.timeout(this.tunables.syncTimeoutMs)
    const t0 = this.clock.now()
    let stream: Stream | undefined
    try {
      stream = await this.libp2p.dialProtocol(peerIdFromString(peerId), SYNC_PROTOCOL, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(this.tunables.dialTimeoutMs)]),
      })
      const ch = streamChannel(stream, this.tunables.maxFrameBytes)
      const r = await withDeadline(initiateSync(ch, scope, entry.store, this.directory.list(), this.tunables), signal, () =>
        ch.abort(new Error('sync timed out')),
      )
      await this.afterSync(peerId, r, opts.relay ?? true)
      this.log.debug({ peer: peerId, scope, ms: this.clock.now() - t0, sent: r.sentBytes, received: r.receivedBytes }, 'sync done')
      return r
    } catch (err) {
      if (isPeerFault(err)) await this.misbehaved(peerId, (err as Error).message)
      else stream?.abort(err instanceof Error ? err : new Error(String(err)))
      throw err
    } finally {
      this.syncing.delete(key)
    }
  }

  /** Call the remote API of `peerId` (a connected or known member). */
  async request(peerId: string, req: ApiRequest, credential?: string | PrivateKey): Promise<ApiResponse> {
    const key = typeof credential === 'string' ? decodeAdminCredential(credential) : credential
    const signal = AbortSignal.timeout(this.tunables.apiTimeoutMs)
    let stream: Stream
    try {
      stream = await this.libp2p.dialProtocol(peerIdFromString(peerId), API_PROTOCOL, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(this.tunables.dialTimeoutMs)]),
      })
    } catch (err) {
      throw new OrcError('unavailable', `dial ${peerId} for the api: ${shortError(err)}`, { peer: peerId }, err)
    }
    const ch = streamChannel(stream, this.tunables.maxApiBytes)
    return withDeadline(callApi(ch, req, key, peerId), signal, () => ch.abort(new Error('api call timed out')))
  }

  /**
   * A node-to-node request to member `peerId` (`/orc/member-api/1.0.0`): no credential, the
   * member's own handler decides what a member may ask. `timeoutMs` bounds the whole call (a log
   * long-poll needs more than the default api timeout).
   */
  async memberRequest(peerId: string, req: ApiRequest, opts: { timeoutMs?: number } = {}): Promise<ApiResponse> {
    const signal = AbortSignal.timeout(opts.timeoutMs ?? this.tunables.apiTimeoutMs)
    let stream: Stream
    try {
      stream = await this.libp2p.dialProtocol(peerIdFromString(peerId), MEMBER_API_PROTOCOL, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(this.tunables.dialTimeoutMs)]),
      })
    } catch (err) {
      throw new OrcError('unavailable', `dial ${peerId}: ${shortError(err)}`, { peer: peerId }, err)
    }
    const ch = streamChannel(stream, this.tunables.maxApiBytes)
    try {
      return await withDeadline(callMemberApi(ch, req), signal, () => ch.abort(new Error('member request timed out')))
    } catch (err) {
      if (err instanceof OrcError) throw err
      throw new OrcError('unavailable', `request to ${peerId}: ${shortError(err)}`, { peer: peerId }, err)
    }
  }

  async start(): Promise<void> {
    if (this.started) return
    if (this.libp2p.status !== 'started') await this.libp2p.start()
    this.started = true
    await this.admit({ peerId: this.peerId, name: this.opts.name, addresses: this.addresses() }).catch(() => undefined)
    const pubsub = this.libp2p.services.pubsub
    const mt = membersTopic(this.clusterId)
    pubsub.topicValidators.set(mt, (peer, msg) => this.validateMemberMessage(peer, msg))
    pubsub.subscribe(mt)
    for (const [scope, store] of Object.entries(this.opts.scopes ?? {})) if (!this.scopes.has(scope)) this.addScope(scope, store)
    this.every(this.tunables.heartbeatIntervalMs, () => this.heartbeat())
    this.every(this.tunables.maintainIntervalMs, () => this.maintain())
    this.every(this.tunables.syncIntervalMs, () => this.syncRound())
    void this.maintain()
  }

  async stop(): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    for (const t of this.timers) this.clock.clearTimeout(t)
    this.timers.clear()
    for (const s of this.scopes.values()) s.unsubscribe()
    await this.libp2p.stop()
  }

  // ---- internals ------------------------------------------------------------------------------

  private every(ms: number, fn: () => Promise<void> | void): void {
    const run = () => {
      this.timers.delete(handle)
      if (this.stopped) return
      Promise.resolve()
        .then(fn)
        .catch((err) => this.log.warn({ err: shortError(err) }, 'periodic task failed'))
        .finally(() => {
          if (!this.stopped) {
            handle = this.clock.setTimeout(run, ms)
            this.timers.add(handle)
          }
        })
    }
    let handle = this.clock.setTimeout(run, ms)
    this.timers.add(handle)
  }

  private startProbation(peerId: string): boolean {
    const now = this.clock.now()
    for (const [p, until] of this.probation) if (until <= now) this.probation.delete(p)
    if (this.probation.has(peerId)) return true
    if (this.probation.size >= this.tunables.maxProbationPeers) return false
    this.probation.set(peerId, now + this.tunables.probationMs)
    return true
  }

  /** The remote peer of an inbound stream when it is a member; a stranger's stream is refused. */
  private memberOf(stream: Stream, conn: Connection): string | undefined {
    const remote = conn.remotePeer.toString()
    if (this.isMember(remote)) return remote
    stream.abort(new Error('not a member'))
    return undefined
  }

  /** A uniform integer in [0, n) from the injected random source. */
  private randomInt(n: number): number {
    const b = this.random(4)
    return (((b[0]! << 24) | (b[1]! << 16) | (b[2]! << 8) | b[3]!) >>> 0) % Math.max(1, n)
  }

  /**
   * The periodic anti-entropy round: one session with one connected member picked at random, a
   * push-pull epidemic as in Serf and as the simulator models it (netsim/sim.ts; heal within 3
   * periods there, with what a session brings in relayed on gossip). Syncing with every connected
   * member each period cost each node O(N) sessions per period, in a burst (docs/benchmarks.md).
   * New connections still sync at once, and `syncNow()` still syncs with everyone.
   */
  private async syncRound(): Promise<void> {
    const peers = this.connectedMembers()
    if (peers.length === 0) return
    await this.syncNow(peers[this.randomInt(peers.length)]!)
  }

  private connectedMembers(): string[] {
    const out = new Set<string>()
    for (const c of this.libp2p.getConnections()) {
      const p = c.remotePeer.toString()
      if (p !== this.peerId && this.isMember(p)) out.add(p)
    }
    return [...out]
  }

  private async installHandlers(): Promise<void> {
    const t = this.tunables
    this.libp2p.addEventListener('connection:open', (evt) => this.onConnectionOpen(evt.detail))
    this.libp2p.addEventListener('peer:connect', (evt) => this.onPeerConnect(evt.detail))

    await this.libp2p.handle(
      JOIN_PROTOCOL,
      async (stream, conn) => {
        const remote = conn.remotePeer.toString()
        const ch = streamChannel(stream, 64 * 1024)
        try {
          await serveJoin(
            ch,
            {
              authority: this.authority,
              cluster: this.cluster,
              scopes: () => this.scopeNames(),
              members: () => this.directory.list(),
              vet: this.opts.vetJoiner,
              admit: async (info) => {
                await this.admit(info, { announce: true })
                await this.opts.admitMember?.(info.peerId, info)
              },
            },
            remote,
          )
          this.log.info({ peer: remote, name: conn.remotePeer.toString() }, 'peer joined')
        } catch (err) {
          this.log.info({ peer: remote, err: shortError(err) }, 'join refused')
          if (!this.isMember(remote)) this.closeSoon(conn)
        }
      },
      { maxInboundStreams: 4 },
    )

    await this.libp2p.handle(
      HEARTBEAT_PROTOCOL,
      async (stream, conn) => {
        const remote = this.memberOf(stream, conn)
        if (remote === undefined) return
        const ch = streamChannel(stream, MAX_MEMBER_MESSAGE_BYTES)
        try {
          for (;;) {
            const frame = await ch.read()
            if (frame === null) return
            const m = decodeMemberMessage(frame)
            if (m === undefined || m.t !== 'hb') {
              ch.abort(new Error('not a heartbeat'))
              await this.misbehaved(remote, 'undecodable heartbeat')
              return
            }
            // Removed while the stream was open: its heartbeats no longer count.
            if (!this.isMember(remote)) {
              ch.abort(new Error('not a member'))
              return
            }
            await this.onHeartbeat(remote, m, 'direct')
          }
        } catch (err) {
          if (isPeerFault(err)) await this.misbehaved(remote, (err as Error).message)
          else this.log.debug({ peer: remote, err: shortError(err) }, 'heartbeat stream ended')
        }
      },
      { maxInboundStreams: 4 },
    )

    await this.libp2p.handle(
      SYNC_PROTOCOL,
      async (stream, conn) => {
        const remote = this.memberOf(stream, conn)
        if (remote === undefined) return
        const ch = streamChannel(stream, t.maxFrameBytes)
        const signal = AbortSignal.timeout(t.syncTimeoutMs)
        try {
          const r = await withDeadline(
            respondSync(ch, (s) => this.scopes.get(s)?.store, this.directory.list(), t),
            signal,
            () => ch.abort(new Error('sync timed out')),
          )
          await this.afterSync(remote, r, true)
        } catch (err) {
          if (isPeerFault(err)) await this.misbehaved(remote, (err as Error).message)
          else {
            this.log.debug({ peer: remote, err: shortError(err) }, 'sync (responder) failed')
            ch.abort(err instanceof Error ? err : new Error(String(err)))
          }
        }
      },
      { maxInboundStreams: 16 },
    )

    await this.libp2p.handle(
      API_PROTOCOL,
      async (stream, conn) => {
        const remote = conn.remotePeer.toString()
        if (!this.isMember(remote) && this.opts.acceptApiFromStrangers !== true) {
          stream.abort(new Error('not a member'))
          return
        }
        const ch = streamChannel(stream, t.maxApiBytes)
        const handler: ApiHandler =
          this.opts.apiHandler ??
          (async () => ({ status: 503, body: { error: { code: 'unavailable', message: 'this node serves no API' } } }))
        try {
          await withDeadline(
            serveApi(ch, { selfPeerId: this.peerId, adminKeys: () => this.cluster.adminKeys, random: this.random, handler }, remote),
            AbortSignal.timeout(t.apiTimeoutMs),
            () => ch.abort(new Error('api call timed out')),
          )
        } catch (err) {
          this.log.info({ peer: remote, err: shortError(err) }, 'api request failed')
          if (!this.isMember(remote)) this.closeSoon(conn)
        }
      },
      { maxInboundStreams: 32 },
    )

    await this.libp2p.handle(
      MEMBER_API_PROTOCOL,
      async (stream, conn) => {
        const remote = conn.remotePeer.toString()
        const handler = this.opts.memberApiHandler
        // Members only: strangers on probation (join, remote CLI) never reach it, removed peers
        // are not members.
        if (!this.isMember(remote) || handler === undefined) {
          stream.abort(new Error(handler === undefined ? 'no member api here' : 'not a member'))
          return
        }
        const ch = streamChannel(stream, t.maxApiBytes)
        try {
          await withDeadline(serveMemberApi(ch, handler, remote, t.maxApiBytes), AbortSignal.timeout(MEMBER_API_SERVE_MS), () =>
            ch.abort(new Error('member request timed out')),
          )
        } catch (err) {
          if (isPeerFault(err)) await this.misbehaved(remote, (err as Error).message)
          else this.log.debug({ peer: remote, err: shortError(err) }, 'member request failed')
        }
      },
      { maxInboundStreams: 32 },
    )
  }

  private onConnectionOpen(conn: Connection): void {
    const remote = conn.remotePeer.toString()
    if (this.isMember(remote) || remote === this.joiningIssuer) return
    const until = this.probation.get(remote) ?? this.clock.now() + this.tunables.probationMs
    const h = this.clock.setTimeout(() => {
      this.timers.delete(h)
      if (!this.isMember(remote)) {
        this.probation.delete(remote)
        this.log.debug({ peer: remote }, 'probation over; closing')
        conn.abort(new Error('probation over'))
      }
    }, Math.max(0, until - this.clock.now()))
    this.timers.add(h)
  }

  private onPeerConnect(peer: PeerId): void {
    const remote = peer.toString()
    if (!this.started || !this.isMember(remote)) return
    this.dialBackoff.delete(remote)
    // Both sides see the connection; the lower peer id starts anti-entropy so it runs once.
    if (this.peerId < remote) {
      void this.syncNow(remote)
    }
  }

  private readonly syncPending = new Set<string>()

  /** Anti-entropy with one peer shortly (debounced), e.g. after ignoring its gossip. */
  private syncSoon(peerId: string): void {
    if (this.syncPending.has(peerId) || this.stopped) return
    this.syncPending.add(peerId)
    this.later(() => {
      this.syncPending.delete(peerId)
      void this.syncNow(peerId)
    }, 100)
  }

  private closeSoon(conn: Connection): void {
    // Give the error frame a moment to leave before the connection goes.
    const h = this.clock.setTimeout(() => {
      this.timers.delete(h)
      void conn.close().catch(() => conn.abort(new Error('closed')))
    }, 200)
    this.timers.add(h)
  }

  private async afterSync(peerId: string, r: SyncResult, relay: boolean): Promise<void> {
    const tr = this.table.heard(peerId, this.clock.now())
    if (tr !== undefined) this.emitTransition(tr)
    for (const m of r.remoteMembers) {
      if (!this.directory.has(m.peerId) && (this.opts.vetAdmission?.(m, peerId) ?? true)) await this.admit(m)
    }
    // Revisions new here may be stranded on a few nodes (a partition, lost gossip): pass them on.
    if (this.planner.sessionDone(peerId, r, this.clock.now()) && relay && !this.stopped) {
      const entry = this.scopes.get(r.scope)
      if (entry !== undefined) {
        this.log.debug({ peer: peerId, scope: r.scope, revisions: r.revisions, bytes: r.receivedBytes }, 'relaying what sync brought in')
        void this.publishUpdate(r.scope, storeTopic(this.clusterId, r.scope), r.received)
      }
    }
    if (r.incomplete) this.repairSoon(r.scope, [])
    this.events.emit('sync:done', { peerId, ...r })
  }

  private async misbehaved(peerId: string, reason: string): Promise<void> {
    const now = this.clock.now()
    const banned = this.scores.penalise(peerId, this.tunables.garbagePenalty, now)
    const score = this.scores.score(peerId)
    this.log.warn({ peer: peerId, reason: reason.slice(0, 200), score, banned }, 'peer sent garbage; disconnecting')
    this.events.emit('peer:misbehaved', { peerId, reason, score, banned })
    await this.libp2p.hangUp(peerIdFromString(peerId)).catch(() => undefined)
  }

  private async publishUpdate(scope: string, topic: string, update: Uint8Array): Promise<void> {
    if (this.stopped) return
    if (update.length > this.tunables.maxGossipBytes) {
      // Too big for one gossip message: let anti-entropy carry it now.
      void this.syncNow()
      return
    }
    try {
      const { recipients } = await this.libp2p.services.pubsub.publish(topic, update)
      // A connected member the publish did not go to (it has not told us its subscriptions yet:
      // right after a join or a reconnect) gets the update by anti-entropy. Otherwise it may get it
      // from nobody (members do not forward what its author sent them directly, see forwards()),
      // and every later update of ours would wait there for this one.
      const reached = new Set(recipients.map((p) => p.toString()))
      for (const p of this.connectedMembers()) if (!reached.has(p)) this.syncSoon(p)
    } catch (err) {
      this.log.debug({ scope, err: shortError(err) }, 'publish failed; anti-entropy will carry it')
    }
  }

  /** Scopes being repaired (see repairSoon), with the attempts made. */
  private readonly repairs = new Map<string, { attempts: number; until?: number }>()

  /**
   * Our store holds updates of `scope` that wait for earlier ones we never received (published
   * before anyone listened, or lost): they stay invisible until those arrive. Rather than wait for
   * the next anti-entropy period (and in a partial mesh, for a session with a member that has
   * them), sync now: first with each of `prefer` in turn, connected or not (the update's author has
   * everything it built on; the forwarder had it), then with random connected members, a few
   * times, until nothing is missing. A gap that outlasts that is left to the periodic rounds.
   */
  private repairSoon(scope: string, prefer: readonly string[]): void {
    const now = this.clock.now()
    const current = this.repairs.get(scope)
    if (this.stopped || (current !== undefined && (current.until === undefined || current.until > now))) return
    const state: { attempts: number; until?: number } = { attempts: 0 }
    this.repairs.set(scope, state)
    const attempt = async (candidates: readonly string[]): Promise<void> => {
      // The preferred peers first, connected or not (syncWith dials a member we are not connected
      // to: in a partial mesh the author is often one of those), then random connected members.
      const [first, ...rest] = candidates.filter((p) => p !== this.peerId && this.isMember(p))
      const connected = this.connectedMembers()
      const peer = first ?? connected[this.randomInt(connected.length)]
      const r = peer === undefined || this.stopped ? undefined : await this.syncWith(peer, scope).catch(() => undefined)
      state.attempts++
      if (r !== undefined && !r.incomplete) {
        this.repairs.delete(scope)
        return
      }
      if (state.attempts >= REPAIR_ATTEMPTS || this.stopped) {
        // Give the periodic rounds a period before trying again.
        state.until = this.clock.now() + this.tunables.syncIntervalMs
        this.log.debug({ scope, attempts: state.attempts }, 'updates still missing; left to periodic anti-entropy')
        return
      }
      this.later(() => attempt(rest), this.tunables.maintainIntervalMs)
    }
    this.later(() => attempt(prefer), 50)
  }

  /** Run `fn` after `ms` unless the mesh stops first. */
  private later(fn: () => Promise<void> | void, ms: number): void {
    const h = this.clock.setTimeout(() => {
      this.timers.delete(h)
      if (!this.stopped) void fn()
    }, ms)
    this.timers.add(h)
  }

  private async publishMembers(m: Parameters<typeof encodeMemberMessage>[0]): Promise<void> {
    try {
      await this.libp2p.services.pubsub.publish(membersTopic(this.clusterId), encodeMemberMessage(m))
    } catch (err) {
      this.log.debug({ err: shortError(err) }, 'member publish failed')
    }
  }

  private async validateStoreMessage(scope: string, store: Replicable, peer: PeerId, msg: Message): Promise<TopicValidatorResult> {
    const source = peer.toString()
    if (msg.type !== 'signed') return TopicValidatorResult.Ignore
    if (!this.isMember(msg.from.toString())) {
      // Our member list lags the sender's (its admission has not reached us yet). Ignore — do not
      // punish — and pull the data by anti-entropy from whoever forwarded it, once it is a member.
      if (this.ignoredSenders.size < 1024) this.ignoredSenders.add(msg.from.toString())
      if (this.isMember(source)) this.syncSoon(source)
      return TopicValidatorResult.Ignore
    }
    if (this.opts.dropStoreGossip?.(source, scope) === true) return TopicValidatorResult.Ignore
    if (msg.data.length > this.tunables.maxGossipBytes) {
      await this.misbehaved(source, `gossip message of ${msg.data.length} bytes`)
      return TopicValidatorResult.Reject
    }
    // Accept (gossipsub forwards) once the update passed the store's checks and is merged in
    // memory; its fsync goes on meanwhile. Waiting for it at every hop put the disk's latency tail
    // on each hop of a two-hop path (docs/benchmarks.md). A failure to persist after that is this
    // node's disk, not the sender's fault: logged, and anti-entropy brings the update again.
    let merged!: () => void
    let accepted = false
    const inMemory = new Promise<void>((r) => (merged = r))
    const durable = applyFromPeer(store, msg.data, 'a gossip update', {
      onApplied: () => {
        accepted = true
        merged()
      },
    })
    durable.then(
      (applied) => {
        // It builds on updates we never got: fetch them from its author (or the forwarder) now.
        if (applied.incomplete === true) this.repairSoon(scope, [msg.from.toString(), source])
      },
      (err) => {
        if (accepted) this.log.warn({ err: shortError(err), scope }, 'gossip update merged but not persisted')
      },
    )
    try {
      await Promise.race([inMemory, durable])
      const from = msg.from.toString()
      this.table.heard(from, this.clock.now())
      // Merged either way; Ignore only tells gossipsub not to forward it (no penalty, see forwards()).
      return this.forwards(from, source) ? TopicValidatorResult.Accept : TopicValidatorResult.Ignore
    } catch (err) {
      if (!isPeerFault(err)) return TopicValidatorResult.Ignore
      await this.misbehaved(source, (err as Error).message)
      return TopicValidatorResult.Reject
    }
  }

  private async validateMemberMessage(peer: PeerId, msg: Message): Promise<TopicValidatorResult> {
    if (msg.type !== 'signed') return TopicValidatorResult.Reject
    const from = msg.from.toString()
    const m = decodeMemberMessage(msg.data)
    if (m === undefined) {
      await this.misbehaved(peer.toString(), 'undecodable member message')
      return TopicValidatorResult.Reject
    }
    // Membership views can briefly differ between members: ignore (don't punish) strangers.
    if (!this.isMember(from)) return TopicValidatorResult.Ignore
    if (m.t === 'hb') {
      await this.onHeartbeat(from, m, 'gossip')
    } else if (m.t === 'admit') {
      if (this.opts.vetAdmission?.(m.member, from) ?? true) await this.admit(m.member)
    }
    return TopicValidatorResult.Accept
  }

  private emitTransition(tr: MemberTransition): void {
    this.planner.memberChanged(tr.peerId, tr.from, tr.to, this.clock.now())
    this.log.info({ peer: tr.peerId, name: tr.name, from: tr.from, to: tr.to }, 'member state changed')
    this.events.emit('member:state', tr)
  }

  /** When each member's last direct heartbeat arrived: it was then connected to every live member. */
  private readonly directHeartbeatAt = new Map<string, number>()

  /**
   * Whether gossipsub should forward a store update we merged. Not when it came straight from its
   * author and the author's heartbeats reach us directly: the author then holds a connection to
   * every member it does not believe dead and its publish went to each of them (a member that was
   * connected but not yet subscribed gets the update by sync, see publishUpdate). Forwarding then
   * only makes duplicates: at 20 members, 57 extra frames per write on top of the 19 the author
   * sends, each encrypted, sent, received and dropped. Otherwise (a partial mesh, an author we hear
   * by gossip, a relayed copy) it is forwarded as usual.
   */
  private forwards(from: string, source: string): boolean {
    if (from !== source) return true
    const at = this.directHeartbeatAt.get(from)
    return at === undefined || this.clock.now() - at > this.tunables.suspectAfterMs
  }

  /** A member's heartbeat, from gossip (signed by it) or its own connection (HEARTBEAT_PROTOCOL). */
  private async onHeartbeat(from: string, m: Extract<MemberMessage, { t: 'hb' }>, path: 'direct' | 'gossip'): Promise<void> {
    this.events.emit('heartbeat', { peerId: from, direction: 'in', path })
    if (path === 'direct') this.directHeartbeatAt.set(from, this.clock.now())
    const tr = this.table.heard(from, this.clock.now(), { name: m.name, addresses: m.addresses })
    const cur = this.directory.get(from)
    if (cur !== undefined && m.addresses.length > 0 && (cur.addresses.join() !== m.addresses.join() || cur.name !== m.name)) {
      await this.directory.add({ peerId: from, name: m.name, addresses: m.addresses })
    }
    if (tr !== undefined) this.emitTransition(tr)
  }

  private async heartbeat(): Promise<void> {
    this.hbSeq += 1
    const hb: MemberMessage = { t: 'hb', name: this.opts.name, addresses: this.opts.announce ?? this.addresses(), seq: this.hbSeq }
    const connected = this.connectedMembers()
    const direct = this.connectedToAllLive(connected)
    if (direct) {
      const frame = encodeMemberMessage(hb)
      for (const p of connected) if (!this.noDirectHeartbeat.has(p)) void this.sendHeartbeat(p, frame)
    }
    // Gossip when some member may not be connected to us, or one runs an older orc (no heartbeat protocol).
    if (!direct || connected.some((p) => this.noDirectHeartbeat.has(p))) {
      await this.publishMembers(hb)
      this.events.emit('heartbeat', { peerId: this.peerId, direction: 'out', path: 'gossip' })
    }
    for (const tr of this.table.tick(this.clock.now())) this.emitTransition(tr)
  }

  /**
   * Whether every member not dead to us (nor banned) is connected to us: then each of them hears
   * our heartbeat straight from us. A member we are not connected to may be connected to none of
   * our neighbours' mesh either, so it needs the gossip copy.
   */
  private connectedToAllLive(connected: string[]): boolean {
    const now = this.clock.now()
    const set = new Set(connected)
    for (const m of this.table.view(now)) {
      if (m.self || m.state === 'dead' || this.scores.isBanned(m.peerId, now)) continue
      if (!set.has(m.peerId)) return false
    }
    return true
  }

  /** One heartbeat frame on the member's heartbeat stream (opened on first use, reopened after an error). */
  private async sendHeartbeat(peerId: string, frame: Uint8Array): Promise<void> {
    const cur = this.hbStreams.get(peerId)
    if (cur !== undefined && cur.busy) return // the previous one is still on its way: skip this beat
    const s = cur ?? { ch: undefined as FrameChannel | undefined, busy: true }
    s.busy = true
    this.hbStreams.set(peerId, s)
    try {
      if (s.ch === undefined) {
        const stream = await this.libp2p.dialProtocol(peerIdFromString(peerId), HEARTBEAT_PROTOCOL, {
          signal: AbortSignal.timeout(this.tunables.dialTimeoutMs),
        })
        s.ch = streamChannel(stream, MAX_MEMBER_MESSAGE_BYTES)
      }
      await s.ch.write(frame)
      s.busy = false
      this.events.emit('heartbeat', { peerId, direction: 'out', path: 'direct' })
    } catch (err) {
      if ((err as Error).name === 'UnsupportedProtocolError') this.noDirectHeartbeat.add(peerId)
      this.log.debug({ peer: peerId, err: shortError(err) }, 'heartbeat stream failed; reopening at the next beat')
      s.ch?.abort(err instanceof Error ? err : new Error(String(err)))
      if (this.hbStreams.get(peerId) === s) this.hbStreams.delete(peerId)
    }
  }

  /**
   * Gossipsub caches a peer's score for a heartbeat: a member admitted a moment ago would still be
   * scored as a stranger (below zero) and its GRAFT refused with a PRUNE and a backoff. Drop the
   * cached score so the next one is computed as a member's. (Reaches into gossipsub's internals, no
   * public API for it; should they change, the short prune backoff still bounds the delay.)
   * The backoff of a peer pruned while it really was a stranger is kept: the peer obeys the same
   * backoff for us, and GRAFTing it before that ends would only be refused and penalised.
   */
  private forgetStrangerScore(peerId: string): void {
    const g = this.libp2p.services.pubsub as unknown as { score?: { scoreCache?: Map<string, unknown> } }
    if (g.score?.scoreCache instanceof Map) g.score.scoreCache.delete(peerId)
  }

  /** Gossipsub's view per topic: members in our mesh for it, and connected peers subscribed to it. */
  gossipState(): Record<string, { mesh: number; subscribers: number }> {
    // getMeshPeers is on the implementation, not on the exported GossipSub interface.
    const pubsub = this.libp2p.services.pubsub as GossipSub & { getMeshPeers(topic: string): string[] }
    const out: Record<string, { mesh: number; subscribers: number }> = {}
    for (const topic of pubsub.getTopics()) {
      out[topic.split('/').slice(-2, -1)[0] ?? topic] = { mesh: pubsub.getMeshPeers(topic).length, subscribers: pubsub.getSubscribers(topic).length }
    }
    return out
  }

  private lastGossipState = ''
  /** Outbound heartbeat stream per connected member (see sendHeartbeat). */
  private readonly hbStreams = new Map<string, { ch: FrameChannel | undefined; busy: boolean }>()
  /** Connected members that do not speak HEARTBEAT_PROTOCOL (an older orc): heartbeats by gossip. */
  private readonly noDirectHeartbeat = new Set<string>()
  private readonly lastPing = new Map<string, number>()
  /** Consecutive failed pings per connected member. */
  private readonly pingFailures = new Map<string, number>()
  /** Senders whose gossip we ignored because they were not (yet) members. */
  private readonly ignoredSenders = new Set<string>()

  private async maintain(): Promise<void> {
    const now = this.clock.now()
    if (this.log.isLevelEnabled('debug')) {
      const g = JSON.stringify(this.gossipState())
      if (g !== this.lastGossipState) {
        this.lastGossipState = g
        this.log.debug({ gossip: JSON.parse(g), connected: this.connectedMembers().length, members: this.directory.list().length }, 'gossip mesh changed')
      }
    }
    const connected = new Set(this.connectedMembers())
    const candidates = this.directory.list().map((m) => m.peerId).filter((p) => p !== this.peerId && !this.scores.isBanned(p, now))
    const want = chooseConnections({
      candidates,
      connected,
      fullMeshMax: this.tunables.fullMeshMax,
      degree: this.tunables.partialMeshDegree,
      random: this.random,
    })
    const dials: Promise<void>[] = []
    for (const p of want) {
      if (connected.has(p)) continue
      const b = this.dialBackoff.get(p)
      if (b !== undefined && b.until > now) continue
      dials.push(this.dialMember(p))
    }
    // A ping opens a stream (several frames each way): to every member every 2 s it cost more than
    // the heartbeats. Ping each member at most every pingIntervalMs; a reply also proves it alive.
    // A member whose heartbeats arrive straight from it is alive and its connection works: it is
    // pinged only for its round-trip time (directPingIntervalMs). At 20 members the routine pings
    // were a third of the idle cluster's CPU (docs/benchmarks.md).
    for (const p of connected) {
      const direct = this.directHeartbeatAt.get(p)
      // (A failed ping is retried on the short schedule below, whatever the heartbeats say; so is
      // a member with no round trip yet — after two failed pings hung up its connection, the new
      // one would otherwise wait a whole directPingIntervalMs for its first ping.)
      const heardDirectly =
        direct !== undefined && now - direct <= this.tunables.suspectAfterMs && !this.pingFailures.has(p) && this.table.rttOf(p) !== null
      const every = heardDirectly ? this.tunables.directPingIntervalMs : this.tunables.pingIntervalMs
      if ((this.lastPing.get(p) ?? 0) + every > now) continue
      this.lastPing.set(p, now)
      void this.libp2p.services.ping
        .ping(peerIdFromString(p), { signal: AbortSignal.timeout(this.tunables.dialTimeoutMs) })
        .then((ms) => {
          this.pingFailures.delete(p)
          this.table.setRtt(p, ms)
          const tr = this.table.heard(p, this.clock.now())
          if (tr !== undefined) this.emitTransition(tr)
        })
        .catch(() => {
          // A failed ping (a stream refused while the connection settles, a timeout on a loaded
          // host) is retried within a few maintenance ticks, not a whole ping interval later:
          // otherwise a member's RTT stays unknown for pingIntervalMs after one lost reply.
          const retryIn = Math.min(this.tunables.pingIntervalMs, 4 * this.tunables.maintainIntervalMs)
          if (this.lastPing.get(p) === now) this.lastPing.set(p, now - this.tunables.pingIntervalMs + retryIn)
          // Twice in a row: the connection is likely dead without TCP knowing (a cut network); hang
          // up so the next maintenance tick dials afresh.
          const failures = (this.pingFailures.get(p) ?? 0) + 1
          this.pingFailures.set(p, failures)
          if (failures >= 2 && !this.stopped) {
            this.pingFailures.delete(p)
            this.log.debug({ peer: p }, 'pings failed twice; closing the connection')
            void this.libp2p.hangUp(peerIdFromString(p)).catch(() => undefined)
          }
        })
    }
    for (const p of this.lastPing.keys()) if (!connected.has(p)) this.lastPing.delete(p)
    for (const p of this.pingFailures.keys()) if (!connected.has(p)) this.pingFailures.delete(p)
    for (const p of this.noDirectHeartbeat) if (!connected.has(p)) this.noDirectHeartbeat.delete(p)
    for (const [p, h] of this.hbStreams) {
      if (connected.has(p) || h.busy) continue
      h.ch?.abort(new Error('member disconnected'))
      this.hbStreams.delete(p)
    }
    // Members back from suspect/dead: their gossip and ours was lost meanwhile; sync out of turn.
    for (const p of this.planner.takeDue(now)) {
      if (connected.has(p)) void this.syncNow(p)
    }
    await Promise.all(dials)
  }

  private async dialMember(p: string): Promise<void> {
    const info = this.directory.get(p)
    if (info === undefined || info.addresses.length === 0) return
    const id = peerIdFromString(p)
    try {
      await this.libp2p.peerStore.merge(id, { multiaddrs: info.addresses.map((a) => multiaddr(a)) })
      await this.libp2p.dial(id, { signal: AbortSignal.timeout(this.tunables.dialTimeoutMs) })
      this.dialBackoff.delete(p)
    } catch (err) {
      const failures = (this.dialBackoff.get(p)?.failures ?? 0) + 1
      const wait = Math.min(60_000, this.tunables.maintainIntervalMs * 2 ** Math.min(failures - 1, 5))
      this.dialBackoff.set(p, { until: this.clock.now() + wait, failures })
      this.log.debug({ peer: p, err: shortError(err), failures }, 'dial member failed')
    }
  }
}
