/**
 * The resolve-image unit's work: turn a pod's image (a name in the node's image store, or with a
 * hostPath grant a host path; rootfs dir, OCI layout dir, or OCI layout tar) into an unpacked rootfs in the runtime's image cache, and keep the unpacked images
 * of each pod's last few revisions so a rollback starts without importing again.
 *
 * A layout tar is read by a `cat` child process, not by the agent: an image on a stuck file system
 * (or a FIFO nobody writes) then blocks only that process, which the unit's timeout kills, instead
 * of a libuv thread the store also needs.
 */
import { spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { realpath, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { type Random, randomHex, systemRandom } from '../../effects/index.ts'
import { isRegistryReference } from '../../images/index.ts'
import { OrcError, wrapError } from '../../model/index.ts'
import { type ResolvedImage, resolveImage } from '../../runtime/index.ts'
import type { ImageService } from '../images/service.ts'
import { imageLocation } from './security.ts'

const MAX_TAR_BYTES = 8 * 1024 * 1024 * 1024

/** Nobody: a host file a pod names (granted hostPath) is read with no more rights than any user's. */
const NOBODY = 65534

function readWithCat(path: string, signal: AbortSignal, asNobody: boolean): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const ids = asNobody && process.getuid?.() === 0 ? { uid: NOBODY, gid: NOBODY } : {}
    const child = spawn('cat', ['--', path], { stdio: ['ignore', 'pipe', 'pipe'], signal, ...ids })
    const chunks: Buffer[] = []
    let size = 0
    let stderr = ''
    child.stdout.on('data', (c: Buffer) => {
      size += c.length
      if (size > MAX_TAR_BYTES) child.kill('SIGKILL')
      else chunks.push(c)
    })
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
    child.on('error', (err) => reject(signal.aborted ? (signal.reason ?? err) : err))
    child.on('close', (code) => {
      if (signal.aborted) return reject(signal.reason ?? new OrcError('unavailable', 'aborted'))
      if (size > MAX_TAR_BYTES) return reject(new OrcError('too_large', `image ${path} is larger than ${MAX_TAR_BYTES} bytes`))
      if (code !== 0) return reject(new OrcError('unavailable', `read image ${path}: ${stderr.trim() || `cat exited ${code}`}`))
      resolve(Buffer.concat(chunks))
    })
  })
}

interface Pins {
  /** pod uid → newest-first list of { revision, digests of its images } */
  pods: Record<string, { revision: number; digests: string[] }[]>
}

export class PodImages {
  private pins: Pins
  /** Registry images (docs/images.md): set by the agent; absent, a registry reference cannot be run here. */
  registry: ImageService | undefined

  constructor(
    readonly cacheDir: string,
    private readonly pinsFile: string,
    private readonly keepRevisions: number,
    /** Names the temporary copy of an image tar (unique per import). */
    private readonly random: Random = systemRandom,
    /** The node's image stores: `<data-dir>/images` (filled by `orc image import`) first, then the operator's. */
    readonly stores: readonly string[] = [join(cacheDir, '..', '..', 'images')],
  ) {
    try {
      this.pins = JSON.parse(readFileSync(pinsFile, 'utf8')) as Pins
    } catch {
      this.pins = { pods: {} }
    }
  }

