/**
 * The local API's route table: every route once, with its method, path pattern, the permission it
 * requires, what a client sends and what it answers. The agent binds a handler to each name
 * (router.ts); the CLI builds its calls from the same entries (cli/call.ts), so a path or a response
 * shape is written in one place. The same table serves the remote API (`orc --node`, mesh/rpc.ts)
 * and, for the names in MEMBER_ROUTES, the member API between nodes.
 *
 * This file holds data and types only: the CLI imports it without loading any handler. The response
 * types the feature modules produce are declared in api-types.ts, which both import, so the table
 * imports no feature module, not even for a type.
 */

import type { MemberView, TokenRecord } from '../mesh/index.ts'
import type { Change, ObjectRef, VolumeSnapshotEntry } from '../model/index.ts'
import type { PodExplanation } from '../sched/index.ts'
import type { Revision, StoredObject, WriteResult } from '../store/index.ts'
import type { ControllerGraph } from '../workflow/index.ts'
import type {
  ApplyResultItem,
  ClusterEvent,
  DownResponse,
  FederationProposalView,
  FederationView,
  Finding,
  ImageInspectView,
  ImageListRow,
  ImagePullView,
  NetworkReport,
  NodeInfo,
  PeerRow,
  RolloutView,
  RotateKeyAnswer,
  StabilityAnswer,
} from './api-types.ts'

/**
 * What a route requires of its caller, checked on every request (agent/authz.ts, model/rbac.ts).
 * `kind` names the object kind the route touches: a kind, `:kind` for the kind named in the path,
 * `*` for the kinds in the body (apply); absent when the route touches no stored object.
 * `sub` is a part of an object with its own right, as Kubernetes' `pods/log`.
 */
export interface Permission {
  verb: 'get' | 'list' | 'apply' | 'delete' | 'admin'
  kind?: string
  sub?: 'logs' | 'history' | 'reveal' | 'exec' | 'portforward' | 'console'
}

export type Method = 'GET' | 'POST' | 'DELETE'

export interface RouteSpec {
  method: Method
  /** Literal segments and `:param`s, e.g. `/v1/objects/:kind/:ns/:name`. */
  path: string
  permission: Permission
  /** Status of a successful answer; default 200. */
  status?: number
}

/** A value a client may put in a query; the transports turn it into text. */
export type QueryValue = string | number | boolean | string[] | undefined

interface Shape {
  response: unknown
  body?: unknown
  query?: Record<string, QueryValue>
}

/** The types ride on the entry as an absent field, so each route says them beside its path. */
const route =
  <T extends Shape>() =>
  <const S extends RouteSpec>(spec: S): S & { readonly types?: T } =>
    spec

// ---- shapes shared by several routes -----------------------------------------------------------

/** `GET /v1/status`: the agent itself, plus what ops (http, peers) and the mesh (mesh) add. */
export interface StatusView {
  node: NodeInfo
  objects: number
  counts: Record<string, number>
  uptimeSeconds: number
  /** The HTTPS install/metrics listener: where, and curl's pin of its certificate key. */
  http?: { address: string; pin: string } | null
  peers?: PeerRow[]
  mesh?: MeshStatus
}

export interface MeshStatus {
  peerId: string
  clusterId: string
  addresses: string[]
  /** Where new nodes redeem this node's join tokens (its join host); empty when `--join-listen off`. */
  joinAddresses: string[]
  state: string
  members: { total: number; alive: number; suspect: number; dead: number }
}

/**
 * A write: why (recorded in history). The author is the request's principal (`user:NAME`); the
 * router sets it and refuses a body naming anyone else.
 */
/** One piece of `orc volume export`: `data` (base64) is `total` bytes' slice at `offset`; `done` on the last (the node then drops its copy). */
export interface VolumeExportChunk {
  id: string
  node: string
  offset: number
  total: number
  data: string
  done: boolean
}

interface Authored {
  author?: string
  reason?: string
}

/** `GET /v1/pods/NS/NAME/logs`: the lines; a follow poll adds where to continue and whether the container ended. */
export interface LogsAnswer {
  container: string
  revision: number | null
  lines: string[]
  cursor?: number
  ended?: boolean
}

