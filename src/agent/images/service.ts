/**
 * The node's registry images (docs/images.md): one blob store and one puller per agent, shared by
 * the pods' lifecycle (`pull-image`, `resolve-image`) and the image API (`orc image pull|list|
 * inspect|rm|prune`). Pulls in progress are listed with their bytes so `orc why`, `orc image pull`
 * and `orc image list` show the same progress. Two pulls of one image share its downloads (the
 * puller fetches each digest once at a time), each with its own progress.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import type { Clock } from '../../effects/index.ts'
import {
  type BlobSource,
  BlobStore,
  type Descriptor,
  formatReference,
  type ImageInfo,
  ImagePuller,
  type ImageReference,
  type PullResult,
  parseReference,
  type RegistryAccess,
  type RegistryTls,
} from '../../images/index.ts'
import { OrcError } from '../../model/index.ts'
import type { ResolvedImage } from '../../runtime/index.ts'
import type { ImageListRow, ImagePullView } from '../api-types.ts'
import { type DataLookup, openSecretValue } from '../pods/refs.ts'

/** A pull the node is doing or did last (per image reference and digest); the API's shape. */
export type PullView = ImagePullView

/** An image this node pulled, as `orc image list` shows it; the API's shape. */
export type ImageRow = ImageListRow

export interface PullRunOptions {
  access: RegistryAccess
  namespace: string
  signal?: AbortSignal
  onProgress?: (v: PullView) => void
}

/** How many ended pulls `orc image list` and `orc image pull` can still see. */
const MAX_ENDED_VIEWS = 50

/** Default budget of the blob store: past it, blobs no pod revision keeps go, least recently used first. */
export const DEFAULT_BLOB_BUDGET_BYTES = 20 * 1024 ** 3

export interface ImageServiceOptions {
  dataDir: string
  /** Unpacked rootfs per manifest digest (the pods' image cache). */
  cacheDir: string
  clock: Clock
  log: Logger
  /** The cluster's members as a blob source (late bound: the mesh starts after the lifecycle). */
  peers?: () => BlobSource | undefined
  /** Per registry request. */
  timeoutMs?: number
  /** Blob store budget (bytes); default DEFAULT_BLOB_BUDGET_BYTES. */
  budgetBytes?: number
  /** Digests pods of this node keep (their revisions' images): never collected. */
  inUse?: () => Set<string>
  /** After each pull: where its bytes came from (metrics). */
  onPulled?: (bytes: PullResult['bytes']) => void
}

/** Keys of a registry credential Secret (docs/images.md). */
const TLS_MODES: readonly RegistryTls[] = ['verify', 'insecure', 'plain']

/**
 * The registry access a pod (or `orc image pull --secret`) gets from its pull Secrets: the first
 * Secret whose `server` is the image's registry, or that names no server. Values are opened with the
 * cluster keyring here, on the node that pulls; they never reach a container or a message.
 */
export function registryAccessOf(
  registry: string,
  namespace: string,
  secretNames: readonly string[],
  lookup: DataLookup | undefined,
  opts: { serverRequired?: boolean } = {},
): RegistryAccess {
  if (secretNames.length === 0 || lookup === undefined) return {}
  for (const name of secretNames) {
    const s = lookup.secret(name)
    if (s === undefined) throw new OrcError('not_found', `image pull secret secret/${name} not found in namespace ${namespace}`)
    const sealed = s.spec?.sealed ?? {}
    const open = (key: string): string | undefined => {
      const v = sealed[key]
      return v === undefined ? undefined : openSecretValue(lookup, namespace, name, key, v).toString('utf8')
    }
    const server = open('server')
    if (server !== undefined ? server.trim() !== registry : opts.serverRequired) continue
    const tls = open('tls')?.trim()
    if (tls !== undefined && !TLS_MODES.includes(tls as RegistryTls))
      throw new OrcError('invalid', `secret/${name}: tls must be one of ${TLS_MODES.join(', ')}, not ${JSON.stringify(tls)}`)
    const username = open('username')
    const password = open('password')
    const ca = open('ca.crt')
    return {
      ...(tls !== undefined ? { tls: tls as RegistryTls } : {}),
      ...(username !== undefined ? { username } : {}),
      ...(password !== undefined ? { password } : {}),
      ...(ca !== undefined ? { ca } : {}),
    }
  }
  return {}
}

export class ImageService {
  readonly blobs: BlobStore
  readonly puller: ImagePuller
  private readonly views = new Map<string, PullView>()
  private readonly log: Logger
  private readonly tagsFile: string
  private tagCache: Record<string, { digest: string; at: number }> | undefined