  /**
   * Resolve one image; the signal (unit timeout, run cancel) stops a slow read. An image is a name
   * (or path) in the node's image store; a host path only with `hostPath` granted (check-security),
   * and nothing outside the store is even opened without it.
   */
  async resolve(image: string, signal: AbortSignal, opts: { hostPath?: boolean; digest?: string } = {}): Promise<ResolvedImage> {
    if (isRegistryReference(image)) {
      // pull-image fetched it (or a peer's copy) and chose the digest: unpack it, once per manifest.
      if (this.registry === undefined) throw new OrcError('unavailable', `image ${image}: this agent has no registry image service`)
      if (opts.digest === undefined) throw new OrcError('internal', `image ${image}: no digest was resolved for it`)
      signal.throwIfAborted()
      return this.registry.unpack(opts.digest)
    }
    const loc = imageLocation(image, this.stores)
    const hostPathRefused = (what: string) =>
      new OrcError(
        'forbidden',
        `image ${image} ${what}, not an image of the node's image store (${this.stores.join(', ')}): it needs a SecurityPolicy granting hostPath (or import it: orc image import SRC --name NAME)`,
        { image },
      )
    if (!loc.store && !opts.hostPath) throw hostPathRefused('is a host path')
    const path = loc.path
    let real: string
    try {
      real = await realpath(path)
    } catch (err) {
      throw new OrcError('not_found', `image ${image} not found (import one with orc image import)`, { image }, err)
    }
    // A link in the store must not lead out of it.
    const storesReal = await Promise.all(this.stores.map((s) => realpath(s).catch(() => s)))
    const inStore = storesReal.some((s) => real.startsWith(`${s}/`))
    if (!inStore && !opts.hostPath) throw hostPathRefused(`leads to ${real}, a host path`)
    const st = await stat(real)
    if (st.isDirectory()) return resolveImage(real, this.cacheDir)
    const data = await readWithCat(real, signal, !inStore)
    signal.throwIfAborted()
    const tmp = join(this.cacheDir, `incoming-${process.pid}-${randomHex(this.random, 8)}.tar`)
    try {
      writeFileSync(tmp, data, { mode: 0o600 })
      return resolveImage(tmp, this.cacheDir)
    } catch (err) {
      throw wrapError(`import image ${image}`, err)
    } finally {
      rmSync(tmp, { force: true })
    }
  }

  /** Remember the images a pod revision used; forget those of older revisions beyond the bound. */
  pin(podUid: string, revision: number, digests: string[]): void {
    const list = (this.pins.pods[podUid] ?? []).filter((e) => e.revision !== revision)
    list.unshift({ revision, digests })
    this.pins.pods[podUid] = list.slice(0, Math.max(1, this.keepRevisions))
    this.save()
    this.gc()
  }

  unpin(podUid: string): void {
    if (!(podUid in this.pins.pods)) return
    delete this.pins.pods[podUid]
    this.save()
    this.gc()
  }

  /** Remove unpacked layouts no pod revision in the bound uses. */
  gc(): string[] {
    const keep = new Set<string>()
    for (const list of Object.values(this.pins.pods)) for (const e of list) for (const d of e.digests) keep.add(d.replace(':', '-'))
    const removed: string[] = []
    let names: string[] = []
    try {
      names = readdirSync(this.cacheDir)
    } catch {
      return removed
    }
    for (const n of names) {
      if (!/^sha256-[0-9a-f]{64}$/.test(n) || keep.has(n)) continue
      rmSync(join(this.cacheDir, n), { recursive: true, force: true })
      removed.push(n)
    }
    return removed
  }

  private save(): void {
    const tmp = `${this.pinsFile}.tmp`
    writeFileSync(tmp, JSON.stringify(this.pins), { mode: 0o600 })
    renameSync(tmp, this.pinsFile)
  }

  /** The pod uids whose kept revisions use `digest`. */
  podsPinning(digest: string): Set<string> {
    const out = new Set<string>()
    for (const [uid, list] of Object.entries(this.pins.pods)) if (list.some((e) => e.digests.includes(digest))) out.add(uid)
    return out
  }

  /** Every digest a pod revision on this node keeps (image and manifest digests): what image GC must not remove. */
  pinnedDigests(): Set<string> {
    const out = new Set<string>()
    for (const list of Object.values(this.pins.pods)) for (const e of list) for (const d of e.digests) out.add(d)
    return out
  }

  hasCached(digest: string): boolean {
    return existsSync(join(this.cacheDir, digest.replace(':', '-'), 'rootfs'))
  }
}