/** `POST /v1/pods/NS/NAME/exec`: a command to run in a container of the pod (its node runs it). */
export interface ExecStartBody {
  /** Default: the pod's first container. */
  container?: string
  command: string[]
  tty?: boolean
  rows?: number
  cols?: number
  /** TERM etc. for a tty session. */
  env?: Record<string, string>
}

/** `POST /v1/pods/NS/NAME/portforward`: a TCP connection to PORT inside the pod's network namespace. */
export interface PortForwardStartBody {
  port: number
  container?: string
}

/** A session on the pod's node (exec or one forwarded connection); every later call names it. */
export interface PodStreamOpened {
  session: string
  container: string
  node: string
}

/**
 * One exchange with a session: what to write (base64), then a long-poll for what came out (base64).
 * `eof` ends the command's stdin (or the connection's write side); `close` ends the session.
 */
export interface PodStreamIoBody {
  stdin?: string
  eof?: boolean
  close?: boolean
  /** How long to wait for output when there is none yet (≤ 20 s, default 10 s). */
  waitMs?: number
  /** false: only write (a writer beside a long-polling reader takes no output, so output stays in order). */
  read?: boolean
}

export interface PodStreamIoAnswer {
  stdout: string
  stderr: string
  /** Present once the command ended (or the connection closed) and all its output was sent. */
  exit?: { code: number | null; signal: string | null }
}

/** `orc top`: CPU and memory of a node and of the pods it runs, read from /proc and the pods' cgroups. */
export interface TopPodRow {
  namespace: string
  name: string
  node: string
  /** CPU in millicores, averaged over the sampling window (null: no cgroup accounting). */
  cpuMillis: number | null
  /** Cumulative CPU time in seconds (the cgroup's counter). */
  cpuSeconds: number | null
  memoryBytes: number | null
  containers: { name: string; cpuMillis: number | null; cpuSeconds: number | null; memoryBytes: number | null }[]
}

export interface TopNodeRow {
  node: string
  cpuMillis: number
  cpuCores: number
  memoryBytes: number
  memoryTotalBytes: number
  pods: number
}

export interface TopAnswer {
  nodes: TopNodeRow[]
  pods: TopPodRow[]
  /** VirtualMachines: their qemu's use from its cgroup (one container, `qemu`); absent from members of older versions. */
  vms?: TopPodRow[]
  /** Members that did not answer, and why. */
  unreachable: { node: string; error: string }[]
}

export interface LogsQuery extends Record<string, QueryValue> {
  container?: string
  revision?: string
  tail?: string
  follow?: string
  cursor?: string
  waitMs?: string
}

/** `GET /v1/watch/KIND`: the list as listObjects, once its version differs from `known`. */
export interface WatchQuery extends Record<string, QueryValue> {
  namespace?: string
  all?: string | number | boolean
  /** The version of the list the client has; absent: answer at once. */
  known?: string
  /** How long to wait for a change (ms, at most 25 000; default 10 000). */
  waitMs?: string | number
}

export interface WatchAnswer {
  kind: string
  /** Names the list's state: equal versions, equal objects (every write changes it). */
  version: string
  /** The whole list when it changed; absent when the wait ended without a change. */
  items?: StoredObject[]
}

export type TokenView = Omit<TokenRecord, 'secretHash'>

export interface FederationAnswer {
  federation: FederationView
}

/** `GET /v1/whoami`: the principal the node sees, and its roles. */
export interface WhoAmI {
  user: string
  author: string
  via: string
  roles: string[]
  /** When the caller's credential stops being accepted (UTC ISO); absent: never. */
  expiresAt?: string
}

export interface UserView {
  name: string
  roles: string[]
  key: string
  created: string | undefined
  /** UTC ISO; absent: the key does not expire. */
  expiresAt?: string
}

/** When a new key stops being accepted: in `expiresInMs` from the agent's now, or at `expiresAt` (UTC ISO). Neither: never. */
export interface KeyExpiry {
  expiresInMs?: number
  expiresAt?: string
}

/** A new key of a user: the credential is shown once and never stored. */
export interface UserCredential {
  user: string
  roles: string[]
  credential: string
  expiresAt?: string
}

// ---- the table ---------------------------------------------------------------------------------

