/**
 * `/orc/blobs/1.0.0`: image blobs (layers, configs, manifests) from one member to another
 * (docs/images.md, "Peer distribution"). One request per stream:
 *
 * - `{op:'has', digests:[…]}` (at most 64) → `{have:[…]}`, the ones this node holds;
 * - `{op:'get', digest, via?: {image, namespace}}` → a `{size}` header, the bytes in `chunk`
 *   frames, an `end` frame — or an `error` frame (`not_found`, `unavailable` when the node is busy,
 *   or what a registry said). With `via`, a node that lacks the blob fetches it from the image's
 *   registry on the cluster's behalf (the namespace's credentials are the serving node's to find),
 *   once however many members ask for it at the same time, then streams it.
 *
 * Served to current members only, checked at each stream and again after reading the request:
 * never to a removed peer, a stranger on a trial connection or the remote CLI. Every field of a
 * request is checked; anything else is the peer's fault (scored down). Bounded: at most
 * `maxBlobServes` transfers at once and `maxBlobServesPerPeer` per member — beyond that the answer
 * is an `unavailable` error at once, so the asker tries another member instead of waiting — and
 * each transfer has a deadline scaled to its size.
 *
 * The mesh carries the bytes as they are: the receiver's blob store checks them against the digest.
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
import { isRecord, peerFault, readJson, remoteError, Tag, writeBytes, writeError, writeJson } from './wire.ts'

export const BLOBS_PROTOCOL = '/orc/blobs/1.0.0'
/** Digests per `has` request. */
export const MAX_HAS_DIGESTS = 64
/** A request is a few digests and an image reference: nothing larger is read. */
const MAX_REQUEST_BYTES = 16 * 1024
const DIGEST = /^sha256:[0-9a-f]{64}$/
/** What a reference may look like on the wire (parseReference decides whether it is one). */
const MAX_IMAGE_CHARS = 1024
const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/
const MAX_MEDIA_TYPE_CHARS = 255
/** RFC 6838 type/subtype, with `+suffix` and `.` as registries use them (no parameters). */
const MEDIA_TYPE = /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$/

export function isBlobDigest(v: unknown): v is string {
  return typeof v === 'string' && DIGEST.test(v)
}

/**
 * Where a blob comes from when the serving node fetches it from the registry: the image, the
 * namespace whose credentials apply, and what the image's manifest says of the blob (the serving
 * node's store checks the size as it writes).
 */
export interface BlobVia {
  image: string
  namespace: string
  size: number
  mediaType: string
}

export interface BlobBody {
  size: number
  body: AsyncIterable<Uint8Array>
}

/** What the agent gives the mesh (MeshOptions.blobs): this node's blob store, and its way to the registries. */
export interface BlobProvider {
  has(digest: string): boolean
  /** The blob as a stream, or undefined when absent. */
  open(digest: string): BlobBody | undefined
  /**
   * Fetch the blob from `via.image`'s registry with `via.namespace`'s credentials into this node's
   * store, and return it (or undefined when the registry has no such blob). The mesh calls it once
   * per digest at a time: members asking meanwhile wait for it and then `open` the stored blob. Throw
   * an OrcError to refuse (its code and one line reach the asker).
   */
  fetchThrough?(digest: string, via: BlobVia): Promise<BlobBody | undefined>
}

export type BlobRequest = { op: 'has'; digests: string[] } | { op: 'get'; digest: string; via?: BlobVia }

/**
 * Whether `via` is one a member accepts. A sender checks before asking: a malformed request costs
 * it its connection (the receiver scores it as garbage). A descriptor known only by its digest (a
 * manifest pinned by digest: no media type, no size) cannot be fetched through a member.
 */
export function isBlobVia(via: unknown): via is BlobVia {
  return (
    isRecord(via) &&
    Object.keys(via).length === 4 &&
    typeof via.image === 'string' &&
    via.image.length > 0 &&
    via.image.length <= MAX_IMAGE_CHARS &&
    !/\s/.test(via.image) &&
    typeof via.namespace === 'string' &&
    NAMESPACE.test(via.namespace) &&
    typeof via.size === 'number' &&
    Number.isSafeInteger(via.size) &&
    via.size >= 0 &&
    typeof via.mediaType === 'string' &&
    via.mediaType.length <= MAX_MEDIA_TYPE_CHARS &&
    MEDIA_TYPE.test(via.mediaType)
  )
}

