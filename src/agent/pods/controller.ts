/**
 * controller:lifecycle — runs the pods bound to this node. Reacts to store changes (local writes
 * and replicated ones alike), keeps one PodWorker per pod, routes container exits to them, and on
 * start re-adopts the containers a previous agent left running (runtime.recover()).
 */
import { chmodSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { field, type ObjectRef } from '../../model/index.ts'
import { createRuntime, type ExitStatus, type Runtime, type RuntimeOptionsInput } from '../../runtime/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import type { Clock as WorkflowClock } from '../../workflow/index.ts'
import { Binder } from './binder.ts'
import type { NodeMember } from '../sched/index.ts'
import { PodImages } from './images.ts'
import { DEFAULT_POD_TUNABLES, type PodTunables } from './options.ts'
import { PodWorker } from './worker.ts'
import type { PodNetworkHooks } from '../network/index.ts'

export interface PodLifecycleComponents {
  store: ObjectStore
  nodeName: string
  dataDir: string
  clock: WorkflowClock
  logger: Logger
  tunables?: Partial<PodTunables>
  /** Names of the nodes believed alive, this one included (membership). */
  aliveNodes(): string[]
  /** Membership with states (the mesh's members()); when absent, aliveNodes() are alive, others dead. */
  members?(): readonly NodeMember[]
  /** How often the binder re-plans without a store change (membership moves on). Default 1000 ms. */
  schedTickMs?: number
  /** Runtimes by kind; the real ones (state under `<dataDir>/runtime`) unless a test injects others. */
  runtime?: (kind: 'sandbox' | 'oci') => Runtime
  /** The node network: each pod's netns and IPv6 address. Absent: loopback-only pods. */
  network?: PodNetworkHooks
}

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
  private readonly runtimes = new Map<'sandbox' | 'oci', Runtime>()
  private readonly adopted = new Map<string, { pid: number; startedAt: number }>()
  private readonly gone = new Map<string, ExitStatus>()
  private readonly images: PodImages
  private readonly tunables: PodTunables
  private readonly binder: Binder
  private readonly log: Logger
  private unsubscribe: (() => void) | undefined
  private exitUnsubs: (() => void)[] = []
  private stopped = false

  constructor(private readonly c: PodLifecycleComponents) {
    this.tunables = { ...DEFAULT_POD_TUNABLES, ...c.tunables }
    this.log = c.logger.child({ module: 'lifecycle' })
    mkdirSync(this.runtimeDir(), { recursive: true, mode: 0o711 })
    chmodSync(this.runtimeDir(), 0o711)
    mkdirSync(join(c.dataDir, 'pods'), { recursive: true, mode: 0o700 })
    this.images = new PodImages(join(this.runtimeDir(), 'images'), join(this.runtimeDir(), 'image-pins.json'), this.tunables.keepImageRevisions)
    mkdirSync(this.images.cacheDir, { recursive: true, mode: 0o711 })
    this.binder = new Binder({
      store: c.store,
      nodeName: c.nodeName,
      members: c.members ?? (() => c.aliveNodes().map((name) => ({ name, state: 'alive' as const }))),
      now: () => c.clock.now(),
      setTimeout: (fn, ms) => c.clock.setTimeout(fn, ms),
      clearTimeout: (h) => c.clock.clearTimeout(h as Parameters<typeof c.clock.clearTimeout>[0]),
      log: c.logger.child({ module: 'scheduler' }),
      ...(c.schedTickMs !== undefined ? { tickMs: c.schedTickMs } : {}),
    })
  }

  private runtimeDir(): string {
    return join(this.c.dataDir, 'runtime')
  }

  runtime(kind: 'sandbox' | 'oci'): Runtime {
    let rt = this.runtimes.get(kind)
    if (!rt) {
      if (this.c.runtime) rt = this.c.runtime(kind)
      else {
        const opts: RuntimeOptionsInput = { stateDir: this.runtimeDir(), logger: this.c.logger, clock: { now: () => this.c.clock.now() } }
        rt = createRuntime(kind, opts)
      }
      this.runtimes.set(kind, rt)
      this.exitUnsubs.push(rt.onExit((id, exit) => this.onExit(id, exit)))
    }
    return rt
  }

  /** Re-adopt containers, subscribe to the store, reconcile every pod. */
  async start(): Promise<void> {
    for (const kind of ['sandbox', 'oci'] as const) {
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
    this.unsubscribe = this.c.store.onChange((keys) => this.onStoreChange(keys))
    await this.binder.pass()
    this.binder.start()
    await Promise.all(this.c.store.list('Pod').map((p) => this.workerFor({ kind: 'Pod', namespace: p.metadata.namespace ?? 'default', name: p.metadata.name }).reconcile()))
    await this.reapOrphans()
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
          const pod = this.c.store.list('Pod').find((p) => s.id.startsWith(`${p.metadata.uid}.`))
          const to = pod?.status?.node
          if (pod && typeof to === 'string' && to !== '' && to !== this.c.nodeName && !reported.has(pod.metadata.uid)) {
            reported.add(pod.metadata.uid)
            await this.binder.reportStoppedCopy({ namespace: pod.metadata.namespace ?? 'default', name: pod.metadata.name }, `pod is bound to ${to}`)
          }
        } catch (err) {
          this.log.warn({ id: s.id, err: String(err) }, 'remove orphaned container')
        }
      }
    }
    this.adopted.clear()
    this.gone.clear()
  }

  private pendingKeys = new Set<string>()

  /**
   * The store calls listeners inside its document transaction: collect the keys and react on the
   * next turn, so no write of ours ever starts inside another write.
   */
  private onStoreChange(keys: string[]): void {
    if (this.stopped) return
    const first = this.pendingKeys.size === 0
    for (const k of keys) this.pendingKeys.add(k)
    if (first) setImmediate(() => this.react())
  }

  private react(): void {
    const keys = [...this.pendingKeys]
    this.pendingKeys.clear()
    if (this.stopped) return
    let bind = false
    const policyNs = new Set<string>()
    for (const key of keys) {
      const ref = refOfKey(key)
      if (!ref) continue
      if (ref.kind === 'Pod') {
        // Only a change that can need a binding wakes the binder (a pod gone frees capacity; an
        // unbound pod needs a node); bindings on lost nodes are found by its periodic pass.
        if (!bind) bind = this.mayNeedBinding(ref)
        void this.workerFor(ref).reconcile().then(() => this.dropIfDone(key))
      } else if (ref.kind === 'Node') bind = true
      else if (ref.kind === 'SecurityPolicy') policyNs.add(ref.namespace)
    }
    if (bind) this.binder.request()
    if (policyNs.size > 0) for (const w of this.workers.values()) if (policyNs.has(w.ref.namespace)) w.policiesChanged()
  }

  private mayNeedBinding(ref: ObjectRef): boolean {
    const pod = this.c.store.get(ref)
    if (!pod) return true
    const pin = field(pod, 'spec.placement.node')
    if (typeof pin === 'string' && pin !== '' && pin !== this.c.nodeName) return false
    const node = field(pod, 'status.node')
    return typeof node !== 'string' || node === ''
  }

  private dropIfDone(key: string): void {
    const w = this.workers.get(key)
    if (w?.done) this.workers.delete(key)
  }

  private workerFor(ref: ObjectRef): PodWorker {
    const key = keyOf(ref)
    let w = this.workers.get(key)
    if (!w) {
      w = new PodWorker(
        {
          store: this.c.store,
          nodeName: this.c.nodeName,
          runtime: (k) => this.runtime(k),
          images: this.images,
          clock: this.c.clock,
          log: this.log,
          tunables: this.tunables,
          podDir: (uid) => join(this.c.dataDir, 'pods', uid),
          adopted: (id) => this.adopted.get(id),
          gone: (id) => this.gone.get(id),
          copyStopped: (r, why) => void this.binder.reportStoppedCopy(r, why),
          ...(this.c.network ? { network: this.c.network } : {}),
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

  private onExit(id: string, exit: ExitStatus): void {
    for (const w of this.workers.values()) if (w.owns(id)) return w.containerExited(id, exit)
  }

  /** The scheduler's current view of the cluster (what `orc why` explains placement with). */
  schedView() {
    return this.binder.currentView()
  }

  /** Where a container's logs are on this node. */
  logDirOf(ref: ObjectRef, uid: string, container: string): string {
    return join(this.c.dataDir, 'pods', uid, 'logs', container)
  }

  /** Wait until queued work is done (tests, benchmarks). */
  async idle(): Promise<void> {
    await Promise.all([...this.workers.values()].map((w) => w.idle()))
  }

  /** Stop reacting; containers keep running for the next agent to adopt. */
  async stop(): Promise<void> {
    this.stopped = true
    this.binder.stop()
    this.unsubscribe?.()
    for (const w of this.workers.values()) w.detach()
    await Promise.all([...this.workers.values()].map((w) => w.idle().catch(() => {})))
    for (const u of this.exitUnsubs) u()
    for (const rt of this.runtimes.values()) await rt.close().catch(() => {})
  }
}

