/**
 * The mesh: one libp2p host (pnet, members only) plus a join host (no pnet, the join protocol only;
 * join.ts) and the parts that run on them — admission (tokens, join, trial limits, bans), liveness (membership view, heartbeats, pings, connections to members), replication
 * (gossip, anti-entropy, repair) and the request protocols (api-service.ts). Each part owns its
 * state and timers; Mesh builds them, wires them to each other and keeps the public surface.
 */

import { createServer } from 'node:net'
import type { PeerId, PrivateKey, Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { Libp2pOptions } from 'libp2p'
import type { Logger } from 'pino'
import { type Clock, type Random, systemClock, systemRandom, unrefTimers } from '../effects/index.ts'
import { OrcError, wrapError } from '../model/index.ts'
import type { Replicable } from '../store/index.ts'
import { advertisableAddresses, joinListenFor, tcpPortOf, withTcpPort } from './address.ts'
import { Admission } from './admission.ts'
import { ApiService } from './api-service.ts'
import { type BlobBody, type BlobProvider, BlobService, type BlobVia } from './blobs.ts'
import { type ClusterState, initCluster, loadCluster, saveCluster } from './cluster.ts'
import { MemberConnections } from './connections.ts'
import { CredentialPeers } from './credential-peers.ts'
import { shortError, withDeadline } from './deadline.ts'
import { MeshEventBus, type MeshEvents, type MeshListener } from './events.ts'
import { createGater, createJoinerGater, createJoinGater, type GatePolicy } from './gater.ts'
import { storeTopic } from './gossip.ts'
import { createHost, createJoinHost, forgetCachedScore, gossipMeshState, type JoinLibp2p, type MeshLibp2p, streamChannel } from './host.ts'
import { loadOrCreateIdentity, peerIdOf } from './identity.ts'
import { JOIN_PROTOCOL, type JoinProgress, type JoinResponse, joinRequestFromToken, requestJoin } from './join.ts'
import { type KeyringProvider, KeyringService } from './keyring.ts'
import { Liveness } from './liveness.ts'
import type { MemberApiHandler } from './member-api.ts'
import { JsonFileMemberDirectory, type MemberDirectory } from './members.ts'
import type { MemberInfo, MemberView } from './membership.ts'
import { defaultLogger, type MeshTunables, resolveTunables } from './options.ts'
import { encodePsk } from './psk.ts'
import { RemovedPeers } from './removed.ts'
import { Replication } from './replication.ts'
import type { ApiHandler, ApiRequest, ApiResponse } from './rpc.ts'
import { PeerScores } from './score.ts'
import { recordSigner } from './signing.ts'
import type { SyncResult } from './sync.ts'
import {
  checkTokenFresh,
  decodeToken,
  type IssueTokenOptions,
  JsonFileTokenBook,
  TokenAuthority,
  type TokenBook,
  type TokenClaims,
  type TokenRecord,
} from './token.ts'

/** How long after serving a join this node leaves the joiner's first sync session to the joiner. */
const JOINER_SYNCS_ITSELF_MS = 60_000

export interface MeshOptions {
  dataDir: string
  /** Human name of this node (hostname by default in the agent). */
  name: string
  /** Listen multiaddrs; default `/ip4/0.0.0.0/tcp/0`. */
  listen?: string[]
  /** Addresses to advertise instead of the listen addresses (NAT, public IP). */
  announce?: string[]
  /**
   * Listen multiaddrs of the join host (join.ts): TCP + Noise, no pnet, the join protocol only.
   * Default: the listen addresses two ports lower (joinListenFor; port 0 stays 0). `[]`: no join
   * host — this node issues no tokens (`--join-listen off`). Tokens name its addresses (with
   * `announce`, the announced hosts at the join port).
   */
  joinListen?: string[]
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
  /**
   * The cluster's data keyring (`/orc/keyring/1.0.0`, keyring.ts): what this node hands a member
   * that asks, and what it does with one a member offers. Served to current members only.
   */
  keyring?: KeyringProvider
  /**
   * This node's image blobs (`/orc/blobs/1.0.0`, blobs.ts): what it serves members that ask, and its
   * way to fetch one from a registry on the cluster's behalf. Served to current members only.
   */
  blobs?: BlobProvider
  /**
   * Public keys (base64url protobuf, like ClusterConfig.adminKeys) whose holders may connect as the
   * remote CLI, known by the peer id of the key (credential-peers.ts), beside the cluster's admin
   * keys — e.g. users' keys. Read at each connection.
   */
  credentialKeys?: () => readonly string[]
  /** The user a remote API key belongs to (the agent's users); default: the cluster's admin keys are `admin`. */
  apiKeyOwner?: (key: string) => string | undefined
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

/** Join the cluster a token invites to (`orc join`): redeem the token at the issuer's join host, then sync. */
export async function joinMesh(opts: JoinOptions): Promise<Mesh> {
  const clock = unrefTimers(opts.clock ?? systemClock)
  const claims = decodeToken(opts.token)
  checkTokenFresh(claims, clock.now())
  await checkDataDirFree(opts.dataDir)
  const say = opts.onProgress ?? (() => {})
  const joinStarted = clock.now()
  let meshLog: Logger | undefined
  const progress = (p: JoinProgress): void => {
    meshLog?.debug({ phase: p.phase, ms: clock.now() - joinStarted }, 'join progress')
    say(p)
  }
  // No key yet: the mesh host listens (its addresses go in the request) but refuses every connection until the response brings the PSK.
  const pending: ClusterState = { clusterId: claims.cluster, createdAt: 0, adminKeys: [], psk: new Uint8Array(0) }
  const mesh = await Mesh.create(opts, pending, claims.issuer)
  meshLog = mesh.log
  const t = mesh.tunables
  const named = opts.peerAddrs ?? []
  let res: JoinResponse
  let client: JoinLibp2p | undefined
  try {
    await mesh.startHosts()
    // A host the user named (`orc join HOST:MESHPORT`) is dialed at the token's join port.
    const addrs = [...new Set([...named.flatMap((a) => joinAddressAt(a, claims.addrs)), ...claims.addrs])]
    progress({ phase: 'connecting', peer: claims.issuer, addresses: addrs })
    client = await createJoinHost({
      privateKey: mesh.privateKey,
      listen: [],
      gater: createJoinerGater(claims.issuer),
      tunables: t,
      transports: opts.transports,
    })
    await client.start()
    res = await presentToken(client, claims, addrs, opts.name, mesh.addresses(), t, progress)
    if (res.psk === undefined) throw new OrcError('invalid', 'the issuer admitted this node but sent no cluster key (an orc too old to join through?)')
  } catch (err) {
    await mesh.stopHosts()
    if (err instanceof OrcError && err.details.remote === true) throw wrapError('join refused by issuer', err)
    throw err instanceof OrcError ? err : wrapError('join cluster', err)
  } finally {
    await Promise.resolve(client?.stop()).catch(() => undefined)
  }
  const cluster = await recordAdmission(mesh, opts, { ...pending, psk: new Uint8Array(Buffer.from(res.psk, 'hex')) }, res, progress)
  // Now a member: dial the issuer's mesh port with the key (the host the user named, at the port named, first).
  const issuerInfo = res.members.find((m) => m.peerId === claims.issuer)
  const meshAddrs = [...new Set([...named, ...(issuerInfo?.addresses ?? [])])]
  try {
    const issuer = peerIdFromString(claims.issuer)
    await mesh.libp2p.peerStore.merge(issuer, { multiaddrs: meshAddrs.map((a) => multiaddr(a)) })
    await mesh.libp2p.dial(issuer, { signal: AbortSignal.timeout(t.joinTimeoutMs) })
  } catch (err) {
    mesh.log.warn({ err: shortError(err), addresses: meshAddrs }, "admitted, but the issuer's mesh port did not answer; the mesh keeps dialing members")
  }
  return finishJoin(mesh, claims.issuer, cluster, progress)
}

/**
 * The default join listen addresses, each on a free port if its own (mesh port − 2) is taken: as
 * the HTTP listener's default does, several agents on one machine (tests, experiments) each get one.
 * An explicit `--join-listen` is never moved.
 */
async function freeOrAnyPort(addrs: string[], log: Logger): Promise<string[]> {
  const out: string[] = []
  for (const a of addrs) {
    const m = /^\/(ip4|ip6)\/([^/]+)\/tcp\/([0-9]+)$/.exec(a)
    if (m === null || m[3] === '0') {
      out.push(a)
      continue
    }
    const code = await new Promise<string | undefined>((resolve) => {
      const srv = createServer()
      srv.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'))
      srv.listen({ host: m[2], port: Number(m[3]), exclusive: true }, () => srv.close(() => resolve(undefined)))
    })
    if (code === 'EADDRINUSE') {
      log.warn({ wanted: a }, 'default join port in use; the join host listens on a free port instead (tokens name it)')
      out.push(withTcpPort(a, 0))
    } else out.push(a)
  }
  return out
}

/**
 * Dial the issuer by its peer id from `host` (Noise refuses a node whose key is not the issuer's,
 * before the token is sent), present the token, read the answer; checks it is for the token's cluster.
 */
async function presentToken(
  host: Pick<JoinLibp2p, 'peerStore' | 'dial' | 'dialProtocol'>,
  claims: Pick<TokenClaims, 'id' | 'secret' | 'cluster' | 'issuer'>,
  addrs: string[],
  name: string,
  addresses: string[],
  t: MeshTunables,
  progress: (p: JoinProgress) => void,
): Promise<JoinResponse> {
  const issuer = peerIdFromString(claims.issuer)
  await host.peerStore.merge(issuer, { multiaddrs: addrs.map((a) => multiaddr(a)) })
  const signal = AbortSignal.timeout(t.joinTimeoutMs)
  let stream: Stream
  try {
    await host.dial(issuer, { signal: AbortSignal.any([signal, AbortSignal.timeout(t.dialTimeoutMs)]) })
    stream = await host.dialProtocol(issuer, JOIN_PROTOCOL, { signal })
  } catch (err) {
    throw dialError(claims.issuer, addrs, err)
  }
  progress({ phase: 'joining', peer: claims.issuer })
  const ch = streamChannel(stream, t.maxFrameBytes)
  const res = await withDeadline(requestJoin(ch, joinRequestFromToken(claims, name, addresses)), signal, () => ch.abort(new Error('join timed out')))
  if (res.clusterId !== claims.cluster) throw new OrcError('invalid', `issuer answered for cluster ${res.clusterId}, token is for ${claims.cluster}`)
  return res
}

/** The join host's address on the host of `named` (a mesh address the user gave): the token's join port, same IP family first. */
function joinAddressAt(named: string, joinAddrs: string[]): string[] {
  const family = named.split('/')[1]
  const same = joinAddrs.find((a) => a.split('/')[1] === family) ?? joinAddrs[0]
  const port = same === undefined ? undefined : tcpPortOf(same)
  return port === undefined || tcpPortOf(named) === undefined ? [] : [withTcpPort(named, port)]
}

function dialError(issuer: string, addrs: string[], err: unknown): OrcError {
  const short = shortError(err)
  const why = /does not match expected remote|UnexpectedPeer/i.test(short)
    ? "the node there is not the token's issuer (its key is not the one the token names); nothing was sent to it"
    : /EOF|reset|closed|denied|gater/i.test(short)
      ? 'the issuer refused the connection (it has no join open: token used up, expired or revoked — or the token is from another cluster)'
      : short
  return new OrcError('unavailable', `dial ${issuer} at ${addrs.join(', ') || '(no address)'}: ${why}`, { peer: issuer }, err)
}

async function checkDataDirFree(dataDir: string): Promise<void> {
  const existing = await loadCluster(dataDir)
  if (existing !== undefined) {
    throw new OrcError('conflict', `data dir ${dataDir} already belongs to cluster ${existing.clusterId}`, { dataDir })
  }
}

/** Admitted: the cluster files on disk, the members (and this node) in the directory. */
async function recordAdmission(
  mesh: Mesh,
  opts: JoinOptions,
  pending: ClusterState,
  res: JoinResponse,
  progress: (p: JoinProgress) => void,
): Promise<ClusterState> {
  const cluster: ClusterState = { ...pending, createdAt: res.createdAt, adminKeys: res.adminKeys }
  await saveCluster(opts.dataDir, cluster)
  mesh.cluster = cluster
  for (const m of res.members) await mesh.admit(m, { announce: false })
  await mesh.admit({ peerId: mesh.peerId, name: opts.name, addresses: mesh.addresses() }, { announce: false })
  progress({ phase: 'admitted', clusterId: cluster.clusterId, members: res.members.length })
  return cluster
}

/** Admitted: start the mesh and take the issuer's store in. */
async function finishJoin(mesh: Mesh, issuer: string, cluster: ClusterState, progress: (p: JoinProgress) => void): Promise<Mesh> {
  await mesh.start()
  await mesh.gossipReadyWith(issuer, 3_000)
  let revisions = 0
  for (const scope of mesh.scopeNames()) {
    // Everything the first session brings is what this new node lacked, not news to pass on.
    const r = await mesh.syncWith(issuer, scope, { relay: false }).catch((err) => {
      mesh.log.warn({ err: shortError(err), scope }, 'initial sync failed; anti-entropy will retry')
      return undefined
    })
    revisions += r?.revisions ?? 0
    progress({ phase: 'syncing', scope, peer: issuer, revisions: r?.revisions ?? 0 })
  }
  progress({ phase: 'ready', clusterId: cluster.clusterId, members: mesh.members().length, revisions })
  return mesh
}

export class Mesh {
  readonly peerId: string
  readonly tunables: MeshTunables
  readonly log: Logger
  readonly authority: TokenAuthority
  cluster: ClusterState
  private readonly events = new MeshEventBus()
  private readonly directory: MemberDirectory
  private readonly admission: Admission
  private readonly connections: MemberConnections
  private readonly liveness: Liveness
  private readonly replication: Replication
  private readonly api: ApiService
  private readonly keyring: KeyringService
  private readonly blobs: BlobService
  private readonly removed: RemovedPeers
  private readonly credentialPeers: CredentialPeers
  private started = false
  private stopped = false
  /**
   * Members whose join this node served, and when: each ends its join with a sync session of its
   * own with us (finishJoin), so a connection from one starts none from our side until that
   * session is done (at most JOINER_SYNCS_ITSELF_MS). Otherwise, when our peer id was the lower
   * one, both sessions ran at once and the joiner took in the whole store twice (a 10k-object
   * join took 8–10 s instead of 5.5).
   */
  private readonly joinedHere = new Map<string, number>()
  private readonly clock: Clock

  private constructor(
    readonly opts: MeshOptions,
    readonly libp2p: MeshLibp2p,
    /** The join host (join.ts); undefined with `joinListen: []`. */
    readonly joinHost: JoinLibp2p | undefined,
    /** This node's key (a joiner's temporary host dials with it too). */
    readonly privateKey: PrivateKey,
    cluster: ClusterState,
    deps: {
      clock: Clock
      random: Random
      tunables: MeshTunables
      directory: MemberDirectory
      authority: TokenAuthority
      log: Logger
      scores: PeerScores
      removed: RemovedPeers
    },
  ) {
    const { clock, random, tunables, directory, authority, log } = deps
    this.clock = clock
    // The joiner's own first session is done: a later connection syncs as any other.
    this.events.on('sync:done', (r) => this.joinedHere.delete(r.peerId))
    this.removed = deps.removed
    this.credentialPeers = new CredentialPeers(() => [...this.cluster.adminKeys, ...(opts.credentialKeys?.() ?? [])])
    this.peerId = peerIdOf(privateKey)
    this.cluster = cluster
    this.tunables = tunables
    this.directory = directory
    this.authority = authority
    this.log = log
    // What every part is given; the parts reach each other only through the callbacks below.
    const common = { libp2p, peerId: this.peerId, clock, tunables, log, isMember: (p: string) => this.isMember(p) }
    const misbehaved = (p: string, reason: string) => this.admission.misbehaved(p, reason)
    const isBanned = (p: string, now: number) => this.admission.isBanned(p, now)
    const learnt = (info: MemberInfo, via: string) => this.learnt(info, via)
    this.admission = new Admission({
      ...common,
      events: this.events,
      cluster: () => this.cluster,
      directory,
      authority,
      scores: deps.scores,
      isRemoved: (p) => this.isRemoved(p),
      scopeNames: () => this.scopeNames(),
      admitJoiner: async (info) => {
        this.joinedHere.set(info.peerId, clock.now())
        await this.admit(info, { announce: true })
        await this.opts.admitMember?.(info.peerId, info)
      },
      vetJoiner: opts.vetJoiner,
      joinHost,
    })
    this.connections = new MemberConnections({ ...common, random, directory, isBanned })
    const signer = privateKey.type === 'Ed25519' ? recordSigner(privateKey) : undefined
    this.liveness = new Liveness({
      ...common,
      random,
      sign: (data) => signer?.sign(data) ?? new Uint8Array(0),
      events: this.events,
      name: opts.name,
      clusterId: () => this.clusterId,
      advertised: () => this.opts.announce ?? this.addresses(),
      directory,
      connections: this.connections,
      isBanned,
      misbehaved,
      learnt,
      memberChanged: (tr) => this.replication.memberChanged(tr),
      upkept: (connected, now) => this.replication.syncRecovered(connected, now),
    })
    this.replication = new Replication({
      ...common,
      events: this.events,
      clusterId: () => this.clusterId,
      random,
      directory,
      connections: this.connections,
      liveness: this.liveness,
      misbehaved,
      learnt,
      dropStoreGossip: opts.dropStoreGossip,
      isRemoved: (p) => this.isRemoved(p),
    })
    this.api = new ApiService({
      ...common,
      cluster: () => this.cluster,
      random,
      misbehaved,
      closeSoon: (conn) => this.admission.closeSoon(conn),
      apiHandler: opts.apiHandler,
      memberApiHandler: opts.memberApiHandler,
      isCredentialPeer: (p) => this.isCredentialPeer(p),
      apiKeyOwner: opts.apiKeyOwner,
    })
    this.keyring = new KeyringService({ ...common, isRemoved: (p) => this.isRemoved(p), misbehaved, provider: opts.keyring })
    this.blobs = new BlobService({ ...common, isRemoved: (p) => this.isRemoved(p), misbehaved, provider: opts.blobs })
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
    // Before the host listens: a restarted node refuses removed peers before its store has synced.
    const removed = await RemovedPeers.inDataDir(opts.dataDir).load()
    // The gater and gossip score need the Mesh, which needs the host: late-bind through `self`.
    let self: Mesh | undefined
    const joinWindowOpen = () => authority.joinWindowOpen(tunables.tokenGraceMs)
    const startProbation = (p: string, source: string) => self?.admission.startProbation(p, source) ?? false
    const policy: GatePolicy = {
      isRemoved: (p) => removed.has(p),
      isMember: (p) => self?.isMember(p) ?? false,
      isCredentialPeer: (p) => self?.isCredentialPeer(p) ?? false,
      isBanned: (p) => scores.isBanned(p, clock.now()),
      mayDial: (p) => p === joiningIssuer && self?.started !== true,
      // A cluster's mesh port admits members (and the remote CLI) only: joiners go to the join host.
      acceptsStrangers: () => false,
      startProbation,
    }
    const listen = opts.listen ?? ['/ip4/0.0.0.0/tcp/0']
    const joinListen = opts.joinListen ?? (await freeOrAnyPort(joinListenFor(listen), log))
    const joinHost =
      joinListen.length === 0
        ? undefined
        : await createJoinHost({
            privateKey,
            listen: joinListen,
            gater: createJoinGater({ isRemoved: policy.isRemoved, isBanned: policy.isBanned, acceptsStrangers: joinWindowOpen, startProbation }),
            tunables,
            transports: opts.transports,
          })
    const libp2p = await createHost({
      privateKey,
      // A joiner learns the key from the join response: until then its host refuses every connection.
      psk:
        cluster.psk.length > 0 ? encodePsk(cluster.psk) : () => (self !== undefined && self.cluster.psk.length > 0 ? encodePsk(self.cluster.psk) : undefined),
      listen,
      announce: opts.announce,
      gater: createGater(policy),
      tunables,
      transports: opts.transports,
      // Strangers (probation) sit below the publish and gossip thresholds, so nothing of ours
      // reaches them, but above graylist so their subscriptions are still heard for when they are
      // admitted. Banned peers are graylisted outright.
      appSpecificScore: (p) => (scores.isBanned(p, clock.now()) ? -1000 : self?.isMember(p) === true ? 0 : -60),
    })
    self = new Mesh(opts, libp2p, joinHost, privateKey, cluster, { clock, random, tunables, directory, authority, log, scores, removed })
    for (const m of directory.list()) self.liveness.upsert(m)
    await self.install()
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

  /**
   * Where joiners dial this node's join host (what its tokens name): its listen addresses as
   * advertised, or with `announce`, the announced hosts at the join port. Empty without a join host.
   */
  joinAddresses(): string[] {
    const host = this.joinHost
    if (host === undefined) return []
    const bound = host.getMultiaddrs().map((ma) => ma.toString().replace(/\/p2p\/[^/]+$/, ''))
    const port = bound.map(tcpPortOf).find((p) => p !== undefined)
    if (this.opts.announce !== undefined && this.opts.announce.length > 0 && port !== undefined) {
      return [...new Set(this.opts.announce.map((a) => withTcpPort(a, port)))]
    }
    return advertisableAddresses([...new Set(bound)], this.opts.joinListen ?? [], this.opts.privateRanges?.(this.clusterId) ?? [])
  }

  members(): MemberView[] {
    return this.liveness.view()
  }

  /** How recently a live member is normally heard (the fence's "heard now"; grows with log N under swim). */
  heardWindowMs(): number {
    return this.liveness.heardWindowMs()
  }

  /** An admitted peer that was not removed since. */
  isMember(peerId: string): boolean {
    return !this.removed.has(peerId) && this.directory.has(peerId)
  }

  /** Removed from the cluster (removeMember): refused by the gater and every handler, forever. */
  isRemoved(peerId: string): boolean {
    return this.removed.has(peerId)
  }

  /** Peer ids removed from the cluster that this node knows of (persisted in the data dir). */
  removedPeers(): string[] {
    return this.removed.list()
  }

  /** The remote CLI: a peer whose identity is one of the cluster's credential keys (credential-peers.ts). */
  isCredentialPeer(peerId: string): boolean {
    return this.credentialPeers.has(peerId)
  }

  scopeNames(): string[] {
    return this.replication.scopeNames()
  }

  on<K extends keyof MeshEvents>(event: K, fn: MeshListener<K>): () => void {
    return this.events.on(event, fn)
  }

  createToken(opts: IssueTokenOptions): Promise<{ token: string; id: string; expiresAt: number; uses: number }> {
    if (this.joinHost === undefined) {
      return Promise.reject(
        new OrcError(
          'unavailable',
          'this node serves no joins (its join listener is off): create the token on another member, or restart this one with --join-listen ADDR',
        ),
      )
    }
    return this.admission.createToken(opts, this.joinAddresses())
  }

  revokeToken(id: string): Promise<TokenRecord> {
    return this.admission.revokeToken(id)
  }

  listTokens(): Promise<TokenRecord[]> {
    return this.admission.listTokens()
  }

  /**
   * Admit a peer id (the agent calls this when the store gains a node; the mesh calls it on a
   * successful join and on announcements from other members). Every part takes note of it here.
   */
  async admit(info: MemberInfo, opts: { announce?: boolean } = {}): Promise<void> {
    if (this.removed.has(info.peerId)) {
      this.log.debug({ peer: info.peerId }, 'not admitting a removed peer')
      return
    }
    const known = this.directory.has(info.peerId)
    await this.directory.add(info)
    this.liveness.upsert(info)
    this.admission.admitted(info.peerId)
    if (known) return
    this.log.info({ peer: info.peerId, name: info.name }, 'member admitted')
    this.events.emit('member:admitted', info)
    if (this.started) forgetCachedScore(this.libp2p.services.pubsub, info.peerId)
    // Gossip from it was ignored while it was unknown: catch up with it directly. (Only then: a
    // fresh joiner has no store yet, and syncs with everyone it connects to anyway.)
    if (this.replication.forgetIgnored(info.peerId) && this.started && this.libp2p.getConnections(peerIdFromString(info.peerId)).length > 0) {
      this.replication.syncSoon(info.peerId)
    }
    if (opts.announce === true && this.started) await this.liveness.announce(info)
  }

  /**
   * Remove a member, forever: record the tombstone (persisted) so the gater and every handler refuse
   * it whatever token it presents, forget it, revoke its join tokens, close its open connections.
   * Safe to repeat.
   */
  async removeMember(peerId: string): Promise<void> {
    if (peerId === this.peerId) throw new OrcError('invalid', 'a node cannot remove itself from the mesh')
    await this.removed.add(peerId)
    this.replication.forgetIgnored(peerId)
    await this.admission.remove(peerId)
    if (this.liveness.forget(peerId)) this.events.emit('member:removed', peerId)
    await this.libp2p.hangUp(peerIdFromString(peerId)).catch(() => undefined)
  }

  addScope(scope: string, store: Replicable): void {
    this.replication.addScope(scope, store)
  }

  /** Run anti-entropy now with every connected member (or one peer), all scopes. */
  syncNow(peerId?: string): Promise<SyncResult[]> {
    return this.replication.syncNow(peerId)
  }

  /**
   * One anti-entropy session with `peerId` for `scope`, initiated by us. `relay: false` keeps what
   * it brings in from being passed on (a joiner's first session).
   */
  syncWith(peerId: string, scope: string, opts: { relay?: boolean } = {}): Promise<SyncResult> {
    return this.replication.syncWith(peerId, scope, opts)
  }

  /** Call the remote API of `peerId` (a connected or known member). */
  request(peerId: string, req: ApiRequest, credential?: string | PrivateKey): Promise<ApiResponse> {
    return this.api.request(peerId, req, credential)
  }

  /**
   * A node-to-node request to member `peerId` (`/orc/member-api/1.0.0`): no credential, the
   * member's own handler decides what a member may ask. `timeoutMs` bounds the whole call (a log
   * long-poll needs more than the default api timeout).
   */
  memberRequest(peerId: string, req: ApiRequest, opts: { timeoutMs?: number } = {}): Promise<ApiResponse> {
    return this.api.memberRequest(peerId, req, opts)
  }

  /** Member `peerId`'s cluster keyring, as JSON for the caller to check (`/orc/keyring/1.0.0`). */
  fetchKeyring(peerId: string): Promise<unknown> {
    return this.keyring.fetch(peerId)
  }

  /** Hand `keyring` (JSON) to member `peerId`, which merges it into its own (after a rotation). */
  offerKeyring(peerId: string, keyring: unknown): Promise<void> {
    return this.keyring.offer(peerId, keyring)
  }

  /** Which of `digests` (at most 64) member `peerId` holds (`/orc/blobs/1.0.0`). */
  blobHas(peerId: string, digests: string[], signal?: AbortSignal): Promise<string[]> {
    return this.blobs.has(peerId, digests, signal)
  }

  /**
   * Image blob `digest` from member `peerId`, as a stream the caller checks against the digest (the
   * blob store does). With `via`, a member that lacks it fetches it from the registry for us first.
   */
  fetchBlob(peerId: string, digest: string, via?: BlobVia, signal?: AbortSignal): Promise<BlobBody> {
    return this.blobs.get(peerId, digest, via, signal)
  }

  /** Blob transfers this node is serving now. */
  blobServes(): number {
    return this.blobs.serving()
  }

  /**
   * Wait (at most `ms`) until `peerId`'s gossip subscriptions to our store topics have arrived: the
   * gossip streams both ways are up, so a write made right after `orc join` reports ready reaches
   * this node by gossip rather than at the next anti-entropy round. (A joiner dials the issuer's
   * mesh port only once admitted, moments before it is ready.)
   */
  async gossipReadyWith(peerId: string, ms: number): Promise<void> {
    const pubsub = this.libp2p.services.pubsub
    const topics = this.scopeNames().map((s) => storeTopic(this.clusterId, s))
    const ready = () => topics.every((t) => pubsub.getSubscribers(t).some((p) => p.toString() === peerId))
    // Real time, not the injected clock: this waits on network events, and a test's clock may stand still.
    const deadline = Date.now() + ms
    while (!ready() && Date.now() < deadline && !this.stopped) await new Promise((r) => setTimeout(r, 25))
  }

  /** Gossipsub's view per topic: members in our mesh for it, and connected peers subscribed to it. */
  gossipState(): Record<string, { mesh: number; subscribers: number }> {
    return gossipMeshState(this.libp2p.services.pubsub)
  }

  /** Listen: the mesh host and the join host (a port in use fails here, naming the listener). */
  async startHosts(): Promise<void> {
    if (this.libp2p.status !== 'started') await this.libp2p.start()
    if (this.joinHost !== undefined && this.joinHost.status !== 'started') {
      try {
        await this.joinHost.start()
      } catch (err) {
        await this.stopHosts()
        const at = (this.opts.joinListen ?? joinListenFor(this.opts.listen ?? [])).join(', ')
        throw new OrcError(
          'unavailable',
          `join listener on ${at}: address in use or not on this machine; choose another with --join-listen ADDR, or --join-listen off`,
          { joinListen: at },
          err,
        )
      }
    }
  }

  /** Stop both hosts (a failed join: nothing else was started). */
  async stopHosts(): Promise<void> {
    await Promise.resolve(this.libp2p.stop()).catch(() => undefined)
    await Promise.resolve(this.joinHost?.stop()).catch(() => undefined)
  }

  async start(): Promise<void> {
    if (this.started) return
    await this.startHosts()
    this.started = true
    await this.admit({ peerId: this.peerId, name: this.opts.name, addresses: this.addresses() }).catch(() => undefined)
    this.liveness.start()
    this.replication.start(this.opts.scopes ?? {})
    // The first upkeep at once (dials, pings), once the scopes are in: it may start syncs.
    void this.liveness.upkeep()
  }

  async stop(): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    this.liveness.stop()
    this.replication.stop()
    this.admission.stop()
    await this.libp2p.stop()
    await this.joinHost?.stop()
  }

  // ---- internals ------------------------------------------------------------------------------

  /** Protocol handlers and connection events, before the host is started. */
  private async install(): Promise<void> {
    this.libp2p.addEventListener('peer:connect', (evt) => this.onPeerConnect(evt.detail))
    await this.admission.install()
    await this.liveness.install()
    await this.replication.install()
    await this.api.install()
    await this.keyring.install()
    await this.blobs.install()
  }

  private onPeerConnect(peer: PeerId): void {
    const remote = peer.toString()
    if (!this.started || !this.isMember(remote)) return
    this.connections.connectedTo(remote)
    // Both sides see the connection; the lower peer id starts anti-entropy so it runs once. A
    // member that just joined through us starts its own (the last step of its join).
    if (this.peerId < remote && !this.joinerSyncsItself(remote)) {
      void this.replication.syncNow(remote)
    }
  }

  /** Whether `peerId` joined through this node within JOINER_SYNCS_ITSELF_MS (entries older are dropped). */
  private joinerSyncsItself(peerId: string): boolean {
    const now = this.clock.now()
    for (const [p, at] of this.joinedHere) if (now - at > JOINER_SYNCS_ITSELF_MS) this.joinedHere.delete(p)
    return this.joinedHere.has(peerId)
  }

  /**
   * A member another member told us of (an announcement, or a sync session's member list; `via`
   * told us): admitted unless vetAdmission refuses it.
   */
  private async learnt(info: MemberInfo, via: string): Promise<void> {
    if (this.opts.vetAdmission?.(info, via) ?? true) await this.admit(info)
  }
}
