/**
 * The request and response types of the API (routes.ts), declared once here, apart from the code
 * that produces them. This file imports no agent file, only other modules' index.ts: the route
 * table and each feature module that answers a route both import from it, so neither imports the
 * other (and the route table imports no handler, not even for a type).
 */
import type { RolloutProgress } from '../model/index.ts'
import type { DeploymentStatus } from '../sched/index.ts'

// ---- objects and the node (api.ts) -------------------------------------------------------------

export interface NodeInfo {
  name: string
  version: string
  dataDir: string
  socket: string
  pid: number
  startedAt: number
  cluster?: { name: string; id: string }
}

export type ApplyOutcome = 'created' | 'configured' | 'unchanged'

export interface ApplyResultItem {
  kind: string
  namespace: string
  name: string
  outcome: ApplyOutcome
  revision: number | null
}

// ---- rollouts (deployments/api.ts) -------------------------------------------------------------

/** The rollout as `orc rollout status` shows it (the body of GET /v1/rollouts/NS/NAME). */
export interface RolloutView extends DeploymentStatus {
  deployment: string
  namespace: string
  revision?: number
  observedBy: string
  everyNode: boolean
  split: { replicas?: number; nextReplicas?: number; nextPercent?: number }
  pods: { name: string; version: 'previous' | 'next' | 'old'; template: string | undefined; node: string | null; phase: string; ready: boolean }[]
  /** The stored rollout record (controller:rollout): progressing, complete, or aborted with why. */
  rollout?: RolloutProgress
}

// ---- federations (federation/manager.ts) -------------------------------------------------------

/** A federation as this cluster records it: in it, or left by this cluster, or removed by the others. */
export type FederationState = 'joined' | 'left' | 'removed'

export interface FederationClusterView {
  name: string
  id: string
  self: boolean
  members: number
  connected: number
}

export interface FederationView {
  name: string
  id: string
  cluster: string
  namespaces: string[]
  /** Shared namespaces whose share names its writers: the clusters whose users write in each. */
  writers?: Record<string, string[]>
  state: FederationState
  peerId?: string
  addresses?: string[]
  /** Where the federation host's join host listens: what its tokens and invites name (no PSK there). */
  joinAddresses?: string[]
  clusters?: FederationClusterView[]
  objects?: number
  /** The cluster that created the federation. */
  creator?: string
  /** Who admits and removes clusters: the quorum and the proposals (federation/governance.ts). */
  governance?: FederationGovernanceView
}

export interface FederationProposalView {
  id: string
  action: 'admit' | 'remove' | 'quorum' | 'share-namespace' | 'unshare-namespace' | 'set-writers'
  /** The cluster admitted or removed, the new quorum, or the namespace shared, unshared or given new writers. */
  target: string
  proposer: string
  author: string
  at: number
  members: string[]
  /** A share-namespace's writers (the clusters whose users write in the namespace while it lasts), or a set-writers' new ones. */
  writers?: string[]
  required: number
  approvals: Array<{ cluster: string; author: string; at: number }>
  /** expired: not passed within 7 days of being made (approvals after that do not count). */
  state: 'pending' | 'passed' | 'withdrawn' | 'expired'
  passedAt?: number
  withdrawnAt?: number
}

export interface FederationGovernanceView {
  /** The setting: a number of approvals, or the default rule (any one for two clusters, a majority beyond). */
  quorum: number | 'default'
  /** Approvals an admission and a removal need now. */
  admit: number
  remove: number
  proposals: FederationProposalView[]
}

// ---- the node network (network/controller.ts, network/plan.ts, network/api.ts) -----------------

/**
 * `direct`: to an endpoint we dial; `peer-dials`: the peer is behind NAT and dials us; `relayed`:
 * neither side reaches the other, the peer's /64 goes through a member both reach (`via`);
 * `unknown`: no endpoint known yet.
 */
export type PeerPath = 'direct' | 'peer-dials' | 'relayed' | 'unknown'

export type NetworkState = 'Off' | 'Unavailable' | 'Starting' | 'Ready' | 'Degraded' | 'Stopped'

export interface TunnelReport {
  node: string
  peerId: string
  prefix: string
  publicKey: string
  endpoint?: string
  path: PeerPath
  /** When relayed: the node whose tunnel carries this peer's traffic. */
  via?: string
  /** The endpoint is this peer's NAT mapping as another member sees it (hole punching). */
  punched?: boolean
  /** For a relayed peer, the state of the path (the relay's tunnel); `direct` is the direct tunnel's. */
  state: 'up' | 'waiting' | 'down'
  direct?: 'up' | 'waiting' | 'down'
  latestHandshakeMs?: number
  rxBytes: number
  txBytes: number
  alive: boolean
}