/** The request a peer sent, checked field by field; anything else is the peer's fault. */
export function parseBlobRequest(v: unknown): BlobRequest {
  if (!isRecord(v)) throw peerFault('blob request is malformed')
  if (v.op === 'has') {
    const { digests } = v
    if (Object.keys(v).length !== 2 || !Array.isArray(digests) || digests.length === 0 || digests.length > MAX_HAS_DIGESTS) {
      throw peerFault('blob has-request is malformed')
    }
    if (!digests.every(isBlobDigest)) throw peerFault('blob has-request names something that is not a sha256 digest')
    return { op: 'has', digests: [...new Set(digests)] }
  }
  if (v.op === 'get') {
    const { digest, via } = v
    const keys = Object.keys(v).filter((k) => k !== 'op' && k !== 'digest' && k !== 'via')
    if (keys.length > 0 || !isBlobDigest(digest)) throw peerFault('blob get-request is malformed')
    if (via === undefined) return { op: 'get', digest }
    if (!isBlobVia(via)) throw peerFault('blob get-request is malformed (via)')
    return { op: 'get', digest, via: { image: via.image, namespace: via.namespace, size: via.size, mediaType: via.mediaType } }
  }
  throw peerFault('blob request is malformed (op)')
}

/** Deadline of one transfer of `size` bytes: a base plus the time at the slowest acceptable rate. */
export function blobTransferMs(t: Pick<MeshTunables, 'blobTransferBaseMs' | 'blobMinBytesPerSecond'>, size: number): number {
  return t.blobTransferBaseMs + Math.ceil((size / Math.max(1, t.blobMinBytesPerSecond)) * 1000)
}

export interface BlobServiceComponents {
  libp2p: Pick<MeshLibp2p, 'handle' | 'dialProtocol'>
  peerId: string
  tunables: MeshTunables
  log: Logger
  isMember: (peerId: string) => boolean
  isRemoved: (peerId: string) => boolean
  misbehaved: (peerId: string, reason: string) => Promise<void>
  provider?: BlobProvider
}

export class BlobService {
  private servingTotal = 0
  private readonly servingPer = new Map<string, number>()
  /** Fetch-throughs under way, by digest: one per digest however many members ask. */
  private readonly flights = new Map<string, Promise<BlobBody | undefined>>()

  constructor(private readonly c: BlobServiceComponents) {}

  /** Whether `peerId` may ask this node for blobs now. */
  mayServe(peerId: string): boolean {
    return peerId !== this.c.peerId && !this.c.isRemoved(peerId) && this.c.isMember(peerId)
  }

  /** Transfers under way (tests, status). */
  serving(): number {
    return this.servingTotal
  }

  install(): Promise<void> {
    return handleForMembers(this.c, {
      protocol: BLOBS_PROTOCOL,
      provider: () => this.c.provider,
      mayServe: (p) => this.mayServe(p),
      maxFrameBytes: MAX_REQUEST_BYTES,
      // Beyond the serve limits a request is answered `unavailable` (below); this only bounds streams.
      maxInboundStreams: 32,
      serve: (ch, provider, remote) => this.serve(ch, provider, remote),
    })
  }

  private async serve(ch: FrameChannel, provider: BlobProvider, remote: string): Promise<void> {
    const t = this.c.tunables
    const req = await withDeadline(readJson(ch, Tag.json, 'blob request'), AbortSignal.timeout(t.apiTimeoutMs), () =>
      ch.abort(new Error('blob request timed out')),
    ).then(parseBlobRequest)
    // Membership again, after the read: a removal that arrived meanwhile wins.
    if (!this.mayServe(remote)) {
      await writeError(ch, new OrcError('forbidden', 'blob request refused: not a member'))
      await ch.close()
      return
    }
    if (req.op === 'has') {
      await writeJson(ch, Tag.json, { have: req.digests.filter((d) => provider.has(d)) })
      await ch.close()
      return
    }
    const per = this.servingPer.get(remote) ?? 0
    if (this.servingTotal >= t.maxBlobServes || per >= t.maxBlobServesPerPeer) {
      this.c.log.debug({ peer: remote, serving: this.servingTotal, peerServing: per }, 'blob request refused: busy')
      await writeError(ch, new OrcError('unavailable', `node is busy serving blobs (${this.servingTotal} transfers); ask another member`))
      await ch.close()
      return
    }
    this.servingTotal++
    this.servingPer.set(remote, per + 1)
    try {
      await this.transfer(ch, provider, remote, req.digest, req.via)
    } finally {
      this.servingTotal--
      const n = (this.servingPer.get(remote) ?? 1) - 1
      if (n <= 0) this.servingPer.delete(remote)
      else this.servingPer.set(remote, n)
    }
  }

