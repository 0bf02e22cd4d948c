/**
 * Image blobs from the cluster's members before the registry (docs/images.md, "Peer distribution";
 * the wire protocol is mesh/blobs.ts).
 *
 * `MeshBlobSource` is the puller's `BlobSource`: for a blob this node lacks it asks members which of
 * them hold it and streams it from one; when none does, it asks the blob's *owner* to fetch it from
 * the registry for the cluster and stream it on (`via`). `StoreBlobProvider` is the other side: what
 * this node serves to members from its blob store, and its fetch-through on their behalf.
 *
 * Why a blob is pulled from the registry at most once per cluster (when members are reachable),
 * even when every node starts the same image at the same moment — the case where "ask the members
 * first" alone fails, since nobody has it yet and everybody goes to the registry:
 *
 * - Every node names the same owner for a digest: the member with the highest sha256(digest +
 *   peerId) among the live members and itself (rendezvous hashing, `blobOwner`). No coordination,
 *   no store writes; a member joining or leaving moves only the digests it wins or held.
 * - A node that is not the owner and finds no holder asks the owner with `via`. The owner's mesh runs
 *   one fetch-through per digest (single flight, mesh/blobs.ts) and hands the stored blob to every
 *   member that asked meanwhile; the puller's own one-download-per-blob rule joins the owner's own
 *   pull of the image to that fetch.
 * - The owner alone goes to the registry (it returns `undefined` here, so its puller does).
 *
 * So N nodes starting one image make one registry download per blob. It degrades, never blocks:
 * two nodes that disagree on who is live may name different owners (two downloads); an owner that
 * is unreachable, busy or failing makes the asker go to the registry itself (`undefined`), as does
 * a node with no live member. Correctness never depends on a peer: the blob store checks every byte
 * against the digest.
 */
import { createHash } from 'node:crypto'
import type { Logger } from 'pino'
import { type BlobSource, type Descriptor, formatReference, type ImageReference, isRegistryReference, parseReference } from '../../images/index.ts'
import { type BlobBody, type BlobProvider, type BlobVia, isBlobDigest, isBlobVia, type Mesh } from '../../mesh/index.ts'
import { OrcError } from '../../model/index.ts'
import type { MetricsRegistry } from '../ops/metrics.ts'

/** The score of `peerId` for `digest`: the highest owns it. */
function rendezvousScore(digest: string, peerId: string): string {
  return createHash('sha256').update(digest).update('\0').update(peerId).digest('hex')
}

/** Peer ids ordered by their rendezvous score for `digest`, the owner first (ties cannot happen: ids differ). */
export function rankByRendezvous(digest: string, peerIds: Iterable<string>): string[] {
  return [...new Set(peerIds)]
    .map((p) => ({ p, s: rendezvousScore(digest, p) }))
    .sort((a, b) => (a.s < b.s ? 1 : a.s > b.s ? -1 : 0))
    .map((x) => x.p)
}

/** The node that fetches `digest` from the registry for the cluster: the same on every node that sees the same members. */
export function blobOwner(digest: string, peerIds: Iterable<string>): string | undefined {
  return rankByRendezvous(digest, peerIds)[0]
}

/** What MeshBlobSource uses of the mesh. */
export type BlobMesh = Pick<Mesh, 'peerId' | 'members' | 'blobHas' | 'fetchBlob'>

export interface MeshBlobSourceComponents {
  /** The node's mesh once it is up (late-bound: the puller exists before it); undefined: registry only. */
  mesh: () => BlobMesh | undefined
  /**
   * Live members' peer ids, self excluded. Default: the mesh's members seen alive, connected or not
   * (beyond fullMeshMax most are not; a request dials them), so every node ranks the same set.
   */
  members?: () => string[]
  /** Default: the mesh's peer id. */
  selfPeerId?: () => string
  log: Logger
  /** Registers the peer counters (`orc_image_peer_*`) when given. */
  metrics?: MetricsRegistry
  /** Members asked `has` per blob. Default 6. */
  askPeers?: number
  /** Bound on the `has` round. Default 2 s. */
  hasTimeoutMs?: number
  /** Rounds tried again when a member that would serve the blob is busy (default 5), waiting busyWaitMs × round (default 250 ms). */
  busyRetries?: number
  busyWaitMs?: number
  /** Waits between rounds (tests pass a fake). */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>
}

