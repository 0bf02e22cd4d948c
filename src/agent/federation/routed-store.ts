/**
 * The object store the API sees: objects in a federated namespace live in that federation's
 * document, everything else in the cluster's own. Writes to a federated namespace carry the
 * cluster's name in their author (`user:alice@home`), which the other clusters verify.
 */
import { applyChanges, type Change, getKind, KINDS, type ObjectRef, OrcError, type OrcObject } from '../../model/index.ts'
import type { ObjectStore, WriteOptions } from '../../store/index.ts'
import { endsWithWritersMark, writersMark } from './governance.ts'
import { clusterOfAuthor, tagAuthor } from './membership.ts'
import { ORIGIN_CLUSTER_ANNOTATION } from './scheduling.ts'
import { mayFederate } from './secrets.ts'

export interface FederatedScope {
  store: ObjectStore
  /** This cluster's name in the federation. */
  cluster: string
  federation: string
  /** The clusters whose users may write in namespace `ns` now (undefined: every member's; governance.ts writersAt). */
  writers?(ns: string): readonly string[] | undefined
  /**
   * The passed share or set-writers of `ns` in force here now (undefined: none, as shared at
   * create): a user's write names it, and every replica judges the write against it (governance.ts checkNamespaceWriters).
   */
  writersState?(ns: string): string | undefined
}

export interface ScopeRouter {
  /** The federation holding namespace `ns` here, if it is federated. */
  scopeOf(ns: string): FederatedScope | undefined
  /** Every federated scope open here (for listings across namespaces). */
  scopes(): Array<{ namespaces: readonly string[]; scope: FederatedScope }>
  /** Told when a federation starts or stops here, or learns its namespaces (watches follow it). */
  onScopesChange?(fn: () => void): () => void
}

function nsOf(kind: string, ns: string | undefined): string | undefined {
  return getKind(kind).namespaced ? (ns === undefined || ns === '' ? 'default' : ns) : undefined
}

/** Kinds that record the cluster that created them in a shared namespace (withOrigin). */
const ORIGIN_KINDS = new Set(['Pod', 'PinnedDeployment', 'Job', 'CronJob'])

/** Store keys (`Kind/ns/name`) of the namespaced objects `store` holds in `namespaces`. */
function keysIn(store: ObjectStore, namespaces: ReadonlySet<string>): string[] {
  const out: string[] = []
  for (const k of KINDS) {
    if (!k.namespaced) continue
    let list: OrcObject[]
    try {
      list = store.list(k.kind)
    } catch {
      return out // a federation store closing
    }
    for (const o of list) {
      const ns = o.metadata.namespace ?? 'default'
      if (namespaces.has(ns)) out.push(`${k.kind}/${ns}/${o.metadata.name}`)
    }
  }
  return out
}

