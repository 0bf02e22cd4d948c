/**
 * The node's content-addressed blob store (docs/images.md): `<data-dir>/blobs/sha256/<hex>`, one
 * file per blob — layers, image configs, manifests and indexes alike, so a peer can serve any of
 * them. A blob is written to a temporary file while its sha256 and size are checked, and renamed
 * into place only when both match: a tampered or truncated blob is refused (OrcError `corrupt`) and
 * nothing of it is kept. A blob in the store is therefore always the content its name says.
 */
import { OrcError } from '../model/index.ts'

export interface BlobInfo {
  digest: string
  size: number
  /** Last write or use (ms since epoch): garbage collection removes the least recently used first. */
  usedAt: number
}

export interface BlobWriteOptions {
  /** The size the descriptor announced: more or fewer bytes is `corrupt`, more is refused as soon as it arrives. */
  size?: number
  signal?: AbortSignal
  /** Called with the bytes written so far (progress). */
  onBytes?: (written: number) => void
}

export class BlobStore {
  constructor(readonly dir: string) {}

  has(digest: string): boolean {
    throw new OrcError('internal', `BlobStore.has(${digest}) is not implemented yet`)
  }

  /** Size in bytes, or undefined when absent. */
  size(digest: string): number | undefined {
    throw new OrcError('internal', `BlobStore.size(${digest}) is not implemented yet`)
  }

  /** The blob's whole content (manifests, configs: small). */
  read(digest: string): Buffer {
    throw new OrcError('internal', `BlobStore.read(${digest}) is not implemented yet`)
  }

  /** The blob as a stream (layers: large), for unpacking and for serving to peers. Throws `not_found`. */
  open(digest: string): { size: number; body: AsyncIterable<Uint8Array> } {
    throw new OrcError('internal', `BlobStore.open(${digest}) is not implemented yet`)
  }

  /** Store a blob from `body`, verified against `digest` (and `opts.size`); resolves once it is in place. */
  async write(digest: string, body: AsyncIterable<Uint8Array>, opts: BlobWriteOptions = {}): Promise<void> {
    void body
    void opts
    throw new OrcError('internal', `BlobStore.write(${digest}) is not implemented yet`)
  }

  list(): BlobInfo[] {
    throw new OrcError('internal', 'BlobStore.list is not implemented yet')
  }

  /** Mark a blob used now (GC order). */
  touch(digest: string): void {
    void digest
  }

  /** Remove one blob; false when it was absent. */
  remove(digest: string): boolean {
    throw new OrcError('internal', `BlobStore.remove(${digest}) is not implemented yet`)
  }

  totalBytes(): number {
    throw new OrcError('internal', 'BlobStore.totalBytes is not implemented yet')
  }
}
