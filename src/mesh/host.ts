/**
 * libp2p plumbing: builds the host (TCP, Noise, Yamux, pnet, identify, ping, gossipsub) and adapts
 * libp2p streams to `FrameChannel`. No protocol decisions live here.
 */
import { createLibp2p, type Libp2pOptions } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { ping, type Ping } from '@libp2p/ping'
import { preSharedKey } from '@libp2p/pnet'
import { gossipsub, type GossipSub, type GossipsubOpts } from '@libp2p/gossipsub'
import type { ConnectionGater, Libp2p, PrivateKey, Stream } from '@libp2p/interface'
import { FrameDecoder, encodeFrame, type FrameChannel } from './framing.ts'
import type { MeshTunables } from './options.ts'

export type MeshServices = { ping: Ping; identify: unknown; pubsub: GossipSub }
export type MeshLibp2p = Libp2p<MeshServices>

export interface HostInit {
  privateKey: PrivateKey
  /** PSK in the libp2p v1 swarm-key text format. */
  psk: Uint8Array
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

export async function createHost(init: HostInit): Promise<MeshLibp2p> {
  const t = init.tunables
  const node = await createLibp2p({
    privateKey: init.privateKey,
    start: false,
    addresses: { listen: init.listen, announce: init.announce ?? [] },
    transports: init.transports ?? [tcp({ dialOpts: { timeout: t.dialTimeoutMs } } as any)],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    connectionProtector: preSharedKey({ psk: init.psk, timeout: Math.min(t.dialTimeoutMs, 5_000) }),
    connectionGater: init.gater,
    connectionManager: {
      dialTimeout: t.dialTimeoutMs,
      addressDialTimeout: t.dialTimeoutMs,
      inboundUpgradeTimeout: t.dialTimeoutMs,
      reconnectRetries: 0,
      inboundConnectionThreshold: t.inboundPerIpPerSecond,
    },
    services: {
      identify: identify(),
      ping: ping({ timeout: t.dialTimeoutMs }),
      pubsub: gossipsub({
        allowPublishToZeroTopicPeers: true,
        ignoreDuplicatePublishError: true,
        emitSelf: false,
        // An RPC may batch a few messages; allow a little over one max-size message plus framing.
        maxInboundDataLength: t.maxGossipBytes + 64 * 1024,
        heartbeatInterval: 700,
        // Clusters are small and, up to fullMeshMax, fully connected: flood publishing already hands
        // every message to every connected member, so the mesh only adds duplicates. A lower degree
        // halves the relayed copies (and the CPU they cost every node) without adding a hop.
        D: 4,
        Dlo: 3,
        Dhi: 8,
        Dscore: 2,
        Dout: 2,
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
        ...init.gossip,
      }),
    },
  })
  return node as unknown as MeshLibp2p
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
