/**
 * Pulling an image into the node (docs/images.md): resolve a tag to a digest, fetch the index or
 * manifest, the config and the layers into the BlobStore — from a peer that has them first
 * (`BlobSource`, the mesh), else from the registry — and unpack a manifest into a rootfs the
 * runtimes use (`<cacheDir>/<manifest digest>/rootfs`, shared by every pod using that image).
 * One download per blob at a time on a node, however many pods want it.
 */
import { OrcError } from '../model/index.ts'
import type { ResolvedImage } from '../runtime/index.ts'
import type { BlobStore } from './blobs.ts'
import type { ImageReference } from './reference.ts'
import type { Descriptor, RegistryAccess } from './registry.ts'

/** Another place blobs come from before the registry: the cluster's members (src/agent/images). */
export interface BlobSource {
  /**
   * A stream of the blob, or undefined when no peer can give it. `image` says where it comes from
   * (a peer that fetches it from the registry on the cluster's behalf needs it).
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
  totalBytes: number
  /** Where the bytes came from in this pull. */
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

export interface ImagePullerOptions {
  /** Peers first; absent: registry only. */
  peers?: BlobSource
  /** Defaults to this machine's (linux + process.arch mapped to GOARCH). */
  platform?: { os: string; architecture: string }
  /** Per registry request. */
  timeoutMs?: number
}

export class ImagePuller {
  constructor(
    readonly blobs: BlobStore,
    /** Unpacked rootfs per manifest digest. */
    readonly cacheDir: string,
    readonly opts: ImagePullerOptions = {},
  ) {}

  /** The digest a tag names now (asks the registry); a reference with a digest is returned as is. */
  async resolveDigest(ref: ImageReference, opts: PullOptions = {}): Promise<string> {
    void opts
    throw new OrcError('internal', `ImagePuller.resolveDigest(${ref.repository}) is not implemented yet`)
  }

  /** Fetch everything `ref@digest` needs into the blob store (nothing present is fetched again). */
  async pull(ref: ImageReference & { digest: string }, opts: PullOptions = {}): Promise<PullResult> {
    void opts
    throw new OrcError('internal', `ImagePuller.pull(${ref.repository}) is not implemented yet`)
  }

  /** Fetch one blob from the registry into the blob store (a peer asked us to, on the cluster's behalf). */
  async fetchBlob(ref: ImageReference, d: Descriptor, opts: PullOptions = {}): Promise<void> {
    void opts
    throw new OrcError('internal', `ImagePuller.fetchBlob(${ref.repository}@${d.digest}) is not implemented yet`)
  }

  /** Unpack a pulled image (its `digest` as PullResult.digest) into a rootfs, once per manifest digest. */
  unpack(digest: string): ResolvedImage {
    throw new OrcError('internal', `ImagePuller.unpack(${digest}) is not implemented yet`)
  }

  /** Whether a manifest is unpacked into a rootfs here. */
  isUnpacked(manifestDigest: string): boolean {
    throw new OrcError('internal', `ImagePuller.isUnpacked(${manifestDigest}) is not implemented yet`)
  }

  /** Blobs reachable from `keep` (image digests) stay; others go, least recently used first, until the store is under `budgetBytes` (0: all unused go). */
  gc(keep: Iterable<string>, budgetBytes: number): { removed: string[]; freedBytes: number } {
    void keep
    throw new OrcError('internal', `ImagePuller.gc(${budgetBytes}) is not implemented yet`)
  }
}
