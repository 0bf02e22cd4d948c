/**
 * A protocol served to current members only (keyring.ts, blobs.ts): the check when a stream opens —
 * a provider installed, the peer a member and not removed — the frame channel, and what a failed
 * request costs its sender (a peer fault scores it down). Each service checks membership again
 * after reading its request: a removal that arrives meanwhile wins.
 */
import type { Logger } from 'pino'
import { shortError } from './deadline.ts'
import type { FrameChannel } from './framing.ts'
import { type MeshLibp2p, streamChannel } from './host.ts'
import { isPeerFault } from './wire.ts'

export interface MembersOnlyHost {
  libp2p: Pick<MeshLibp2p, 'handle'>
  log: Logger
  isMember: (peerId: string) => boolean
  misbehaved: (peerId: string, reason: string) => Promise<void>
}

export interface MembersOnlyProtocol<P> {
  protocol: string
  /** What the agent gave the mesh to serve from; undefined: nothing here yet (refused). */
  provider: () => P | undefined
  mayServe: (peerId: string) => boolean
  maxFrameBytes: number
  maxInboundStreams: number
  serve: (ch: FrameChannel, provider: P, remote: string) => Promise<void>
}

export async function handleForMembers<P>(host: MembersOnlyHost, p: MembersOnlyProtocol<P>): Promise<void> {
  await host.libp2p.handle(
    p.protocol,
    async (stream, conn) => {
      const remote = conn.remotePeer.toString()
      const provider = p.provider()
      if (provider === undefined || !p.mayServe(remote)) {
        host.log.info({ protocol: p.protocol, peer: remote, member: host.isMember(remote), provider: provider !== undefined }, 'members-only request refused')
        stream.abort(new Error(provider === undefined ? 'nothing to serve here yet' : 'not a member'))
        return
      }
      const ch = streamChannel(stream, p.maxFrameBytes)
      try {
        await p.serve(ch, provider, remote)
      } catch (err) {
        ch.abort(err instanceof Error ? err : new Error(String(err)))
        if (isPeerFault(err)) await host.misbehaved(remote, (err as Error).message)
        else host.log.debug({ protocol: p.protocol, peer: remote, err: shortError(err) }, 'members-only request failed')
      }
    },
    { maxInboundStreams: p.maxInboundStreams },
  )
}
