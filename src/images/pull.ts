/**
 * Pulling an image into the node (docs/images.md): resolve a tag to a digest, fetch the index or
 * manifest, the config and the layers into the BlobStore — from a peer that has them first
 * (`BlobSource`, the mesh), else from the registry — and unpack a manifest into a rootfs the
 * runtimes use (`<cacheDir>/<manifest digest>/rootfs`, shared by every pod using that image).
 * One download per blob at a time on a node, however many pods want it.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import pino, { type Logger } from 'pino'
import { type Clock, systemClock } from '../effects/index.ts'
import { formatReference, type ImageReference, isOrcError, OrcError, wrapError } from '../model/index.ts'
import { choosePlatformManifest, hostPlatform, type ImagePlatform, isIndexMediaType, type ResolvedImage, unpackManifest } from '../runtime/index.ts'
import type { BlobStore } from './blobs.ts'
import { digestHex } from './blobs.ts'
import { type Descriptor, MEDIA_TYPES, type RegistryAccess, RegistryClient } from './registry.ts'

/** Another place blobs come from before the registry: the cluster's members (src/agent/images). */
export interface BlobSource {
  /**
   * A stream of the blob, or undefined when no peer can give it. `image` says where it comes from
   * (a peer that fetches it from the registry on the cluster's behalf needs it). `d.size` is 0 when
   * it is not known yet (the index or manifest a reference's digest names); the stream is verified
   * by the caller (BlobStore.write), so a peer cannot make the node keep bytes of another digest.
   */
  fetch(
    d: Descriptor,
    image: { ref: ImageReference; namespace: string },
    signal: AbortSignal,
  ): Promise<{ body: AsyncIterable<Uint8Array>; from: string } | undefined>
}

export interface PullProgress {
  phase: 'resolve' | 'manifest' | 'blobs' | 'unpack' | 'done'
  /** Bytes of the image's blobs present so far, of `totalBytes` (known once the manifest is read). */
  doneBytes: number
  totalBytes?: number
}

export interface PullResult {
  /** The digest the reference resolved to (an index's when the registry serves one): what pods pin. */
  digest: string
  /** The platform manifest chosen (the unpacked rootfs is keyed by it). */
  manifestDigest: string
  configDigest: string
  layers: Descriptor[]
  /** Bytes of every blob of the image on this platform: index, manifest, config and layers. */
  totalBytes: number
  /** Where the bytes came from in this pull (they add up to totalBytes). */
  bytes: { registry: number; peers: number; cached: number }
}

export interface PullOptions {
  /** Credentials and TLS for the reference's registry. */
  access?: RegistryAccess
  /** The namespace of the pod (or `default`): peers use it to find credentials when they fetch on our behalf. */
  namespace?: string
  signal?: AbortSignal
  onProgress?: (p: PullProgress) => void
}

/** What the puller asks of a registry (RegistryClient; tests give a fake). */
export type RegistryApi = Pick<RegistryClient, 'resolve' | 'manifest' | 'blob'>

export interface ImagePullerOptions {
  /** Peers first; absent: registry only. */
  peers?: BlobSource
  /** Defaults to this machine's (linux + process.arch mapped to GOARCH, the ARM variant). */
  platform?: { os: string; architecture: string; variant?: string }
  /** Per registry request. */
  timeoutMs?: number
  /** The registry client for a registry (default: a RegistryClient with `timeoutMs`); tests serve a layout from memory. */
  client?: (registry: string, access: RegistryAccess) => RegistryApi
  /** Blobs downloaded at once in one pull (default 3). */
  concurrency?: number
  /** Progress callbacks at most this often, phase changes aside (default 250 ms). */
  progressIntervalMs?: number
  clock?: Clock
  logger?: Logger
}

/** An image in the store, for `orc image list`. */
export interface ImageInfo {
  /** The digest pods pin (an index's or a manifest's). */
  digest: string
  /** This platform's manifest, when the index or manifest is present. */
  manifestDigest?: string
  /** References pulled that resolved to it (`registry/repo:tag`, or `registry/repo@digest`). */
  refs: string[]
  /** Bytes of its blobs present in the store. */
  size: number
  /** Every blob it needs is present. */
  complete: boolean
  pulledAt?: number
}