function sleepFor(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason)
    const t = setTimeout(() => {
      signal.removeEventListener('abort', stop)
      resolve()
    }, ms)
    const stop = () => {
      clearTimeout(t)
      reject(signal.reason)
    }
    signal.addEventListener('abort', stop, { once: true })
  })
}

export interface PeerBlobStats {
  /** Blobs streamed whole from a member that held them. */
  peerBlobs: number
  peerBytes: number
  /** Blobs an owner fetched from the registry for this node and streamed on. */
  fetchThroughBlobs: number
  fetchThroughBytes: number
  /** Blobs no member could give (the caller went to the registry). */
  misses: number
  /** Transfers from a member that broke after they started (the caller's write fails; it retries). */
  broken: number
}

type Outcome = 'peer' | 'fetch_through'

export class MeshBlobSource implements BlobSource {
  private readonly s: PeerBlobStats = { peerBlobs: 0, peerBytes: 0, fetchThroughBlobs: 0, fetchThroughBytes: 0, misses: 0, broken: 0 }
  private readonly blobsTotal?: ReturnType<MetricsRegistry['counter']>
  private readonly bytesTotal?: ReturnType<MetricsRegistry['counter']>

  constructor(private readonly c: MeshBlobSourceComponents) {
    const m = c.metrics
    if (m !== undefined) {
      this.blobsTotal = m.counter(
        'orc_image_peer_blobs_total',
        'Image blobs this node looked for at members, by result (peer: from a member holding it; fetch_through: its owner fetched it from the registry for the cluster; miss: none could, the registry was asked; broken: a transfer that failed midway).',
      )
      this.bytesTotal = m.counter('orc_image_peer_bytes_total', 'Image blob bytes received from members, by source (peer, fetch_through).')
      const ratio = m.gauge(
        'orc_image_peer_hit_ratio',
        'Share of blobs looked for at members that members gave (peer + fetch_through) over all looked for; 0 before any.',
      )
      for (const result of ['peer', 'fetch_through', 'miss', 'broken']) this.blobsTotal.inc({ result }, 0)
      for (const source of ['peer', 'fetch_through']) this.bytesTotal.inc({ source }, 0)
      m.onCollect(() => ratio.set({}, this.hitRatio()))
    }
  }

  stats(): PeerBlobStats {
    return { ...this.s }
  }

  /** Blobs members gave over blobs looked for at members (0 before any). */
  hitRatio(): number {
    const hits = this.s.peerBlobs + this.s.fetchThroughBlobs
    const all = hits + this.s.misses + this.s.broken
    return all === 0 ? 0 : hits / all
  }

  async fetch(
    d: Descriptor,
    image: { ref: ImageReference; namespace: string },
    signal: AbortSignal,
  ): Promise<{ body: AsyncIterable<Uint8Array>; from: string } | undefined> {
    const mesh = this.c.mesh()
    if (mesh === undefined || !isBlobDigest(d.digest)) return undefined
    const log = this.c.log.child({ digest: d.digest })
    const retries = this.c.busyRetries ?? 5
    for (let round = 0; ; round++) {
      const r = await this.round(mesh, d, image, signal, log)
      if ('body' in r) return r
      if (r.none) return undefined
      // A member that would serve us said it is busy: wait for it rather than add a registry
      // download (the limits answer at once, so under a burst most askers hear this first).
      if (!r.busy || round >= retries || signal.aborted) break
      await (this.c.sleep ?? sleepFor)((this.c.busyWaitMs ?? 250) * (round + 1), signal).catch(() => undefined)
    }
    this.s.misses++
    this.blobsTotal?.inc({ result: 'miss' })
    log.debug('blob not from members; from the registry')
    return undefined
  }

