/**
 * libp2p plumbing: builds the host (TCP, Noise, Yamux, pnet, identify, ping, gossipsub) and adapts
 * libp2p streams to `FrameChannel`. No protocol decisions live here.
 */

import { createHash } from 'node:crypto'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { type GossipSub, type GossipsubOpts, gossipsub } from '@libp2p/gossipsub'
import { identify } from '@libp2p/identify'
import type { ConnectionGater, ConnectionProtector, Libp2p, PrivateKey, Stream } from '@libp2p/interface'
import { type Ping, ping } from '@libp2p/ping'
import { preSharedKey } from '@libp2p/pnet'
import { tcp } from '@libp2p/tcp'
import { createLibp2p, type Libp2pOptions } from 'libp2p'
import { encodeFrame, type FrameChannel, FrameDecoder } from './framing.ts'
import type { MeshTunables } from './options.ts'
import { withCachedSigning } from './signing.ts'
import { fixXsalsa20 } from './xsalsa20-fix.ts'
import { halfWindowUpdates } from './yamux-window.ts'

// pnet's cipher grows its memory without bound under large transfers on several connections (xsalsa20-fix.ts).
fixXsalsa20()

export type MeshServices = { ping: Ping; identify: unknown; pubsub: GossipSub }
export type MeshLibp2p = Libp2p<MeshServices>

export interface HostInit {
  privateKey: PrivateKey
  /**
   * PSK in the libp2p v1 swarm-key text format, or a function read at each connection (a joiner's
   * host listens before the join response brings the key; until then every connection is refused).
   */
  psk: Uint8Array | (() => Uint8Array | undefined)
  listen: string[]
  announce?: string[]
  gater: ConnectionGater
  tunables: MeshTunables
  /** Transports; default TCP. The simulator may pass its own. */
  transports?: Libp2pOptions['transports']
  /** Gossipsub app-specific score: members score 0, strangers and offenders very negative. */
  appSpecificScore: (peerId: string) => number
  gossip?: Partial<GossipsubOpts>
}

/** What the mesh host and the join host share: TCP, Noise, Yamux, the timeouts and connection limits. */
function transportOptions(t: MeshTunables, transports: Libp2pOptions['transports'] | undefined) {
  return {
    transports: transports ?? [tcp({ dialOpts: { timeout: t.dialTimeoutMs } } as any)],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    // The mesh pings every member itself (RTT for `orc get nodes -o wide`, proof of life) and hangs
    // up a connection whose pings fail twice in a row (liveness.ts, ping). libp2p's own monitor
    // pinged every connection again every 10 s: a stream each, ~0.25 of a core across 20 agents.
    connectionMonitor: { enabled: false },
    connectionManager: {
      dialTimeout: t.dialTimeoutMs,
      addressDialTimeout: t.dialTimeoutMs,
      inboundUpgradeTimeout: t.dialTimeoutMs,
      reconnectRetries: 0,
      inboundConnectionThreshold: t.inboundPerIpPerSecond,
    },
  } satisfies Libp2pOptions
}

export async function createHost(init: HostInit): Promise<MeshLibp2p> {
  const t = init.tunables
  halfWindowUpdates()
  const node = await createLibp2p({
    privateKey: withCachedSigning(init.privateKey),
    start: false,
    addresses: { listen: init.listen, announce: init.announce ?? [] },
    ...transportOptions(t, init.transports),
    connectionProtector: pskProtector(init.psk, Math.min(t.dialTimeoutMs, 5_000)),
    connectionGater: init.gater,
    services: {
      identify: identify(),
      ping: ping({ timeout: t.dialTimeoutMs }),
      pubsub: gossipsub({
        allowPublishToZeroTopicPeers: true,
        ignoreDuplicatePublishError: true,
        emitSelf: false,
        // An RPC may batch a few messages; allow a little over one max-size message plus framing.
        maxInboundDataLength: t.maxGossipBytes + 64 * 1024,
        heartbeatInterval: 1_000,
        // Clusters are small and, up to fullMeshMax, fully connected: flood publishing already hands
        // every message to every connected member, so the mesh mostly adds duplicates, and every copy
        // is a frame to encrypt, send, receive and drop. Beyond fullMeshMax the mesh carries a message
        // to the members its publisher is not connected to; three forwards per node still reach them
        // in a hop or two (and IHAVE gossip repairs a miss). At 20 agents, D 3 / Dhi 4 against 4 / 8
        // halved an agent's socket writes (docs/benchmarks.md, "Mesh").
        D: 3,
        Dlo: 2,
        Dhi: 4,
        Dscore: 1,
        Dout: 1,
        Dlazy: 3,
        // A peer pruned while it was a stranger on probation (a joiner dialing members that have not
        // heard of its admission yet) is backed off for this long on both sides; gossipsub's 60 s
        // default kept fresh members out of each other's mesh for a minute after every join.
        pruneBackoff: t.gossipPruneBackoffMs,
        graftFloodThreshold: Math.min(2_000, t.gossipPruneBackoffMs),
        scoreParams: {
          appSpecificScore: init.appSpecificScore,
          appSpecificWeight: 1,
          IPColocationFactorWeight: 0, // every test node and many home-lab nodes share an IP
          // A joiner's first GRAFTs arrive while it is still a stranger (pruned, with backoff); its
          // re-GRAFTs after admission count as backoff violations. Membership is enforced by the
          // gater and our own scores, so gossipsub's behaviour penalty only has to stop floods.
          behaviourPenaltyWeight: -1,
          behaviourPenaltyThreshold: 6,
        },
        scoreThresholds: {
          gossipThreshold: -10,
          publishThreshold: -50,
          graylistThreshold: -80,
        },
        // Every member forwards what it receives, so a message arrives several times; without this,
        // gossipsub checks the Ed25519 signature of every copy before it looks for duplicates (18 % of
        // an idle agent's CPU at 20 members). The id covers every signed byte, so a forged copy
        // never shadows the real message: it is checked, rejected and not remembered.
        fastMsgIdFn: gossipFastMsgId,
        // IDONTWANT (gossipsub 1.2) goes to every mesh peer for each received message of at least
        // this size. A store update is ~600 B, over the 512 B default: an extra frame per mesh peer
        // per update that saves nothing here, where the copies it would stop are already in flight.
        // Kept for large updates (up to maxGossipBytes), where a copy not sent is worth a frame.
        idontwantMinDataSize: 16 * 1024,
        ...init.gossip,
      }),
    },
  })
  return node as unknown as MeshLibp2p
}

