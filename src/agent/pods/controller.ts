/**
 * controller:lifecycle — runs the pods bound to this node. Reacts to store changes (local writes
 * and replicated ones alike), keeps one PodWorker per pod, routes container exits to them, and on
 * start re-adopts the containers a previous agent left running (runtime.recover()).
 */
import { chmodSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { type Clock, type Random, systemRandom } from '../../effects/index.ts'
import type { BlobSource } from '../../images/index.ts'
import { isRefOf, type Node, type ObjectRef, type Pod } from '../../model/index.ts'
import { createRuntime, type ExitStatus, RUNTIME_KINDS, type Runtime, type RuntimeKind, type RuntimeOptionsInput, shmDirOf } from '../../runtime/index.ts'
import { DEFAULT_SCHED_OPTIONS, type PodView } from '../../sched/index.ts'
import type { Keyring } from '../../secrets/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { ImageService } from '../images/service.ts'
import type { PodNetworkHooks } from '../network/index.ts'
import { NODE_CONTROLLER } from '../node-info.ts'
import { buildSchedView, type NodeMember, podViewOf, schedOptionsOf, withVmUses, withVolumeConstraints } from '../sched/index.ts'
import { Binder, type ViewBuilder } from './binder.ts'
import { Fence } from './fence.ts'
import { PodImages } from './images.ts'
import { DEFAULT_POD_TUNABLES, type PodTunables } from './options.ts'
import type { IsAdmin } from './security.ts'
import { PodDataFiles } from './volumes.ts'
import { type PodStorage, PodWorker } from './worker.ts'

export interface PodLifecycleComponents {
  store: ObjectStore
  nodeName: string
  dataDir: string
  clock: Clock
  /** Random bytes (temporary file names); the system's unless given. */
  random?: Random
  logger: Logger
  tunables?: Partial<PodTunables>
  /** Names of the nodes believed alive, this one included (membership). */
  aliveNodes(): string[]
  /** Membership with states (the mesh's members()); when absent, aliveNodes() are alive, others dead. */
  members?(): readonly NodeMember[]
  /** How recently a live member is normally heard (the mesh's heardWindowMs; default two heartbeats). */
  heardWindowMs?(): number
  /** How often the binder re-plans without a store change (membership moves on). Default 1000 ms. */
  schedTickMs?: number
  /** Runtimes by kind; the real ones (state under `<dataDir>/runtime`) unless a test injects others. */
  runtime?: (kind: RuntimeKind) => Runtime
  /** The node network: each pod's netns and IPv6 address. Absent: loopback-only pods. */
  network?: PodNetworkHooks
  /** Whether an author may approve grants (pods/security.ts); any user unless given. */
  isAdmin?: IsAdmin
  /** Image stores besides `<dataDir>/images` the operator trusts (AgentOptions.imageStores). */
  imageStores?: readonly string[]
  /** Cluster members as a source of image blobs before the registry (late bound: the mesh comes up after the lifecycle). */
  imagePeers?: () => BlobSource | undefined
  /** After each pull: where its bytes came from (metrics). */
  onPulled?: (bytes: { registry: number; peers: number; cached: number }) => void
  /**
   * This node's copy of the cluster keyring, to open the Secrets pods use (agent/secrets.ts
   * ClusterKeyring). Read when a pod needs it, loaded from disk if not yet: a joiner gets it after admission.
   */
  keyring?: { get(): Keyring | undefined; load(): Promise<Keyring | undefined>; onChange?(fn: (ring: Keyring) => void): () => void }
  /** A directory on a tmpfs for Config and Secret volumes; default `/dev/shm/orc-<hash of dataDir>`. */
  dataFilesDir?: string
  /** emptyDir, hostPath and persistent Volume sources (agent/volumes). */
  storage?: PodStorage
  /** Each pod's /etc/resolv.conf and /etc/hosts (the node's DNS resolver, agent/dns); absent: the image's own. */
  dnsFiles?(namespace: string, pod: string, address?: string): { resolvConf: string; hosts: string } | undefined
}

/**
 * A second set of pods this node runs besides the cluster's own: a federation's shared namespaces
 * (docs/federation.md). Its pods live in its own store, are bound by its own binder over its own
 * nodes (`node@cluster`), and run here exactly like the cluster's.
 */
export interface PodScope {
  /** Unique per scope, e.g. `federation/lab`. */
  id: string
  /** The scope's store, writing as this cluster (authors tagged `@cluster`). */
  store: ObjectStore
  /** This node's name in the scope (`h1@home`). */
  nodeName: string
  /** Namespaces the scope holds (pods in others are ignored). */
  namespaces: readonly string[]
  members(): readonly NodeMember[]
  nodes(): Stored<Node>[]
  buildView: ViewBuilder
}

interface ScopeRun {
  id: string
  store: ObjectStore
  nodeName: string
  /** `@<cluster>` of a federation scope's node name; '' for the cluster's own scope. */
  suffix: string
  namespaces: readonly string[] | undefined
  binder: Binder
  unsubscribe?: () => void
  pendingKeys: Set<string>
}

/**
 * Federated pods bound to nodes of this cluster, as the cluster's own scheduler must count them:
 * pinned to the node (they are the federation's to move, never the cluster's), holding its
 * resources. `suffix` is `@<this cluster's name in the federation>`; `scope` keeps keys apart.
 */
export function federatedLoad(scope: string, suffix: string, pods: readonly Stored<Pod>[]): PodView[] {
  const out: PodView[] = []
  for (const p of pods) {
    const node = p.status?.node
    if (typeof node !== 'string' || !node.endsWith(suffix) || node.length === suffix.length) continue
    const phase = p.status?.phase
    if (phase === 'Succeeded' || phase === 'Failed') continue
    const v = podViewOf(p)
    const local = node.slice(0, -suffix.length)
    out.push({
      namespace: `${scope}:${v.namespace}`,
      name: v.name,
      node: local,
      pin: local,
      ...(v.requests ? { requests: v.requests } : {}),
      ...(v.createdAt !== undefined ? { createdAt: v.createdAt } : {}),
    })
  }
  return out
}

/** How many stopped copies a Node keeps in `status.stoppedCopies`. */
export const STOPPED_COPIES_KEPT = 20

function keyOf(ref: ObjectRef): string {
  return `${ref.kind}/${ref.namespace}/${ref.name}`
}

function refOfKey(key: string): ObjectRef | undefined {
  const [kind, namespace, ...rest] = key.split('/')
  if (!kind || namespace === undefined || rest.length === 0) return undefined
  return { kind, namespace, name: rest.join('/') }
}

export class PodLifecycle {
  private readonly workers = new Map<string, PodWorker>()
  private readonly runtimes = new Map<RuntimeKind, Runtime>()
  private readonly adopted = new Map<string, { pid: number; startedAt: number }>()
  private readonly gone = new Map<string, ExitStatus>()
  readonly images: PodImages
  private readonly dataFiles: PodDataFiles
  private readonly tunables: PodTunables
  private readonly binder: Binder
  private readonly log: Logger
  private exitUnsubs: (() => void)[] = []
  private stopped = false
  private started = false
  /** The cluster's own scope (id '') and any federation scopes, in the order they were added. */
  private readonly scopes = new Map<string, ScopeRun>()
  /** Self-fencing of ha pods: this node's quorum and the lease their watchdogs read. */
  readonly fence: Fence
  private fenceTimer: unknown

  constructor(private readonly c: PodLifecycleComponents) {
    this.tunables = { ...DEFAULT_POD_TUNABLES, ...c.tunables }
    this.log = c.logger.child({ module: 'lifecycle' })
    mkdirSync(this.runtimeDir(), { recursive: true, mode: 0o711 })
    chmodSync(this.runtimeDir(), 0o711)
    this.fence = new Fence({
      nodeName: c.nodeName,
      // Without a mesh's membership (tests), a node believed alive counts as heard just now.
      members: c.members ?? (() => c.aliveNodes().map((name) => ({ name, state: 'alive' as const, lastSeen: c.clock.now() }))),
      nodes: () => c.store.list('Node'),
      clusters: () => c.store.list('Cluster'),
      now: () => c.clock.now(),
      leaseFile: join(this.runtimeDir(), 'lease'),
      log: this.log,
      ...(c.heardWindowMs !== undefined ? { heardWindowMs: () => c.heardWindowMs!() } : {}),
    })
    mkdirSync(join(c.dataDir, 'pods'), { recursive: true, mode: 0o700 })
    this.images = new PodImages(
      join(this.runtimeDir(), 'images'),
      join(this.runtimeDir(), 'image-pins.json'),
      this.tunables.keepImageRevisions,
      c.random ?? systemRandom,
      [join(c.dataDir, 'images'), ...(c.imageStores ?? [])],
    )
    mkdirSync(this.images.cacheDir, { recursive: true, mode: 0o711 })
    this.images.registry = new ImageService({
      dataDir: c.dataDir,
      cacheDir: this.images.cacheDir,
      clock: c.clock,
      log: c.logger.child({ module: 'images' }),
      inUse: () => this.images.pinnedDigests(),
      ...(c.onPulled !== undefined ? { onPulled: c.onPulled } : {}),
      ...(c.imagePeers !== undefined ? { peers: c.imagePeers } : {}),
    })
    this.dataFiles = new PodDataFiles(c.dataFilesDir ?? shmDirOf('orc', c.dataDir))
    this.binder = new Binder({
      store: c.store,
      nodeName: c.nodeName,
      members: c.members ?? (() => c.aliveNodes().map((name) => ({ name, state: 'alive' as const }))),
      now: () => c.clock.now(),
      setTimeout: (fn, ms) => c.clock.setTimeout(fn, ms),
      clearTimeout: (h) => c.clock.clearTimeout(h),
      log: c.logger.child({ module: 'scheduler' }),
      ...(c.schedTickMs !== undefined ? { tickMs: c.schedTickMs } : {}),
      // The cluster's scheduler counts the federated pods running on the cluster's nodes.
      buildView: (pods, nodes, me, members, now, down, taints) => {
        const noQuorum = this.fence.noQuorum()
        const vms = c.store.list('VirtualMachine')
        const base = withVolumeConstraints(
          withVmUses(buildSchedView(pods, nodes, me, members, now, down, taints), vms),
          pods,
          c.store.list('Volume'),
          nodes,
          schedOptionsOf(c.store.list('Cluster')).haAfterSeconds ?? DEFAULT_SCHED_OPTIONS.haAfterSeconds,
          vms,
        )
        const v = { ...base, ...(noQuorum !== undefined ? { noQuorum } : {}) }
        const extra: PodView[] = []
        for (const run of this.scopes.values()) {
          if (run.id === '') continue
          extra.push(...federatedLoad(run.id, run.suffix, this.podsOf(run)))
        }
        return extra.length === 0 ? v : { ...v, pods: [...v.pods, ...extra] }
      },
    })
    // A keyring delivered or rotated: pods waiting to open a Secret try again at once.
    this.exitUnsubs.push(c.keyring?.onChange?.(() => this.keyringChanged()) ?? (() => {}))
    this.scopes.set('', { id: '', store: c.store, nodeName: c.nodeName, suffix: '', namespaces: undefined, binder: this.binder, pendingKeys: new Set() })
  }

  /** How many pod workers this node holds (pods it runs or ran, and those being reconciled). */
  workerCount(): number {
    return this.workers.size
  }

  /** The pods of this node that keep an image digest (their kept revisions): `namespace/name`. */
  podsUsingImage(digest: string): string[] {
    const uids = this.images.podsPinning(digest)
    const out: string[] = []
    for (const w of this.workers.values()) if (w.podUid !== undefined && uids.has(w.podUid)) out.push(`${w.ref.namespace}/${w.ref.name}`)
    return out.sort()
  }

  /**
   * Run a federation's pods on this node too (its own binder and store). Before start(), the
   * scope's containers are re-adopted with the rest; after, its pods are reconciled at once.
   */
  async addScope(scope: PodScope): Promise<void> {
    if (this.stopped || this.scopes.has(scope.id)) return
    const binder = new Binder({
      store: scope.store,
      nodeName: scope.nodeName,
      members: () => scope.members(),
      nodes: () => scope.nodes(),
      buildView: scope.buildView,
      now: () => this.c.clock.now(),
      setTimeout: (fn, ms) => this.c.clock.setTimeout(fn, ms),
      clearTimeout: (h) => this.c.clock.clearTimeout(h),
      log: this.c.logger.child({ module: 'scheduler', scope: scope.id }),
      ...(this.c.schedTickMs !== undefined ? { tickMs: this.c.schedTickMs } : {}),
    })
    const run: ScopeRun = {
      id: scope.id,
      store: scope.store,
      nodeName: scope.nodeName,
      suffix: scope.nodeName.slice(scope.nodeName.lastIndexOf('@')),
      namespaces: scope.namespaces,
      binder,
      pendingKeys: new Set(),
    }
    this.scopes.set(scope.id, run)
    this.log.info({ scope: scope.id, node: scope.nodeName, namespaces: scope.namespaces }, 'pod scope added')
    if (this.started) {
      // The cluster's own pods in these namespaces are hidden now (the agent's store view): they stop.
      await this.reconcileOwn(scope.namespaces)
      await this.startScope(run)
    }
  }

  /** Reconcile the cluster's own pods of `namespaces` here (they were hidden or shown: a federation started or stopped). */
  private async reconcileOwn(namespaces: readonly string[]): Promise<void> {
    const own = this.scopes.get('')
    if (own === undefined) return
    const refs = new Map<string, ObjectRef<'Pod'>>()
    for (const [k, w] of this.workers) if (k.startsWith(`${own.id}\0`) && namespaces.includes(w.ref.namespace)) refs.set(keyOf(w.ref), w.ref)
    for (const p of this.podsOf(own)) {
      const ref = { kind: 'Pod' as const, namespace: p.metadata.namespace ?? 'default', name: p.metadata.name }
      if (namespaces.includes(ref.namespace)) refs.set(keyOf(ref), ref)
    }
    await Promise.all(
      [...refs.values()].map(async (ref) => {
        const wk = this.workerKey(own, ref)
        await this.workerFor(own, ref).reconcile()
        this.dropIfDone(wk)
      }),
    )
  }

  /** Stop running a scope's pods here (its containers stop) and its binder. */
  async removeScope(id: string, why: string): Promise<void> {
    const run = this.scopes.get(id)
    // Agent shutdown: containers keep running for the next agent to adopt.
    if (!run || id === '' || this.stopped) return
    this.scopes.delete(id)
    run.binder.stop()
    run.unsubscribe?.()
    const mine = [...this.workers.entries()].filter(([k]) => k.startsWith(`${id}\0`))
    for (const [k] of mine) this.workers.delete(k)
    await Promise.all(mine.map(([, w]) => w.release(why).catch(() => undefined)))
    this.log.info({ scope: id, pods: mine.length, why }, 'pod scope removed')
    // The cluster's own pods in those namespaces (kept copies among them) are visible again.
    if (this.started && run.namespaces !== undefined) await this.reconcileOwn(run.namespaces)
  }

  /**
   * A federation scope now holds `namespaces` (a namespace shared or unshared after it started):
   * its pods in namespaces it no longer holds stop here (`why`), the cluster's own pods of every
   * namespace that came or went are reconciled (hidden or shown by the agent's store view), and
   * the scope's pods in the new ones run.
   */
  async setScopeNamespaces(id: string, namespaces: readonly string[], why: string): Promise<void> {
    const run = this.scopes.get(id)
    if (!run || id === '' || this.stopped) return
    const before = run.namespaces ?? []
    const gone = before.filter((n) => !namespaces.includes(n))
    const fresh = namespaces.filter((n) => !before.includes(n))
    run.namespaces = [...namespaces]
    const mine = [...this.workers.entries()].filter(([k, w]) => k.startsWith(`${id}\0`) && gone.includes(w.ref.namespace))
    for (const [k] of mine) this.workers.delete(k)
    await Promise.all(mine.map(([, w]) => w.release(why).catch(() => undefined)))
    this.log.info({ scope: id, namespaces, gone, fresh, pods: mine.length, why }, 'pod scope namespaces changed')
    if (!this.started) return
    await this.reconcileOwn([...gone, ...fresh])
    await Promise.all(
      this.podsOf(run)
        .filter((p) => fresh.includes(p.metadata.namespace ?? 'default'))
        .map((p) => this.workerFor(run, { kind: 'Pod', namespace: p.metadata.namespace ?? 'default', name: p.metadata.name }).reconcile()),
    )
    await run.binder.pass()
  }

  /** The scope holding namespace `ns` (a federation's, else the cluster's own). */
  private scopeOfNs(ns: string): ScopeRun {
    for (const r of this.scopes.values()) if (r.namespaces?.includes(ns)) return r
    return this.scopes.get('')!
  }

  private async startScope(run: ScopeRun): Promise<void> {
    run.unsubscribe = run.store.onChange((keys) => this.onStoreChange(run, keys))
    await run.binder.pass()
    run.binder.start()
    await Promise.all(
      this.podsOf(run).map((p) => this.workerFor(run, { kind: 'Pod', namespace: p.metadata.namespace ?? 'default', name: p.metadata.name }).reconcile()),
    )
  }

  private podsOf(run: ScopeRun): Stored<Pod>[] {
    const pods = run.store.list('Pod')
    return run.namespaces === undefined ? pods : pods.filter((p) => run.namespaces!.includes(p.metadata.namespace ?? 'default'))
  }

  private runtimeDir(): string {
    return join(this.c.dataDir, 'runtime')
  }

  runtime(kind: RuntimeKind): Runtime {
    let rt = this.runtimes.get(kind)
    if (!rt) {
      if (this.c.runtime) rt = this.c.runtime(kind)
      else {
        const opts: RuntimeOptionsInput = { stateDir: this.runtimeDir(), logger: this.c.logger, clock: this.c.clock }
        rt = createRuntime(kind, opts)
      }
      this.runtimes.set(kind, rt)
      this.exitUnsubs.push(rt.onExit((id, exit) => this.onExit(id, exit)))
    }
    return rt
  }

  /**
   * Once a second: recompute the quorum (renewing the lease) and let the workers of ha pods stop
   * or start their copy when the fence decision changed.
   */
  private fenceLoop(): void {
    if (this.stopped) return
    this.fence.refresh()
    for (const w of this.workers.values()) w.fenceTick()
    this.fenceTimer = this.c.clock.setTimeout(() => this.fenceLoop(), 1000)
  }

  /** Re-adopt containers, subscribe to the store, reconcile every pod. */
  async start(): Promise<void> {
    this.fence.refresh()
    for (const kind of RUNTIME_KINDS) {
      let rt: Runtime
      try {
        rt = this.runtime(kind)
      } catch (err) {
        this.log.warn({ runtime: kind, err: String(err) }, 'runtime unavailable')
        continue
      }
      const r = await rt.recover()
      for (const h of r.adopted) this.adopted.set(h.id, { pid: h.pid, startedAt: h.startedAt })
      for (const g of r.gone) if (g.exit) this.gone.set(g.id, g.exit)
      if (r.adopted.length + r.gone.length > 0) this.log.info({ runtime: kind, adopted: r.adopted.length, gone: r.gone.length }, 'containers recovered')
    }
    this.started = true
    for (const run of this.scopes.values()) await this.startScope(run)
    await this.reapOrphans()
    this.fenceTimer = this.c.clock.setTimeout(() => this.fenceLoop(), 1000)
  }

  /** Containers of a previous agent that belong to no pod of this node any more. */
  private async reapOrphans(): Promise<void> {
    const reported = new Set<string>()
    for (const kind of this.runtimes.keys()) {
      const rt = this.runtimes.get(kind)!
      for (const s of rt.list()) {
        if ([...this.workers.values()].some((w) => w.owns(s.id))) continue
        try {
          if (s.state === 'running') await rt.stop(s.id, { graceMs: 10_000 })
          await rt.remove(s.id)
          this.log.info({ id: s.id, runtime: kind }, 'orphaned container removed')
          // A copy of a pod that moved to another node while this one was away: report it once.
          for (const run of this.scopes.values()) {
            const pod = this.podsOf(run).find((p) => s.id.startsWith(`${p.metadata.uid}.`))
            const to = pod?.status?.node
            if (pod && typeof to === 'string' && to !== '' && to !== run.nodeName && !reported.has(pod.metadata.uid)) {
              reported.add(pod.metadata.uid)
              await this.reportStoppedCopy(run, { namespace: pod.metadata.namespace ?? 'default', name: pod.metadata.name }, to, `pod is bound to ${to}`)
            }
          }
        } catch (err) {
          this.log.warn({ id: s.id, err: String(err) }, 'remove orphaned container')
        }
      }
    }
    this.adopted.clear()
    this.gone.clear()
  }

  /**
   * The store calls listeners inside its document transaction: collect the keys and react on the
   * next turn, so no write of ours ever starts inside another write.
   */
  private onStoreChange(run: ScopeRun, keys: string[]): void {
    if (this.stopped || this.scopes.get(run.id) !== run) return
    const first = run.pendingKeys.size === 0
    for (const k of keys) run.pendingKeys.add(k)
    if (first) setImmediate(() => this.react(run))
  }

  private react(run: ScopeRun): void {
    const keys = [...run.pendingKeys]
    run.pendingKeys.clear()
    if (this.stopped || this.scopes.get(run.id) !== run) return
    let bind = false
    const policyNs = new Set<string>()
    const dataRefs = new Map<string, Set<string>>()
    for (const key of keys) {
      const ref = refOfKey(key)
      if (!ref) continue
      if (isRefOf(ref, 'Pod')) {
        if (run.namespaces !== undefined && !run.namespaces.includes(ref.namespace)) continue
        // Only a change that can need a binding wakes the binder (a pod gone frees capacity; an
        // unbound pod needs a node); bindings on lost nodes are found by its periodic pass.
        if (!bind) bind = this.mayNeedBinding(run, ref)
        const wk = this.workerKey(run, ref)
        void this.workerFor(run, ref)
          .reconcile()
          .then(() => this.dropIfDone(wk))
      } else if (
        ref.kind === 'Node' ||
        (run.id !== '' && ref.kind === 'Cluster') ||
        (run.id === '' && (ref.kind === 'Volume' || ref.kind === 'VirtualMachine'))
      )
        bind = true
      else if (ref.kind === 'SecurityPolicy') policyNs.add(ref.namespace)
      else if (ref.kind === 'Config' || ref.kind === 'Secret') {
        if (!dataRefs.has(ref.namespace)) dataRefs.set(ref.namespace, new Set())
        dataRefs.get(ref.namespace)!.add(`${ref.kind.toLowerCase()}/${ref.name}`)
      }
    }
    if (dataRefs.size > 0) {
      for (const [k, w] of this.workers) {
        const refs = dataRefs.get(w.ref.namespace)
        if (refs && k.startsWith(`${run.id}\0`)) w.dataChanged(refs)
      }
    }
    if (bind) run.binder.request()
    if (policyNs.size > 0) for (const [k, w] of this.workers) if (k.startsWith(`${run.id}\0`) && policyNs.has(w.ref.namespace)) w.policiesChanged()
  }

  private mayNeedBinding(run: ScopeRun, ref: ObjectRef): boolean {
    const pod = run.store.get({ ...ref, kind: 'Pod' })
    if (!pod) return true
    const pin = pod.spec?.placement?.node
    if (typeof pin === 'string' && pin !== '' && pin !== run.nodeName) return false
    const node = pod.status?.node
    return typeof node !== 'string' || node === ''
  }

  private dropIfDone(key: string): void {
    const w = this.workers.get(key)
    if (w?.done) this.workers.delete(key)
  }

  private workerKey(run: ScopeRun, ref: ObjectRef): string {
    return `${run.id}\0${keyOf(ref)}`
  }

  private workerFor(run: ScopeRun, ref: ObjectRef<'Pod'>): PodWorker {
    const key = this.workerKey(run, ref)
    let w = this.workers.get(key)
    if (!w) {
      w = new PodWorker(
        {
          store: run.store,
          nodeName: run.nodeName,
          runtime: (k) => this.runtime(k),
          images: this.images,
          clock: this.c.clock,
          log: this.log,
          tunables: this.tunables,
          podDir: (uid) => join(this.c.dataDir, 'pods', uid),
          adopted: (id) => this.adopted.get(id),
          gone: (id) => this.gone.get(id),
          copyStopped: (r, to, why) => void this.reportStoppedCopy(run, r, to, why),
          fence: this.fence,
          ...(this.c.isAdmin ? { isAdmin: this.c.isAdmin } : {}),
          haAfterSeconds: () => schedOptionsOf(this.c.store.list('Cluster')).haAfterSeconds ?? DEFAULT_SCHED_OPTIONS.haAfterSeconds,
          ...(this.c.network ? { network: this.c.network } : {}),
          dataLookup: (ns) => this.dataLookup(run, ns),
          dataFiles: this.dataFiles,
          ...(this.c.dnsFiles ? { dnsFiles: this.c.dnsFiles } : {}),
          loadKeyring: () => this.loadKeyring(),
          ...(this.c.storage ? { storage: this.c.storage } : {}),
          forgetRecovered: (id) => {
            this.adopted.delete(id)
            this.gone.delete(id)
          },
        },
        ref,
      )
      this.workers.set(key, w)
    }
    return w
  }

  /** A namespace's Configs and Secrets in the scope's store, and this node's keyring (loaded on first use). */
  /** The cluster's own Configs and Secrets of a namespace, and the keyring (the image API's pull credentials). */
  clusterDataLookup(ns: string) {
    return this.dataLookup(this.scopes.get('')!, ns)
  }

  /** The node's registry images (blob store, puller, pulls). */
  get imageService(): ImageService {
    return this.images.registry!
  }

  private dataLookup(run: ScopeRun, ns: string) {
    return {
      config: (name: string) => run.store.get({ kind: 'Config', namespace: ns, name }),
      secret: (name: string) => run.store.get({ kind: 'Secret', namespace: ns, name }),
      keyring: () => this.c.keyring?.get(),
    }
  }

  /** Every pod waiting for a Config or Secret tries again (the keyring arrived: a Secret may open now). */
  keyringChanged(): void {
    if (this.stopped) return
    for (const w of this.workers.values()) w.retryIfWaitingForData()
  }

  /** Load the keyring from disk if this node has none in memory yet (it may have arrived since). */
  async loadKeyring(): Promise<void> {
    if (this.c.keyring && this.c.keyring.get() === undefined)
      await this.c.keyring.load().catch((err) => this.log.warn({ err: String(err) }, 'load cluster keyring'))
  }

  private onExit(id: string, exit: ExitStatus): void {
    for (const w of this.workers.values()) {
      if (w.owns(id)) {
        w.containerExited(id, exit)
        return
      }
    }
  }

  /**
   * This node stopped its copy of a pod bound to another node (a conflicting binding lost, or the
   * pod moved away while this node was unreachable). The pod's status belongs to the node running
   * it, so this goes in this node's own Node object (`status.stoppedCopies`, the newest
   * STOPPED_COPIES_KEPT), where `orc why` and `orc events` find it, and in the log.
   */
  private async reportStoppedCopy(run: ScopeRun, ref: { namespace: string; name: string }, boundTo: string, why: string): Promise<void> {
    const pod = `${run.id === '' ? '' : `${run.id}:`}${ref.namespace}/${ref.name}`
    this.log.warn(
      { kind: 'Pod', ns: ref.namespace, name: ref.name, scope: run.id || undefined, node: run.nodeName, boundTo, why },
      'stopped the copy of a pod bound elsewhere',
    )
    const nodeRef = { kind: 'Node', namespace: '', name: this.c.nodeName }
    const self = this.c.store.get(nodeRef)
    if (!self) return
    const now = this.c.clock.now()
    const prior = Array.isArray(self.status?.stoppedCopies) ? (self.status.stoppedCopies as unknown[]) : []
    const entry = { pod, boundTo, at: new Date(now).toISOString(), why }
    await this.c.store
      .patch(nodeRef, [{ path: ['status', 'stoppedCopies'], value: [...prior, entry].slice(-STOPPED_COPIES_KEPT) }], {
        author: NODE_CONTROLLER,
        reason: `stopped the copy of pod ${pod}: ${why}`,
        now,
      })
      .catch((err) => this.log.warn({ kind: 'Pod', ns: ref.namespace, name: ref.name, err: String(err) }, 'report stopped copy'))
  }

  /** The scheduler's current view of the cluster (what `orc why` explains placement with). */
  schedView() {
    return this.binder.currentView()
  }

  /** The scheduler view of the scope holding namespace `ns` (a shared namespace: the federation's). */
  schedViewFor(ns: string) {
    const run = this.scopeOfNs(ns)
    return { store: run.store, ...run.binder.currentView() }
  }

  /** Where a container's logs are on this node. */
  logDirOf(_ref: ObjectRef, uid: string, container: string): string {
    return join(this.c.dataDir, 'pods', uid, 'logs', container)
  }

  /** Wait until queued work is done (tests, benchmarks). */
  async idle(): Promise<void> {
    await Promise.all([...this.workers.values()].map((w) => w.idle()))
  }

  /** Stop reacting; containers keep running for the next agent to adopt. */
  async stop(): Promise<void> {
    this.stopped = true
    if (this.fenceTimer !== undefined) this.c.clock.clearTimeout(this.fenceTimer as Parameters<typeof this.c.clock.clearTimeout>[0])
    for (const run of this.scopes.values()) {
      run.binder.stop()
      run.unsubscribe?.()
    }
    for (const w of this.workers.values()) w.detach()
    await Promise.all([...this.workers.values()].map((w) => w.idle().catch(() => {})))
    for (const u of this.exitUnsubs) u()
    for (const rt of this.runtimes.values()) await rt.close().catch(() => {})
  }
}
