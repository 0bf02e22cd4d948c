/**
 * Image references as pods write them (docs/images.md): `REGISTRY/REPOSITORY[:TAG][@DIGEST]`.
 *
 * A reference names a registry only when its first component looks like a host: it has a `.` or a
 * `:` (port), or is `localhost` (the rule Docker uses). Anything else (`busybox`, `team/app:1.2`)
 * stays a name in the node's image store, as before registries existed: an image a user imported
 * must not silently turn into a pull from Docker Hub. Docker Hub is named explicitly
 * (`docker.io/library/redis:7` or `docker.io/redis:7`).
 */
import { OrcError } from './errors.ts'

export interface ImageReference {
  /** Host[:port] as written (`docker.io` is kept; `registryEndpoint` maps it to its API host). */
  registry: string
  /** Repository path (`library/redis`, `team/app`). */
  repository: string
  tag?: string
  /** `sha256:<64 hex>`: wins over the tag when both are given. */
  digest?: string
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/
const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/
const DIGEST = /^sha256:[a-f0-9]{64}$/
const HOST = /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(?::[0-9]{1,5})?$/
const MAX_REFERENCE = 512

/** Whether `image` names a registry (first component a host) rather than a store image or a path. */
export function isRegistryReference(image: string): boolean {
  if (image.startsWith('/') || image.startsWith('.')) return false
  const slash = image.indexOf('/')
  if (slash <= 0) return false
  const first = image.slice(0, slash)
  return first === 'localhost' || first.includes('.') || first.includes(':') || first.startsWith('[')
}

/** Parse a registry reference; throws OrcError `invalid` naming the bad part. */
export function parseReference(image: string): ImageReference {
  const bad = (why: string): never => {
    throw new OrcError('invalid', `image reference ${JSON.stringify(image)}: ${why}`, { image })
  }
  if (image.length > MAX_REFERENCE) bad(`longer than ${MAX_REFERENCE} characters`)
  if (!isRegistryReference(image)) bad('names no registry (write HOST[:PORT]/REPOSITORY[:TAG], e.g. docker.io/library/redis:7)')
  let rest = image
  let digest: string | undefined
  const at = rest.indexOf('@')
  if (at >= 0) {
    digest = rest.slice(at + 1)
    rest = rest.slice(0, at)
    if (!DIGEST.test(digest)) bad(`digest ${JSON.stringify(digest)} is not sha256:<64 lowercase hex>`)
  }
  const slash = rest.indexOf('/')
  const registry = rest.slice(0, slash)
  let path = rest.slice(slash + 1)
  if (!HOST.test(registry)) bad(`registry ${JSON.stringify(registry)} is not HOST[:PORT]`)
  const port = /:(\d+)$/.exec(registry)?.[1]
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) bad(`port ${port} is out of range`)
  let tag: string | undefined
  const colon = path.lastIndexOf(':')
  if (colon >= 0) {
    tag = path.slice(colon + 1)
    path = path.slice(0, colon)
    if (!TAG.test(tag)) bad(`tag ${JSON.stringify(tag)}: letters, digits, _ . - (at most 128, not starting with . or -)`)
  }
  if (path === '') bad('has no repository')
  const parts = path.split('/')
  for (const p of parts) if (!COMPONENT.test(p)) bad(`repository component ${JSON.stringify(p)}: lowercase letters and digits, separated by . _ __ or -`)
  if (path.length > 255) bad('repository longer than 255 characters')
  if ((registry === 'docker.io' || registry === 'index.docker.io') && parts.length === 1) path = `library/${path}`
  if (tag === undefined && digest === undefined) tag = 'latest'
  return { registry, repository: path, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) }
}

/** The reference written back (`REGISTRY/REPO:TAG@DIGEST`, parts that are present). */
export function formatReference(ref: ImageReference): string {
  return `${ref.registry}/${ref.repository}${ref.tag !== undefined ? `:${ref.tag}` : ''}${ref.digest !== undefined ? `@${ref.digest}` : ''}`
}

/** The host the distribution API is served on (Docker Hub's differs from its name). */
export function registryEndpoint(registry: string): string {
  return registry === 'docker.io' || registry === 'index.docker.io' ? 'registry-1.docker.io' : registry
}

/** Whether the registry is on this machine's loopback, where plain HTTP is allowed without an opt-in (as Docker does). */
export function isLoopbackRegistry(registry: string): boolean {
  const host = registry
    .replace(/:\d+$/, '')
    .replace(/^\[|\]$/g, '')
    .toLowerCase()
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host)
}