export interface RefRecord {
  digest: string
  pulledAt: number
}

/** Manifests and indexes larger than this are refused (the distribution registry's own limit is 4 MiB). */
const MAX_MANIFEST = 4 << 20
const LAYER_MEDIA_TYPE = /\.tar(?:\.gzip|\+gzip|\+zstd)?$/

interface ManifestJson {
  schemaVersion?: number
  mediaType?: string
  manifests?: Descriptor[]
  config?: Descriptor
  layers?: Descriptor[]
}

interface PullContext {
  ref: ImageReference
  namespace: string
  client: () => RegistryApi
  signal: AbortSignal
  usePeers: boolean
  stats: { registry: number; peers: number; cached: number }
  progress: (deltaBytes: number) => void
}

function parseManifest(bytes: Buffer, digest: string): ManifestJson {
  let m: unknown
  try {
    m = JSON.parse(bytes.toString('utf8'))
  } catch (err) {
    throw wrapError(`parse manifest ${digest}`, err, 'invalid')
  }
  if (typeof m !== 'object' || m === null || Array.isArray(m)) throw new OrcError('invalid', `manifest ${digest} is not a JSON object`)
  const j = m as ManifestJson
  if (j.schemaVersion !== 2)
    throw new OrcError('invalid', `manifest ${digest} has schemaVersion ${String(j.schemaVersion)} (only 2 is supported: OCI and Docker v2)`)
  return j
}

function isIndex(j: ManifestJson): boolean {
  return isIndexMediaType(j.mediaType) || (j.mediaType === undefined && Array.isArray(j.manifests) && j.layers === undefined)
}

function checkDescriptor(d: Descriptor | undefined, what: string, manifest: string): Descriptor {
  if (!d || typeof d.digest !== 'string' || typeof d.size !== 'number' || !Number.isSafeInteger(d.size) || d.size < 0) {
    throw new OrcError('invalid', `manifest ${manifest}: ${what} is not a descriptor with a digest and a size`)
  }
  digestHex(d.digest)
  return d
}

/** The key a pull is recorded under in refs.json: the tag when there is one, else the digest. */
function refKey(ref: ImageReference & { digest: string }): string {
  return ref.tag !== undefined
    ? formatReference({ registry: ref.registry, repository: ref.repository, tag: ref.tag })
    : formatReference({ registry: ref.registry, repository: ref.repository, digest: ref.digest })
}

export class ImagePuller {
  readonly #clock: Clock
  readonly #log: Logger
  readonly #platform: ImagePlatform
  /** One download per digest at a time: a second asker waits for the first. */
  readonly #inflight = new Map<string, Promise<void>>()
  /** Root digests of the pulls in progress (gc keeps what they reach). */
  readonly #pulling = new Map<string, number>()
  readonly #clients = new Map<string, RegistryApi>()

  constructor(
    readonly blobs: BlobStore,
    /** Unpacked rootfs per manifest digest. */
    readonly cacheDir: string,
    readonly opts: ImagePullerOptions = {},
  ) {
    this.#clock = opts.clock ?? systemClock
    this.#log = (opts.logger ?? pino({ level: 'silent' })).child({ module: 'images' })
    this.#platform = opts.platform ?? hostPlatform()
  }

