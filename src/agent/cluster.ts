/**
 * Mesh wiring of a node: creates, restarts or joins the cluster's mesh in the data dir, replicates
 * the store as the `cluster` scope, keeps membership decisions in the replicated store, provides
 * the cluster routes (tokens, members, node removal, credential) and serves the API on the mesh.
 *
 * Membership: the mesh admits peers (join, announcements, anti-entropy member lists) into a
 * grow-only directory. Removal must win over that everywhere, so it is a tombstone in the store —
 * `Cluster.status.removedPeers.<peerId>` (a map, so concurrent removals merge) — and the directory
 * the gater reads answers "not a member" for every removed peer id, forever.
 */
import { existsSync, readdirSync, rmSync } from 'node:fs'
import { chmod, open, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import type { Clock, Random } from '../effects/index.ts'
import {
  type BlobProvider,
  decodeToken,
  encodeRemoteCredential,
  formatDuration,
  initCluster,
  type JoinProgress,
  JsonFileMemberDirectory,
  joinMesh,
  loadCluster,
  type MemberDirectory,
  type MemberInfo,
  type Mesh,
  type MeshOptions,
  publicKeyOfCredential,
  resolvePeerAddress,
  startMesh,
  verifySignedRequest,
} from '../mesh/index.ts'
import { ADMIN_USER, type ApiRequest, type ApiResponse, errorBody, isPlainObject, OrcError, type Query, userExpired } from '../model/index.ts'
import { EVIDENCE_WINDOW_MS, type ObjectStore, type StoredObject, unsignedRefused, userSignaturePolicy } from '../store/index.ts'
import { createMemberApiHandler, type ForwardedUsers } from './member-api.ts'
import { unadvertisedRanges } from './network/index.ts'
import { NODE_CONTROLLER } from './node-info.ts'
import type { MeshSetup } from './options.ts'
import { forwardToNode, type LogsProxyComponents, proxiedLogs, proxiedPodRoute, proxiedVmLogs, proxiedVmRoute, proxiedVolumeRoute } from './pods/logs-proxy.ts'
import type { ApiHandler, RouteHandler, RouteHandlers } from './router.ts'
import type { StatusView } from './routes.ts'
import { KeyringDelivery, secretKeyRoutes } from './secret-keys.ts'
import { type ClusterKeyring, createKeyringFile, KEYRING_FILE } from './secrets.ts'

export const CLUSTER_CONTROLLER = 'controller:cluster'
/** The admin credential (orcadmin1.…) of a cluster created here, mode 0600. */
export const ADMIN_CREDENTIAL_FILE = 'admin.credential'

export type { MeshSetup } from './options.ts'

// ---- join preconditions (before anything is written) -------------------------------------------

/**
 * Check an `orc join` can start in `dataDir`: the token decodes and is not expired, the data dir is
 * new or empty. Returns how to undo everything a failed join wrote.
 */
export function prepareJoin(dataDir: string, token: string, now: number): { undo(): void } {
  const claims = decodeToken(token)
  if (now >= claims.exp) {
    throw new OrcError('forbidden', `join refused: token expired ${formatDuration(now - claims.exp)} ago (create a new one with 'orc token create')`, {
      reason: 'expired',
    })
  }
  const existed = existsSync(dataDir)
  if (existed && readdirSync(dataDir).length > 0) {
    throw new OrcError(
      'conflict',
      `data dir ${dataDir} is not empty: orc join needs a new data dir (this one may already belong to a cluster; start it with orc up)`,
      {
        dataDir,
      },
    )
  }
  return {
    undo() {
      if (existed) for (const f of readdirSync(dataDir)) rmSync(join(dataDir, f), { recursive: true, force: true })
      else rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

// ---- membership from the store -----------------------------------------------------------------

/** Peer ids removed from the cluster (`orc node remove`), from the replicated Cluster object. */
export function removedPeersOf(store: ObjectStore): Map<string, { name?: string }> {
  const out = new Map<string, { name?: string }>()
  for (const c of store.list('Cluster')) {
    const rp = (c.status as Record<string, unknown> | undefined)?.removedPeers
    if (!isPlainObject(rp)) continue
    for (const [peerId, v] of Object.entries(rp)) out.set(peerId, isPlainObject(v) && typeof v.name === 'string' ? { name: v.name } : {})
  }
  return out
}

/** The mesh's member directory, with every peer removed in the store refused. */
export class RevocableDirectory implements MemberDirectory {
  constructor(
    private readonly inner: MemberDirectory,
    private readonly isRemoved: (peerId: string) => boolean,
  ) {}
  load() {
    return this.inner.load()
  }
  has(peerId: string) {
    return !this.isRemoved(peerId) && this.inner.has(peerId)
  }
  get(peerId: string) {
    return this.isRemoved(peerId) ? undefined : this.inner.get(peerId)
  }
  list() {
    return this.inner.list().filter((m) => !this.isRemoved(m.peerId))
  }
  async add(info: MemberInfo) {
    if (!this.isRemoved(info.peerId)) await this.inner.add(info)
  }
  remove(peerId: string) {
    return this.inner.remove(peerId)
  }
}

/**
 * The user a remote API key belongs to: a User object's key; the cluster's admin keys (cluster.json)
 * are the user `admin` until a User `admin` exists (a cluster from before users, or before the first
 * `orc user rotate admin`).
 */
export function keyOwner(store: Pick<ObjectStore, 'list'>, key: string, adminKeys: () => readonly string[], now?: number): string | undefined {
  const users = store.list('User')
  const owner = users.find((u) => u.spec?.publicKey === key)
  if (owner !== undefined) {
    // An expired key is refused by name, so its holder knows what to ask an admin for.
    const name = owner.metadata.name
    if (now !== undefined && userExpired(store, name, now)) {
      throw new OrcError(
        'forbidden',
        `the credential of user ${name} expired at ${String(owner.spec?.expiresAt)} (an admin gives it a new one: orc user rotate ${name})`,
        {
          reason: 'expired',
        },
      )
    }
    return name
  }
  if (users.some((u) => u.metadata.name === ADMIN_USER)) return undefined
  return adminKeys().includes(key) ? ADMIN_USER : undefined
}

/**
 * Who is behind a request a member forwards (member-api.ts): the user whose signature it carries,
 * checked here — signed for the forwarding member, within EVIDENCE_WINDOW_MS of this node's clock,
 * and when it is the request itself, its nonce not seen before (nonces are kept for twice the
 * window, then dropped: an older request is refused by its time) — or, without a signature, the user the member names, unless the
 * cluster requires users' signatures (then only that member's own socket users).
 */
export function forwardedUsers(c: {
  store: Pick<ObjectStore, 'list'>
  now: () => number
  adminKeys: () => readonly string[]
  nodeOf: (peer: string) => string | undefined
}): ForwardedUsers {
  const seen = new Map<string, number>()
  const refuse = (why: string): never => {
    throw new OrcError('forbidden', `forwarded request refused: ${why}`)
  }
  return {
    signedUser: (s, forwarder, once) => {
      const now = c.now()
      if (s.peer !== forwarder) refuse('the user signed it for another node')
      if (Math.abs(now - s.at) > EVIDENCE_WINDOW_MS) refuse(`signed at ${new Date(s.at).toISOString()}, more than 10 minutes from now`)
      if (!verifySignedRequest(s)) refuse("the user's signature does not verify")
      const user = keyOwner(c.store, s.key, c.adminKeys, now)
      if (user === undefined) refuse('the signing key belongs to no user of this cluster')
      for (const [n, at] of seen) if (at < now - 2 * EVIDENCE_WINDOW_MS) seen.delete(n)
      if (once && seen.has(s.nonce)) refuse('the signed request was forwarded before (a replay)')
      if (once) seen.set(s.nonce, s.at)
      return user!
    },
    unsignedAllowed: (user, peer) => unsignedRefused({ a: `user:${user}`, t: c.now() }, c.nodeOf(peer), userSignaturePolicy(c.store)) === undefined,
  }
}

// ---- the node's mesh ---------------------------------------------------------------------------

export interface ClusterNode {
  readonly mesh: Mesh
  readonly clusterId: string
  readonly peerId: string
  /** The cluster data keyring across members: delivery, retirement, offers after a rotation (secret-keys.ts). */
  readonly keys: KeyringDelivery
  /** The cluster routes: members, tokens, credential export, node removal, data key rotation. */
  routes(): RouteHandlers
  /** How pod requests are forwarded to the member running the pod (the shared namespaces' logs use it too). */
  readonly podProxy: LogsProxyComponents
  /** The logs route of a clustered node: forwarded to the member running the pod, else `local`. */
  logsRoute(local: RouteHandler<'podLogs'>): RouteHandler<'podLogs'>
  /** The exec and port-forward routes of a clustered node: forwarded to the member running the pod, else these. */
  streamRoutes(local: RouteHandlers): RouteHandlers
  /** Snapshots and exports of a Volume: forwarded to the member holding its data, else these. */
  volumeRoutes(local: RouteHandlers): RouteHandlers
  /** A member route on node `node` (replica syncs): its answer, or an error naming the node's state. */
  requestNode(node: string, req: ApiRequest, timeoutMs: number): Promise<ApiResponse>
  /** Ask every other live member for `path` (a member route), in parallel, each bounded by `timeoutMs`. */
  askMembers(path: string, timeoutMs: number): Promise<{ node: string; status?: number; body?: unknown; error?: string }[]>
  /** What the node's status answer gains from the mesh. */
  statusFields(): Pick<StatusView, 'mesh'>
  /**
   * Serve `handler` (the whole API) on the remote API, and `local` to members: this node's own
   * routes without forwarding (a forwarded request is answered here or refused, never forwarded
   * again) and without the cluster routes, behind the member allowlist.
   */
  serve(handler: ApiHandler, local: ApiHandler): void
  stop(): Promise<void>
}

function progressLine(p: JoinProgress, store: ObjectStore): string {
  switch (p.phase) {
    case 'connecting':
      return `connecting to ${p.addresses.join(', ')} …`
    case 'joining':
      return `presenting the token to ${p.peer} …`
    case 'admitted':
      return `admitted to cluster ${p.clusterId} (${p.members} members)`
    case 'syncing':
      return `syncing: received ${p.revisions} revisions, ${store.count()} objects`
    case 'ready':
      return `ready: ${store.count()} objects, ${p.members} members`
  }
}

async function writeSecret(path: string, text: string): Promise<void> {
  const fh = await open(path, 'w', 0o600)
  try {
    await fh.writeFile(text)
    await fh.sync()
  } finally {
    await fh.close()
  }
  await chmod(path, 0o600)
}

/**
 * Create (fresh data dir), restart (cluster.json present) or join (`setup.join`) the mesh of this
 * node and replicate `store` as its `cluster` scope.
 */
export async function startClusterMesh(c: {
  dataDir: string
  nodeName: string
  store: ObjectStore
  logger: Logger
  setup: MeshSetup
  clock: Clock
  random: Random
  /** Given the member directory before the mesh starts (the store's verifier reads it from the first sync on). */
  onDirectory?: (d: Pick<MemberDirectory, 'get'>) => void
  /** This node's copy of the cluster data keyring (agent.ts holds the one instance); loaded here once the mesh is up. */
  keyring: ClusterKeyring
  /** This node's image blobs as members get them (/orc/blobs/1.0.0); late-bound: agent/images/peers.ts LateBlobProvider. */
  blobs?: BlobProvider
}): Promise<ClusterNode> {
  const { store, dataDir } = c
  const log = c.logger.child({ module: 'cluster' })
  let removed = removedPeersOf(store)
  let handler: ApiHandler | undefined
  let memberHandler: ReturnType<typeof createMemberApiHandler> | undefined
  const directory = new RevocableDirectory(JsonFileMemberDirectory.inDataDir(dataDir), (p) => removed.has(p))
  c.onDirectory?.(directory)
  // The data keyring: served to members over /orc/keyring/1.0.0, fetched from them when missing.
  let meshRef: Mesh | undefined
  const keys = new KeyringDelivery({ keyring: c.keyring, store, peers: () => meshRef, clock: c.clock, log: c.logger })

  const vetJoiner = (info: MemberInfo): void => {
    const node = store.get({ kind: 'Node', namespace: '', name: info.name })
    if (node === undefined) return
    const peer = (node.status as Record<string, unknown> | undefined)?.peerId
    if (peer === info.peerId) return
    const gone = [...removed.values()].some((r) => r.name === info.name)
    throw new OrcError(
      'conflict',
      gone
        ? `node name ${info.name} belonged to a node removed from this cluster; join with another --name`
        : `node name ${info.name} is taken in this cluster; join with another --name`,
      { name: info.name },
    )
  }

  const opts: MeshOptions = {
    dataDir,
    name: c.nodeName,
    listen: c.setup.listen,
    announce: c.setup.announce,
    ...(c.setup.joinListen !== undefined ? { joinListen: c.setup.joinListen } : {}),
    privateRanges: unadvertisedRanges,
    scopes: { cluster: store },
    members: directory,
    logger: c.logger,
    clock: c.clock,
    random: c.random,
    tunables: c.setup.tunables,
    vetJoiner,
    apiKeyOwner: (key) => keyOwner(store, key, () => mesh.cluster.adminKeys, c.clock.now()),
    // Users' keys dial as credential peers (never a trial slot); the API checks each is still a user's.
    credentialKeys: () => store.list('User').flatMap((u) => (typeof u.spec?.publicKey === 'string' ? [u.spec.publicKey] : [])),
    apiHandler: async (req, ctx) => {
      if (handler === undefined) return { status: 503, body: errorBody(new OrcError('unavailable', 'node is starting')) }
      return handler({
        method: req.method,
        path: req.path,
        query: req.query,
        body: req.body,
        principal: { kind: 'user', name: ctx.user, via: 'remote', ...(ctx.signed !== undefined ? { signed: ctx.signed } : {}) },
      })
    },
    memberApiHandler: async (req, ctx) => {
      if (memberHandler === undefined) return { status: 503, body: errorBody(new OrcError('unavailable', 'node is starting')) }
      return memberHandler(req, ctx)
    },
    keyring: keys.provider(),
    ...(c.blobs !== undefined ? { blobs: c.blobs } : {}),
  }
  if (opts.listen === undefined) {
    const { DEFAULT_LISTEN } = await import('../mesh/index.ts')
    opts.listen = DEFAULT_LISTEN
  }

  let mesh: Mesh
  try {
    mesh = await openMesh()
  } catch (err) {
    // (The join listener names itself and its flag: mesh.ts, startHosts.)
    const joinListener = err instanceof OrcError && err.details.joinListen !== undefined
    if (!joinListener && err instanceof Error && /listened on|EADDRINUSE|EADDRNOTAVAIL/.test(err.message)) {
      throw new OrcError(
        'unavailable',
        `listen on ${opts.listen!.join(', ')}: address in use or not on this machine (another orc agent? choose another with --listen)`,
        {
          listen: opts.listen,
        },
        err,
      )
    }
    throw err
  }

  async function openMesh(): Promise<Mesh> {
    if ((await loadCluster(dataDir)) !== undefined) return startMesh(opts)
    if (c.setup.join !== undefined) {
      const j = c.setup.join
      const say = j.onProgress ?? (() => {})
      const peerAddrs = j.peer !== undefined ? await resolvePeerAddress(j.peer) : undefined
      const m = await joinMesh({ ...opts, token: j.token, peerAddrs, onProgress: (p) => say(progressLine(p, store)) })
      removed = removedPeersOf(store)
      // Admitted: a member hands over the data keyring now, so `orc join` ends with it on disk.
      meshRef = m
      keys.start()
      try {
        await keys.ready(m.tunables.joinTimeoutMs)
        say(`received the cluster data key (${KEYRING_FILE})`)
      } catch (err) {
        log.warn({ err: (err as Error).message }, 'no member gave the cluster keyring yet; retrying in the background')
        say('the cluster data key has not arrived yet: this node keeps asking its members (Secrets cannot be opened here until then)')
      }
      return m
    }
    // A data dir from before the mesh keeps its cluster id. The admin credential is on disk before
    // the host starts, so a failed first start (port in use) does not lose it.
    const existing = store.list('Cluster')[0]?.spec?.id
    const { adminCredential } = await initCluster({
      dataDir,
      random: c.random,
      now: c.clock.now(),
      clusterId: typeof existing === 'string' && existing !== '' ? existing : undefined,
    })
    await writeSecret(join(dataDir, ADMIN_CREDENTIAL_FILE), adminCredential + '\n')
    // The cluster data key (Secrets): made here, handed to joiners after admission.
    if (existsSync(join(dataDir, KEYRING_FILE)) === false) await createKeyringFile(dataDir, c.random, c.clock.now())
    return startMesh(opts)
  }

  // Removal is decided by the store: apply every new tombstone to the mesh as it arrives.
  const applied = new Set<string>()
  const applyRemovals = async (): Promise<void> => {
    removed = removedPeersOf(store)
    for (const [peerId, r] of removed) {
      if (applied.has(peerId)) continue
      applied.add(peerId)
      if (peerId === mesh.peerId) {
        log.error({ peer: peerId }, 'this node was removed from the cluster; it keeps its local state but no peer accepts it')
        continue
      }
      log.info({ peer: peerId, name: r.name }, 'member removed')
      await mesh.removeMember(peerId).catch((err) => log.warn({ err, peer: peerId }, 'remove member'))
    }
  }
  await applyRemovals()
  await c.keyring.load()
  meshRef = mesh
  keys.start()
  const traceChanges = log.isLevelEnabled('trace') // replication latency is measured from these (test/bench/mesh.bench.ts)
  const unmerged = traceChanges ? store.onRemoteMerged((keys) => log.trace({ keys: keys.slice(0, 100) }, 'objects merged')) : () => undefined
  const unsubscribe = store.onChange((keys) => {
    if (traceChanges) log.trace({ keys: keys.slice(0, 100) }, 'objects changed')
    if (keys.some((k) => k.startsWith('Cluster/'))) void applyRemovals()
  })

  const podProxy: LogsProxyComponents = {
    store,
    nodeName: c.nodeName,
    members: () => mesh.members(),
    forward: async (peer, req, timeoutMs) => {
      const r = await mesh.memberRequest(
        peer,
        {
          method: req.method,
          path: req.path,
          query: flatQuery(req.query),
          ...(req.body !== undefined ? { body: req.body } : {}),
          ...(req.principal !== undefined ? { principal: req.principal } : {}),
        },
        { timeoutMs },
      )
      return { status: r.status, body: r.body ?? null }
    },
    now: () => c.clock.now(),
    log,
  }
  const node: ClusterNode = {
    mesh,
    clusterId: mesh.clusterId,
    peerId: mesh.peerId,
    keys,
    routes: () => ({
      ...clusterRoutes({ mesh, store, dataDir, clock: c.clock, applyRemovals }),
      ...secretKeyRoutes({ delivery: keys, random: c.random, now: () => c.clock.now() }),
    }),
    podProxy,
    logsRoute: (local) => proxiedLogs(podProxy, local),
    requestNode: (node, req, timeoutMs) =>
      forwardToNode(podProxy, req, { kind: 'Node', namespace: '', name: node }, node, 'the replica is on', timeoutMs, 'its copies'),
    volumeRoutes: (local) => {
      const out: RouteHandlers = {}
      // A snapshot or an export copies the whole volume on its node before it answers.
      for (const name of ['volumeSnapshot', 'volumeRestoreSnapshot', 'volumeExport'] as const) {
        const h = local[name]
        if (h !== undefined) out[name] = proxiedVolumeRoute(podProxy, h as RouteHandler<typeof name>, 10 * 60_000, 'its snapshots') as never
      }
      // A VM's console is on the node it is pinned to.
      if (local.vmLogs) out.vmLogs = proxiedVmLogs(podProxy, local.vmLogs)
      // Its console sessions too (an exchange long-polls up to 20 s there).
      if (local.vmConsole) out.vmConsole = proxiedVmRoute(podProxy, local.vmConsole, 30_000)
      if (local.vmConsoleIo) out.vmConsoleIo = proxiedVmRoute(podProxy, local.vmConsoleIo, 35_000)
      return out
    },
    streamRoutes: (local) => {
      // An exchange long-polls up to 20 s on the pod's node; a start may wait for a runtime launch.
      const out: RouteHandlers = {}
      if (local.podExec) out.podExec = proxiedPodRoute(podProxy, local.podExec, 30_000, 'exec sessions')
      if (local.podExecIo) out.podExecIo = proxiedPodRoute(podProxy, local.podExecIo, 35_000, 'exec sessions')
      if (local.podPortForward) out.podPortForward = proxiedPodRoute(podProxy, local.podPortForward, 30_000, 'its ports')
      if (local.podPortForwardIo) out.podPortForwardIo = proxiedPodRoute(podProxy, local.podPortForwardIo, 35_000, 'its ports')
      return out
    },
    askMembers: async (path, timeoutMs) => {
      const others = mesh.members().filter((m) => !m.self && m.state !== 'dead')
      return Promise.all(
        others.map(async (m) => {
          try {
            const r = await mesh.memberRequest(m.peerId, { method: 'GET', path }, { timeoutMs })
            return { node: m.name, status: r.status, body: r.body }
          } catch (err) {
            return { node: m.name, error: err instanceof Error ? err.message : String(err) }
          }
        }),
      )
    },
    statusFields: () => {
      const members = mesh.members()
      const count = (s: string) => members.filter((x) => !x.self && x.state === s).length
      return {
        mesh: {
          peerId: mesh.peerId,
          clusterId: mesh.clusterId,
          addresses: mesh.addresses(),
          joinAddresses: mesh.joinAddresses(),
          state: 'running',
          members: { total: members.length, alive: count('alive') + 1, suspect: count('suspect'), dead: count('dead') },
        },
      }
    },
    serve(api, local) {
      memberHandler = createMemberApiHandler(
        local,
        log,
        forwardedUsers({
          store,
          now: () => c.clock.now(),
          adminKeys: () => mesh.cluster.adminKeys,
          nodeOf: (peer) => mesh.members().find((m) => m.peerId === peer)?.name,
        }),
      )
      handler = api
    },
    async stop() {
      keys.stop()
      unsubscribe()
      unmerged()
      await mesh.stop()
    },
  }
  return node
}

/** The mesh carries one value per query key (the last one, as the API reads them). */
function flatQuery(q: Query | undefined): Record<string, string> | undefined {
  if (q === undefined) return undefined
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(q)) {
    const last = Array.isArray(v) ? v[v.length - 1] : v
    if (last !== undefined) out[k] = last
  }
  return out
}

// ---- API routes --------------------------------------------------------------------------------

interface RouteDeps {
  mesh: Mesh
  store: ObjectStore
  dataDir: string
  clock: { now(): number }
  applyRemovals(): Promise<void>
}

const AUTHOR = /^(user|controller):[A-Za-z0-9][-A-Za-z0-9_.@]{0,127}$/

const bodyOf = (b: unknown): Record<string, unknown> => (isPlainObject(b) ? b : {})

function clusterRoutes(d: RouteDeps) {
  const { mesh } = d
  return {
    members: () => ({ self: mesh.peerId, members: mesh.members() }),
    createToken: async ({ body }) => {
      const b = bodyOf(body)
      const ttlMs = b.ttlMs === undefined ? 3_600_000 : Number(b.ttlMs)
      const uses = b.uses === undefined ? 1 : Number(b.uses)
      const t = await mesh.createToken({ ttlMs, uses })
      return { ...t, issuer: mesh.peerId, addresses: mesh.addresses() }
    },
    tokens: async () => ({ tokens: (await mesh.listTokens()).map(({ secretHash: _s, ...r }) => r) }),
    revokeToken: async ({ params }) => {
      const { secretHash: _s, ...r } = await mesh.revokeToken(params.id)
      return { token: r }
    },
    credential: async () => {
      let admin: string
      try {
        admin = (await readFile(join(d.dataDir, ADMIN_CREDENTIAL_FILE), 'utf8')).trim()
      } catch {
        throw new OrcError(
          'not_found',
          'this node does not hold the admin credential: export it on the node that created the cluster (orc up on a fresh data dir)',
        )
      }
      if (keyOwner(d.store, publicKeyOfCredential(admin), () => mesh.cluster.adminKeys) !== ADMIN_USER) {
        throw new OrcError(
          'conflict',
          `${ADMIN_CREDENTIAL_FILE} holds the cluster's first admin key, retired by 'orc user rotate admin': use the credential that command printed`,
        )
      }
      return { credential: encodeRemoteCredential(mesh.cluster, admin) }
    },
    removeNode: async ({ params, body }) => {
      const b = bodyOf(body)
      const author = typeof b.author === 'string' && AUTHOR.test(b.author) ? b.author : undefined
      if (author === undefined) throw new OrcError('invalid', 'author: must be user:<name> or controller:<name>')
      const reason = typeof b.reason === 'string' && b.reason !== '' ? b.reason.slice(0, 1024) : undefined
      return removeNode(d, params.name, author, reason)
    },
  } satisfies RouteHandlers
}

async function removeNode(d: RouteDeps, name: string, author: string, reason: string | undefined): Promise<{ node: string; peerId: string; removed: true }> {
  const { store, mesh } = d
  const ref = { kind: 'Node', namespace: '', name }
  const node = store.get(ref)
  if (node === undefined) throw new OrcError('not_found', `node/${name} not found`, { ...ref })
  const peerId = (node.status as Record<string, unknown> | undefined)?.peerId
  if (typeof peerId !== 'string' || peerId === '') {
    throw new OrcError('invalid', `node/${name} has no peer id recorded (it never ran with the mesh), so there is nothing to revoke`)
  }
  if (peerId === mesh.peerId) throw new OrcError('invalid', `node/${name} is this node: run orc node remove on another node of the cluster`)
  const cluster = store.list('Cluster')[0] as StoredObject | undefined
  if (cluster === undefined) throw new OrcError('unavailable', 'this node has no Cluster object yet (still syncing?)')
  const now = d.clock.now()
  const why = `${author} removed node ${name}${reason ? `: ${reason}` : ''}`
  await store.patch(
    { kind: 'Cluster', namespace: '', name: cluster.metadata.name },
    [{ path: ['status', 'removedPeers', peerId], value: { name, at: new Date(now).toISOString(), by: author, ...(reason ? { reason } : {}) } }],
    { author: CLUSTER_CONTROLLER, reason: why, now },
  )
  await store.patch(
    ref,
    [
      { path: ['status', 'state'], value: 'Removed' },
      { path: ['status', 'removedAt'], value: new Date(now).toISOString() },
    ],
    { author: NODE_CONTROLLER, reason: why, now },
  )
  await d.applyRemovals()
  return { node: name, peerId, removed: true as const }
}
