/** The shape every stored object has: Kubernetes-style manifests users already know. */
export const API_VERSION = 'orc/v1'
export const DEFAULT_NAMESPACE = 'default'

export interface ObjectMeta {
  name: string
  namespace?: string
  labels?: Record<string, string>
  annotations?: Record<string, string>
}

export interface OrcObject {
  apiVersion: string
  kind: string
  metadata: ObjectMeta
  spec?: Record<string, unknown>
  status?: Record<string, unknown>
}

/** Metadata the store adds when it returns an object; accepted on input and ignored. */
export const SYSTEM_METADATA = ['uid', 'revision', 'revisionId', 'createdAt', 'updatedAt', 'updatedBy'] as const

export interface ObjectRef<K extends string = string> {
  kind: K
  namespace: string // '' for cluster-scoped kinds
  name: string
}

/** Narrows a ref to one kind: `if (isRefOf(ref, 'Pod')) store.get(ref)` is then a Pod. */
export function isRefOf<K extends string>(ref: ObjectRef, kind: K): ref is ObjectRef<K> {
  return ref.kind === kind
}

/** The store key of an object: `Kind/namespace/name` (namespace empty for cluster-scoped kinds). */
export function keyOf(ref: ObjectRef): string {
  return `${ref.kind}/${ref.namespace}/${ref.name}`
}

export function refOfKey(key: string): ObjectRef {
  const [kind, namespace, ...rest] = key.split('/')
  return { kind: kind!, namespace: namespace ?? '', name: rest.join('/') }
}

export function formatRef(ref: ObjectRef): string {
  return `${ref.kind.toLowerCase()}/${ref.name}`
}
