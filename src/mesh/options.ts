import type { Logger } from 'pino'
import { pino } from 'pino'
import { type SwimTunables, swimTunableDefaults } from './swim.ts'

/** Tunables of the mesh. Every field has a default (see `meshDefaults`); SwimTunables apply with failureDetector 'swim'. */
export interface MeshTunables extends SwimTunables {
  /** Give up on any single dial after this long (a wrong PSK otherwise hangs for seconds). */
  dialTimeoutMs: number
  /** Whole join exchange (dial + token check + response) must finish within this. */
  joinTimeoutMs: number
  /** A peer admitted only to present a join token is closed after this long. */
  probationMs: number
  /** Strangers are let in on probation while a token is live and for this long after (see token.ts). */
  tokenGraceMs: number
  /** Inbound connection attempts accepted per second from one IP address (libp2p rate limit). */
  inboundPerIpPerSecond: number
  /** At most this many not-yet-admitted peers connected at once (trial slots). */
  maxProbationPeers: number
  /** …of which at most this many from one IP address. */
  maxProbationPerSource: number
  /** New trial connections accepted from one IP address per minute. */
  probationStartsPerSourcePerMinute: number
  /** Anti-entropy period with each connected member. */
  syncIntervalMs: number
  /**
   * A sync session that brought in revisions new here publishes them on gossip when at most this
   * big, so a write stranded on a few nodes (after a partition) floods on from the first node that
   * pulls it (see antientropy.ts). 0 turns relaying off.
   */
  syncRelayMaxBytes: number
  /** No relaying this long after start: a node that just started is catching up, not finding news. */
  syncRelayAfterStartMs: number
  /**
   * Out-of-turn syncs with members seen alive again after suspect/dead, per anti-entropy period.
   * 0 (the default): with relaying on, the simulator measured no gain from them, while every member
   * that came back was synced by all its peers at once (see docs/netsim.md).
   */
  recoverySyncsPerPeriod: number
  /** …each at a random moment within this long after the member came back. */
  recoverySyncJitterMs: number
  /** One sync session (both directions) must finish within this. */
  syncTimeoutMs: number
  /** Largest frame on a stream protocol (a bigger sync payload is chunked). */
  maxFrameBytes: number
  /** Largest total sync payload accepted in one session. */
  maxSyncBytes: number
  /** Largest gossip message; bigger local updates are left to anti-entropy. */
  maxGossipBytes: number
  /**
   * How members are found dead. `heartbeat`: every member heartbeats every other every
   * heartbeatIntervalMs (cost per node grows with N). `swim`: SWIM probing with Lifeguard's
   * suspicion (swim.ts; one probe per probeIntervalMs, changes piggybacked), cost per node flat in
   * N. Either way a node answers the other's probes and heartbeats, so a cluster can switch one
   * node at a time (docs/mesh.md).
   */
  failureDetector: 'heartbeat' | 'swim'
  heartbeatIntervalMs: number
  /** Each connected member is pinged (round trip, and proof it is alive) at most this often. */
  pingIntervalMs: number
  /**
   * A connected member whose heartbeats arrive straight from it (within suspectAfterMs) needs no
   * proof of life: it is pinged only this often, for its round-trip time. Once its heartbeats stop,
   * pingIntervalMs applies again (and two failed pings close the connection).
   */
  directPingIntervalMs: number
  /** Gossipsub PRUNE backoff (gossipsub's default is 60 s; see host.ts). */
  gossipPruneBackoffMs: number
  suspectAfterMs: number
  deadAfterMs: number
  /**
   * Up to this many members, every node connects to every other (and heartbeats go straight to each
   * member instead of by gossip); beyond it, a random subset of `partialMeshDegree`.
   */
  fullMeshMax: number
  /** Number of peers to keep connected in partial-mesh mode. */
  partialMeshDegree: number
  /** How often connections to members are checked and re-dialed. */
  maintainIntervalMs: number
  /** Peer score at or below which a peer is refused for `banMs`. */
  banThreshold: number
  banMs: number
  /** Score taken off a peer per invalid message. */
  garbagePenalty: number
  /** Largest remote API request or response body. */
  maxApiBytes: number
  apiTimeoutMs: number
  /** Image blobs served to members at once (blobs.ts); beyond it a request is answered `unavailable` at once. */
  maxBlobServes: number
  /** …of which at most this many to one member. */
  maxBlobServesPerPeer: number
  /** Frames of a blob transfer carry this many bytes. */
  blobChunkBytes: number
  /** A blob transfer must finish within this plus its size at blobMinBytesPerSecond. */
  blobTransferBaseMs: number
  blobMinBytesPerSecond: number
  /** A member fetching a blob from the registry on the cluster's behalf (`via`) must have it within this. */
  blobFetchThroughTimeoutMs: number
}

export const meshDefaults: MeshTunables = {
  dialTimeoutMs: 5_000,
  joinTimeoutMs: 15_000,
  probationMs: 10_000,
  tokenGraceMs: 60_000,
  inboundPerIpPerSecond: 20,
  maxProbationPeers: 16,
  maxProbationPerSource: 4,
  probationStartsPerSourcePerMinute: 12,
  syncIntervalMs: 30_000,
  syncRelayMaxBytes: 64 * 1024,
  syncRelayAfterStartMs: 30_000,
  recoverySyncsPerPeriod: 0,
  recoverySyncJitterMs: 5_000,
  syncTimeoutMs: 60_000,
  maxFrameBytes: 4 * 1024 * 1024,
  maxSyncBytes: 64 * 1024 * 1024, // matches the store's MAX_REMOTE_UPDATE_BYTES
  maxGossipBytes: 1024 * 1024,
  failureDetector: 'heartbeat',
  ...swimTunableDefaults,
  heartbeatIntervalMs: 2_000,
  pingIntervalMs: 10_000,
  directPingIntervalMs: 60_000,
  gossipPruneBackoffMs: 5_000,
  suspectAfterMs: 5_000,
  deadAfterMs: 30_000,
  fullMeshMax: 32,
  partialMeshDegree: 8,
  maintainIntervalMs: 2_000,
  banThreshold: -100,
  banMs: 10 * 60_000,
  garbagePenalty: 50,
  maxApiBytes: 4 * 1024 * 1024,
  apiTimeoutMs: 30_000,
  maxBlobServes: 4,
  maxBlobServesPerPeer: 2,
  blobChunkBytes: 256 * 1024,
  blobTransferBaseMs: 30_000,
  // A layer over a slow home uplink still makes it; a member stalled below this is given up on.
  blobMinBytesPerSecond: 256 * 1024,
  blobFetchThroughTimeoutMs: 10 * 60_000,
}

export function resolveTunables(partial: Partial<MeshTunables> | undefined): MeshTunables {
  return { ...meshDefaults, ...(partial ?? {}) }
}

export function defaultLogger(): Logger {
  return pino({ level: process.env.ORC_LOG_LEVEL ?? 'silent' })
}
