/**
 * The image routes of the local API (`orc image pull|list|inspect|rm|prune`), about this node's
 * blob store (docs/images.md). A pull resolves the tag before answering — a wrong name, tag or
 * credential is the answer's error — then fetches in the background; the CLI follows it through
 * `GET /v1/images` (its `pulls`), which is also how a progress bar works against a remote node.
 */
import type { Logger } from 'pino'
import { parseReference } from '../../images/index.ts'
import { isPlainObject, OrcError } from '../../model/index.ts'
import type { ImageInspectView } from '../api-types.ts'
import type { DataLookup } from '../pods/refs.ts'
import type { RouteHandlers } from '../router.ts'
import { type ImageService, registryAccessOf } from './service.ts'

export interface ImageApiComponents {
  nodeName: string
  images: () => ImageService
  /** Pods of this node keeping a digest (`namespace/name`). */
  usedBy: (digest: string) => string[]
  /** The Configs and Secrets of a namespace and the keyring (pull credentials). */
  dataLookup: (namespace: string) => DataLookup | undefined
  loadKeyring?: () => Promise<unknown>
  log: Logger
}

const NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/

function stringField(body: unknown, key: string): string {
  const v = isPlainObject(body) ? body[key] : undefined
  if (typeof v !== 'string' || v === '') throw new OrcError('invalid', `${key}: required`)
  return v
}

function parseJsonBlob<T>(buf: Buffer, what: string): T {
  try {
    return JSON.parse(buf.toString('utf8')) as T
  } catch {
    throw new OrcError('corrupt', `${what} in the blob store is not JSON`)
  }
}

export function imageRoutes(c: ImageApiComponents): RouteHandlers {
  return {
    images: async () => {
      const svc = c.images()
      return { node: c.nodeName, images: svc.list(c.usedBy), pulls: svc.pulls(), blobBytes: svc.blobs.totalBytes() }
    },
    imagePull: async ({ params, body }) => {
      const image = stringField(body, 'image')
      const ref = parseReference(image)
      const raw = isPlainObject(body) ? body.secrets : undefined
      if (raw !== undefined && (!Array.isArray(raw) || raw.length > 16 || !raw.every((x) => typeof x === 'string' && NAME.test(x))))
        throw new OrcError('invalid', 'secrets: a list of at most 16 Secret names')
      const secrets = (raw ?? []) as string[]
      if (secrets.length > 0) await c.loadKeyring?.()
      const access = registryAccessOf(ref.registry, params.ns, secrets, c.dataLookup(params.ns))
      const svc = c.images()
      const digest = await svc.resolveDigest(image, access)
      const { view, done } = svc.start(image, digest, { access, namespace: params.ns })
      done.catch((err: unknown) => c.log.warn({ image, err: (err as Error).message }, 'image pull failed'))
      return { image, digest, pull: { ...view } }
    },
    imageInspect: async ({ query }) => {
      const q = query.image
      const image = Array.isArray(q) ? q[q.length - 1] : q
      if (typeof image !== 'string' || image === '') throw new OrcError('invalid', 'image: required')
      const svc = c.images()
      const info = svc.find(image)
      if (info === undefined) throw new OrcError('not_found', `image ${image} is not on this node (orc image pull ${image})`)
      const rec = svc.row(info, c.usedBy)
      const manifest = parseJsonBlob<{ mediaType?: string; config?: { digest: string }; layers?: Array<{ digest: string; size: number; mediaType: string }> }>(
        svc.blobs.read(rec.manifestDigest),
        `manifest ${rec.manifestDigest}`,
      )
      const cfg =
        manifest.config?.digest !== undefined
          ? parseJsonBlob<{
              os?: string
              architecture?: string
              variant?: string
              config?: { Entrypoint?: string[]; Cmd?: string[]; Env?: string[]; WorkingDir?: string }
            }>(svc.blobs.read(manifest.config.digest), 'image config')
          : {}
      const view: ImageInspectView = {
        ...rec,
        mediaType: manifest.mediaType ?? 'application/vnd.oci.image.manifest.v1+json',
        platform: {
          ...(cfg.os ? { os: cfg.os } : {}),
          ...(cfg.architecture ? { architecture: cfg.architecture } : {}),
          ...(cfg.variant ? { variant: cfg.variant } : {}),
        },
        config: {
          entrypoint: cfg.config?.Entrypoint ?? [],
          cmd: cfg.config?.Cmd ?? [],
          env: cfg.config?.Env ?? [],
          ...(cfg.config?.WorkingDir ? { workingDir: cfg.config.WorkingDir } : {}),
        },
        layers: (manifest.layers ?? []).map((l) => ({ digest: l.digest, size: l.size, mediaType: l.mediaType })),
      }
      return view
    },
    imageRemove: async ({ body }) => {
      const image = stringField(body, 'image')
      return { image, ...c.images().remove(image, c.usedBy) }
    },
    imagePrune: async ({ body }) => {
      const b = isPlainObject(body) ? body.budgetBytes : undefined
      if (b !== undefined && (typeof b !== 'number' || !Number.isInteger(b) || b < 0)) throw new OrcError('invalid', 'budgetBytes: a whole number of bytes ≥ 0')
      return c.images().prune(b ?? 0)
    },
  }
}
