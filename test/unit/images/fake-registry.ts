/**
 * An in-memory registry (the RegistryApi the puller asks) serving images built here, counting every
 * manifest and blob it serves, able to serve tampered bytes and to hold blob bodies until released.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { gzipSync } from 'node:zlib'
import { type Descriptor, MEDIA_TYPES, type RegistryApi } from '../../../src/images/index.ts'
import { OrcError } from '../../../src/model/index.ts'
import { hostPlatform, type TarEntry, writeTar } from '../../../src/runtime/index.ts'

export const sha256 = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`

export type Compression = 'gzip' | 'zstd' | 'none'

export function file(path: string, data: string | Buffer, mode = 0o644): TarEntry {
  return { path, type: 'file', mode, uid: 0, gid: 0, mtime: 0, data: Buffer.isBuffer(data) ? data : Buffer.from(data) }
}
export function dir(path: string): TarEntry {
  return { path, type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 0 }
}

export function compress(tar: Buffer, c: Compression): Buffer {
  if (c === 'gzip') return gzipSync(tar)
  if (c === 'zstd') return execFileSync('zstd', ['-q', '-c', '-3'], { input: tar, maxBuffer: 1 << 30 })
  return tar
}

export interface LayerSpec {
  entries: TarEntry[]
  compression: Compression
}

export interface BuiltImage {
  /** What a reference pins: the index's digest when there is one, else the manifest's. */
  digest: string
  manifestDigest: string
  configDigest: string
  layers: Descriptor[]
  /** Every blob of the image on this platform (index, manifest, config, layers). */
  blobs: Map<string, Buffer>
}

export class FakeRegistry implements RegistryApi {
  readonly content = new Map<string, Buffer>()
  readonly types = new Map<string, string>()
  readonly tags = new Map<string, string>()
  /** Requests served, per digest (manifests and blobs). */
  readonly served = new Map<string, number>()
  /** Bytes served instead of a blob's content (a tampered registry storage). */
  readonly tampered = new Map<string, Buffer>()
  /** While set, blob bodies wait for it before their first byte. */
  gate: Promise<void> | undefined
  down = false

  count(digest: string): number {
    return this.served.get(digest) ?? 0
  }
  totalServed(): number {
    let n = 0
    for (const v of this.served.values()) n += v
    return n
  }

  put(bytes: Buffer, mediaType: string): Descriptor {
    const digest = sha256(bytes)
    this.content.set(digest, bytes)
    this.types.set(digest, mediaType)
    return { mediaType, digest, size: bytes.length }
  }

  /**
   * An image of `layers` under `repo:tag`; `index` wraps it in an index (OCI) or a manifest list
   * (docker) that lists an image for another platform first.
   */
  addImage(repo: string, tag: string, layers: LayerSpec[], opts: { index?: boolean; docker?: boolean; cmd?: string[] } = {}): BuiltImage {
    const docker = opts.docker ?? false
    const blobs = new Map<string, Buffer>()
    const keep = (d: Descriptor) => {
      blobs.set(d.digest, this.content.get(d.digest)!)
      return d
    }
    const diffIds: string[] = []
    const layerDescs = layers.map((l) => {
      const tar = writeTar(l.entries)
      diffIds.push(sha256(tar))
      const mt = docker
        ? 'application/vnd.docker.image.rootfs.diff.tar.gzip'
        : l.compression === 'gzip'
          ? 'application/vnd.oci.image.layer.v1.tar+gzip'
          : l.compression === 'zstd'
            ? 'application/vnd.oci.image.layer.v1.tar+zstd'
            : 'application/vnd.oci.image.layer.v1.tar'
      return keep(this.put(compress(tar, docker ? 'gzip' : l.compression), mt))
    })
    const plat = hostPlatform()
    const config = keep(
      this.put(
        Buffer.from(
          JSON.stringify({
            architecture: plat.architecture,
            os: 'linux',
            config: { Cmd: opts.cmd ?? ['/bin/sh'] },
            rootfs: { type: 'layers', diff_ids: diffIds },
          }),
        ),
        docker ? 'application/vnd.docker.container.image.v1+json' : 'application/vnd.oci.image.config.v1+json',
      ),
    )
    const mmt = docker ? MEDIA_TYPES.dockerManifest : MEDIA_TYPES.ociManifest
    const manifest = keep(this.put(Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: mmt, config, layers: layerDescs })), mmt))
    let digest = manifest.digest
    if (opts.index) {
      // Another platform's image, listed first: the puller must not take it.
      const otherCfg = this.put(Buffer.from('{"architecture":"s390x","os":"linux"}'), config.mediaType)
      const other = this.put(Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: mmt, config: otherCfg, layers: [] })), mmt)
      const imt = docker ? MEDIA_TYPES.dockerList : MEDIA_TYPES.ociIndex
      const index = keep(
        this.put(
          Buffer.from(
            JSON.stringify({
              schemaVersion: 2,
              mediaType: imt,
              manifests: [
                { ...other, platform: { os: 'linux', architecture: 's390x' } },
                { ...manifest, platform: { os: 'linux', architecture: plat.architecture, ...(plat.variant ? { variant: plat.variant } : {}) } },
              ],
            }),
          ),
          imt,
        ),
      )
      digest = index.digest
    }
    this.tags.set(`${repo}:${tag}`, digest)
    return { digest, manifestDigest: manifest.digest, configDigest: config.digest, layers: layerDescs, blobs }
  }

  #get(digest: string): Buffer {
    if (this.down) throw new OrcError('unavailable', 'registry fake.test:5000 is unreachable')
    const b = this.content.get(digest)
    if (!b) throw new OrcError('not_found', `blob unknown: ${digest}`)
    this.served.set(digest, this.count(digest) + 1)
    return this.tampered.get(digest) ?? b
  }

  async resolve(repository: string, reference: string): Promise<Descriptor> {
    if (this.down) throw new OrcError('unavailable', 'registry fake.test:5000 is unreachable')
    const digest = reference.startsWith('sha256:') ? reference : this.tags.get(`${repository}:${reference}`)
    if (!digest || !this.content.has(digest)) throw new OrcError('not_found', `manifest unknown: ${repository}:${reference}`)
    return { mediaType: this.types.get(digest)!, digest, size: this.content.get(digest)!.length }
  }

  async manifest(repository: string, reference: string): Promise<{ descriptor: Descriptor; bytes: Buffer }> {
    const d = await this.resolve(repository, reference)
    return { descriptor: d, bytes: this.#get(d.digest) }
  }

  async blob(_repository: string, digest: string, signal?: AbortSignal): Promise<{ size: number; body: AsyncIterable<Uint8Array> }> {
    const bytes = this.#get(digest)
    const gate = this.gate
    return {
      size: bytes.length,
      body: (async function* () {
        if (gate) await gate
        for (let i = 0; i < bytes.length; i += 65536) {
          signal?.throwIfAborted()
          yield bytes.subarray(i, i + 65536)
        }
      })(),
    }
  }
}

export async function* chunks(...parts: Buffer[]): AsyncIterable<Uint8Array> {
  for (const p of parts) yield p
}