export const ROUTES = {
  // objects (api.ts)
  status: route<{ response: StatusView }>()({ method: 'GET', path: '/v1/status', permission: { verb: 'get' } }),
  apply: route<{ body: Authored & { objects: unknown[]; namespace?: string }; response: { results: ApplyResultItem[] } }>()({
    method: 'POST',
    path: '/v1/apply',
    permission: { verb: 'apply', kind: '*' },
  }),
  listObjects: route<{ query: { namespace?: string; all?: string | number | boolean }; response: { kind: string; items: StoredObject[] } }>()({
    method: 'GET',
    path: '/v1/objects/:kind',
    permission: { verb: 'list', kind: ':kind' },
  }),
  // A long poll (`orc get -w`): answers when the list differs from the version the client knows, or after waitMs with no items.
  watchObjects: route<{ query: WatchQuery; response: WatchAnswer }>()({
    method: 'GET',
    path: '/v1/watch/:kind',
    permission: { verb: 'list', kind: ':kind' },
  }),
  getObject: route<{ response: { object: StoredObject } }>()({
    method: 'GET',
    path: '/v1/objects/:kind/:ns/:name',
    permission: { verb: 'get', kind: ':kind' },
  }),
  deleteObject: route<{ body: Authored; response: { revision: Revision } }>()({
    method: 'DELETE',
    path: '/v1/objects/:kind/:ns/:name',
    permission: { verb: 'delete', kind: ':kind' },
  }),
  history: route<{ query: { author?: string[]; excludeAuthor?: string[]; since?: string | number }; response: { revisions: Revision[] } }>()({
    method: 'GET',
    path: '/v1/objects/:kind/:ns/:name/history',
    permission: { verb: 'get', kind: ':kind', sub: 'history' },
  }),
  revision: route<{ response: { object: StoredObject } }>()({
    method: 'GET',
    path: '/v1/objects/:kind/:ns/:name/revisions/:rev',
    permission: { verb: 'get', kind: ':kind', sub: 'history' },
  }),
  diff: route<{ query: { from: string | number; to: string | number }; response: { changes: Change[] } }>()({
    method: 'GET',
    path: '/v1/objects/:kind/:ns/:name/diff',
    permission: { verb: 'get', kind: ':kind', sub: 'history' },
  }),
  rollback: route<{ body: Authored & { to?: string | number }; response: WriteResult }>()({
    method: 'POST',
    path: '/v1/objects/:kind/:ns/:name/rollback',
    permission: { verb: 'apply', kind: ':kind' },
  }),

  // secrets (secrets-api.ts): a Secret with its values opened (`orc get secret NAME --show-secrets`)
  revealSecret: route<{ response: { object: StoredObject } }>()({
    method: 'GET',
    path: '/v1/secrets/:ns/:name/reveal',
    permission: { verb: 'get', kind: 'Secret', sub: 'reveal' },
  }),

  // pods (pods/api.ts, pods/logs-proxy.ts, sched/api.ts)
  podLogs: route<{ query: LogsQuery; response: LogsAnswer }>()({
    method: 'GET',
    path: '/v1/pods/:ns/:name/logs',
    permission: { verb: 'get', kind: 'Pod', sub: 'logs' },
  }),
  // a VirtualMachine's serial console (vms/api.ts), forwarded to the node that runs it
  vmLogs: route<{ query: LogsQuery; response: LogsAnswer }>()({
    method: 'GET',
    path: '/v1/vms/:ns/:name/logs',
    permission: { verb: 'get', kind: 'VirtualMachine', sub: 'logs' },
  }),
  // a VirtualMachine's serial console, interactive (vms/console.ts): a session on the VM's node
  vmConsole: route<{ body: Record<string, never>; response: PodStreamOpened }>()({
    method: 'POST',
    path: '/v1/vms/:ns/:name/console',
    permission: { verb: 'apply', kind: 'VirtualMachine', sub: 'console' },
  }),
  vmConsoleIo: route<{ body: PodStreamIoBody; response: PodStreamIoAnswer }>()({
    method: 'POST',
    path: '/v1/vms/:ns/:name/console/:session',
    permission: { verb: 'apply', kind: 'VirtualMachine', sub: 'console' },
  }),
  // exec and port-forward (pods/streams.ts): sessions on the pod's node, reached through any node
  podExec: route<{ body: ExecStartBody; response: PodStreamOpened }>()({
    method: 'POST',
    path: '/v1/pods/:ns/:name/exec',
    permission: { verb: 'apply', kind: 'Pod', sub: 'exec' },
  }),
  podExecIo: route<{ body: PodStreamIoBody; response: PodStreamIoAnswer }>()({
    method: 'POST',
    path: '/v1/pods/:ns/:name/exec/:session',
    permission: { verb: 'apply', kind: 'Pod', sub: 'exec' },
  }),
  podPortForward: route<{ body: PortForwardStartBody; response: PodStreamOpened }>()({
    method: 'POST',
    path: '/v1/pods/:ns/:name/portforward',
    permission: { verb: 'apply', kind: 'Pod', sub: 'portforward' },
  }),
  podPortForwardIo: route<{ body: PodStreamIoBody; response: PodStreamIoAnswer }>()({
    method: 'POST',
    path: '/v1/pods/:ns/:name/portforward/:session',
    permission: { verb: 'apply', kind: 'Pod', sub: 'portforward' },
  }),
  // `orc top`: this node's figures (topLocal, also asked of each member) and the cluster's (top)
  topLocal: route<{ response: TopAnswer }>()({ method: 'GET', path: '/v1/top/local', permission: { verb: 'list', kind: 'Pod' } }),
  top: route<{ response: TopAnswer }>()({ method: 'GET', path: '/v1/top', permission: { verb: 'list', kind: 'Pod' } }),
  podPlacement: route<{ response: { explainedBy: string; explanation: PodExplanation; text: string } }>()({
    method: 'GET',
    path: '/v1/pods/:ns/:name/placement',
    permission: { verb: 'get', kind: 'Pod' },
  }),
  // An unpinned VirtualMachine's placement (`orc why vm/NAME`): explainPod on its scheduler entry
  vmPlacement: route<{ response: { explainedBy: string; explanation: PodExplanation; text: string } }>()({
    method: 'GET',
    path: '/v1/vms/:ns/:name/placement',
    permission: { verb: 'get', kind: 'VirtualMachine' },
  }),
  controllers: route<{ response: ControllerGraph & { text: string } }>()({ method: 'GET', path: '/v1/controllers', permission: { verb: 'get' } }),
  forgetNode: route<{ body: Authored & { force?: boolean }; response: { node: string; forgotten: true; pods: number } }>()({
    method: 'POST',
    path: '/v1/nodes/:name/forget',
    permission: { verb: 'admin', kind: 'Node' },
  }),

  // registry images on this node (images/api.ts): pulls are started in the background and watched through `images`
  images: route<{ response: { node: string; images: ImageListRow[]; pulls: ImagePullView[]; blobBytes: number } }>()({
    method: 'GET',
    path: '/v1/images',
    permission: { verb: 'get' },
  }),
  imagePull: route<{ body: { image: string; secrets?: string[] }; response: { image: string; digest: string; pull: ImagePullView } }>()({
    method: 'POST',
    path: '/v1/images/:ns/pull',
    permission: { verb: 'apply', kind: 'Pod' },
    status: 202,
  }),
  imageInspect: route<{ query: { image: string }; response: ImageInspectView }>()({ method: 'GET', path: '/v1/images/inspect', permission: { verb: 'get' } }),
  imageRemove: route<{ body: { image: string }; response: { image: string; removed: string[]; freedBytes: number } }>()({
    method: 'POST',
    path: '/v1/images/remove',
    permission: { verb: 'admin' },
  }),
  imagePrune: route<{ body: { budgetBytes?: number }; response: { removed: string[]; freedBytes: number; images: string[] } }>()({
    method: 'POST',
    path: '/v1/images/prune',
    permission: { verb: 'admin' },
  }),

  // Volumes (volumes/api.ts): answered by the node holding the volume's data (forwarded there)
  volumeSnapshot: route<{ body: Authored & { name?: string }; response: { node: string; snapshot: VolumeSnapshotEntry } }>()({
    method: 'POST',
    path: '/v1/volumes/:ns/:name/snapshot',
    permission: { verb: 'apply', kind: 'Volume' },
  }),
  volumeRestoreSnapshot: route<{ body: Authored & { snapshot: string }; response: { node: string; snapshot: string } }>()({
    method: 'POST',
    path: '/v1/volumes/:ns/:name/snapshots/restore',
    permission: { verb: 'apply', kind: 'Volume' },
  }),
  /** A deleted Volume made again with its data (kept on its node for the grace period). */
  volumeRestore: route<{ body: Authored; response: { node: string; fromUid: string; revision: number | undefined } }>()({
    method: 'POST',
    path: '/v1/volumes/:ns/:name/restore',
    permission: { verb: 'apply', kind: 'Volume' },
  }),
  /** Replication between nodes (volumes/replicas.ts): a replica's manifest, asked by the volume's primary only. */
  volumeReplicaManifest: route<{ query: { uid?: string }; response: { entries: unknown[] } }>()({
    method: 'GET',
    path: '/v1/volumes/:ns/:name/replica/manifest',
    permission: { verb: 'admin' },
  }),
  /** A piece of a sync from the primary to a replica (base64 tar bytes at `offset`; the last, `done`, applies it). */
  volumeReplicaSync: route<{ body: Record<string, unknown>; response: { node: string; applied: boolean } }>()({
    method: 'POST',
    path: '/v1/volumes/:ns/:name/replica/sync',
    permission: { verb: 'admin' },
  }),
  /** The block-level sync a replica's copy is at (asked by the primary before a block-level sync of a VM's disk). */
  volumeReplicaBlock: route<{ query: { uid?: string }; response: { node: string; base?: string } }>()({
    method: 'GET',
    path: '/v1/volumes/:ns/:name/replica/block',
    permission: { verb: 'admin' },
  }),
  /** A piece of a block-level sync (block ranges and their base64 bytes; the last, `done`, applies it). */
  volumeReplicaBlockSync: route<{ body: Record<string, unknown>; response: { node: string; applied: boolean } }>()({
    method: 'POST',
    path: '/v1/volumes/:ns/:name/replica/blocksync',
    permission: { verb: 'admin' },
  }),
  /** A tar of the volume, in chunks: the first call (no `id`) takes it, each answers `chunk` bytes from `offset` (base64). */
  volumeExport: route<{ query: { id?: string; offset?: string }; response: VolumeExportChunk }>()({
    method: 'GET',
    path: '/v1/volumes/:ns/:name/export',
    permission: { verb: 'get', kind: 'Volume' },
  }),
  // rollouts (deployments/api.ts)
  rollout: route<{ response: RolloutView }>()({ method: 'GET', path: '/v1/rollouts/:ns/:name', permission: { verb: 'get', kind: 'PinnedDeployment' } }),
  rolloutAction: route<{
    body: Authored & { nextReplicas?: number; nextPercent?: number }
    response: { summary: string; changed: boolean; revision: number | undefined; rollout: RolloutView }
  }>()({ method: 'POST', path: '/v1/rollouts/:ns/:name/:action', permission: { verb: 'apply', kind: 'PinnedDeployment' } }),

  // the node (network/api.ts, stability.ts, ops/node-ops.ts)
  network: route<{ response: NetworkReport }>()({ method: 'GET', path: '/v1/network', permission: { verb: 'get' } }),
  down: route<{ response: DownResponse }>()({ method: 'POST', path: '/v1/down', permission: { verb: 'admin' }, status: 202 }),
  stability: route<{ response: StabilityAnswer }>()({ method: 'GET', path: '/v1/stability', permission: { verb: 'get' } }),
  clock: route<{ response: { now: number } }>()({ method: 'GET', path: '/v1/clock', permission: { verb: 'get' } }),
  metrics: route<{ response: { text: string } }>()({ method: 'GET', path: '/v1/ops/metrics', permission: { verb: 'get' } }),
  doctor: route<{ response: { findings: Finding[] } }>()({ method: 'GET', path: '/v1/ops/doctor', permission: { verb: 'get' } }),
  events: route<{
    query: { target?: string; namespace?: string; since?: string | number; limit?: string | number }
    response: { events: ClusterEvent[]; now: number }
  }>()({
    method: 'GET',
    path: '/v1/events',
    permission: { verb: 'list', kind: '*', sub: 'history' },
  }),

  // the cluster (cluster.ts)
  members: route<{ response: { self: string; members: MemberView[] } }>()({ method: 'GET', path: '/v1/members', permission: { verb: 'list' } }),
  createToken: route<{
    body: { ttlMs?: number; uses?: number }
    response: { token: string; id: string; expiresAt: number; uses: number; issuer: string; addresses: string[] }
  }>()({ method: 'POST', path: '/v1/cluster/tokens', permission: { verb: 'admin' } }),
  tokens: route<{ response: { tokens: TokenView[] } }>()({ method: 'GET', path: '/v1/cluster/tokens', permission: { verb: 'admin' } }),
  revokeToken: route<{ response: { token: TokenView } }>()({ method: 'DELETE', path: '/v1/cluster/tokens/:id', permission: { verb: 'admin' } }),
  credential: route<{ response: { credential: string } }>()({ method: 'GET', path: '/v1/cluster/credential', permission: { verb: 'admin' } }),
  removeNode: route<{ body: Authored; response: { node: string; peerId: string; removed: true } }>()({
    method: 'POST',
    path: '/v1/cluster/nodes/:name/remove',
    permission: { verb: 'admin', kind: 'Node' },
  }),

  // identities (users.ts)
  whoami: route<{ response: WhoAmI }>()({ method: 'GET', path: '/v1/whoami', permission: { verb: 'get' } }),
  users: route<{ response: { users: UserView[] } }>()({ method: 'GET', path: '/v1/users', permission: { verb: 'list', kind: 'User' } }),
  addUser: route<{ body: { name: string; role: string; description?: string; reason?: string } & KeyExpiry; response: UserCredential }>()({
    method: 'POST',
    path: '/v1/users',
    permission: { verb: 'admin', kind: 'User' },
    status: 201,
  }),
  removeUser: route<{ body: { reason?: string }; response: { user: string; removed: true } }>()({
    method: 'DELETE',
    path: '/v1/users/:name',
    permission: { verb: 'admin', kind: 'User' },
  }),
  rotateUser: route<{ body: { reason?: string } & KeyExpiry; response: UserCredential }>()({
    method: 'POST',
    path: '/v1/users/:name/rotate',
    permission: { verb: 'admin', kind: 'User' },
  }),

  // the cluster data key of Secrets (secret-keys.ts): a new key, every Secret re-sealed under it
  rotateSecretKey: route<{ body: { reason?: string }; response: RotateKeyAnswer }>()({
    method: 'POST',
    path: '/v1/secrets/rotate-key',
    permission: { verb: 'admin', kind: 'Secret' },
  }),

  // federations (federation/routes.ts)
  federations: route<{ response: { federations: FederationView[] } }>()({ method: 'GET', path: '/v1/federations', permission: { verb: 'list' } }),
  createFederation: route<{ body: { name: string; namespaces: string[]; as?: string; author?: string }; response: FederationAnswer }>()({
    method: 'POST',
    path: '/v1/federations',
    permission: { verb: 'admin' },
  }),
  joinFederation: route<{ body: { token: string; peer?: string; as?: string; author?: string }; response: FederationAnswer }>()({
    method: 'POST',
    path: '/v1/federations/join',
    permission: { verb: 'admin' },
  }),
  federation: route<{ response: FederationAnswer }>()({ method: 'GET', path: '/v1/federations/:name', permission: { verb: 'get' } }),
  federationToken: route<{
    body: { ttlSeconds?: number; readmit?: string; author?: string }
    response: { token: string; expiresAt: number; federation: string; addresses: string[] }
  }>()({
    method: 'POST',
    path: '/v1/federations/:name/token',
    permission: { verb: 'admin' },
  }),
  leaveFederation: route<{ body: { author?: string }; response: FederationAnswer }>()({
    method: 'POST',
    path: '/v1/federations/:name/leave',
    permission: { verb: 'admin' },
  }),
  removeFederationCluster: route<{ body: { author?: string }; response: FederationAnswer }>()({
    method: 'DELETE',
    path: '/v1/federations/:name/clusters/:cluster',
    permission: { verb: 'admin' },
  }),
  proposeFederationChange: route<{
    body: { action: string; target: string; writers?: string[]; author?: string }
    response: { federation: FederationView; proposal: FederationProposalView }
  }>()({
    method: 'POST',
    path: '/v1/federations/:name/proposals',
    permission: { verb: 'admin' },
  }),
  approveFederationProposal: route<{ body: { author?: string }; response: { federation: FederationView; proposal: FederationProposalView } }>()({
    method: 'POST',
    path: '/v1/federations/:name/proposals/:id/approve',
    permission: { verb: 'admin' },
  }),
  withdrawFederationProposal: route<{ body: { author?: string }; response: { federation: FederationView; proposal: FederationProposalView } }>()({
    method: 'POST',
    path: '/v1/federations/:name/proposals/:id/withdraw',
    permission: { verb: 'admin' },
  }),
  federationInvite: route<{ response: { token: string; cluster: string } }>()({
    method: 'GET',
    path: '/v1/federation-invites/:id',
    permission: { verb: 'admin' },
  }),
} as const

