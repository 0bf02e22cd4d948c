/**
 * The resolve-image unit's work: turn a pod's image path (rootfs dir, OCI layout dir, or OCI
 * layout tar) into an unpacked rootfs in the runtime's image cache, and keep the unpacked images
 * of each pod's last few revisions so a rollback starts without importing again.
 *
 * A layout tar is read by a `cat` child process, not by the agent: an image on a stuck file system
 * (or a FIFO nobody writes) then blocks only that process, which the unit's timeout kills, instead
 * of a libuv thread the store also needs.
 */
import { spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { stat } from 'node:fs/promises'
import { join } from 'node:path'
import { type Random, randomHex, systemRandom } from '../../effects/index.ts'
import { OrcError, wrapError } from '../../model/index.ts'
import { type ResolvedImage, resolveImage } from '../../runtime/index.ts'

const MAX_TAR_BYTES = 8 * 1024 * 1024 * 1024

function readWithCat(path: string, signal: AbortSignal): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn('cat', ['--', path], { stdio: ['ignore', 'pipe', 'pipe'], signal })
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

  constructor(
    readonly cacheDir: string,
    private readonly pinsFile: string,
    private readonly keepRevisions: number,
    /** Names the temporary copy of an image tar (unique per import). */
    private readonly random: Random = systemRandom,
  ) {
    try {
      this.pins = JSON.parse(readFileSync(pinsFile, 'utf8')) as Pins
    } catch {
      this.pins = { pods: {} }
    }
  }

  /** Resolve one image; the signal (unit timeout, run cancel) stops a slow read. */
  async resolve(image: string, signal: AbortSignal): Promise<ResolvedImage> {
    let st
    try {
      st = await stat(image)
    } catch (err) {
      throw new OrcError('not_found', `image ${image} not found (import one with orc image import)`, { image }, err)
    }
    if (st.isDirectory()) return resolveImage(image, this.cacheDir)
    const data = await readWithCat(image, signal)
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

  hasCached(digest: string): boolean {
    return existsSync(join(this.cacheDir, digest.replace(':', '-'), 'rootfs'))
  }
}