  private async transfer(ch: FrameChannel, provider: BlobProvider, remote: string, digest: string, via: BlobVia | undefined): Promise<void> {
    const t = this.c.tunables
    let blob: BlobBody | undefined
    let fetched = false
    try {
      blob = provider.open(digest)
      if (blob === undefined && via !== undefined && provider.fetchThrough !== undefined) {
        blob = await withDeadline(this.fetchThrough(provider, digest, via), AbortSignal.timeout(t.blobFetchThroughTimeoutMs), () => undefined).catch((err) => {
          if (err instanceof OrcError && err.code === 'unavailable' && err.message === 'timed out') {
            throw new OrcError('unavailable', `fetching blob ${digest} from the registry took over ${t.blobFetchThroughTimeoutMs} ms`)
          }
          throw err
        })
        fetched = true
      }
    } catch (err) {
      const e = err instanceof OrcError ? err : new OrcError('internal', `blob ${digest}: ${shortError(err)}`)
      this.c.log.info({ peer: remote, digest, code: e.code, err: e.message }, 'blob not served')
      await writeError(ch, e)
      await ch.close()
      return
    }
    if (blob === undefined) {
      await writeError(ch, new OrcError('not_found', `blob ${digest} is not on this node`))
      await ch.close()
      return
    }
    const size = blob.size
    const deadline = AbortSignal.timeout(blobTransferMs(t, size))
    const send = async (): Promise<void> => {
      await writeJson(ch, Tag.json, { size })
      let sent = 0
      const step = Math.max(1024, Math.min(t.blobChunkBytes, t.maxFrameBytes - 1))
      for await (const part of blob.body) {
        for (let off = 0; off < part.length; off += step) {
          const piece = part.subarray(off, off + step)
          sent += piece.length
          if (sent > size) throw new OrcError('corrupt', `blob ${digest} on this node is larger than its ${size} bytes`)
          await writeBytes(ch, Tag.chunk, piece)
        }
      }
      if (sent !== size) throw new OrcError('corrupt', `blob ${digest} on this node has ${sent} of its ${size} bytes`)
      await writeJson(ch, Tag.end, { bytes: sent })
      await ch.close()
    }
    try {
      await withDeadline(send(), deadline, () => ch.abort(new Error('blob transfer timed out')))
      this.c.log.debug({ peer: remote, digest, size, fetched }, 'blob served')
    } catch (err) {
      this.c.log.info({ peer: remote, digest, err: shortError(err) }, 'blob transfer failed')
      if (err instanceof OrcError && err.code === 'corrupt') {
        await writeError(ch, err).catch(() => undefined)
        await ch.close().catch(() => undefined)
      } else {
        ch.abort(err instanceof Error ? err : new Error(String(err)))
      }
    }
  }

  /**
   * One fetch-through per digest: the first asker starts it; the others wait for it, then open what
   * it stored — or get the error it ended with (the registry is asked once, whatever it answers).
   */
  private async fetchThrough(provider: BlobProvider, digest: string, via: BlobVia): Promise<BlobBody | undefined> {
    const running = this.flights.get(digest)
    if (running !== undefined) {
      await running
      return provider.open(digest)
    }
    const flight = provider.fetchThrough!(digest, via)
    this.flights.set(digest, flight)
    try {
      return await flight
    } finally {
      this.flights.delete(digest)
    }
  }

  private async open(peerId: string, signal: AbortSignal | undefined): Promise<FrameChannel> {
    const t = this.c.tunables
    let stream: Stream
    try {
      stream = await this.c.libp2p.dialProtocol(peerIdFromString(peerId), BLOBS_PROTOCOL, {
        signal: AbortSignal.any([...(signal ? [signal] : []), AbortSignal.timeout(t.dialTimeoutMs)]),
      })
    } catch (err) {
      throw new OrcError('unavailable', `dial ${peerId} for blobs: ${shortError(err)}`, { peer: peerId }, err)
    }
    return streamChannel(stream, t.maxFrameBytes)
  }

  /** Which of `digests` member `peerId` holds. */
  async has(peerId: string, digests: string[], signal?: AbortSignal): Promise<string[]> {
    if (digests.length === 0) return []
    if (digests.length > MAX_HAS_DIGESTS) throw new OrcError('invalid', `ask for at most ${MAX_HAS_DIGESTS} blobs at once (${digests.length} given)`)
    for (const d of digests) if (!isBlobDigest(d)) throw new OrcError('invalid', `not a sha256 digest: ${String(d).slice(0, 80)}`)
    const ch = await this.open(peerId, signal)
    const asked = new Set(digests)
    const call = async (): Promise<string[]> => {
      await writeJson(ch, Tag.json, { op: 'has', digests: [...asked] })
      const res = await readJson(ch, Tag.json, 'blob has-answer')
      await ch.close().catch(() => undefined)
      if (!isRecord(res) || !Array.isArray(res.have) || !res.have.every((d) => typeof d === 'string' && asked.has(d))) {
        throw peerFault('blob has-answer is malformed')
      }
      return [...new Set(res.have as string[])]
    }
    const bound = AbortSignal.any([...(signal ? [signal] : []), AbortSignal.timeout(this.c.tunables.apiTimeoutMs)])
    try {
      return await withDeadline(call(), bound, () => ch.abort(new Error('blob has-request timed out')))
    } catch (err) {
      if (err instanceof OrcError) throw err
      throw new OrcError('unavailable', `blobs of ${peerId}: ${shortError(err)}`, { peer: peerId }, err)
    }
  }