  /** One try: holders first, else the owner with `via`. `busy`: a member refused because it was at its limits. */
  private async round(
    mesh: BlobMesh,
    d: Descriptor,
    image: { ref: ImageReference; namespace: string },
    signal: AbortSignal,
    log: Logger,
  ): Promise<{ body: AsyncIterable<Uint8Array>; from: string } | { busy: boolean; none?: true }> {
    const self = this.c.selfPeerId?.() ?? mesh.peerId
    const views = mesh.members()
    const nameOf = (p: string) => views.find((m) => m.peerId === p)?.name ?? p
    const live = (this.c.members?.() ?? views.filter((m) => !m.self && m.state === 'alive').map((m) => m.peerId)).filter((p) => p !== self)
    // No member to ask: not counted as a miss (nothing was looked for at members).
    if (live.length === 0) return { busy: false, none: true }
    const ranked = rankByRendezvous(d.digest, [...live, self])
    const owner = ranked[0]!
    // The owner first among those asked: it is the likeliest holder (it fetched for the cluster).
    const asked = ranked.filter((p) => p !== self).slice(0, this.c.askPeers ?? 6)
    const hasSignal = AbortSignal.any([signal, AbortSignal.timeout(this.c.hasTimeoutMs ?? 2_000)])
    const answers = await Promise.all(
      asked.map((p) =>
        mesh.blobHas(p, [d.digest], hasSignal).then(
          (have) => (have.includes(d.digest) ? p : undefined),
          (err) => {
            log.debug({ peer: p, err: (err as Error).message }, 'blob has-request failed')
            return undefined
          },
        ),
      ),
    )
    // Spread the load: each asker prefers holders in its own order, so holders share the askers.
    const holders = rankByRendezvous(
      d.digest + self,
      answers.filter((p): p is string => p !== undefined),
    )
    let busy = false
    for (const p of holders) {
      const got = await this.tryGet(mesh, p, d, undefined, signal, log)
      if ('body' in got) return { body: this.counted(got.body, 'peer'), from: nameOf(p) }
      busy ||= got.busy
    }
    const via: BlobVia = { image: formatReference(image.ref), namespace: image.namespace, size: d.size, mediaType: d.mediaType }
    // Only a request the owner accepts (a manifest pinned by digest has no media type: this node
    // pulls it itself when no member holds it).
    if (owner !== self && !holders.includes(owner) && !signal.aborted && isRegistryReference(via.image) && isBlobVia(via)) {
      const got = await this.tryGet(mesh, owner, d, via, signal, log)
      if ('body' in got) return { body: this.counted(got.body, 'fetch_through'), from: `${nameOf(owner)} (fetched from the registry for the cluster)` }
      busy ||= got.busy
    }
    log.debug({ owner, self: owner === self, holders: holders.length, busy }, 'no member gave the blob')
    return { busy }
  }

  private async tryGet(
    mesh: BlobMesh,
    peer: string,
    d: Descriptor,
    via: BlobVia | undefined,
    signal: AbortSignal,
    log: Logger,
  ): Promise<BlobBody | { busy: boolean }> {
    try {
      const got = await mesh.fetchBlob(peer, d.digest, via, signal)
      // Size 0: not known yet (the root index or manifest of a pull by digest); the store bounds it.
      if (d.size > 0 && got.size !== d.size) {
        // The store would refuse it anyway; do not spend the transfer.
        for await (const _ of got.body) break
        log.warn({ peer, size: got.size, expected: d.size }, 'member announced a blob of the wrong size')
        return { busy: false }
      }
      return got
    } catch (err) {
      log.debug({ peer, via: via !== undefined, err: (err as Error).message }, 'blob from member failed')
      // `unavailable` from the member itself (not a failed dial): at its serve limits.
      return { busy: err instanceof OrcError && err.code === 'unavailable' && err.details.remote === true }
    }
  }

  private async *counted(body: AsyncIterable<Uint8Array>, outcome: Outcome): AsyncGenerator<Uint8Array> {
    let done = false
    try {
      for await (const part of body) {
        if (outcome === 'peer') this.s.peerBytes += part.length
        else this.s.fetchThroughBytes += part.length
        this.bytesTotal?.inc({ source: outcome }, part.length)
        yield part
      }
      done = true
      if (outcome === 'peer') this.s.peerBlobs++
      else this.s.fetchThroughBlobs++
      this.blobsTotal?.inc({ result: outcome })
    } finally {
      if (!done) {
        this.s.broken++
        this.blobsTotal?.inc({ result: 'broken' })
      }
    }
  }
}