export function routedStore(own: ObjectStore, router: ScopeRouter): ObjectStore {
  const pick = (kind: string, ns: string | undefined): { store: ObjectStore; scope?: FederatedScope } => {
    const n = nsOf(kind, ns)
    const scope = n === undefined ? undefined : router.scopeOf(n)
    return scope ? { store: scope.store, scope } : { store: own }
  }
  /**
   * A user's write in a namespace whose share names its writers is refused here unless this
   * cluster is one of them (the other replicas would refuse it on receipt: governance.ts
   * checkNamespaceWriters). Controllers write as before.
   */
  const checkWriter = (opts: WriteOptions, scope: FederatedScope | undefined, ns: string | undefined): void => {
    if (scope === undefined || ns === undefined || opts.author.startsWith('controller:')) return
    const writers = scope.writers?.(ns)
    if (writers !== undefined && !writers.includes(scope.cluster))
      throw new OrcError(
        'forbidden',
        `namespace ${ns} of federation ${scope.federation} is written by the users of ${writers.join(', ')} only: cluster ${scope.cluster} reads it (its pods run here as placed)`,
        { namespace: ns, writers: [...writers], cluster: scope.cluster },
      )
  }
  const tag = <T extends WriteOptions>(opts: T, scope: FederatedScope | undefined, ns: string | undefined): T => {
    if (scope === undefined) return opts
    const claimed = clusterOfAuthor(opts.author)
    if (claimed !== undefined && claimed !== scope.cluster) {
      throw new OrcError(
        'forbidden',
        `author ${opts.author} names cluster ${claimed}, but this is cluster ${scope.cluster} of federation ${scope.federation}`,
        {
          author: opts.author,
        },
      )
    }
    // A user's write names the writers state it was made under, so it is judged against that one;
    // a reason that ends like that mark already would be judged against what it names.
    const user = ns !== undefined && !opts.author.startsWith('controller:')
    if (user && endsWithWritersMark(opts.reason ?? ''))
      throw new OrcError('invalid', 'reason: ends with [writers PROPOSAL], the mark orc adds itself to writes in a shared namespace', { field: 'reason' })
    const under = user ? scope.writersState?.(ns) : undefined
    return { ...opts, author: tagAuthor(opts.author, scope.cluster), ...(under !== undefined ? { reason: writersMark(opts.reason ?? '', under) } : {}) }
  }
  /**
   * A pod created in a shared namespace records the cluster that created it: without
   * `placement.clusters` it runs only there (scheduling.ts). A PinnedDeployment, Job or CronJob
   * records it too, and what it makes carries it (deployments/plan.ts, jobs/plan.ts), whichever
   * cluster's node writes them. The record is
   * orc's: kept on updates that leave it out, and a different value is refused.
   */
  const withOrigin = (store: ObjectStore, manifest: OrcObject, scope: FederatedScope | undefined): OrcObject => {
    if (scope === undefined || !ORIGIN_KINDS.has(manifest.kind)) return manifest
    const cur = store.get({ kind: manifest.kind, namespace: manifest.metadata.namespace ?? 'default', name: manifest.metadata.name })
    const origin = cur?.metadata.annotations?.[ORIGIN_CLUSTER_ANNOTATION] ?? (cur === undefined ? scope.cluster : undefined)
    const given = manifest.metadata.annotations?.[ORIGIN_CLUSTER_ANNOTATION]
    if (given !== undefined && given !== origin) {
      throw new OrcError(
        'invalid',
        `metadata.annotations.${ORIGIN_CLUSTER_ANNOTATION}: set by orc to the cluster that created the ${manifest.kind.toLowerCase()} (${origin ?? 'unknown'}); use spec.placement.clusters to choose where it runs`,
        {
          field: `metadata.annotations.${ORIGIN_CLUSTER_ANNOTATION}`,
        },
      )
    }
    if (origin === undefined || given !== undefined) return manifest
    return { ...manifest, metadata: { ...manifest.metadata, annotations: { ...manifest.metadata.annotations, [ORIGIN_CLUSTER_ANNOTATION]: origin } } }
  }
  /** `placement.node: node@cluster` names a node of another cluster: only a shared namespace has those. */
  const checkPin = (manifest: OrcObject, scope: FederatedScope | undefined): void => {
    if (scope !== undefined) return
    const spec = manifest.spec as Record<string, any> | undefined
    const pins: [string, unknown][] =
      manifest.kind === 'Pod'
        ? [['spec.placement.node', spec?.placement?.node]]
        : manifest.kind === 'PinnedDeployment'
          ? [
              ['spec.previous.spec.placement.node', spec?.previous?.spec?.placement?.node],
              ['spec.next.spec.placement.node', spec?.next?.spec?.placement?.node],
            ]
          : []
    for (const [field, pin] of pins) {
      if (typeof pin === 'string' && pin.includes('@'))
        throw new OrcError(
          'invalid',
          `${field}: ${pin} names a node of cluster ${pin.slice(pin.indexOf('@') + 1)}, but namespace ${manifest.metadata.namespace ?? 'default'} is not shared with a federation (pin to a node of this cluster by its name)`,
          { field },
        )
    }
  }
  /**
   * A Secret in a shared namespace is the federation's only when it is shareable (secrets.ts):
   * otherwise it stays in the cluster's own scope. A stored one is found where it is; it does not
   * move between the two by an edit (delete it and apply it again).
   */
  const secretRef = (ref: ObjectRef): { store: ObjectStore; scope?: FederatedScope } => {
    const p = pick(ref.kind, ref.namespace)
    if (p.scope === undefined || ref.kind !== 'Secret' || p.store.get(ref) !== undefined) return p
    return { store: own }
  }
  const secretObj = (o: OrcObject): { store: ObjectStore; scope?: FederatedScope } => {
    const p = pick(o.kind, o.metadata.namespace)
    if (p.scope === undefined) return p
    const ref = { kind: 'Secret', namespace: o.metadata.namespace ?? 'default', name: o.metadata.name }
    const shared = mayFederate(o)
    const where = p.store.get(ref) !== undefined ? 'shared' : own.get(ref) !== undefined ? 'private' : undefined
    if (where === 'private' && shared) {
      throw new OrcError(
        'conflict',
        `secret ${ref.namespace}/${ref.name} is private to this cluster: to share it with federation ${p.scope.federation}, delete it and apply it again with spec.shareable: true`,
        { ...ref },
      )
    }
    if (where === 'shared' && !shared) {
      throw new OrcError(
        'conflict',
        `secret ${ref.namespace}/${ref.name} is shared with federation ${p.scope.federation}: spec.shareable stays true (delete it to stop sharing it; the other clusters keep the sealed copies they received)`,
        { ...ref },
      )
    }
    return shared ? p : { store: own }
  }
  const forRef = (ref: ObjectRef) => (ref.kind === 'Secret' ? secretRef(ref) : pick(ref.kind, ref.namespace))
  const forObj = (o: OrcObject) => (o.kind === 'Secret' ? secretObj(o) : pick(o.kind, o.metadata.namespace))
  const federatedNs = (): Set<string> => new Set(router.scopes().flatMap((s) => [...s.namespaces]))
  /**
   * One subscription on the cluster store and on every federation scope's store, following the
   * federations that start and stop after it was made. When a scope's namespaces become visible
   * (a federation started or joined, or a namespace was shared or unshared after), `fn` hears of
   * every object it holds in them, and of the cluster's own there, as if each had just changed: a
   * watcher (the DNS zone, a controller) sees them as it would see a new object.
   */
  const subscribeAll = (sub: (s: ObjectStore, fn: (keys: string[]) => void) => () => void, fn: (keys: string[]) => void): (() => void) => {
    const offOwn = sub(own, fn)
    const watched = new Map<ObjectStore, { off: () => void; namespaces: Set<string> }>()
    const follow = () => {
      const now = new Map(router.scopes().map((s) => [s.scope.store, s.namespaces] as const))
      for (const [store, w] of watched) {
        if (now.has(store)) continue
        w.off()
        watched.delete(store)
        // Its objects go from view, and the cluster's own in those namespaces come back.
        if (w.namespaces.size > 0) fn([...keysIn(store, w.namespaces), ...keysIn(own, w.namespaces)])
      }
      for (const [store, namespaces] of now) {
        let w = watched.get(store)
        if (w === undefined) {
          w = { off: sub(store, fn), namespaces: new Set() }
          watched.set(store, w)
        }
        const fresh = namespaces.filter((n) => !w.namespaces.has(n))
        for (const n of fresh) w.namespaces.add(n)
        // A namespace no longer shared (unshared after create): its objects go from view, the cluster's own come back.
        const gone = new Set([...w.namespaces].filter((n) => !namespaces.includes(n)))
        for (const n of gone) w.namespaces.delete(n)
        const changed = new Set([...fresh, ...gone])
        if (changed.size > 0) fn([...keysIn(store, changed), ...keysIn(own, changed)])
      }
    }
    for (const s of router.scopes()) watched.set(s.scope.store, { off: sub(s.scope.store, fn), namespaces: new Set(s.namespaces) })
    const offScopes = router.onScopesChange?.(follow)
    return () => {
      offScopes?.()
      offOwn()
      for (const w of watched.values()) w.off()
      watched.clear()
    }
  }

  return {
    // Replication of the cluster scope is the mesh's business, on the cluster store itself.
    encodeSyncState: () => own.encodeSyncState(),
    encodeMissing: (r) => own.encodeMissing(r),
    applyRemote: (u, opts) => own.applyRemote(u, opts),
    onLocalUpdate: (fn) => own.onLocalUpdate(fn),
    onRefused: (fn) => own.onRefused(fn),
    async apply(manifest, opts) {
      const { store, scope } = forObj(manifest)
      checkPin(manifest, scope)
      const ns = nsOf(manifest.kind, manifest.metadata.namespace)
      checkWriter(opts, scope, ns)
      return store.apply(withOrigin(store, manifest, scope), tag(opts, scope, ns))
    },
    planApply(manifest, opts) {
      const { store, scope } = forObj(manifest)
      checkPin(manifest, scope)
      const ns = nsOf(manifest.kind, manifest.metadata.namespace)
      checkWriter(opts, scope, ns)
      return store.planApply(withOrigin(store, manifest, scope), tag(opts, scope, ns))
    },
    async patch(ref, fields, opts) {
      const { store, scope } = forRef(ref)
      const ns = nsOf(ref.kind, ref.namespace)
      checkWriter(opts, scope, ns)
      if (ref.kind === 'Secret' && scope !== undefined) {
        const cur = store.get(ref)
        const changes: Change[] = fields.map((f) =>
          f.value === undefined ? { op: 'unset', path: f.path, old: undefined } : { op: 'set', path: f.path, value: f.value },
        )
        if (cur !== undefined && !mayFederate(applyChanges(cur as OrcObject, changes))) {
          throw new OrcError('conflict', `secret ${ref.namespace}/${ref.name} is shared with federation ${scope.federation}: spec.shareable stays true`, {
            ...ref,
          })
        }
      }
      return store.patch(ref, fields, tag(opts, scope, ns))
    },
    async delete(ref, opts) {
      const { store, scope } = forRef(ref)
      const ns = nsOf(ref.kind, ref.namespace)
      checkWriter(opts, scope, ns)
      return store.delete(ref, tag(opts, scope, ns))
    },
    async rollback(ref, opts) {
      const { store, scope } = forRef(ref)
      const ns = nsOf(ref.kind, ref.namespace)
      checkWriter(opts, scope, ns)
      return store.rollback(ref, tag(opts, scope, ns))
    },
    get: (ref) => forRef(ref).store.get(ref),
    history: (ref, q) => forRef(ref).store.history(ref, q),
    at: (ref, rev) => forRef(ref).store.at(ref, rev),
    diff: (ref, from, to) => forRef(ref).store.diff(ref, from, to),
    list(kind, namespace) {
      if (kind === 'Secret') {
        // Private Secrets of shared namespaces are in the cluster's own scope, shared ones in the federation's.
        const scope = namespace === undefined ? undefined : router.scopeOf(namespace)
        if (namespace !== undefined) return scope ? [...own.list(kind, namespace), ...scope.store.list(kind, namespace)] : own.list(kind, namespace)
        const out = own.list(kind)
        for (const { namespaces, scope: s } of router.scopes()) {
          for (const o of s.store.list(kind)) if (namespaces.includes(o.metadata.namespace ?? 'default')) out.push(o)
        }
        return out
      }
      if (namespace !== undefined || !getKind(kind).namespaced) return pick(kind, namespace).store.list(kind, namespace)
      // Across namespaces: the cluster's own objects outside federated namespaces, then each federation's.
      const fed = federatedNs()
      const out = own.list(kind).filter((o) => !fed.has(o.metadata.namespace ?? 'default'))
      for (const { namespaces, scope } of router.scopes()) {
        for (const o of scope.store.list(kind)) if (namespaces.includes(o.metadata.namespace ?? 'default')) out.push(o)
      }
      return out
    },
    count: () => own.count() + router.scopes().reduce((n, s) => n + s.scope.store.count(), 0),
    onChange: (fn) => subscribeAll((s, f) => s.onChange(f), fn),
    onRemoteMerged: (fn) => subscribeAll((s, f) => s.onRemoteMerged(f), fn),
    setStability: (fn) => own.setStability(fn),
    pruneTombstones: (reports) => own.pruneTombstones(reports),
    encodeStabilityReport: () => own.encodeStabilityReport(),
    docStats: () => own.docStats(),
    close: () => own.close(),
  }
}

/**
 * The cluster's own store as its controllers see it: objects of namespaces a federation shares here
 * are hidden (docs/federation.md: objects a namespace held before it was shared, or copies kept
 * from an earlier membership, stay in the cluster's scope, dormant while the namespace is
 * federated). Reads of them answer as if they were absent: the pod lifecycle stops their
 * containers, the scheduler and the deployment and job controllers leave them alone. Writes and
 * everything else go to `store` as they are.
 */
export function withoutShared(store: ObjectStore, isShared: (ns: string) => boolean): ObjectStore {
  const visible = (o: OrcObject): boolean => {
    const ns = nsOf(o.kind, o.metadata.namespace)
    return ns === undefined || !isShared(ns)
  }
  const list = ((kind: string, namespace?: string) =>
    (store.list(kind as never, namespace) as unknown as OrcObject[]).filter(visible)) as unknown as ObjectStore['list']
  const get = ((ref: ObjectRef) => {
    const o = store.get(ref as never) as OrcObject | undefined
    return o !== undefined && visible(o) ? o : undefined
  }) as ObjectStore['get']
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'list') return list
      if (prop === 'get') return get
      const v = Reflect.get(target, prop, target)
      return typeof v === 'function' ? v.bind(target) : v
    },
  })
}