export type RouteName = keyof typeof ROUTES

/**
 * What another member may ask over the member API (member-api.ts). Membership proves only that the
 * peer is one of ours, not that an operator is behind the request: read-only internal routes only.
 */
export const MEMBER_ROUTES: readonly RouteName[] = [
  'podLogs',
  'vmLogs',
  // The node's clock, for `orc doctor`'s skew check.
  'clock',
  // Its durable state vector and member list, for tombstone pruning (stability.ts).
  'stability',
  // A single-use invite into a federation this cluster is in, so the asking node follows its
  // cluster there (federation/manager.ts); the invite travels inside the cluster's own mesh.
  'federationInvite',
  // exec and port-forward sessions live on the pod's node; the user's right is checked there too.
  'podExec',
  'podExecIo',
  'podPortForward',
  'podPortForwardIo',
  // A VM's console session lives on its node; the user's right is checked there too.
  'vmConsole',
  'vmConsoleIo',
  // Each node's own CPU and memory figures, for `orc top` on any node.
  'topLocal',
  // A Volume's snapshots and exports are taken on the node holding its data; the user's right is checked there too.
  'volumeSnapshot',
  'volumeRestoreSnapshot',
  'volumeExport',
  // Replication: a Volume's primary ships copies to its replicas; the replica checks the sender is
  // the volume's primary node (volumes/replicas.ts), and only a member without a user may call them.
  'volumeReplicaManifest',
  'volumeReplicaSync',
  'volumeReplicaBlock',
  'volumeReplicaBlockSync',
]