/** What StoreBlobProvider serves from: BlobStore's `has` and `open` (open throws `not_found` when absent). */
export interface BlobStoreReader {
  has(digest: string): boolean
  open(digest: string): BlobBody
}

export interface StoreBlobProviderComponents {
  store: BlobStoreReader
  /**
   * Fetch `desc` of image `ref` from its registry into the store, with `namespace`'s credentials
   * (the agent: ImagePuller.fetchBlob with the namespace's RegistryAccess). Absent: no fetch-through.
   */
  fetchThrough?: (ref: ImageReference, desc: Descriptor, namespace: string) => Promise<void>
  log: Logger
  metrics?: MetricsRegistry
}

/** This node's blobs as the mesh serves them to members (MeshOptions.blobs). */
export class StoreBlobProvider implements BlobProvider {
  private readonly served?: ReturnType<MetricsRegistry['counter']>
  readonly fetchThrough?: (digest: string, via: BlobVia) => Promise<BlobBody | undefined>

  constructor(private readonly c: StoreBlobProviderComponents) {
    this.served = c.metrics?.counter(
      'orc_image_blobs_served_total',
      'Image blob requests from members, by result (served from the store; fetched: from the registry for the cluster first; absent).',
    )
    if (c.fetchThrough !== undefined) {
      const fetch = c.fetchThrough
      this.fetchThrough = async (digest, via) => {
        let ref: ImageReference
        try {
          ref = parseReference(via.image)
        } catch (err) {
          throw new OrcError('invalid', `fetch-through of ${digest}: ${(err as Error).message}`)
        }
        if (!isRegistryReference(via.image)) throw new OrcError('invalid', `fetch-through of ${digest}: ${via.image} names no registry`)
        await fetch(ref, { digest, size: via.size, mediaType: via.mediaType }, via.namespace)
        const got = this.open(digest)
        this.served?.inc({ result: got === undefined ? 'absent' : 'fetched' })
        this.c.log.info({ digest, image: via.image, namespace: via.namespace, size: via.size }, 'blob fetched from the registry for a member')
        return got
      }
    }
  }

  has(digest: string): boolean {
    try {
      return this.c.store.has(digest)
    } catch {
      return false
    }
  }

  open(digest: string): BlobBody | undefined {
    let got: BlobBody | undefined
    try {
      got = this.c.store.has(digest) ? this.c.store.open(digest) : undefined
    } catch (err) {
      if (err instanceof OrcError && err.code === 'not_found') got = undefined
      else throw err
    }
    this.served?.inc({ result: got === undefined ? 'absent' : 'served' })
    return got
  }
}

/** A provider the agent fills in later (the blob store and puller are made after the mesh starts). */
export class LateBlobProvider implements BlobProvider {
  private inner?: BlobProvider

  set(p: BlobProvider | undefined): void {
    this.inner = p
  }

  has(digest: string): boolean {
    return this.inner?.has(digest) ?? false
  }

  open(digest: string): BlobBody | undefined {
    return this.inner?.open(digest)
  }

  fetchThrough(digest: string, via: BlobVia): Promise<BlobBody | undefined> {
    const f = this.inner?.fetchThrough
    return f === undefined ? Promise.resolve(undefined) : f.call(this.inner, digest, via)
  }
}

/** Registers `orc_image_blob_bytes_total{source=registry|peer|cache}`; the agent calls `pulled` with each PullResult.bytes. */
export function imageBlobMetrics(metrics: MetricsRegistry): { pulled(bytes: { registry: number; peers: number; cached: number }): void } {
  const bytes = metrics.counter(
    'orc_image_blob_bytes_total',
    'Bytes of image blobs needed by pulls on this node, by where they came from (registry, peer, cache: already here).',
  )
  for (const source of ['registry', 'peer', 'cache']) bytes.inc({ source }, 0)
  return {
    pulled(b) {
      bytes.inc({ source: 'registry' }, b.registry)
      bytes.inc({ source: 'peer' }, b.peers)
      bytes.inc({ source: 'cache' }, b.cached)
    },
  }
}