/** A WireGuard peer in another federated cluster: routes only to its federated pods' /128s. */
export interface FederatedTunnelReport {
  /** `node@cluster`. */
  node: string
  cluster: string
  federations: string[]
  /** The /128s routed to it (its federated pods). */
  routes: string[]
  /** Its /64 in its own cluster (not routed). */
  nodePrefix: string
  publicKey: string
  endpoint?: string
  path: PeerPath
  /** When relayed (both ends behind NAT): the node whose tunnel carries `routes` (`node`, or `node@cluster` of the other cluster). */
  via?: string
  /** On a relay: the nodes of this cluster whose traffic with this peer it carries (or would, as the spare candidate). */
  relayFor?: string[]
  /** For a relayed peer, the state of the path (the relay's tunnel); `direct` is its own tunnel's. */
  state: 'up' | 'waiting' | 'down'
  direct?: 'up' | 'waiting' | 'down'
  latestHandshakeMs?: number
  rxBytes: number
  txBytes: number
}

export interface NetworkReport {
  node: string
  state: NetworkState
  reason?: string
  mode?: string
  iface?: string
  publicKey?: string
  prefix?: string
  listenPort?: number
  endpoints?: string[]
  egress?: string
  tunnels: TunnelReport[]
  /** Peers in other federated clusters (absent when there are none). */
  federated?: FederatedTunnelReport[]
  pods: { uid: string; ipv6: string; netns: string }[]
}

/** What `orc down` will remove (host names this node made). */
export interface DownPlan {
  iface?: string
  /** Pod network namespaces present now. */
  pods: string[]
  podNetnsPrefix?: string
  nftTable?: string
}

/** `POST /v1/down`: the agent's pid (to wait for) and what will be removed. */
export interface DownResponse {
  node: string
  pid: number
  dataDir?: string
  network: DownPlan
}

// ---- ops (ops/doctor.ts, ops/events.ts, ops/peers.ts) -----------------------------------------

export type Severity = 'ok' | 'info' | 'warn' | 'error'

export interface Finding {
  /** Short check name: `kernel`, `wireguard`, `sandbox`, `clock`, `ports`, `disk`, `data-dir`, … */
  check: string
  status: Severity
  message: string
  /** What to run or change; absent when nothing is wrong. */
  fix?: string
}

export interface ClusterEvent {
  /** Stable id, so a follower can skip what it already printed. */
  id: string
  time: number
  /** `pod/web` style. */
  object: string
  namespace: string
  /** `Created`, `Updated`, `Deleted`, `RolledBack`, `UnitStarted`, `UnitDone`, `UnitRetrying`, `UnitFailed`, `UnitSkipped`, `CopyStopped`. */
  type: string
  /** Who: the revision's author, or the node that ran the unit. */
  source: string
  message: string
  /** Revision number the event belongs to (revisions) or runs for (units). */
  revision?: number
}

export interface PeerRow {
  name: string
  peerId: string
  self: boolean
  state: string
  /** direct (a mesh connection of its own), relayed (through a relay), gossip (no connection; heard through others). */
  path: 'self' | 'direct' | 'relayed' | 'gossip'
  latencyMs: number | null
  lastSeen: number | null
  /** When the current mesh connection's handshake completed (ms since epoch). */
  handshakeAt: number | null
  addresses: string[]
  version: string | null
  pods: number
}

// ---- tombstone pruning (stability.ts) ----------------------------------------------------------

export interface StabilityAnswer {
  /** base64 of the store's encodeStabilityReport(), or null while unknown. */
  report: string | null
  /** Peer ids in the answering node's member directory, itself included. */
  members: string[]
}

/** `POST /v1/secrets/rotate-key`'s answer. */
export interface RotateKeyAnswer {
  /** The new current data key's id. */
  key: string
  /** Secrets re-sealed under it (`ns/name`). */
  resealed: string[]
  /** Secrets that could not be re-sealed (this node lacks the key that sealed them), with why. */
  failed: Array<{ secret: string; error: string }>
  /** Key ids dropped: no Secret uses them any more. */
  retired: string[]
  /** Members the new keyring was offered to, and how many took it (the others fetch it when they see a Secret sealed with it). */
  members: { offered: number; reached: number }
}

// ---- registry images (images/api.ts) -----------------------------------------------------------

/** A pull as `orc image pull` and `orc image list` show it (images/service.ts PullView). */
export interface ImagePullView {
  image: string
  digest?: string
  namespace: string
  state: 'pulling' | 'done' | 'failed'
  /** `resolve`, `manifest`, `blobs`, `unpack`, `done` (images/pull.ts PullProgress). */
  phase: 'resolve' | 'manifest' | 'blobs' | 'unpack' | 'done'
  doneBytes: number
  totalBytes?: number
  startedAt: number
  finishedAt?: number
  error?: string
  bytes?: { registry: number; peers: number; cached: number }
}

/** One image this node pulled (`GET /v1/images`). */
export interface ImageListRow {
  digest: string
  manifestDigest: string
  refs: string[]
  bytes: number
  pulledAt: number
  usedBy: string[]
  unpacked: boolean
}

/** `GET /v1/images/inspect`: what the node holds of one image. */
export interface ImageInspectView extends ImageListRow {
  mediaType: string
  platform?: { os?: string; architecture?: string; variant?: string }
  config: { entrypoint: string[]; cmd: string[]; env: string[]; workingDir?: string }
  layers: Array<{ digest: string; size: number; mediaType: string }>
}