type Types<N extends RouteName> = NonNullable<(typeof ROUTES)[N]['types']>
type ParamNames<P extends string> = P extends `${string}:${infer N}/${infer R}` ? N | ParamNames<`/${R}`> : P extends `${string}:${infer N}` ? N : never

export type ResponseOf<N extends RouteName> = Types<N>['response']
export type BodyOf<N extends RouteName> = Types<N> extends { body: infer B } ? B : undefined
export type QueryOf<N extends RouteName> = Types<N> extends { query: infer Q } ? Q : Record<string, never>
export type ParamsOf<N extends RouteName> = { [K in ParamNames<(typeof ROUTES)[N]['path']>]: string }

// ---- paths -------------------------------------------------------------------------------------

/** `route`'s path with its params filled in (each encoded as one segment). */
export function pathOf<N extends RouteName>(name: N, params: ParamsOf<N>): string {
  const p = params as Record<string, string>
  return ROUTES[name].path.replace(/:([A-Za-z]+)/g, (_, k: string) => encodeURIComponent(p[k]!))
}

/** The params of `pattern` in `segments`, or undefined when it does not match. */
export function matchPattern(pattern: readonly string[], segments: readonly string[]): Record<string, string> | undefined {
  if (pattern.length !== segments.length) return undefined
  const params: Record<string, string> = {}
  for (const [i, p] of pattern.entries()) {
    if (p.startsWith(':')) params[p.slice(1)] = segments[i]!
    else if (p !== segments[i]) return undefined
  }
  return params
}

export function patternOf(path: string): string[] {
  return path.split('/').filter(Boolean)
}

/** The object-route params of a ref: cluster-scoped objects live under namespace `_`. */
export function objectParams(ref: ObjectRef): { kind: string; ns: string; name: string } {
  return { kind: ref.kind, ns: ref.namespace === '' ? '_' : ref.namespace, name: ref.name }
}
