/**
 * What a cluster keeps of a federation's shared namespaces when it stops sharing them (it leaves,
 * is removed, or a namespace is unshared): copies of the document's objects, written into the
 * cluster's own scope so they run there from then on. Pure: the manager lists and writes.
 */
import { type JobStatus, jobFinished, type ObjectRef, type OrcObject } from '../../model/index.ts'

/**
 * The namespaced kinds a federation's document holds for a shared namespace, in the order they are
 * copied: what pods read first (Configs, Secrets, Services, policies), then the workloads that make
 * pods, then the pods. Volumes and VirtualMachines are never shared (docs/storage.md, runtimes.md).
 */
export const KEPT_KINDS = ['Config', 'Secret', 'Service', 'SecurityPolicy', 'PinnedDeployment', 'CronJob', 'Job', 'Pod'] as const

/** Where each kind holds pod specs: the placement of each is kept (keptPlacement). */
const POD_SPECS: Record<string, readonly (readonly string[])[]> = {
  Pod: [[]],
  PinnedDeployment: [
    ['previous', 'spec'],
    ['next', 'spec'],
  ],
  Job: [['template', 'spec']],
  CronJob: [['jobTemplate', 'spec', 'template', 'spec']],
}

/**
 * The placement of a pod spec as kept by cluster `own` when it leaves (or is removed from) a
 * federation: the copy lives in the cluster's own scope, where `own` is the only cluster. Clusters
 * the pod may run in that include `own` no longer constrain it (dropped, with `preferClusters`); a
 * pin to `node@own` becomes the bare name. What names only other clusters is kept as it is, so the
 * copy stays pending there with that reason rather than running where its author did not want it.
 * Returns the spec (the same object when nothing changed) and what changed, for the revision's reason.
 */
export function keptPlacement(spec: Record<string, any> | undefined, own: string): { spec: Record<string, any> | undefined; changed: string[] } {
  const pl = spec?.placement
  if (pl === null || typeof pl !== 'object') return { spec, changed: [] }
  const out: Record<string, any> = { ...pl }
  const changed: string[] = []
  if (Array.isArray(pl.clusters) && pl.clusters.includes(own)) {
    delete out.clusters
    delete out.preferClusters
    changed.push(`placement.clusters [${pl.clusters.join(', ')}] dropped`)
  }
  if (typeof pl.node === 'string' && pl.node.endsWith(`@${own}`)) {
    out.node = pl.node.slice(0, -own.length - 1)
    changed.push(`pin ${pl.node} is now ${out.node}`)
  }
  return changed.length === 0 ? { spec, changed } : { spec: { ...spec, placement: out }, changed }
}

/** `value` with `at` replaced by `fn` of what is there (a copy along the path; `value` itself when `at` is empty). */
function replaceAt(value: any, at: readonly string[], fn: (v: any) => any): any {
  if (at.length === 0) return fn(value)
  if (value === null || typeof value !== 'object') return value
  const [head, ...rest] = at
  return { ...value, [head!]: replaceAt(value[head!], rest, fn) }
}

/** keptPlacement of each pod spec a kind's spec holds: a Pod's own, a PinnedDeployment's templates (`previous`, `next`), a Job's and a CronJob's template. */
export function keptSpec(kind: string, spec: Record<string, any> | undefined, own: string): { spec: Record<string, any> | undefined; changed: string[] } {
  const paths = POD_SPECS[kind]
  if (paths === undefined || spec === undefined) return { spec, changed: [] }
  let out = spec
  const changed: string[] = []
  for (const path of paths) {
    let inner: string[] = []
    out = replaceAt(out, path, (s) => {
      const k = keptPlacement(s, own)
      inner = k.changed
      return k.spec
    })
    changed.push(...inner.map((c) => (path.length === 0 ? c : `${path[0]}: ${c}`)))
  }
  return changed.length === 0 ? { spec, changed } : { spec: out, changed }
}

/** Why an object of the document is not copied (undefined: it is). */
export function notKept(o: OrcObject, canOpen: (secret: OrcObject) => boolean): string | undefined {
  const status = (o as { status?: Record<string, any> }).status
  if (o.kind === 'Job' && jobFinished(status as JobStatus | undefined) !== undefined)
    return `finished (${jobFinished(status as JobStatus)!.type}): a copy would run it again`
  if (o.kind === 'Pod') {
    const phase = status?.phase
    const restart = (o.spec as { restartPolicy?: string } | undefined)?.restartPolicy ?? 'Always'
    if ((phase === 'Succeeded' || phase === 'Failed') && restart !== 'Always') return `finished (${phase}): a copy would run it again`
  }
  if (o.kind === 'Secret' && !canOpen(o)) return 'sealed by another cluster: this cluster cannot open it'
  return undefined
}

export interface KeptCopy {
  copy: OrcObject
  /** For the revision: `kept from federation lab (left); placement.clusters [home, cloud] dropped`. */
  reason: string
}

/**
 * The copies cluster `own` keeps of the objects `list` gives in `namespaces` (`why` goes in the
 * reason), and the objects it leaves with the reason. A copy holds the object's name, namespace,
 * labels, annotations and spec (kept placement), never its status: it starts afresh in the
 * cluster's own scope. Finished Jobs and pods are left (a copy would run their work again), and so
 * are Secrets sealed by another cluster (nobody here could open them).
 */
export function keptObjects(
  list: (kind: string) => readonly OrcObject[],
  namespaces: readonly string[],
  own: string,
  federation: string,
  why: string,
  canOpen: (secret: OrcObject) => boolean,
): { copies: KeptCopy[]; left: Array<{ ref: ObjectRef; why: string }> } {
  const copies: KeptCopy[] = []
  const left: Array<{ ref: ObjectRef; why: string }> = []
  for (const kind of KEPT_KINDS) {
    for (const o of list(kind)) {
      const namespace = o.metadata.namespace ?? 'default'
      if (!namespaces.includes(namespace)) continue
      const { name, labels, annotations } = o.metadata
      const skip = notKept(o, canOpen)
      if (skip !== undefined) {
        left.push({ ref: { kind, namespace, name }, why: skip })
        continue
      }
      // This cluster is the only one the copy can run in now.
      const kept = keptSpec(kind, o.spec as Record<string, any> | undefined, own)
      copies.push({
        copy: {
          apiVersion: o.apiVersion,
          kind: o.kind,
          metadata: { name, namespace, ...(labels ? { labels } : {}), ...(annotations ? { annotations } : {}) },
          spec: kept.spec,
        } as OrcObject,
        reason: `kept from federation ${federation} (${why})${kept.changed.length > 0 ? `; ${kept.changed.join('; ')}` : ''}`.slice(0, 1000),
      })
    }
  }
  return { copies, left }
}