  constructor(private readonly o: ImageServiceOptions) {
    this.log = o.log
    this.blobs = new BlobStore(join(o.dataDir, 'blobs'))
    const peers: BlobSource = {
      fetch: async (d: Descriptor, image, signal) => (await o.peers?.()?.fetch(d, image, signal)) ?? undefined,
    }
    this.tagsFile = join(o.dataDir, 'blobs', 'tags.json')
    this.puller = new ImagePuller(this.blobs, o.cacheDir, { peers, ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}) })
  }

  /** The digest `image`'s tag names now (asks the registry); an image with a digest is answered from it. */
  async resolveDigest(image: string, access: RegistryAccess, signal?: AbortSignal): Promise<string> {
    const ref = parseReference(image)
    if (ref.digest !== undefined) return ref.digest
    const key = formatReference({ registry: ref.registry, repository: ref.repository, ...(ref.tag !== undefined ? { tag: ref.tag } : {}) })
    try {
      const digest = await this.puller.resolveDigest(ref, { access, ...(signal ? { signal } : {}) })
      this.rememberTag(key, digest)
      return digest
    } catch (err) {
      // The registry is unreachable: the digest the registry named for this tag when this node last
      // asked it (as Docker's IfNotPresent does). Only what the registry itself told this node: a
      // member's answer, or a `tag@digest` a pod wrote, could not be checked against anything.
      const code = (err as { code?: string }).code
      if (signal?.aborted || (code !== 'unavailable' && code !== 'timeout')) throw err
      const known = this.tags()[key]
      if (known === undefined || !this.blobs.has(known.digest)) throw err
      this.log.warn(
        { image, digest: known.digest, resolvedAt: new Date(known.at).toISOString(), err: (err as Error).message },
        'registry unreachable: using the digest the registry last named for the tag',
      )
      return known.digest
    }
  }

  /** Tag → the digest the registry last named for it here (`<data-dir>/blobs/tags.json`), read once. */
  private tags(): Record<string, { digest: string; at: number }> {
    if (this.tagCache !== undefined) return this.tagCache
    try {
      const j = JSON.parse(readFileSync(this.tagsFile, 'utf8')) as Record<string, { digest: string; at: number }>
      this.tagCache = typeof j === 'object' && j !== null ? j : {}
    } catch {
      this.tagCache = {}
    }
    return this.tagCache
  }

  private rememberTag(key: string, digest: string): void {
    const tags = this.tags()
    if (tags[key]?.digest === digest) return
    tags[key] = { digest, at: this.o.clock.now() }
    try {
      mkdirSync(this.blobs.dir, { recursive: true })
      writeFileSync(`${this.tagsFile}.tmp`, JSON.stringify(tags), { mode: 0o600 })
      renameSync(`${this.tagsFile}.tmp`, this.tagsFile)
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'could not record a resolved tag')
    }
  }

  /** Fetch `image@digest` into the blob store (peers first, then the registry). */
  pull(image: string, digest: string, opts: PullRunOptions): Promise<PullResult> {
    return this.begin(image, digest, opts).done
  }

  /** Start a pull and return its view at once (`orc image pull` follows it through `pulls()`). */
  start(image: string, digest: string, opts: PullRunOptions): { view: PullView; done: Promise<PullResult> } {
    return this.begin(image, digest, opts)
  }

  private begin(image: string, digest: string, opts: PullRunOptions): { view: PullView; done: Promise<PullResult> } {
    const ref: ImageReference & { digest: string } = { ...parseReference(image), digest }
    const key = `${formatReference({ ...ref, digest: undefined } as ImageReference)}@${digest}`
    const view: PullView = {
      image,
      digest,
      namespace: opts.namespace,
      state: 'pulling',
      phase: 'resolve',
      doneBytes: 0,
      startedAt: this.o.clock.now(),
    }
    this.views.delete(key)
    this.views.set(key, view)
    this.forgetOldViews()
    return { view, done: this.run(ref, view, opts) }
  }

  private async run(ref: ImageReference & { digest: string }, view: PullView, opts: PullRunOptions): Promise<PullResult> {
    const { image, digest } = view
    try {
      const result = await this.puller.pull(ref, {
        access: opts.access,
        namespace: opts.namespace,
        ...(opts.signal ? { signal: opts.signal } : {}),
        onProgress: (p) => {
          view.phase = p.phase
          view.doneBytes = p.doneBytes
          if (p.totalBytes !== undefined) view.totalBytes = p.totalBytes
          opts.onProgress?.(view)
        },
      })
      this.o.onPulled?.(result.bytes)
      this.collectOverBudget()
      view.state = 'done'
      view.phase = 'done'
      view.bytes = result.bytes
      view.doneBytes = result.totalBytes
      view.totalBytes = result.totalBytes
      this.log.info({ image, digest, bytes: result.bytes }, 'image pulled')
      return result
    } catch (err) {
      view.state = 'failed'
      view.error = (err as Error).message
      throw err
    } finally {
      view.finishedAt = this.o.clock.now()
    }
  }

  /**
   * As a blob's owner: fetch it from its registry for a member that asked (`/orc/blobs/1.0.0` via),
   * with the credentials of the asker's namespace — a Secret there whose `server` is the registry
   * (a member may not name Secrets; without one the pull is anonymous, and the asker falls back to
   * its own pull with its pod's pull Secrets if this fails).
   */
  async fetchThrough(
    ref: ImageReference,
    desc: Descriptor,
    namespace: string,
    lookup: DataLookup,
    secrets: readonly { metadata: { name: string }; spec?: { sealed?: Record<string, unknown> } }[],
  ): Promise<void> {
    const named = secrets.map((s) => s.metadata.name)
    let access: RegistryAccess = {}
    try {
      access = registryAccessOf(ref.registry, namespace, named, lookup, { serverRequired: true })
    } catch (err) {
      this.log.warn({ registry: ref.registry, namespace, err: (err as Error).message }, 'fetch-through: no usable credentials; pulling anonymously')
    }
    await this.puller.fetchBlob(ref, desc, { access, namespace })
  }

  unpack(digest: string): ResolvedImage {
    return this.puller.unpack(digest)
  }

  /** Ended pulls beyond the last MAX_ENDED_VIEWS are forgotten (a map in insertion order: oldest first). */
  private forgetOldViews(): void {
    let ended = [...this.views.values()].filter((v) => v.state !== 'pulling').length
    for (const [k, v] of this.views) {
      if (ended <= MAX_ENDED_VIEWS) break
      if (v.state === 'pulling') continue
      this.views.delete(k)
      ended--
    }
  }

  /** Pulls under way and the last ones that ended (newest first). */
  pulls(): PullView[] {
    return [...this.views.values()].sort((a, b) => b.startedAt - a.startedAt)
  }

  /** Over budget: what no pod keeps goes, least recently used first. */
  private collectOverBudget(): void {
    const budget = this.o.budgetBytes ?? DEFAULT_BLOB_BUDGET_BYTES
    if (this.blobs.totalBytes() > budget) this.prune(budget)
  }

  /** The image a reference or digest names here, if this node pulled it (a tag written as in the pod, or normalised). */
  find(imageOrDigest: string): ImageInfo | undefined {
    const all = this.puller.images()
    const byDigest = all.find((i) => i.digest === imageOrDigest || i.manifestDigest === imageOrDigest)
    if (byDigest) return byDigest
    let norm: string | undefined
    try {
      const r = parseReference(imageOrDigest)
      norm = formatReference({ registry: r.registry, repository: r.repository, ...(r.digest ? { digest: r.digest } : { tag: r.tag }) } as ImageReference)
      if (r.digest) return all.find((i) => i.digest === r.digest)
    } catch {}
    return all.find((i) => i.refs.includes(imageOrDigest) || (norm !== undefined && i.refs.includes(norm)))
  }

  /** The images this node pulled, with the pods that keep them. */
  list(usedBy: (digest: string) => string[]): ImageRow[] {
    return this.puller.images().map((i) => this.row(i, usedBy))
  }

  row(i: ImageInfo, usedBy: (digest: string) => string[]): ImageRow {
    const m = i.manifestDigest ?? i.digest
    return {
      digest: i.digest,
      manifestDigest: m,
      refs: i.refs,
      bytes: i.size,
      pulledAt: i.pulledAt ?? 0,
      usedBy: [...new Set([...usedBy(i.digest), ...usedBy(m)])].sort(),
      unpacked: this.puller.isUnpacked(m),
    }
  }

  /** Digests nothing may collect now: pods' revisions and pulls under way. */
  private kept(): Set<string> {
    const keep = new Set(this.o.inUse?.() ?? [])
    for (const v of this.views.values()) if (v.state === 'pulling' && v.digest) keep.add(v.digest)
    return keep
  }

  /**
   * Forget an image and remove its blobs (those no other kept image shares). Refused while a pod of
   * this node keeps it: delete or update the pod first.
   */
  remove(imageOrDigest: string, usedBy: (digest: string) => string[]): { removed: string[]; freedBytes: number } {
    const rec = this.find(imageOrDigest)
    if (rec === undefined) throw new OrcError('not_found', `image ${imageOrDigest} is not on this node (orc image list shows what is)`)
    const users = this.row(rec, usedBy).usedBy
    if (users.length > 0) throw new OrcError('conflict', `image ${imageOrDigest} is used by ${users.join(', ')} on this node; delete or update those first`)
    for (const r of rec.refs) this.puller.forget(r)
    // Other images stay, with every blob they share with this one.
    const keep = new Set([...this.kept(), ...this.puller.images().map((i) => i.digest)])
    return this.puller.gc(keep, 0)
  }

  /** Remove what no pod keeps until the blob store is under `budgetBytes` (0: every unused image). */
  prune(budgetBytes: number): { removed: string[]; freedBytes: number; images: string[] } {
    const before = new Set(this.puller.images().map((i) => i.digest))
    const res = this.puller.gc(this.kept(), budgetBytes)
    for (const i of this.puller.images()) before.delete(i.digest)
    return { ...res, images: [...before] }
  }
}

/** One line of a pull's progress: `12.0 MiB / 48.3 MiB (25%)`. */
export function formatPullProgress(v: Pick<PullView, 'phase' | 'doneBytes' | 'totalBytes'>): string {
  if (v.totalBytes === undefined || v.totalBytes === 0) return `${v.phase}: ${mib(v.doneBytes)}`
  return `${v.phase}: ${mib(v.doneBytes)} / ${mib(v.totalBytes)} (${Math.floor((100 * v.doneBytes) / v.totalBytes)}%)`
}

function mib(n: number): string {
  return `${(n / 1024 / 1024).toFixed(1)} MiB`
}
