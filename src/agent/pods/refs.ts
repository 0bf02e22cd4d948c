/**
 * A pod's Configs and Secrets as its node uses them (docs/secrets.md, "Using them in pods"): the
 * environment each container gets (`envFrom`, then `env`, Kubernetes' order) and the files of each
 * Config or Secret volume. Secrets are opened here, on the node that runs the pod, with the cluster
 * keyring; the clear values go only into the container's environment and a tmpfs (volumes.ts).
 */
import { createHash } from 'node:crypto'
import type { Config, OrcObject, Pod, PodSpec, SealedValue, Secret } from '../../model/index.ts'
import { ENV_NAME, OrcError } from '../../model/index.ts'
import { type Keyring, openValue } from '../../secrets/index.ts'

export type DataRefKind = 'secret' | 'config'

/** What resolution reads: the pod namespace's Configs and Secrets, and the keyring (absent until this node received it). */
export interface DataLookup {
  config(name: string): { metadata: { revision?: number }; spec?: Config['spec'] } | undefined
  secret(name: string): { metadata: { revision?: number }; spec?: Secret['spec'] } | undefined
  keyring(): Keyring | undefined
}

export interface VolumeFile {
  /** Relative path inside the volume (a data key, or an item's path). */
  path: string
  data: Buffer
}

export interface ResolvedVolume {
  name: string
  /** From a Secret (files 0400) or a Config (0444). */
  secret: boolean
  files: VolumeFile[]
}

export interface ResolvedData {
  /** Each container's whole environment from the spec (envFrom, value, valueFrom). */
  env: Map<string, Record<string, string>>
  /** The pod's Config and Secret volumes with their files. */
  volumes: ResolvedVolume[]
  /** `secret/db` → the revision used (absent: an optional reference that does not exist). */
  revisions: Record<string, number>
  /** `secret/db` → what of it the pod saw (value hashes, not values): a change of it restarts the pod. */
  fingerprints: Record<string, string>
}

/** Why a pod cannot start yet: a reference that does not resolve (it waits Pending, retrying). */
export class DataRefError extends OrcError {}

type Source = { kind: DataRefKind; name: string; values: Map<string, { data: () => Buffer; binary: boolean }>; revision: number; fingerprint: string }

function fingerprint(parts: Record<string, unknown>): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 16)
}

/** One value of Secret `ns/name`, opened with this node's keyring (DataRefError `unavailable` until the node holds it). */
export function openSecretValue(lookup: Pick<DataLookup, 'keyring'>, ns: string, name: string, key: string, v: SealedValue): Buffer {
  const ring = lookup.keyring()
  if (ring === undefined)
    throw new DataRefError('unavailable', `secret/${name}: this node does not hold the cluster data key yet (it receives it from a member after admission)`)
  return openValue(ring, { namespace: ns, name, key }, v)
}

/** One Config or Secret, values opened lazily (only the keys used are decrypted). */
function sourceOf(kind: DataRefKind, name: string, ns: string, lookup: DataLookup): Source | undefined {
  if (kind === 'config') {
    const c = lookup.config(name)
    if (!c) return undefined
    const values = new Map<string, { data: () => Buffer; binary: boolean }>()
    for (const [k, v] of Object.entries(c.spec?.data ?? {})) values.set(k, { data: () => Buffer.from(String(v), 'utf8'), binary: false })
    for (const [k, v] of Object.entries(c.spec?.binaryData ?? {})) values.set(k, { data: () => Buffer.from(String(v), 'base64'), binary: true })
    return { kind, name, values, revision: c.metadata.revision ?? 0, fingerprint: fingerprint({ d: c.spec?.data ?? {}, b: c.spec?.binaryData ?? {} }) }
  }
  const s = lookup.secret(name)
  if (!s) return undefined
  const sealed = s.spec?.sealed ?? {}
  const values = new Map<string, { data: () => Buffer; binary: boolean }>()
  for (const [k, v] of Object.entries(sealed)) {
    values.set(k, {
      binary: v.binary === true,
      data: () => openSecretValue(lookup, ns, name, k, v),
    })
  }
  // Value hashes, not sealed envelopes: a key rotation re-seals every value without changing one.
  const hashes = Object.fromEntries(Object.entries(sealed).map(([k, v]) => [k, v.hash]))
  return { kind, name, values, revision: s.metadata.revision ?? 0, fingerprint: fingerprint(hashes) }
}

const missing = (ref: string, ns: string) => new DataRefError('not_found', `${ref} not found in namespace ${ns}`)

/**
 * Resolve every Config and Secret reference of a pod. Throws DataRefError naming the first
 * reference that does not resolve (a missing object or key that is not optional, binary data in
 * an environment variable, a Secret this node cannot open yet).
 */
