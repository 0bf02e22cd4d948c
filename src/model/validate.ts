import { OrcError } from './errors.ts'
import { dnsName, labelsSchema } from './kinds/common.ts'
import { API_VERSION, DEFAULT_NAMESPACE, type ObjectRef, type OrcObject, SYSTEM_METADATA } from './object.ts'
import { getKind } from './registry.ts'
import { type Issue, isPlainObject, s, validate } from './schema.ts'

/** Largest object the store accepts, serialized as JSON. etcd's default request limit is 1.5 MiB;
 * orc replicates every object to every node, so it is stricter. See docs/architecture.md. */
export const MAX_OBJECT_BYTES = 256 * 1024

const metadataSchema = s.object({
  name: s.required(dnsName),
  namespace: dnsName,
  labels: labelsSchema,
  annotations: s.map(s.string({ maxLength: 65536 }), { maxEntries: 128 }),
})

/** What normalizeManifest returned: passed to it again (the API, then the store), it is not re-checked. */
const NORMALIZED = new WeakSet<object>()

/**
 * Validate a manifest and return it normalized: namespace defaulted for namespaced kinds (removed
 * for cluster-scoped ones), store-added metadata stripped. Throws OrcError('invalid') listing every
 * problem as `path: rule`. Its result is a new object that callers must not change: given back to
 * this function it is returned as is, so a write is validated once however many layers it crosses.
 */
export function normalizeManifest(input: unknown, opts: { defaultNamespace?: string } = {}): OrcObject {
  if (isPlainObject(input) && NORMALIZED.has(input)) return input as unknown as OrcObject
  if (!isPlainObject(input)) throw new OrcError('invalid', 'manifest must be an object with apiVersion, kind and metadata')
  if (input.apiVersion !== API_VERSION) {
    throw new OrcError('invalid', `apiVersion: must be ${API_VERSION}; got ${JSON.stringify(input.apiVersion ?? null)}`, {
      issues: [{ path: 'apiVersion', rule: `must be ${API_VERSION}` }],
    })
  }
  if (typeof input.kind !== 'string') {
    throw new OrcError('invalid', 'kind: required', { issues: [{ path: 'kind', rule: 'required' }] })
  }
  const def = getKind(input.kind)
  if (def.kind !== input.kind) {
    throw new OrcError('invalid', `kind: must be ${def.kind}; got ${JSON.stringify(input.kind)}`)
  }
  const meta = isPlainObject(input.metadata) ? { ...input.metadata } : input.metadata
  if (isPlainObject(meta)) {
    for (const k of SYSTEM_METADATA) delete meta[k]
    if (def.namespaced) {
      if (meta.namespace === undefined || meta.namespace === null || meta.namespace === '') {
        meta.namespace = opts.defaultNamespace ?? DEFAULT_NAMESPACE
      }
    } else if (meta.namespace !== undefined && meta.namespace !== '') {
      throw new OrcError('invalid', `metadata.namespace: ${def.kind} is cluster-scoped and takes no namespace`)
    } else {
      delete meta.namespace
    }
  }
  const obj: Record<string, unknown> = { ...input, metadata: meta }
  const issues: Issue[] = []
  validate(
    obj,
    s.object({
      apiVersion: s.required(s.string()),
      kind: s.required(s.string()),
      metadata: s.required(metadataSchema),
      spec: def.spec,
      status: def.status ?? s.object({}),
    }),
    '',
    issues,
  )
  if (issues.length === 0 && def.check) issues.push(...def.check(obj as unknown as OrcObject))
  if (issues.length > 0) {
    const name = isPlainObject(meta) && typeof meta.name === 'string' ? `${def.kind.toLowerCase()}/${meta.name}` : def.kind
    throw new OrcError('invalid', `${name}: ${issues.map((i) => `${i.path}: ${i.rule}`).join('; ')}`, { issues })
  }
  const size = Buffer.byteLength(JSON.stringify(obj))
  if (size > MAX_OBJECT_BYTES) {
    throw new OrcError('too_large', `${def.kind.toLowerCase()}/${(meta as { name: string }).name}: object is ${size} bytes; the limit is ${MAX_OBJECT_BYTES}`, {
      size,
      limit: MAX_OBJECT_BYTES,
    })
  }
  NORMALIZED.add(obj)
  return obj as unknown as OrcObject
}

export function refOf(obj: OrcObject): ObjectRef {
  return { kind: obj.kind, namespace: obj.metadata.namespace ?? '', name: obj.metadata.name }
}

/** Parse `pod/web`, `pods/web` or (`pod`, `web`) into a ref, applying the namespace rules of the kind. */
export function parseRef(text: string, namespace = DEFAULT_NAMESPACE): ObjectRef {
  const slash = text.indexOf('/')
  if (slash <= 0 || slash === text.length - 1) {
    throw new OrcError('invalid', `${JSON.stringify(text)}: expected KIND/NAME, like pod/web`)
  }
  const def = getKind(text.slice(0, slash))
  const name = text.slice(slash + 1)
  return { kind: def.kind, namespace: def.namespaced ? namespace : '', name }
}
