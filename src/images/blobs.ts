/**
 * The node's content-addressed blob store (docs/images.md): `<data-dir>/blobs/sha256/<hex>`, one
 * file per blob — layers, image configs, manifests and indexes alike, so a peer can serve any of
 * them. A blob is written to a temporary file while its sha256 and size are checked, and renamed
 * into place only when both match: a tampered or truncated blob is refused (OrcError `corrupt`) and
 * nothing of it is kept. A blob in the store is therefore always the content its name says.
 */
import { createHash } from 'node:crypto'
import { createReadStream, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statfsSync, statSync, unlinkSync, utimesSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { join } from 'node:path'
import { type Clock, systemClock } from '../effects/index.ts'
import { OrcError, wrapError } from '../model/index.ts'

export interface BlobInfo {
  digest: string
  size: number
  /** Last write or use (ms since epoch): garbage collection removes the least recently used first. */
  usedAt: number
}

export interface BlobWriteOptions {
  /** The size the descriptor announced: more or fewer bytes is `corrupt`, more is refused as soon as it arrives. */
  size?: number
  /** When `size` is unknown (a manifest fetched by digest alone): more bytes than this is refused. */
  maxBytes?: number
  signal?: AbortSignal
  /** Called with the bytes written so far (progress). */
  onBytes?: (written: number) => void
  /** Where the bytes come from, for the error (`registry.example:5000/team/app`, `peer 12D3…`). */
  from?: string
}

export interface BlobStoreOptions {
  /** usedAt of touched blobs. Default: the system clock. */
  clock?: Clock
  /** Free bytes on the file system of `dir` (tests inject a full disk). Default: statfs. */
  freeBytes?: (dir: string) => number
}

const DIGEST = /^sha256:([a-f0-9]{64})$/
const HEX = /^[a-f0-9]{64}$/
const TMP = /\.tmp-\d+-\d+$/

/** The hex of a `sha256:<64 hex>` digest; anything else (never a path) is refused as `invalid`. */
export function digestHex(digest: string): string {
  const m = DIGEST.exec(digest)
  if (!m) throw new OrcError('invalid', `digest ${JSON.stringify(digest.slice(0, 80))} is not sha256:<64 lowercase hex>`)
  return m[1]!
}

let tmpCounter = 0
/** Bytes gathered before one write to the temporary file. */
const WRITE_RUN_BYTES = 1 << 20

function defaultFreeBytes(dir: string): number {
  const st = statfsSync(dir)
  return Number(st.bavail) * Number(st.bsize)
}

export class BlobStore {
  readonly #clock: Clock
  readonly #freeBytes: (dir: string) => number
  readonly #shaDir: string
  /** Temporary files being written by this process (gc leaves them alone). */
  readonly #writing = new Set<string>()

  constructor(
    readonly dir: string,
    opts: BlobStoreOptions = {},
  ) {
    this.#clock = opts.clock ?? systemClock
    this.#freeBytes = opts.freeBytes ?? defaultFreeBytes
    this.#shaDir = join(dir, 'sha256')
  }

  /** The file of a blob (whether present or not). */
  path(digest: string): string {
    return join(this.#shaDir, digestHex(digest))
  }

  has(digest: string): boolean {
    return this.size(digest) !== undefined
  }

  /** Size in bytes, or undefined when absent. */
  size(digest: string): number | undefined {
    try {
      return statSync(this.path(digest)).size
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
      throw err
    }
  }

  /** The blob's whole content (manifests, configs: small). */
  read(digest: string): Buffer {
    try {
      return readFileSync(this.path(digest))
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new OrcError('not_found', `blob ${digest} is not in the store`, { digest })
      throw wrapError(`read blob ${digest}`, err)
    }
  }

  /** The blob as a stream (layers: large), for unpacking and for serving to peers. Throws `not_found`. */
  open(digest: string): { size: number; body: AsyncIterable<Uint8Array> } {
    const size = this.size(digest)
    if (size === undefined) throw new OrcError('not_found', `blob ${digest} is not in the store`, { digest })
    return { size, body: createReadStream(this.path(digest), { highWaterMark: 1 << 20 }) }
  }

  /** Store a blob from `body`, verified against `digest` (and `opts.size`); resolves once it is in place. */
  async write(digest: string, body: AsyncIterable<Uint8Array>, opts: BlobWriteOptions = {}): Promise<void> {
    const hex = digestHex(digest)
    const from = opts.from ? ` from ${opts.from}` : ''
    mkdirSync(this.#shaDir, { recursive: true })
    opts.signal?.throwIfAborted()
    if (opts.size !== undefined) {
      let free: number
      try {
        free = this.#freeBytes(this.#shaDir)
      } catch (err) {
        throw wrapError(`check free space in ${this.dir}`, err)
      }
      if (opts.size > free) {
        throw new OrcError('too_large', `disk full: blob ${digest} needs ${opts.size} bytes, ${free} free in ${this.dir}`, {
          digest,
          size: opts.size,
          free,
        })
      }
    }
    const limit = opts.size ?? opts.maxBytes ?? Number.POSITIVE_INFINITY
    const tmp = join(this.#shaDir, `${hex}.tmp-${process.pid}-${++tmpCounter}`)
    this.#writing.add(tmp)
    const hash = createHash('sha256')
    let written = 0
    const fh = await open(tmp, 'wx', 0o644)
    let closed = false
    let pending: Uint8Array[] = []
    let pendingBytes = 0
    const flush = async () => {
      if (pendingBytes === 0) return
      const run = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes)
      pending = []
      pendingBytes = 0
      await fh.write(run)
    }
    const it = body[Symbol.asyncIterator]()
    let onAbort: (() => void) | undefined
    try {
      const aborted = opts.signal
        ? new Promise<never>((_, reject) => {
            onAbort = () => reject(opts.signal!.reason ?? new OrcError('unavailable', `write of blob ${digest} cancelled`))
            if (opts.signal!.aborted) onAbort()
            else opts.signal!.addEventListener('abort', onAbort, { once: true })
          })
        : undefined
      aborted?.catch(() => {})
      for (;;) {
        const next = aborted ? await Promise.race([it.next(), aborted]) : await it.next()
        if (next.done) break
        const chunk = next.value
        written += chunk.byteLength
        if (written > limit) {
          throw new OrcError(
            'corrupt',
            opts.size !== undefined
              ? `blob ${digest}${from} does not match its size: more than the ${opts.size} bytes announced`
              : `blob ${digest}${from} is larger than ${limit} bytes`,
            { digest },
          )
        }
        hash.update(chunk)
        // Written in runs of ~1 MiB: one write (a thread-pool round trip) per network chunk of a
        // few KiB cost a quarter of a pull's time.
        pending.push(chunk)
        pendingBytes += chunk.byteLength
        if (pendingBytes >= WRITE_RUN_BYTES) await flush()
        opts.onBytes?.(written)
      }
      await flush()
      if (opts.size !== undefined && written !== opts.size) {
        throw new OrcError('corrupt', `blob ${digest}${from} does not match its size: ${written} bytes, ${opts.size} announced`, { digest })
      }
      const got = `sha256:${hash.digest('hex')}`
      if (got !== digest) throw new OrcError('corrupt', `blob ${digest}${from} does not match its digest (its content is ${got})`, { digest })
      await fh.sync()
      await fh.close()
      closed = true
      // A concurrent writer of the same digest may have put it in place already: same bytes, so
      // the second rename replaces a file with an identical one.
      renameSync(tmp, this.path(digest))
      this.touch(digest)
    } catch (err) {
      void it.return?.()?.catch?.(() => {})
      if (!closed) await fh.close().catch(() => {})
      rmSync(tmp, { force: true })
      if ((err as NodeJS.ErrnoException).code === 'ENOSPC') {
        throw new OrcError('too_large', `disk full: blob ${digest} needs ${opts.size ?? 'more than ' + written} bytes, no space left in ${this.dir}`, {
          digest,
        })
      }
      throw err
    } finally {
      if (onAbort) opts.signal?.removeEventListener('abort', onAbort)
      this.#writing.delete(tmp)
    }
  }

  list(): BlobInfo[] {
    let names: string[]
    try {
      names = readdirSync(this.#shaDir)
    } catch {
      return []
    }
    const out: BlobInfo[] = []
    for (const n of names) {
      if (!HEX.test(n)) continue
      try {
        const st = statSync(join(this.#shaDir, n))
        out.push({ digest: `sha256:${n}`, size: st.size, usedAt: st.mtimeMs })
      } catch {}
    }
    return out
  }

  /** Mark a blob used now (GC order). */
  touch(digest: string): void {
    const t = this.#clock.now() / 1000
    try {
      utimesSync(this.path(digest), t, t)
    } catch {}
  }

  /** Remove one blob; false when it was absent. */
  remove(digest: string): boolean {
    try {
      unlinkSync(this.path(digest))
      return true
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
      throw wrapError(`remove blob ${digest}`, err)
    }
  }

  totalBytes(): number {
    return this.list().reduce((n, b) => n + b.size, 0)
  }

  /** Remove temporary files left by writes that did not finish (a crash); those being written now stay. */
  sweepTemporary(): number {
    let n = 0
    let names: string[]
    try {
      names = readdirSync(this.#shaDir)
    } catch {
      return 0
    }
    for (const name of names) {
      const p = join(this.#shaDir, name)
      if (!TMP.test(name) || this.#writing.has(p)) continue
      rmSync(p, { force: true })
      n++
    }
    return n
  }
}