  /**
   * Blob `digest` from member `peerId` (with `via`: fetched from the registry by that member if it
   * lacks it). Resolves once the header arrived; the body then streams, and throws if the transfer
   * breaks, stalls past its deadline or carries more or fewer bytes than announced. The bytes are not
   * checked against the digest here (the blob store does that).
   */
  async get(peerId: string, digest: string, via?: BlobVia, signal?: AbortSignal): Promise<BlobBody> {
    if (!isBlobDigest(digest)) throw new OrcError('invalid', `not a sha256 digest: ${String(digest).slice(0, 80)}`)
    const t = this.c.tunables
    const ch = await this.open(peerId, signal)
    // The header comes at once, or once the member fetched the blob from the registry for us.
    const headerMs = via !== undefined ? t.blobFetchThroughTimeoutMs + t.apiTimeoutMs : t.apiTimeoutMs
    const headerBound = AbortSignal.any([...(signal ? [signal] : []), AbortSignal.timeout(headerMs)])
    let size: number
    try {
      size = await withDeadline(
        (async () => {
          await writeJson(ch, Tag.json, via !== undefined ? { op: 'get', digest, via } : { op: 'get', digest })
          const head = await readJson(ch, Tag.json, 'blob header')
          if (!isRecord(head) || typeof head.size !== 'number' || !Number.isSafeInteger(head.size) || head.size < 0) {
            throw peerFault('blob header is malformed')
          }
          return head.size
        })(),
        headerBound,
        () => ch.abort(new Error('blob request timed out')),
      )
    } catch (err) {
      ch.abort(new Error('blob request failed'))
      if (err instanceof OrcError) throw err
      throw new OrcError('unavailable', `blob ${digest} from ${peerId}: ${shortError(err)}`, { peer: peerId }, err)
    }
    const bound = AbortSignal.any([...(signal ? [signal] : []), AbortSignal.timeout(blobTransferMs(t, size))])
    // Armed now, not when the body is first read: a body nobody reads still ends with its deadline.
    const what = `blob ${digest} from ${peerId}`
    const onAbort = () => ch.abort(new Error(`${what}: timed out`))
    bound.addEventListener('abort', onAbort, { once: true })
    return { size, body: readBlobBody(ch, size, bound, what, () => bound.removeEventListener('abort', onAbort)) }
  }
}

/** The chunks of a blob until its `end` frame: exactly `size` bytes, or an error. */
async function* readBlobBody(ch: FrameChannel, size: number, signal: AbortSignal, what: string, disarm: () => void): AsyncGenerator<Uint8Array> {
  let got = 0
  let done = false
  try {
    for (;;) {
      let f: Uint8Array | null
      try {
        f = await ch.read()
      } catch (err) {
        if (signal.aborted) throw new OrcError('unavailable', `${what}: timed out after ${got} of ${size} bytes`)
        if (err instanceof OrcError && err.code === 'too_large') throw peerFault(err.message, err)
        throw new OrcError('unavailable', `${what}: ${shortError(err)} after ${got} of ${size} bytes`, {}, err)
      }
      if (f === null) throw new OrcError('unavailable', `${what}: the member closed the stream after ${got} of ${size} bytes`)
      if (f.length === 0) throw peerFault(`${what}: empty frame`)
      if (f[0] === Tag.error) throw remoteError(f.subarray(1), what)
      if (f[0] === Tag.end) {
        if (got !== size) throw peerFault(`${what}: ended after ${got} of ${size} bytes`)
        done = true
        await ch.close().catch(() => undefined)
        return
      }
      if (f[0] !== Tag.chunk) throw peerFault(`${what}: frame type ${f[0]} instead of a chunk`)
      got += f.length - 1
      if (got > size) throw peerFault(`${what}: more than the ${size} bytes announced`)
      yield f.subarray(1)
    }
  } finally {
    disarm()
    // Stopped early (the consumer returned or failed): hang up this stream, not the connection.
    if (!done) ch.abort(new Error('blob transfer abandoned'))
  }
}