  #client(registry: string, access: RegistryAccess = {}): RegistryApi {
    const key = JSON.stringify([registry, access.tls, access.ca, access.username, access.password])
    let c = this.#clients.get(key)
    if (!c) {
      c = this.opts.client ? this.opts.client(registry, access) : new RegistryClient(registry, access, { timeoutMs: this.opts.timeoutMs })
      this.#clients.set(key, c)
    }
    return c
  }

  /** The digest a tag names now (asks the registry); a reference with a digest is returned as is. */
  async resolveDigest(ref: ImageReference, opts: PullOptions = {}): Promise<string> {
    if (ref.digest !== undefined) return ref.digest
    opts.onProgress?.({ phase: 'resolve', doneBytes: 0 })
    const d = await this.#client(ref.registry, opts.access).resolve(ref.repository, ref.tag ?? 'latest', opts.signal)
    digestHex(d.digest)
    return d.digest
  }

  /** Fetch everything `ref@digest` needs into the blob store (nothing present is fetched again). */
  async pull(ref: ImageReference & { digest: string }, opts: PullOptions = {}): Promise<PullResult> {
    digestHex(ref.digest)
    const stop = new AbortController()
    const signal = opts.signal ? AbortSignal.any([opts.signal, stop.signal]) : stop.signal
    let done = 0
    let total: number | undefined
    let phase: PullProgress['phase'] = 'manifest'
    let lastReport = Number.NEGATIVE_INFINITY
    const interval = this.opts.progressIntervalMs ?? 250
    const report = (force: boolean) => {
      if (!opts.onProgress) return
      const now = this.#clock.now()
      if (!force && now - lastReport < interval) return
      lastReport = now
      opts.onProgress({ phase, doneBytes: done, ...(total !== undefined ? { totalBytes: total } : {}) })
    }
    const ctx: PullContext = {
      ref,
      namespace: opts.namespace ?? 'default',
      client: () => this.#client(ref.registry, opts.access),
      signal,
      usePeers: true,
      stats: { registry: 0, peers: 0, cached: 0 },
      progress: (delta) => {
        done += delta
        report(false)
      },
    }
    this.#pulling.set(ref.digest, (this.#pulling.get(ref.digest) ?? 0) + 1)
    try {
      report(true)
      const rootBytes = await this.#manifestBlob(ctx, { mediaType: '', digest: ref.digest, size: 0 })
      let rootJson = parseManifest(rootBytes, ref.digest)
      let manifestDigest = ref.digest
      let manifestBytes = rootBytes.length
      if (isIndex(rootJson)) {
        const chosen = checkDescriptor(choosePlatformManifest(rootJson.manifests ?? [], this.#platform) as Descriptor, 'platform manifest', ref.digest)
        if (isIndexMediaType(chosen.mediaType)) throw new OrcError('invalid', `image index ${ref.digest} nests another index (${chosen.digest}): not supported`)
        if (chosen.size > MAX_MANIFEST) throw new OrcError('invalid', `manifest ${chosen.digest} is ${chosen.size} bytes (at most ${MAX_MANIFEST})`)
        const bytes = await this.#manifestBlob(ctx, chosen)
        rootJson = parseManifest(bytes, chosen.digest)
        if (isIndex(rootJson)) throw new OrcError('invalid', `image index ${ref.digest} nests another index (${chosen.digest}): not supported`)
        manifestDigest = chosen.digest
        manifestBytes += bytes.length
      }
      const config = checkDescriptor(rootJson.config, 'config', manifestDigest)
      const layers = (rootJson.layers ?? []).map((l, i) => checkDescriptor(l, `layer ${i}`, manifestDigest))
      for (const l of layers) {
        if (!LAYER_MEDIA_TYPE.test(l.mediaType ?? '')) {
          throw new OrcError(
            'invalid',
            `layer ${l.digest} of ${manifestDigest} has media type ${JSON.stringify(l.mediaType)}: not a tar, tar+gzip or tar+zstd layer`,
          )
        }
      }
      total = manifestBytes + config.size + layers.reduce((n, l) => n + l.size, 0)
      phase = 'blobs'
      report(true)
      await this.#fetchAll(ctx, [config, ...layers], stop)
      this.#recordRef(ref)
      phase = 'done'
      report(true)
      return {
        digest: ref.digest,
        manifestDigest,
        configDigest: config.digest,
        layers,
        totalBytes: total,
        bytes: ctx.stats,
      }
    } finally {
      const n = (this.#pulling.get(ref.digest) ?? 1) - 1
      if (n <= 0) this.#pulling.delete(ref.digest)
      else this.#pulling.set(ref.digest, n)
    }
  }

  /** Fetch one blob from the registry into the blob store (a peer asked us to, on the cluster's behalf). */
  async fetchBlob(ref: ImageReference, d: Descriptor, opts: PullOptions = {}): Promise<void> {
    checkDescriptor(d, 'blob', formatReference(ref))
    const ctx: PullContext = {
      ref,
      namespace: opts.namespace ?? 'default',
      client: () => this.#client(ref.registry, opts.access),
      signal: opts.signal ?? new AbortController().signal,
      // Never back to the peers: they asked us because they do not have it.
      usePeers: false,
      stats: { registry: 0, peers: 0, cached: 0 },
      progress: () => {},
    }
    const manifest =
      d.mediaType === MEDIA_TYPES.ociIndex ||
      d.mediaType === MEDIA_TYPES.ociManifest ||
      d.mediaType === MEDIA_TYPES.dockerList ||
      d.mediaType === MEDIA_TYPES.dockerManifest
    if (manifest) await this.#manifestBlob(ctx, d)
    else await this.#ensure(ctx, d, 'blob')
  }

  /** Download `list` (config and layers) a few at a time; the first failure cancels the rest. */
  async #fetchAll(ctx: PullContext, list: Descriptor[], stop: AbortController): Promise<void> {
    const queue = [...list]
    let failure: unknown
    const worker = async () => {
      for (;;) {
        const d = queue.shift()
        if (!d || failure !== undefined) return
        try {
          await this.#ensure(ctx, d, 'blob')
        } catch (err) {
          if (failure === undefined) failure = err
          stop.abort(err)
          return
        }
      }
    }
    const n = Math.max(1, Math.min(this.opts.concurrency ?? 3, list.length))
    await Promise.all(Array.from({ length: n }, worker))
    if (failure !== undefined) throw failure
  }

  /** A manifest or index's bytes, put in the blob store (from the store, a peer or the registry). */
  async #manifestBlob(ctx: PullContext, d: Descriptor): Promise<Buffer> {
    await this.#ensure(ctx, d, 'manifest')
    return this.blobs.read(d.digest)
  }

  /** The blob is in the store once this resolves; one download per digest however many ask. */
  async #ensure(ctx: PullContext, d: Descriptor, kind: 'manifest' | 'blob'): Promise<void> {
    for (;;) {
      ctx.signal.throwIfAborted()
      const have = this.blobs.size(d.digest)
      if (have !== undefined) {
        this.blobs.touch(d.digest)
        ctx.stats.cached += have
        ctx.progress(have)
        return
      }
      const running = this.#inflight.get(d.digest)
      if (running) {
        try {
          await abortable(running, ctx.signal)
        } catch (err) {
          // The other download failed or was cancelled with its own pull: try ourselves (unless we were cancelled).
          if (ctx.signal.aborted) throw err
          if (running === this.#inflight.get(d.digest)) this.#inflight.delete(d.digest)
        }
        continue
      }
      const p = this.#download(ctx, d, kind)
      this.#inflight.set(d.digest, p)
      try {
        await p
      } finally {
        if (this.#inflight.get(d.digest) === p) this.#inflight.delete(d.digest)
      }
      return
    }
  }

  async #download(ctx: PullContext, d: Descriptor, kind: 'manifest' | 'blob'): Promise<void> {
    const { ref, signal } = ctx
    const size = d.size > 0 ? d.size : undefined
    let written = 0
    const onBytes = (n: number) => {
      ctx.progress(n - written)
      written = n
    }
    const undoProgress = () => {
      ctx.progress(-written)
      written = 0
    }
    if (ctx.usePeers && this.opts.peers) {
      let from = 'a peer'
      try {
        const got = await this.opts.peers.fetch(d, { ref, namespace: ctx.namespace }, signal)
        if (got) {
          from = `peer ${got.from}`
          await this.blobs.write(d.digest, got.body, { size, maxBytes: MAX_MANIFEST, signal, onBytes, from })
          ctx.stats.peers += this.blobs.size(d.digest) ?? 0
          return
        }
      } catch (err) {
        if (signal.aborted) throw err
        undoProgress()
        // A peer that sends bad bytes or breaks off costs a registry download, never a wrong image.
        this.#log.warn({ digest: d.digest, from, err: err instanceof Error ? err.message : String(err) }, 'peer blob refused, fetching from the registry')
      }
    }
    const repo = `${ref.registry}/${ref.repository}`
    if (kind === 'manifest') {
      const { bytes } = await ctx.client().manifest(ref.repository, d.digest, signal)
      if (bytes.length > MAX_MANIFEST) throw new OrcError('invalid', `manifest ${d.digest} from ${repo} is ${bytes.length} bytes (at most ${MAX_MANIFEST})`)
      await this.blobs.write(d.digest, once(bytes), { size, signal, onBytes, from: repo })
    } else {
      const blob = await ctx.client().blob(ref.repository, d.digest, signal)
      await this.blobs.write(d.digest, blob.body, { size, maxBytes: MAX_MANIFEST, signal, onBytes, from: repo })
    }
    ctx.stats.registry += this.blobs.size(d.digest) ?? 0
  }

  /** Unpack a pulled image (its `digest` as PullResult.digest) into a rootfs, once per manifest digest. */
  unpack(digest: string): ResolvedImage {
    digestHex(digest)
    if (!this.blobs.has(digest)) throw new OrcError('not_found', `image ${digest} is not pulled on this node`, { digest })
    const json = parseManifest(this.blobs.read(digest), digest)
    let mdesc: Descriptor = { mediaType: json.mediaType ?? MEDIA_TYPES.ociManifest, digest, size: this.blobs.size(digest) ?? 0 }
    if (isIndex(json)) mdesc = choosePlatformManifest(json.manifests ?? [], this.#platform) as Descriptor
    const read = (d: { digest: string }): Buffer => {
      try {
        const b = this.blobs.read(d.digest)
        this.blobs.touch(d.digest)
        return b
      } catch (err) {
        if (isOrcError(err, 'not_found')) throw new OrcError('not_found', `image ${digest} is not fully pulled: blob ${d.digest} is missing`, { digest })
        throw err
      }
    }
    try {
      return unpackManifest(read, mdesc, this.cacheDir)
    } catch (err) {
      throw wrapError(`unpack image ${digest}`, err)
    }
  }

  /** The blobs an image needs that are present (index, this platform's and other present manifests, configs, layers) and whether any is missing. */
  #reach(digest: string, into: Set<string>): { complete: boolean; manifestDigest?: string } {
    const visit = (d: string, depth: number): { complete: boolean; manifestDigest?: string } => {
      if (!this.blobs.has(d)) return { complete: false }
      into.add(d)
      let json: ManifestJson
      try {
        json = parseManifest(this.blobs.read(d), d)
      } catch {
        return { complete: false }
      }
      if (isIndex(json)) {
        if (depth > 2) return { complete: false }
        let chosen: Descriptor | undefined
        try {
          chosen = choosePlatformManifest(json.manifests ?? [], this.#platform) as Descriptor
        } catch {}
        let result: { complete: boolean; manifestDigest?: string } = { complete: false }
        for (const m of json.manifests ?? []) {
          if (typeof m?.digest !== 'string' || !/^sha256:[a-f0-9]{64}$/.test(m.digest)) continue
          if (m.digest === chosen?.digest) result = visit(m.digest, depth + 1)
          else if (this.blobs.has(m.digest)) visit(m.digest, depth + 1)
        }
        return result
      }
      let complete = true
      for (const b of [json.config, ...(json.layers ?? [])]) {
        if (typeof b?.digest !== 'string' || !/^sha256:[a-f0-9]{64}$/.test(b.digest)) continue
        if (this.blobs.has(b.digest)) into.add(b.digest)
        else complete = false
      }
      return { complete, manifestDigest: d }
    }
    return visit(digest, 0)
  }

  /** Whether a manifest is unpacked into a rootfs here. */
  isUnpacked(manifestDigest: string): boolean {
    return /^sha256:[a-f0-9]{64}$/.test(manifestDigest) && existsSync(join(this.cacheDir, manifestDigest.replace(':', '-'), 'rootfs'))
  }

  /** Blobs reachable from `keep` (image digests) stay; others go, least recently used first, until the store is under `budgetBytes` (0: all unused go). */
  gc(keep: Iterable<string>, budgetBytes: number): { removed: string[]; freedBytes: number } {
    const reachable = new Set<string>()
    for (const d of [...keep, ...this.#pulling.keys()]) {
      if (/^sha256:[a-f0-9]{64}$/.test(d)) this.#reach(d, reachable)
    }
    for (const d of this.#inflight.keys()) reachable.add(d)
    this.blobs.sweepTemporary()
    const all = this.blobs.list()
    let total = all.reduce((n, b) => n + b.size, 0)
    const removed: string[] = []
    let freedBytes = 0
    for (const b of all.filter((x) => !reachable.has(x.digest)).sort((a, c) => a.usedAt - c.usedAt)) {
      if (total <= budgetBytes && budgetBytes > 0) break
      if (this.blobs.remove(b.digest)) {
        removed.push(b.digest)
        freedBytes += b.size
        total -= b.size
      }
    }
    if (removed.length > 0) {
      const gone = new Set(removed)
      const refs = this.refs()
      let changed = false
      for (const [k, v] of Object.entries(refs)) {
        if (gone.has(v.digest)) {
          delete refs[k]
          changed = true
        }
      }
      if (changed) this.#writeRefs(refs)
      this.#log.info({ removed: removed.length, freedBytes }, 'image blobs collected')
    }
    return { removed, freedBytes }
  }

  // ---- references pulled (refs.json beside the blobs), for `orc image list|rm` ----

  get #refsPath(): string {
    return join(this.blobs.dir, 'refs.json')
  }

  /** Every reference pulled on this node and the digest it resolved to (last pull wins). */
  refs(): Record<string, RefRecord> {
    try {
      const j = JSON.parse(readFileSync(this.#refsPath, 'utf8')) as unknown
      if (typeof j !== 'object' || j === null || Array.isArray(j)) return {}
      const out: Record<string, RefRecord> = {}
      for (const [k, v] of Object.entries(j as Record<string, RefRecord>)) {
        if (typeof v?.digest === 'string' && typeof v.pulledAt === 'number') out[k] = { digest: v.digest, pulledAt: v.pulledAt }
      }
      return out
    } catch {
      return {}
    }
  }

  /** Forget a reference (`orc image rm`): its blobs go at the next gc unless something else keeps them. False when unknown. */
  forget(ref: string): boolean {
    const refs = this.refs()
    if (!(ref in refs)) return false
    delete refs[ref]
    this.#writeRefs(refs)
    return true
  }

  #recordRef(ref: ImageReference & { digest: string }): void {
    const refs = this.refs()
    refs[refKey(ref)] = { digest: ref.digest, pulledAt: this.#clock.now() }
    this.#writeRefs(refs)
  }

  #writeRefs(refs: Record<string, RefRecord>): void {
    const tmp = `${this.#refsPath}.tmp-${process.pid}`
    writeFileSync(tmp, JSON.stringify(refs, null, 1))
    renameSync(tmp, this.#refsPath)
  }

  /** The images on this node (`orc image list`): each digest a pull recorded, with its references and size. */
  images(): ImageInfo[] {
    const byDigest = new Map<string, { refs: string[]; pulledAt: number }>()
    for (const [k, v] of Object.entries(this.refs())) {
      const e = byDigest.get(v.digest) ?? { refs: [], pulledAt: 0 }
      e.refs.push(k)
      e.pulledAt = Math.max(e.pulledAt, v.pulledAt)
      byDigest.set(v.digest, e)
    }
    const sizes = new Map(this.blobs.list().map((b) => [b.digest, b.size]))
    const out: ImageInfo[] = []
    for (const [digest, e] of byDigest) {
      const blobs = new Set<string>()
      const r = this.#reach(digest, blobs)
      let size = 0
      for (const b of blobs) size += sizes.get(b) ?? 0
      out.push({
        digest,
        ...(r.manifestDigest ? { manifestDigest: r.manifestDigest } : {}),
        refs: e.refs.sort(),
        size,
        complete: r.complete,
        pulledAt: e.pulledAt,
      })
    }
    return out.sort((a, b) => (b.pulledAt ?? 0) - (a.pulledAt ?? 0))
  }
}

async function* once(b: Uint8Array): AsyncIterable<Uint8Array> {
  yield b
}

/** `p`, or the signal's reason as soon as it aborts (the work behind `p` goes on for its other waiters). */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason)
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort)
        resolve(v)
      },
      (e) => {
        signal.removeEventListener('abort', onAbort)
        reject(e)
      },
    )
  })
}