export function resolvePodData(spec: Partial<PodSpec>, ns: string, lookup: DataLookup): ResolvedData {
  const sources = new Map<string, Source | undefined>()
  const revisions: Record<string, number> = {}
  const fingerprints: Record<string, string> = {}
  const get = (kind: DataRefKind, name: string): Source | undefined => {
    const ref = `${kind}/${name}`
    if (!sources.has(ref)) {
      const s = sourceOf(kind, name, ns, lookup)
      sources.set(ref, s)
      fingerprints[ref] = s?.fingerprint ?? 'absent'
      if (s) revisions[ref] = s.revision
    }
    return sources.get(ref)
  }
  const env = new Map<string, Record<string, string>>()
  for (const c of spec.containers ?? []) {
    const out: Record<string, string> = {}
    for (const from of c.envFrom ?? []) {
      const kind: DataRefKind = from.secret !== undefined ? 'secret' : 'config'
      const name = from.secret ?? from.config ?? ''
      const s = get(kind, name)
      if (!s) throw missing(`${kind}/${name}`, ns)
      for (const [k, v] of s.values) {
        const key = `${from.prefix ?? ''}${k}`
        // As Kubernetes does: keys that cannot be variables are left out (and binary values too).
        if (!ENV_NAME.test(key) || v.binary) continue
        const text = v.data().toString('utf8')
        if (!text.includes('\0')) out[key] = text
      }
    }
    for (const e of c.env ?? []) {
      const ref = e.valueFrom?.secret ?? e.valueFrom?.config
      if (ref === undefined) {
        out[e.name] = e.value ?? ''
        continue
      }
      const kind: DataRefKind = e.valueFrom?.secret !== undefined ? 'secret' : 'config'
      const s = get(kind, ref.name)
      const v = s?.values.get(ref.key)
      if (v === undefined) {
        if (ref.optional) continue
        throw s
          ? new DataRefError('not_found', `${kind}/${ref.name} has no key ${ref.key} (env ${e.name} of container ${c.name})`)
          : missing(`${kind}/${ref.name}`, ns)
      }
      if (v.binary) throw new DataRefError('invalid', binaryEnvMessage(kind, ref.name, ref.key, c.name, e.name))
      const text = v.data().toString('utf8')
      if (text.includes('\0'))
        throw new DataRefError('invalid', binaryEnvMessage(kind, ref.name, ref.key, c.name, e.name).replace('holds binary data', 'holds a NUL byte'))
      out[e.name] = text
    }
    env.set(c.name, out)
  }
  const volumes: ResolvedVolume[] = []
  for (const vol of spec.volumes ?? []) {
    const kind: DataRefKind | undefined = vol.secret !== undefined ? 'secret' : vol.config !== undefined ? 'config' : undefined
    const src = vol.secret ?? vol.config
    if (kind === undefined || src === undefined) continue
    const s = get(kind, src.name)
    if (!s) {
      if (src.optional) {
        volumes.push({ name: vol.name, secret: kind === 'secret', files: [] })
        continue
      }
      throw missing(`${kind}/${src.name}`, ns)
    }
    const items = src.items ?? [...s.values.keys()].sort().map((key) => ({ key, path: key }))
    const files: VolumeFile[] = []
    for (const it of items) {
      const v = s.values.get(it.key)
      if (v === undefined) {
        if (src.optional) continue
        throw new DataRefError('not_found', `${kind}/${src.name} has no key ${it.key} (volume ${vol.name})`)
      }
      files.push({ path: it.path, data: v.data() })
    }
    volumes.push({ name: vol.name, secret: kind === 'secret', files })
  }
  return { env, volumes, revisions, fingerprints }
}

function binaryEnvMessage(kind: DataRefKind, name: string, key: string, container: string, env: string): string {
  return `container ${container} env ${env}: ${kind}/${name} key ${key} holds binary data, which cannot be an environment variable (mount it as a file: spec.volumes)`
}

/**
 * At apply: a pod whose env takes a binary value of a Config or Secret (stored, or in the same
 * batch) is refused in one line naming the key. What appears later is caught on the node (the pod
 * waits Pending with the reason).
 */
export function admitPodData(
  pod: OrcObject,
  batch: readonly OrcObject[],
  stored: (kind: 'Config' | 'Secret', ns: string, name: string) => OrcObject | undefined,
): void {
  if (pod.kind !== 'Pod') return
  const ns = pod.metadata.namespace ?? 'default'
  const find = (kind: 'Config' | 'Secret', name: string): OrcObject | undefined =>
    batch.find((o) => o.kind === kind && (o.metadata.namespace ?? 'default') === ns && o.metadata.name === name) ?? stored(kind, ns, name)
  for (const c of (pod as Pod).spec?.containers ?? []) {
    for (const e of c.env ?? []) {
      const s = e.valueFrom?.secret
      const cf = e.valueFrom?.config
      if (s !== undefined) {
        const obj = find('Secret', s.name) as Secret | undefined
        // A Secret in the same batch is still in clear form (the API seals it after this check).
        const binary = obj?.spec?.sealed?.[s.key]?.binary === true || obj?.spec?.binaryData?.[s.key] !== undefined
        if (binary) throw new OrcError('invalid', `pod/${pod.metadata.name}: ${binaryEnvMessage('secret', s.name, s.key, c.name, e.name)}`)
      }
      if (cf !== undefined) {
        const obj = find('Config', cf.name) as Config | undefined
        if (obj?.spec?.binaryData?.[cf.key] !== undefined)
          throw new OrcError('invalid', `pod/${pod.metadata.name}: ${binaryEnvMessage('config', cf.name, cf.key, c.name, e.name)}`)
      }
    }
  }
}

/** `secret/db changed (revision 7)`, for each reference whose content differs from what the running copy saw. */
export function changedRefs(before: Record<string, string>, after: Record<string, string>, revisions: Record<string, number>): string[] {
  const out: string[] = []
  for (const ref of Object.keys(before).sort()) {
    if (after[ref] === undefined || after[ref] === before[ref]) continue
    out.push(after[ref] === 'absent' ? `${ref} deleted` : `${ref} changed (revision ${revisions[ref] ?? '?'})`)
  }
  return out
}
