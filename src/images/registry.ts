/**
 * A client of the OCI distribution API (v2) (docs/images.md): manifests and blobs of one registry,
 * over HTTPS (system CAs, or the registry's own CA, or — opted in — unverified) or plain HTTP
 * (loopback registries, or opted in), with basic auth and bearer-token auth (the
 * `WWW-Authenticate: Bearer realm=…,service=…,scope=…` dance), following blob redirects.
 *
 * Errors are OrcErrors with one line a user can act on: `forbidden` (unauthorized: wrong or
 * missing credentials), `not_found` (manifest unknown, blob unknown), `unavailable` (registry
 * unreachable, 5xx), `timeout`, `invalid` (an answer that is not what the API promises).
 */
import { OrcError } from '../model/index.ts'

/** How the registry is reached. Default: `verify` (HTTPS with system CAs), `plain` for loopback registries. */
export type RegistryTls = 'verify' | 'insecure' | 'plain'

export interface RegistryAccess {
  tls?: RegistryTls
  /** PEM CA certificate(s) trusted for this registry in addition to the system's (tls `verify`). */
  ca?: string
  username?: string
  password?: string
}

export interface Descriptor {
  mediaType: string
  digest: string
  size: number
  platform?: { os?: string; architecture?: string; variant?: string }
  annotations?: Record<string, string>
}

export const MEDIA_TYPES = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
} as const

export interface RegistryClientOptions {
  /** Per request (connect + headers); a body stalled this long is aborted too. */
  timeoutMs?: number
}

export class RegistryClient {
  constructor(
    /** HOST[:PORT] as in the reference (docker.io is mapped to its API host). */
    readonly registry: string,
    readonly access: RegistryAccess = {},
    readonly opts: RegistryClientOptions = {},
  ) {}

  /** The descriptor of `reference` (a tag or a digest): HEAD, falling back to GET. */
  async resolve(repository: string, reference: string, signal?: AbortSignal): Promise<Descriptor> {
    void signal
    throw new OrcError('internal', `RegistryClient.resolve(${repository}:${reference}) is not implemented yet`)
  }

  /** A manifest or index and its bytes, checked against the digest when `reference` is one. */
  async manifest(repository: string, reference: string, signal?: AbortSignal): Promise<{ descriptor: Descriptor; bytes: Buffer }> {
    void signal
    throw new OrcError('internal', `RegistryClient.manifest(${repository}:${reference}) is not implemented yet`)
  }

  /** A blob as a stream (the caller verifies it: BlobStore.write). */
  async blob(repository: string, digest: string, signal?: AbortSignal): Promise<{ size: number; body: AsyncIterable<Uint8Array> }> {
    void signal
    throw new OrcError('internal', `RegistryClient.blob(${repository}@${digest}) is not implemented yet`)
  }
}
