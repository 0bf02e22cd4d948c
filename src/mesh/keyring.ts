/**
 * `/orc/keyring/1.0.0`: how the cluster's data keyring (src/secrets; docs/secrets.md) reaches every
 * member. A member asks another for its keyring (`get`: a joiner after admission, a node that sees
 * a Secret sealed with a key it lacks), or hands its own to another (`offer`: after a rotation).
 *
 * Served to current members only, checked at each stream (one request per stream): never to a
 * removed peer, a stranger on a trial connection (join) or the remote CLI (a credential peer), even
 * though the gater let their connection in. The connection is PSK + Noise, so the keyring is
 * encrypted on the wire like everything else. The mesh carries the keyring as opaque JSON; the
 * agent parses and checks it (`Keyring.fromJSON`: every key matches its id) and merges it.
 */
import type { Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import { OrcError } from '../model/index.ts'
import { shortError, withDeadline } from './deadline.ts'
import type { FrameChannel } from './framing.ts'
import { type MeshLibp2p, streamChannel } from './host.ts'
import { handleForMembers } from './members-only.ts'
import type { MeshTunables } from './options.ts'
import { isRecord, peerFault, readJson, Tag, writeError, writeJson } from './wire.ts'

export const KEYRING_PROTOCOL = '/orc/keyring/1.0.0'
/** A keyring is a few keys of 32 bytes; a generous bound all the same. */
const MAX_KEYRING_BYTES = 256 * 1024

/** What the agent gives the mesh (MeshOptions.keyring). */
export interface KeyringProvider {
  /** This node's keyring as JSON, or undefined when it holds none yet. */
  current(): unknown
  /** Member `from` offers its keyring (after a rotation): take in what it adds. Throw an OrcError to refuse. */
  offered(keyring: unknown, from: string): Promise<void>
}

export interface KeyringServiceComponents {
  libp2p: Pick<MeshLibp2p, 'handle' | 'dialProtocol'>
  peerId: string
  tunables: MeshTunables
  log: Logger
  isMember: (peerId: string) => boolean
  isRemoved: (peerId: string) => boolean
  misbehaved: (peerId: string, reason: string) => Promise<void>
  provider?: KeyringProvider
}

export class KeyringService {
  constructor(private readonly c: KeyringServiceComponents) {}

  /** Whether `peerId` may exchange keyrings with this node now. */
  mayServe(peerId: string): boolean {
    return peerId !== this.c.peerId && !this.c.isRemoved(peerId) && this.c.isMember(peerId)
  }

  install(): Promise<void> {
    return handleForMembers(this.c, {
      protocol: KEYRING_PROTOCOL,
      provider: () => this.c.provider,
      mayServe: (p) => this.mayServe(p),
      maxFrameBytes: MAX_KEYRING_BYTES,
      maxInboundStreams: 8,
      serve: (ch, provider, remote) =>
        withDeadline(this.serve(ch, provider, remote), AbortSignal.timeout(this.c.tunables.apiTimeoutMs), () =>
          ch.abort(new Error('keyring request timed out')),
        ),
    })
  }

  private async serve(ch: FrameChannel, provider: KeyringProvider, remote: string): Promise<void> {
    const req = await readJson(ch, Tag.json, 'keyring request')
    if (!isRecord(req) || (req.op !== 'get' && req.op !== 'offer')) throw peerFault('keyring request is malformed')
    // Membership again, after the read: a removal that arrived meanwhile wins.
    if (!this.mayServe(remote)) {
      await writeError(ch, new OrcError('forbidden', 'keyring request refused: not a member'))
      await ch.close()
      return
    }
    if (req.op === 'get') {
      const ring = provider.current()
      if (ring === undefined) await writeError(ch, new OrcError('not_found', 'this node does not hold the cluster keyring yet'))
      else await writeJson(ch, Tag.json, { keyring: ring })
      this.c.log.info({ peer: remote, given: ring !== undefined }, 'keyring requested by a member')
    } else {
      try {
        await provider.offered(req.keyring, remote)
        await writeJson(ch, Tag.json, { ok: true })
      } catch (err) {
        const e = err instanceof OrcError ? err : new OrcError('internal', `keyring offer: ${(err as Error).message}`)
        await writeError(ch, e)
      }
    }
    await ch.close()
  }

  private async open(peerId: string): Promise<{ ch: FrameChannel; signal: AbortSignal }> {
    const t = this.c.tunables
    const signal = AbortSignal.timeout(t.apiTimeoutMs)
    let stream: Stream
    try {
      stream = await this.c.libp2p.dialProtocol(peerIdFromString(peerId), KEYRING_PROTOCOL, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(t.dialTimeoutMs)]),
      })
    } catch (err) {
      throw new OrcError('unavailable', `dial ${peerId} for the keyring: ${shortError(err)}`, { peer: peerId }, err)
    }
    return { ch: streamChannel(stream, MAX_KEYRING_BYTES), signal }
  }

  /** Member `peerId`'s keyring (JSON, unchecked: the caller parses it). Throws `not_found` when it holds none. */
  async fetch(peerId: string): Promise<unknown> {
    const { ch, signal } = await this.open(peerId)
    const call = async () => {
      await writeJson(ch, Tag.json, { op: 'get' })
      const res = await readJson(ch, Tag.json, 'keyring')
      await ch.close().catch(() => undefined)
      if (!isRecord(res) || res.keyring === undefined) throw peerFault('keyring answer is malformed')
      return res.keyring
    }
    try {
      return await withDeadline(call(), signal, () => ch.abort(new Error('keyring request timed out')))
    } catch (err) {
      if (err instanceof OrcError) throw err
      throw new OrcError('unavailable', `keyring from ${peerId}: ${shortError(err)}`, { peer: peerId }, err)
    }
  }

  /** Hand this node's keyring to member `peerId` (after a rotation). */
  async offer(peerId: string, keyring: unknown): Promise<void> {
    const { ch, signal } = await this.open(peerId)
    const call = async () => {
      await writeJson(ch, Tag.json, { op: 'offer', keyring })
      await readJson(ch, Tag.json, 'keyring offer answer')
      await ch.close().catch(() => undefined)
    }
    try {
      await withDeadline(call(), signal, () => ch.abort(new Error('keyring offer timed out')))
    } catch (err) {
      if (err instanceof OrcError) throw err
      throw new OrcError('unavailable', `keyring to ${peerId}: ${shortError(err)}`, { peer: peerId }, err)
    }
  }
}
