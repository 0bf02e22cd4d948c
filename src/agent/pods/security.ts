/**
 * The two-party rule for unsafe features: a pod gets `root`, `hostNetwork`, … only when it asks for
 * it (`spec.security.unsafe`) and an operator granted it (a SecurityPolicy in the pod's namespace
 * whose selector matches the pod). Checked by the API before a pod is stored, and again by the
 * lifecycle controller before it runs one (pods also arrive by replication from other nodes).
 */
import { OrcError, type OrcObject, type Pod, type SecurityPolicy, type UnsafeFeature } from '../../model/index.ts'

/** Unsafe features this agent can actually provide; the others are refused when a pod runs. */
export const IMPLEMENTED_UNSAFE: ReadonlySet<UnsafeFeature> = new Set<UnsafeFeature>(['root'])

function selects(policy: SecurityPolicy, pod: Pod): boolean {
  const want = policy.spec?.selector?.matchLabels
  if (!want) return true
  const have = pod.metadata.labels ?? {}
  return Object.entries(want).every(([k, v]) => have[k] === v)
}

/** What the pod asks for that no policy of its namespace grants it. */
export function ungranted(pod: Pod, policies: readonly SecurityPolicy[]): UnsafeFeature[] {
  const asks = pod.spec?.security?.unsafe ?? []
  if (asks.length === 0) return []
  const ns = pod.metadata.namespace ?? 'default'
  const granted = new Set<string>()
  for (const p of policies) {
    if ((p.metadata.namespace ?? 'default') !== ns || !selects(p, pod)) continue
    for (const a of p.spec?.allow ?? []) granted.add(a)
  }
  return [...new Set(asks)].filter((a) => !granted.has(a))
}

function list(items: string[]): string {
  return items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`
}

/** The refusal, naming what is missing and from whom. */
export function ungrantedError(pod: Pod, missing: UnsafeFeature[]): OrcError {
  const ns = pod.metadata.namespace ?? 'default'
  return new OrcError(
    'forbidden',
    `pod/${pod.metadata.name} asks for ${list(missing)}, but no SecurityPolicy in namespace ${ns} allows ${missing.length > 1 ? 'them' : 'it'} (an operator must grant ${missing.length > 1 ? 'them' : 'it'})`,
    { kind: 'Pod', namespace: ns, name: pod.metadata.name, missing },
  )
}

/** Throw unless every unsafe feature the pod asks for is granted. */
export function admitPod(obj: OrcObject, policies: readonly SecurityPolicy[]): void {
  if (obj.kind !== 'Pod') return
  const pod = obj as Pod // normalizeManifest checked it against the Pod schema
  const missing = ungranted(pod, policies)
  if (missing.length > 0) throw ungrantedError(pod, missing)
}