/** pnet with a fixed key, or with the key a function gives once it has one (HostInit.psk). */
function pskProtector(psk: HostInit['psk'], timeout: number): () => ConnectionProtector {
  if (psk instanceof Uint8Array) return preSharedKey({ psk, timeout })
  return () => {
    let inner: ConnectionProtector | undefined
    return {
      async protect(conn, opts) {
        if (inner === undefined) {
          const key = psk()
          if (key === undefined) throw new Error('no cluster key yet (this node is joining)')
          inner = preSharedKey({ psk: key, timeout })()
        }
        return inner.protect(conn, opts)
      },
    }
  }
}

export type JoinLibp2p = Libp2p

/**
 * A join host (join.ts): the node's own key, TCP + Noise + Yamux, *no* pnet and no services. The
 * issuer's serves the join protocol on its own port; a joiner's (listening nowhere) dials it.
 */
export async function createJoinHost(init: {
  privateKey: PrivateKey
  listen: string[]
  announce?: string[]
  gater: ConnectionGater
  tunables: MeshTunables
  transports?: Libp2pOptions['transports']
}): Promise<JoinLibp2p> {
  const t = init.tunables
  return createLibp2p({
    privateKey: init.privateKey,
    start: false,
    addresses: { listen: init.listen, announce: init.announce ?? [] },
    ...transportOptions(t, init.transports),
    connectionGater: init.gater,
  })
}

/** Gossipsub's view per topic: members in our mesh for it, and connected peers subscribed to it. */
export function gossipMeshState(pubsub: GossipSub): Record<string, { mesh: number; subscribers: number }> {
  // getMeshPeers is on the implementation, not on the exported GossipSub interface.
  const g = pubsub as GossipSub & { getMeshPeers(topic: string): string[] }
  const out: Record<string, { mesh: number; subscribers: number }> = {}
  for (const topic of g.getTopics()) {
    out[topic.split('/').slice(-2, -1)[0] ?? topic] = { mesh: g.getMeshPeers(topic).length, subscribers: g.getSubscribers(topic).length }
  }
  return out
}

/**
 * Gossipsub caches a peer's score for a heartbeat: a member admitted a moment ago would still be
 * scored as a stranger (below zero) and its GRAFT refused with a PRUNE and a backoff. Drop the
 * cached score so the next one is computed as a member's. (Reaches into gossipsub's internals, no
 * public API for it; should they change, the short prune backoff still bounds the delay.)
 * The backoff of a peer pruned while it really was a stranger is kept: the peer obeys the same
 * backoff for us, and GRAFTing it before that ends would only be refused and penalised.
 */
export function forgetCachedScore(pubsub: GossipSub, peerId: string): void {
  const g = pubsub as unknown as { score?: { scoreCache?: Map<string, unknown> } }
  if (g.score?.scoreCache instanceof Map) g.score.scoreCache.delete(peerId)
}

/** Identity of a received gossip message's bytes (duplicate detection before the signature check). */
export function gossipFastMsgId(m: {
  from?: Uint8Array
  seqno?: Uint8Array
  topic: string
  data?: Uint8Array
  signature?: Uint8Array
  key?: Uint8Array
}): string {
  const h = createHash('sha256')
  // Each field is prefixed with presence and length, so two different splits of the same bytes differ.
  const fields = [m.from, m.seqno, Buffer.from(m.topic), m.data, m.signature, m.key]
  const header = Buffer.alloc(5 * fields.length)
  fields.forEach((f, i) => {
    header.writeUInt8(f === undefined ? 0 : 1, 5 * i)
    header.writeUInt32BE(f?.byteLength ?? 0, 5 * i + 1)
  })
  h.update(header)
  for (const f of fields) if (f !== undefined) h.update(f)
  return h.digest('base64')
}

/** Adapt a libp2p v3 stream (message events + send/backpressure) to length-prefixed frames. */
export function streamChannel(stream: Stream, maxFrameBytes: number): FrameChannel {
  const decoder = new FrameDecoder(maxFrameBytes)
  const it = stream[Symbol.asyncIterator]()
  let ended = false
  return {
    async read() {
      for (;;) {
        const frame = decoder.next()
        if (frame !== undefined) return frame
        if (ended) {
          if (decoder.pendingBytes > 0) throw new Error('stream ended inside a frame')
          return null
        }
        const r = await it.next()
        if (r.done === true) {
          ended = true
          continue
        }
        const chunk = r.value
        decoder.push(chunk instanceof Uint8Array ? chunk : chunk.subarray())
      }
    },
    async write(frame) {
      if (!stream.send(encodeFrame(frame))) await stream.onDrain()
    },
    async close() {
      await stream.close()
    },
    abort(err) {
      stream.abort(err)
    },
  }
}
