/**
 * One pod on this node: runs its lifecycle workflow for the spec revision it should run, watches
 * its containers, applies its restart policy, and reports all of it in the pod's status.
 *
 * Everything a worker does goes through one queue, so a spec change, a container exit and a delete
 * never interleave. A workflow run is started from the queue but not awaited there: a newer spec
 * cancels it (generation counter) instead of waiting behind a unit that hangs.
 */
import { chownSync, existsSync, mkdirSync, realpathSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import type { Clock, TimerHandle } from '../../effects/index.ts'
import { isRegistryReference, parseReference } from '../../images/index.ts'
import {
  dataRefsOf,
  hostPathVolumesOf,
  type ObjectRef,
  OrcError,
  type Pod,
  type PodCondition,
  type PodImagePin,
  type PodPhase,
  type PodStatus,
  type Probe,
  probeTiming,
  type SecurityPolicy,
} from '../../model/index.ts'
import {
  type ContainerFence,
  type ContainerMount,
  type ContainerRunSpec,
  containerNetnsOf,
  type ExitStatus,
  ensureMountPoint,
  probeInNetns,
  type ResolvedImage,
  RUNTIME_KINDS,
  type Runtime,
  type RuntimeKind,
} from '../../runtime/index.ts'
import type { FenceDecision } from '../../sched/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { addPodTargets, type ReachResult, WorkflowGraph, WorkflowRun, type WorkflowSnapshot } from '../../workflow/index.ts'
import { untaggedAuthor } from '../federation/membership.ts'
import { formatPullProgress, type PullView, registryAccessOf } from '../images/service.ts'
import type { PodAttachment, PodNetworkHooks } from '../network/index.ts'
import { SCHEDULER_CONTROLLER } from './binder.ts'
import { ContainerProbes } from './container-probes.ts'
import type { PodImages } from './images.ts'
import type { PodTunables } from './options.ts'
import type { ProbeCheck } from './prober.ts'
import { changedRefs, type DataLookup, type ResolvedData, resolvePodData } from './refs.ts'
import {
  anyUserIsAdmin,
  asksOf,
  hostPathImages,
  IMPLEMENTED_UNSAFE,
  type IsAdmin,
  podAuthorsOf,
  runtimeRefusal,
  ungranted,
  ungrantedError,
} from './security.ts'
import { assignedTo, containerIdOf, type PodContainerSpec, type PodSpecView, podDefaultResourcesOf, podSpecOf, specHash } from './spec.ts'
import { LIFECYCLE_CONTROLLER, StatusWriter } from './status.ts'
import type { PodDataFiles } from './volumes.ts'

/** This node's storage for pods (agent/volumes/service.ts): emptyDir, hostPath and Volume sources. */
export interface PodStorage {
  prepare(pod: Stored<Pod>, podUid: string, owner: { uid: number; gid: number }, hostPathGranted: boolean): Promise<Map<string, string>>
  release(pod: { metadata: { namespace?: string; name: string } }): Promise<void>
  /** The pod's emptyDirs removed (it left this node for good). */
  releaseEmptyDirs(podUid: string): Promise<void>
}

export type { PodPhase } from '../../model/index.ts'

/** What a worker asks of self-fencing (PodLifecycle.fence). */
export interface PodFence {
  decide(haAfterMs: number, graceMs: number, starting?: boolean): FenceDecision
  containerFence(haAfterMs: number, graceMs: number): ContainerFence
  /** This agent has caught up with its cluster since it started (until then it writes no status). */
  caughtUp(): boolean
}

export interface PodWorkerComponents {
  store: ObjectStore
  nodeName: string
  runtime(kind: RuntimeKind): Runtime
  images: PodImages
  clock: Clock
  log: Logger
  tunables: PodTunables
  /** `<dataDir>/pods/<uid>`: logs and anything else the pod keeps on this node. */
  podDir(uid: string): string
  /** A container of a previous agent, still running, found by `runtime.recover()`. */
  adopted(id: string): { pid: number; startedAt: number } | undefined
  /** How a container of a previous agent ended while no agent watched it. */
  gone(id: string): ExitStatus | undefined
  /** Forget what recover() found about this id (it has been dealt with). */
  forgetRecovered(id: string): void
  /** This node stopped its copy because the pod is bound to another node. */
  copyStopped?(ref: { namespace: string; name: string }, boundTo: string, why: string): void
  /** The node network (pod netns + IPv6); absent: containers get loopback only. */
  network?: PodNetworkHooks
  /** Self-fencing of ha pods; absent: ha pods are never fenced (unit tests). */
  fence?: PodFence
  /** The cluster's default haAfterSeconds. */
  haAfterSeconds?(): number
  /** Whether an author may approve grants (pods/security.ts); any user unless given. */
  isAdmin?: IsAdmin
  /** The Configs and Secrets of a namespace, and the keyring to open Secrets (refs.ts). */
  dataLookup?(namespace: string): DataLookup
  /** Where Config and Secret volumes are written (a tmpfs). */
  dataFiles?: PodDataFiles
  /** Before resolving: load the cluster keyring if this node has none in memory yet. */
  loadKeyring?(): Promise<void>
  /** emptyDir, hostPath and persistent Volume sources; absent: pods using them wait with the reason. */
  storage?: PodStorage
  /** The pod's /etc/resolv.conf and /etc/hosts (the cluster DNS, docs/services.md); absent: the image's own. */
  dnsFiles?(namespace: string, pod: string, address?: string): { resolvConf: string; hosts: string } | undefined
}

interface ContainerState {
  spec: PodContainerSpec
  id: string
  state: 'waiting' | 'running' | 'exited'
  reason?: string
  pid?: number
  restarts: number
  exitCode?: number | null
  signal?: string | null
  startedAt?: number
  finishedAt?: number
  backoffMs: number
  timer?: TimerHandle
  /** Set while we stop it ourselves: its exit is not a crash. */
  stopping?: boolean
  image?: ResolvedImage
  /** The probes of the current start (container-probes.ts); a restart makes new ones. */
  probes?: ContainerProbes
  /** Its startup probe passed (or it has none) since it last started. */
  started?: boolean
  /** Started, and its readiness probe passes (or it has none). */
  ready?: boolean
  /** What the readiness probe said last. */
  readyWhy?: string
  /** The startup probe failed during the pod's lifecycle run (the startup-probe unit fails with it). */
  startupFailure?: string
  /** Set while a failed probe stops it: the exit is recorded with this reason, then the restart policy applies. */
  probeKill?: string
  lastTermination?: { reason: string; at: string; exitCode?: number; signal?: string }
}

/** What starting the probe helper in a pod's namespace may take, beyond the probe's timeoutSeconds. */
const PROBE_START_ALLOWANCE_MS = 5_000

type RunState = 'none' | 'running' | 'reached' | 'failed'

function iso(ms: number | undefined): string | undefined {
  return ms === undefined ? undefined : new Date(ms).toISOString()
}

/** argv/env/cwd of a container from its spec over the image config (Kubernetes semantics). */
export function containerCommand(c: PodContainerSpec, img: ResolvedImage): { argv: string[]; env: Record<string, string>; workingDir?: string } {
  const command = c.command ?? []
  const args = c.args ?? []
  const argv = command.length > 0 ? [...command, ...args] : [...img.config.entrypoint, ...(args.length > 0 ? args : img.config.cmd)]
  if (argv.length === 0) throw new OrcError('invalid', `container ${c.name}: no command given and the image has none`)
  const workingDir = c.workingDir ?? img.config.workingDir
  return { argv, env: { ...img.config.env, ...c.env }, ...(workingDir !== undefined ? { workingDir } : {}) }
}

/** Written by this node's controllers (in a federation's document as `controller:lifecycle@<cluster>`). */
export function isControllerAuthor(author: string): boolean {
  const bare = untaggedAuthor(author)
  return bare === LIFECYCLE_CONTROLLER || bare === SCHEDULER_CONTROLLER
}
export class PodWorker {
  readonly ref: ObjectRef<'Pod'>
  private uid: string | undefined
  private chain: Promise<void> = Promise.resolve()
  private gen = 0
  private hash: string | undefined
  private revision: number | undefined
  private runningRevision: number | undefined
  private spec: PodSpecView | undefined
  private run: WorkflowRun | undefined
  private runState: RunState = 'none'
  private runReason: string | undefined
  /** The last check-security refused the pod (two-party rule): it waits Pending for a grant. */
  private refusedByPolicy = false
  /** check-security found a grant for the pod's host-path images (resolve-image may read them). */
  private hostPathGranted = false
  private snapshot: WorkflowSnapshot | undefined
  private stopping = false
  private containers = new Map<string, ContainerState>()
  private runRetryTimer: TimerHandle | undefined
  private runRetryMs: number
  /** A run was started by this worker (its status is this node's from then on). */
  private startedHere = false
  private readonly writer: StatusWriter
  private readonly log: Logger
  /** The pod's network on this node (kept across in-place restarts, dropped on teardown). */
  private net: PodAttachment | undefined
  /** The pod's Configs and Secrets as the current run resolved them (env, volume files, revisions). */
  private data: ResolvedData | undefined
  /** `secret/db` → revision, of the running copy (resolved by this agent, or recorded by the one it adopted from). */
  private refRevisions: Record<string, number> | undefined
  /** Host directory of each volume written for the current run. */
  private volumeDirs = new Map<string, string>()
  /** Host directory of each emptyDir, hostPath and Volume source (mount-volumes). */
  private storageDirs: Map<string, string> | undefined
  /** The last run could not resolve a Config or Secret: the pod waits Pending (retrying) for it. */
  private waitingForData = false
  /** The last mount-volumes failed (a volume in use, on another node, a driver failing): Pending, retrying, nothing deleted. */
  private waitingForVolumes = false
  /** Why the last pull-image attempt failed: the pod waits Pending (retrying) with this reason, rather than Failed. */
  private imageError: string | undefined
  /** Container name → the digest its registry image resolved to for the spec revision being run (status.images). */
  private imagePins = new Map<string, PodImagePin>()
  /**
   * Set by a reconcile that found nothing for this worker to do or keep (the pod gone for good, or
   * bound elsewhere with nothing of it here), cleared by the next: the controller drops the worker
   * while it is set and no work is queued behind it (a step queued meanwhile may start the pod).
   */
  private finished = false
  private queued = 0
  get done(): boolean {
    return this.finished && this.queued === 0
  }
  /** Why this node's copy is fenced (an ha pod on a node that has not heard a quorum), if it is. */
  private fenced: string | undefined
  /** The pod's Ready condition as last written (its lastTransitionTime moves only when it flips). */
  private readyCond: PodCondition | undefined
  /** The startup-probe unit's waits: called on every probe verdict and container exit. */
  private startupListeners = new Set<() => void>()

  /** The uid of the pod this worker runs (undefined before it started one). */
  get podUid(): string | undefined {
    return this.uid
  }

  constructor(
    private readonly c: PodWorkerComponents,
    ref: ObjectRef<'Pod'>,
  ) {
    this.ref = ref
    this.log = c.log
    this.runRetryMs = c.tunables.runRetryMs
    this.writer = new StatusWriter(
      c.store,
      ref,
      c.clock,
      c.log,
      (obj) => assignedTo(obj, c.nodeName) && (c.fence?.caughtUp() ?? true),
      c.tunables.progressWriteMs,
    )
  }

  private fields(rev = this.revision): Record<string, unknown> {
    return { kind: 'Pod', ns: this.ref.namespace, name: this.ref.name, ...(rev !== undefined ? { rev } : {}) }
  }

  private enqueue(fn: () => Promise<void> | void): Promise<void> {
    this.queued++
    const next = this.chain
      .then(fn)
      .catch((err) => this.log.error({ ...this.fields(), err }, 'pod worker step failed'))
      .finally(() => this.queued--)
    this.chain = next
    return next
  }

  /** Bring this node's copy of the pod in line with the store. */
  reconcile(): Promise<void> {
    return this.enqueue(() => this.reconcileNow())
  }

  /** A container of this pod ended (runtime exit event). */
  containerExited(id: string, exit: ExitStatus): void {
    void this.enqueue(() => this.onExit(id, exit))
  }

  /** A SecurityPolicy changed: a run that failed (perhaps for want of a grant) is tried again now. */
  policiesChanged(): void {
    void this.enqueue(async () => {
      if (this.stopping || this.runState === 'none') return
      const obj = this.c.store.get(this.ref)
      if (!obj || !assignedTo(obj, this.c.nodeName)) return
      if (this.runState !== 'failed') {
        // A grant revoked (policy deleted or edited): the pod it allowed stops, and its lifecycle
        // runs again so that check-security records why (orc why, status.reason, the revision).
        const refusal = await this.grantRefusal(obj)
        if (refusal === undefined) return
        this.log.warn({ ...this.fields(), reason: refusal.message }, 'grant revoked: stopping pod')
        this.gen++
        this.run?.cancel('grant revoked')
        this.run = undefined
        await this.stopContainers('grant revoked')
        for (const cs of this.containers.values()) {
          cs.stopping = false
          if (cs.state === 'running') cs.state = 'waiting'
          cs.reason = 'grant revoked'
        }
        this.runningRevision = undefined
        this.runState = 'failed'
        this.runReason = `grant revoked: ${refusal.message}`
        this.writeStatus(`grant revoked: ${refusal.message}`)
        // Recorded as its own revision (the run's next writes would otherwise replace it unwritten).
        await this.writer.settled()
      }
      this.gen++
      this.clearRunRetry()
      await this.startRun(obj, this.gen)
    })
  }

  /**
   * Configs or Secrets of the pod's namespace changed (`secret/db`, `config/app`): a pod waiting
   * for one tries again now; a running pod whose references now hold other values restarts in
   * place, recording which changed (status.configRefs, and the reason of the revision it writes).
   */
  dataChanged(refs: ReadonlySet<string>): void {
    void this.enqueue(async () => {
      if (this.stopping || this.runState === 'none' || this.fenced !== undefined || this.c.dataLookup === undefined) return
      const obj = this.c.store.get(this.ref)
      if (!obj || !assignedTo(obj, this.c.nodeName)) return
      const used = dataRefsOf(obj.spec)
      if (!used.some((r) => refs.has(r))) return
      if (this.runState === 'failed') {
        if (!this.waitingForData) return
        this.gen++
        this.clearRunRetry()
        await this.startRun(obj, this.gen)
        return
      }
      let why: string[]
      try {
        const now = resolvePodData(obj.spec ?? {}, this.ref.namespace, this.c.dataLookup(this.ref.namespace))
        why = this.data ? changedRefs(this.data.fingerprints, now.fingerprints, now.revisions) : this.revisionsChanged(now)
      } catch (err) {
        // It no longer resolves (deleted, a key removed): the running copy keeps what it has; the
        // next start waits Pending for it.
        this.log.warn({ ...this.fields(), reason: (err as Error).message }, 'pod data no longer resolves: the running copy keeps its values')
        return
      }
      if (why.length === 0) return
      const reason = why.join(', ')
      this.log.info({ ...this.fields(), why: reason }, 'pod data changed, restarting in place')
      this.gen++
      this.run?.cancel(reason)
      this.run = undefined
      await this.stopContainers(reason)
      for (const cs of this.containers.values()) {
        cs.stopping = false
        cs.state = 'waiting'
        cs.reason = reason
      }
      this.runningRevision = undefined
      // Starting again at once (not Pending: nothing is missing).
      this.runState = 'running'
      // Recorded as its own revision of the pod: `orc history pod/NAME` says why it restarted.
      this.writeStatus(reason)
      await this.writer.settled()
      this.gen++
      this.clearRunRetry()
      await this.startRun(obj, this.gen, reason)
    })
  }

  /** A pod waiting Pending for its Configs or Secrets tries again now (the keyring arrived). */
  retryIfWaitingForData(): void {
    void this.enqueue(async () => {
      if (this.runState !== 'failed' || !this.waitingForData || this.stopping) return
      const obj = this.c.store.get(this.ref)
      if (!obj || !assignedTo(obj, this.c.nodeName)) return
      this.gen++
      this.clearRunRetry()
      await this.startRun(obj, this.gen)
    })
  }

  /** After an agent restart (no fingerprints of the adopted run): compare the revisions its status recorded. */
  private revisionsChanged(now: ResolvedData): string[] {
    const before = this.refRevisions ?? {}
    return Object.keys(now.fingerprints)
      .sort()
      .filter((r) => (before[r] ?? -1) !== (now.revisions[r] ?? -1))
      .map((r) => (now.revisions[r] === undefined ? `${r} deleted` : `${r} changed (revision ${now.revisions[r]})`))
  }

  /** Why the pod may not run: its runtime, or its unsafe features (the two-party rule); undefined when it may. */
  private async grantRefusal(obj: Stored<Pod>): Promise<OrcError | undefined> {
    const imageStores = this.c.images.stores
    // A SecurityPolicy's requireRuntime (a restriction, whoever wrote it) before the grants.
    const runtime = runtimeRefusal(obj, this.c.store.list('SecurityPolicy', this.ref.namespace))
    if (runtime) return runtime
    if (asksOf(obj, imageStores).length === 0) return undefined
    const ctx = {
      podAuthors: await podAuthorsOf(this.c.store, obj),
      policyAuthor: (p: SecurityPolicy) => (p.metadata as { updatedBy?: string }).updatedBy ?? '',
      isAdmin: this.c.isAdmin ?? anyUserIsAdmin,
      imageStores,
    }
    const u = ungranted(obj, this.c.store.list('SecurityPolicy', this.ref.namespace), ctx)
    return u.missing.length > 0 ? ungrantedError(obj, u, imageStores) : undefined
  }

  /**
   * The lifecycle's once-a-second fence check: an ha pod that ran (or was fenced) here is stopped
   * or started again when the fence decision changed.
   */
  fenceTick(): void {
    if (this.uid === undefined || this.c.fence === undefined) return
    void this.enqueue(async () => {
      // A status held back until this agent caught up with its cluster is written now (if still ours).
      this.writer.reassert(true)
      const obj = this.c.store.get(this.ref)
      if (!obj || !assignedTo(obj, this.c.nodeName)) return
      const ha = this.haOf(obj)
      const run = ha === undefined || this.c.fence!.decide(ha.haAfterMs, ha.graceMs, this.hash === undefined).run
      if (run === (this.fenced === undefined)) return
      await this.reconcileNow()
    })
  }

  /**
   * haAfter and stop grace of an ha pod; undefined for a best-effort one, and for a pinned one (it
   * never moves, so no other node can start a second copy).
   */
  private haOf(obj: Pod): { haAfterMs: number; graceMs: number } | undefined {
    if (obj.spec?.policy !== 'ha' || this.c.fence === undefined) return undefined
    const pin = obj.spec.placement?.node
    if (typeof pin === 'string' && pin !== '') return undefined
    const own = obj.spec.haAfterSeconds
    const seconds = typeof own === 'number' ? own : (this.c.haAfterSeconds?.() ?? 30)
    return { haAfterMs: seconds * 1000, graceMs: podSpecOf(obj).graceMs }
  }

  /** After an agent restart, containers of this pod that still run (kept if the lease allows). */
  private adoptable(obj: Stored<Pod>): boolean {
    return this.uid === undefined && podSpecOf(obj).containers.some((c) => this.c.adopted(containerIdOf(obj.metadata.uid, c.name)) !== undefined)
  }

  /** Stop this node's copy of an ha pod: the node has not heard a quorum for too long. */
  private async fenceStop(reason: string): Promise<void> {
    const running = this.hash !== undefined || this.runningContainers() > 0
    if (running) this.log.warn({ ...this.fields(), reason }, 'ha pod fenced: stopping this copy')
    else if (this.fenced === undefined) this.log.warn({ ...this.fields(), reason }, 'ha pod fenced: not starting it')
    if (running) await this.teardown(reason, false)
    this.fenced = reason
    this.writeStatus(reason)
  }

  /** Resolves once queued work and status writes are done (tests, shutdown). */
  async idle(): Promise<void> {
    await this.chain
    await this.writer.settled()
  }

  /** Stop watching (agent shutdown): cancel timers and the run; containers keep running. */
  detach(): void {
    this.gen++
    this.run?.cancel('agent stopping')
    this.clearRunRetry()
    this.writer.cancelDeferred()
    for (const cs of this.containers.values()) {
      if (cs.timer !== undefined) this.c.clock.clearTimeout(cs.timer)
      cs.probes?.stop()
    }
  }

  /** Stop this node's copy and stop watching (the pod's scope went away: a federation was left). */
  async release(why: string): Promise<void> {
    await this.enqueue(() => this.teardown(why, false))
    this.detach()
  }

  owns(id: string): boolean {
    return this.uid !== undefined && id.startsWith(`${this.uid}.`)
  }

  /** Log dir of a container of this pod. */
  logDirOf(uid: string, container: string): string {
    return join(this.c.podDir(uid), 'logs', container)
  }

  private async reconcileNow(): Promise<void> {
    this.finished = false
    const obj = this.c.store.get(this.ref)
    if (this.uid !== undefined && (!obj || obj.metadata.uid !== this.uid)) {
      await this.teardown('pod deleted', true)
      if (!obj) {
        this.finished = true
        return
      }
    }
    if (!obj) {
      this.finished = true
      return
    }
    if (!assignedTo(obj, this.c.nodeName)) {
      // A copy here: running, or what a previous agent left (adopted, or ended while none watched).
      if (this.hash !== undefined || (this.uid !== undefined && this.podContainerIds().length > 0)) {
        const to = obj.status?.node
        const why = typeof to === 'string' && to !== '' ? `pod is bound to ${to}` : `pod is no longer bound to ${this.c.nodeName}`
        await this.teardown(why, false)
        // Bound to another node (a move while this node was away, or a lost binding conflict): report it.
        if (typeof to === 'string' && to !== '') this.c.copyStopped?.({ namespace: this.ref.namespace, name: this.ref.name }, to, why)
      }
      // Nothing of it ever ran here: no worker to keep (the controller drops it, and makes one again
      // when a change binds the pod here). Every node held a worker for every pod of the cluster
      // (~0.9 KB each: 9 MB per 10k pods, docs/benchmarks.md).
      if (this.hash === undefined && this.uid === undefined && this.run === undefined) this.finished = true
      return
    }
    const ha = this.haOf(obj)
    if (ha !== undefined) {
      // Not running here yet (new here, fenced, or adopted after an agent restart): the start rule.
      const d = this.c.fence!.decide(ha.haAfterMs, ha.graceMs, this.hash === undefined && !this.adoptable(obj))
      if (!d.run) {
        this.uid ??= obj.metadata.uid
        if (this.fenced === undefined || this.hash !== undefined || this.runningContainers() > 0) await this.fenceStop(d.reason)
        return
      }
      if (this.fenced !== undefined) {
        this.log.info({ ...this.fields(), reason: d.reason }, 'ha pod no longer fenced: starting it')
        this.fenced = undefined
      }
    } else if (this.fenced !== undefined) this.fenced = undefined
    const hash = specHash(obj)
    if (hash === this.hash) {
      this.writer.reassert()
      return
    }
    const first = this.uid === undefined
    this.uid = obj.metadata.uid
    if (first && (await this.tryAdopt(obj, hash))) return
    await this.restartWith(obj, hash)
  }

  /** The number of the newest revision that set the spec (status writes add revisions too). */
  private async specRevision(obj: Stored<Pod>): Promise<number> {
    if (!isControllerAuthor(obj.metadata.updatedBy)) return obj.metadata.revision
    // History always includes what the store shows (it waits for queued writes).
    const all = await this.c.store.history(this.ref).catch(() => [])
    const user = all.filter((r) => !isControllerAuthor(r.author) && r.op !== 'delete')
    const last = user[user.length - 1]
    if (last) return last.number
    return obj.metadata.revision
  }

  /**
   * After an agent restart: if the status says this very spec was running, take the containers
   * back (recover() found them) instead of starting them again; ones that ended while no agent
   * watched go through the restart policy like any exit.
   */
  private async tryAdopt(obj: Stored<Pod>, hash: string): Promise<boolean> {
    const st: PodStatus = obj.status ?? {}
    const phase = st.phase
    if (st.specHash !== hash || typeof st.runningRevision !== 'number' || !['Running', 'Succeeded', 'Failed'].includes(phase as string)) return false
    // A grant revoked while no agent watched: start over, so check-security stops it and says why.
    if ((await this.grantRefusal(obj)) !== undefined) return false
    const spec = podSpecOf(obj)
    const prior = new Map<string, Partial<NonNullable<PodStatus['containers']>[number]>>((st.containers ?? []).map((c) => [String(c.name), c]))
    const anyAdopted = spec.containers.some((c) => this.c.adopted(containerIdOf(obj.metadata.uid, c.name)) !== undefined)
    if (
      phase === 'Running' &&
      !anyAdopted &&
      spec.containers.some((c) => prior.get(c.name)?.state === 'running' && this.c.gone(containerIdOf(obj.metadata.uid, c.name)) === undefined)
    ) {
      return false // nothing of it survived and nothing says how it ended: start afresh
    }
    this.hash = hash
    this.spec = spec
    this.revision = st.runningRevision
    this.runningRevision = st.runningRevision
    this.runState = 'reached'
    this.snapshot = st.workflow as WorkflowSnapshot | undefined
    if (st.configRefs !== undefined) this.refRevisions = { ...st.configRefs }
    this.imagePins = new Map(recordedPins(st, st.runningRevision).map((p) => [p.name, p]))
    this.containers = new Map()
    const exits: [string, ExitStatus][] = []
    for (const c of spec.containers) {
      const id = containerIdOf(obj.metadata.uid, c.name)
      const p = prior.get(c.name) ?? {}
      const cs: ContainerState = {
        spec: c,
        id,
        state: 'exited',
        restarts: typeof p.restarts === 'number' ? p.restarts : 0,
        backoffMs: this.c.tunables.restartBackoffMs,
      }
      if (typeof p.exitCode === 'number') cs.exitCode = p.exitCode
      const a = this.c.adopted(id)
      if (a) {
        cs.state = 'running'
        cs.pid = a.pid
        cs.startedAt = a.startedAt
      } else {
        const g = this.c.gone(id)
        if (g) exits.push([id, g])
        else if (p.state === 'running') exits.push([id, { code: null, signal: null, finishedAt: this.c.clock.now() }])
        else if (p.state === 'waiting')
          exits.push([id, { code: typeof p.exitCode === 'number' ? p.exitCode : null, signal: null, finishedAt: this.c.clock.now() }])
        if (typeof p.startedAt === 'string') cs.startedAt = Date.parse(p.startedAt)
      }
      this.c.forgetRecovered(id)
      this.containers.set(c.name, cs)
    }
    this.log.info({ ...this.fields(), adopted: spec.containers.length - exits.length }, 'pod adopted after agent restart')
    const prevNet = st.network as { ipv6?: unknown } | undefined
    if (this.c.network !== undefined) {
      // The containers still run in their namespace: claim it back with the same address.
      this.net = await this.c.network.attachPod(obj.metadata.uid, typeof prevNet?.ipv6 === 'string' ? prevNet.ipv6 : undefined).catch((err) => {
        this.log.warn({ ...this.fields(), err: String(err) }, 'pod network after agent restart')
        return undefined
      })
    }
    const cond = Array.isArray(st.conditions) ? st.conditions.find((c) => c?.type === 'Ready') : undefined
    if (cond !== undefined && typeof cond.lastTransitionTime === 'string') this.readyCond = { ...cond }
    for (const cs of this.containers.values()) if (cs.state === 'running') this.startProbes(cs)
    this.startedHere = true
    this.writeStatus('adopted after agent restart')
    for (const [id, exit] of exits) await this.onExit(id, exit, true)
    // A Config or Secret that changed while no agent watched: restart with its new values.
    if (st.configRefs !== undefined) this.dataChanged(new Set(Object.keys(st.configRefs)))
    return true
  }

  private async restartWith(obj: Stored<Pod>, hash: string): Promise<void> {
    this.gen++
    const gen = this.gen
    this.clearRunRetry()
    this.run?.cancel('the pod spec changed')
    const inPlace = this.hash !== undefined
    const adoptedIds = this.uid ? this.podContainerIds() : []
    if (inPlace || adoptedIds.length > 0) await this.stopContainers(inPlace ? 'restart with the new spec' : 'not the spec to run')
    if (gen !== this.gen) return
    this.hash = hash
    this.spec = podSpecOf(obj)
    this.revision = await this.specRevision(obj)
    this.runRetryMs = this.c.tunables.runRetryMs
    this.containers = new Map(
      this.spec.containers.map((c) => [
        c.name,
        {
          spec: c,
          id: containerIdOf(obj.metadata.uid, c.name),
          state: 'waiting',
          reason: 'starting',
          restarts: 0,
          backoffMs: this.c.tunables.restartBackoffMs,
        },
      ]),
    )
    this.log.info({ ...this.fields(), inPlace }, inPlace ? 'pod spec changed, restarting in place' : 'pod assigned, starting')
    await this.startRun(obj, gen)
  }

  /** Containers of this pod still running here (adopted after a restart, or started). */
  private runningContainers(): number {
    return this.podContainerIds(true).length
  }

  /** `<runtime>:<id>` of this pod's containers here: all (exited ones too), or the running ones. */
  private podContainerIds(runningOnly = false): string[] {
    const out = new Set<string>()
    for (const kind of RUNTIME_KINDS) {
      let rt: Runtime
      try {
        rt = this.c.runtime(kind)
      } catch {
        continue
      }
      for (const s of rt.list()) if (this.owns(s.id) && (!runningOnly || s.state === 'running')) out.add(`${kind}:${s.id}`)
    }
    return [...out]
  }

  /** Stop (SIGTERM, grace, SIGKILL) and forget every container of this pod, in both runtimes. */
  private async stopContainers(why: string): Promise<void> {
    const ids = this.podContainerIds()
    for (const cs of this.containers.values()) {
      cs.stopping = true
      if (cs.timer !== undefined) this.c.clock.clearTimeout(cs.timer)
      cs.timer = undefined
      this.stopProbes(cs)
    }
    if (ids.length === 0) return
    this.stopping = true
    this.writeStatus(why)
    const graceMs = this.spec?.graceMs ?? 10_000
    await Promise.all(
      ids.map(async (tagged) => {
        const [kind, id] = [tagged.slice(0, tagged.indexOf(':')) as RuntimeKind, tagged.slice(tagged.indexOf(':') + 1)]
        const rt = this.c.runtime(kind)
        try {
          const st = rt.status(id)
          if (st && st.state === 'running') await rt.stop(id, { graceMs })
          await rt.remove(id)
          this.c.forgetRecovered(id)
        } catch (err) {
          this.log.warn({ ...this.fields(), id, err: String(err) }, 'stop container')
        }
      }),
    )
    this.log.info({ ...this.fields(), containers: ids.length, why }, 'pod containers stopped')
    this.stopping = false
  }

  private async teardown(why: string, deleted: boolean): Promise<void> {
    this.gen++
    this.run?.cancel(why)
    this.run = undefined
    this.clearRunRetry()
    await this.stopContainers(why)
    if (this.uid !== undefined && this.c.network !== undefined) {
      await this.c.network.detachPod(this.uid).catch((err) => this.log.warn({ ...this.fields(), err: String(err) }, 'remove pod network'))
    }
    this.net = undefined
    if (this.uid !== undefined) this.c.dataFiles?.remove(this.uid)
    if (this.storageDirs !== undefined || this.usesStorage()) {
      await this.c.storage
        ?.release({ metadata: { namespace: this.ref.namespace, name: this.ref.name } })
        .catch((err) => this.log.warn({ ...this.fields(), err: String(err) }, 'detach volumes'))
      if (deleted && this.uid !== undefined)
        await this.c.storage
          ?.releaseEmptyDirs(this.c.podDir(this.uid))
          .catch((err) => this.log.warn({ ...this.fields(), err: String(err) }, 'unmount emptyDir'))
    }
    this.storageDirs = undefined
    this.waitingForVolumes = false
    this.data = undefined
    this.refRevisions = undefined
    this.volumeDirs = new Map()
    this.waitingForData = false
    this.imageError = undefined
    this.imagePins = new Map()
    if (deleted && this.uid !== undefined) {
      this.c.images.unpin(this.uid)
      rmSync(this.c.podDir(this.uid), { recursive: true, force: true })
      this.log.info({ ...this.fields() }, 'pod removed from node')
    }
    this.hash = undefined
    this.revision = undefined
    this.runningRevision = undefined
    this.runState = 'none'
    this.snapshot = undefined
    this.containers = new Map()
    this.readyCond = undefined
    if (deleted) this.uid = undefined
  }

  // ---- the lifecycle workflow ----

  private buildGraph(obj: Stored<Pod>, gen: number): WorkflowGraph {
    const spec = this.spec!
    const t = this.c.tunables
    const g = addPodTargets(new WorkflowGraph())
    g.addUnit({
      name: 'check-security',
      description: 'the runtime is one the SecurityPolicies allow; unsafe features asked for are granted and implemented',
      timeoutMs: 5_000,
      run: async () => {
        const cur = this.c.store.get(this.ref) ?? obj
        const refusal = await this.grantRefusal(cur)
        this.hostPathGranted = false
        if (refusal) {
          this.refusedByPolicy = true
          throw refusal
        }
        this.refusedByPolicy = false
        this.hostPathGranted = hostPathImages(cur, this.c.images.stores).length > 0 || hostPathVolumesOf(cur.spec).length > 0
        // hostPath is provided for a host directory as image (resolve-image) and as a volume (mount-volumes).
        const notImpl = spec.unsafe.filter((u) => !IMPLEMENTED_UNSAFE.has(u) && !(u === 'hostPath' && this.hostPathGranted))
        if (notImpl.length > 0)
          throw new OrcError('invalid', `unsafe feature ${notImpl.join(', ')} is not implemented by this agent yet (granted, but refused)`)
        if (spec.unsafe.includes('root') && spec.runtime === 'oci' && process.getuid?.() !== 0)
          throw new OrcError('forbidden', 'the oci runtime needs a root agent')
      },
    })
    g.addUnit({
      name: 'pull-image',
      description: 'registry images resolved to a digest (once per spec revision) and fetched, from cluster members before the registry',
      requires: ['check-security'],
      wantedBy: ['storage'],
      timeoutMs: t.pullImageTimeoutMs,
      retry: t.pullImageRetry,
      run: async ({ signal, progress }) => {
        try {
          await this.pullImages(obj, gen, signal, progress)
          if (gen === this.gen) this.imageError = undefined
        } catch (err) {
          // Pending with the reason while it retries (and after, until the next run), as Kubernetes' ImagePullBackOff.
          if (gen === this.gen) {
            this.imageError = `pull-image: ${(err as Error).message}`
            this.writeStatus(this.imageError.slice(0, 300))
          }
          throw err
        }
      },
    })
    g.addUnit({
      name: 'resolve-image',
      description: 'container images found and unpacked',
      requires: ['check-security', 'pull-image'],
      wantedBy: ['storage'],
      timeoutMs: t.resolveImageTimeoutMs,
      retry: t.resolveImageRetry,
      run: async ({ signal }) => {
        const digests: string[] = []
        for (const cs of this.containers.values()) {
          const pin = this.imagePins.get(cs.spec.name)
          const img = await this.c.images.resolve(cs.spec.image, signal, { hostPath: this.hostPathGranted, ...(pin ? { digest: pin.digest } : {}) })
          if (gen !== this.gen) return
          cs.image = img
          if (img.digest) digests.push(img.digest)
          if (pin) digests.push(pin.digest)
        }
        if (this.uid && this.revision !== undefined) this.c.images.pin(this.uid, this.revision, digests)
      },
    })
    g.addUnit({
      name: 'resolve-data',
      description: "the Configs and Secrets the pod uses: its environment variables and its volumes' files (on a tmpfs)",
      requires: ['check-security'],
      wantedBy: ['storage'],
      timeoutMs: 5_000,
      run: async () => {
        this.waitingForData = false
        try {
          await this.resolveData()
        } catch (err) {
          if (gen === this.gen) this.waitingForData = true
          throw err
        }
      },
    })
    if (this.usesStorage())
      g.addUnit({
        name: 'mount-volumes',
        description: "the pod's emptyDir, hostPath and persistent Volumes attached and mounted on this node (docs/storage.md)",
        requires: ['check-security'],
        wantedBy: ['storage'],
        timeoutMs: t.mountVolumesTimeoutMs,
        retry: t.mountVolumesRetry,
        run: async () => {
          try {
            const dirs = await this.prepareStorage()
            if (gen === this.gen) [this.storageDirs, this.waitingForVolumes] = [dirs, false]
          } catch (err) {
            if (gen === this.gen) {
              this.waitingForVolumes = true
              this.writeStatus(`mount-volumes: ${(err as Error).message}`.slice(0, 300))
            }
            throw err
          }
        },
      })
    g.addUnit({
      name: 'sandbox-network',
      description: "the pod's network namespace, its IPv6 address in the node's /64 and routes (loopback only when the node has no pod network)",
      requires: ['check-security'],
      wantedBy: ['network'],
      timeoutMs: t.networkTimeoutMs,
      // Without the node network each container gets a fresh namespace holding only loopback.
      run: async () => {
        if (this.c.network === undefined || this.uid === undefined) return
        const prev = (obj.status as { network?: { ipv6?: unknown } } | undefined)?.network?.ipv6
        const hint = this.net?.mode === 'ipv6' ? this.net.ipv6 : typeof prev === 'string' ? prev : undefined
        const net = await this.c.network.attachPod(this.uid, hint)
        if (gen !== this.gen) return
        this.net = net
      },
    })
    g.addUnit({
      name: 'start-containers',
      description: 'containers started in their sandboxes',
      requires: ['storage', 'network'],
      wantedBy: ['running'],
      timeoutMs: t.startTimeoutMs,
      run: async () => {
        for (const cs of this.containers.values()) {
          if (gen !== this.gen) return
          await this.startContainer(cs)
        }
      },
    })
    if (spec.containers.some((c) => c.probes?.startupProbe !== undefined))
      g.addUnit({
        name: 'startup-probe',
        description: "each container's startup probe passed (readiness and liveness probes start after it)",
        requires: ['start-containers'],
        wantedBy: ['running'],
        // The probe's own thresholds bound it (failureThreshold × periodSeconds).
        timeoutMs: Number.POSITIVE_INFINITY,
        run: ({ signal }) => this.waitStarted(gen, signal),
      })
    return g
  }

  /**
   * The pull-image unit: each registry image's digest for this spec revision — the pin startRun
   * took from the status (another node ran it, or this one before a restart), else the registry's
   * answer now, recorded at once — then its blobs fetched (peers first). A reference with a digest
   * is never resolved.
   */
  private async pullImages(obj: Stored<Pod>, gen: number, signal: AbortSignal, progress: (text: string) => void): Promise<void> {
    const wanted = [...this.containers.values()].filter((cs) => isRegistryReference(cs.spec.image))
    if (wanted.length === 0) return
    const svc = this.c.images.registry
    if (svc === undefined) throw new OrcError('unavailable', 'this agent has no registry image service')
    const cur = this.c.store.get(this.ref) ?? obj
    const ns = this.ref.namespace
    const secrets = (cur.spec as { imagePullSecrets?: string[] } | undefined)?.imagePullSecrets ?? []
    if (secrets.length > 0) await this.c.loadKeyring?.()
    const lookup = this.c.dataLookup?.(ns)
    const revision = this.revision ?? cur.metadata.revision
    for (const cs of wanted) {
      const image = cs.spec.image
      const ref = parseReference(image)
      const access = registryAccessOf(ref.registry, ns, secrets, lookup)
      let pin = this.imagePins.get(cs.spec.name)
      if (pin === undefined || pin.image !== image || pin.revision !== revision) {
        const digest = ref.digest ?? (await svc.resolveDigest(image, access, signal))
        if (gen !== this.gen) return
        pin = { name: cs.spec.name, image, digest, revision }
        this.imagePins.set(cs.spec.name, pin)
        this.writeStatus(`image ${image} is ${digest}`)
      }
      let last = -Infinity
      await svc.pull(image, pin.digest, {
        access,
        namespace: ns,
        signal,
        onProgress: (v: PullView) => {
          const now = this.c.clock.now()
          if (now - last < 1_000 && v.phase !== 'done') return
          last = now
          progress(`${cs.spec.name}: ${formatPullProgress(v)}`)
        },
      })
      if (gen !== this.gen) return
    }
  }

  /**
   * Resolve the pod's Configs and Secrets and write its volumes (each run: the files are those of
   * now). `keepFiles`: an adopted pod's restart of one container keeps the files the others bind.
   */
  private async resolveData(keepFiles = false): Promise<void> {
    const obj = this.c.store.get(this.ref)
    if (!obj || this.c.dataLookup === undefined || this.uid === undefined) return
    if (dataRefsOf(obj.spec).some((r) => r.startsWith('secret/'))) await this.c.loadKeyring?.()
    const data = resolvePodData(obj.spec ?? {}, this.ref.namespace, this.c.dataLookup(this.ref.namespace))
    let dirs = new Map<string, string>()
    if (data.volumes.length > 0) {
      if (this.c.dataFiles === undefined) throw new OrcError('unavailable', 'this agent has no place for Config and Secret volumes')
      const spec = this.spec ?? podSpecOf(obj)
      const owner = this.c.runtime(spec.runtime).hostIdsOf({ ...(spec.unsafe.includes('root') ? { rootInside: true } : {}) })
      const kept = keepFiles
        ? this.c.dataFiles.existing(
            this.uid,
            data.volumes.map((v) => v.name),
          )
        : undefined
      dirs = kept ?? this.c.dataFiles.write(this.uid, data.volumes, owner)
    }
    this.data = data
    this.refRevisions = data.revisions
    this.volumeDirs = dirs
  }

  /** The pod has emptyDir, hostPath or Volume sources (the mount-volumes unit). */
  private usesStorage(): boolean {
    const obj = this.c.store.get(this.ref)
    return (obj?.spec?.volumes ?? []).some((v) => v.emptyDir !== undefined || v.hostPath !== undefined || v.volume !== undefined)
  }

  private async prepareStorage(): Promise<Map<string, string>> {
    const obj = this.c.store.get(this.ref)
    if (!obj || this.uid === undefined) return new Map()
    if (this.c.storage === undefined) throw new OrcError('unavailable', 'this agent has no volume service (emptyDir, hostPath and Volume sources)')
    const spec = this.spec ?? podSpecOf(obj)
    const owner = this.c.runtime(spec.runtime).hostIdsOf({ ...(spec.unsafe.includes('root') ? { rootInside: true } : {}) })
    const hostPath = this.hostPathGranted || (obj.spec?.volumes ?? []).every((v) => v.hostPath === undefined) || (await this.grantRefusal(obj)) === undefined
    return this.c.storage.prepare(obj, this.uid, owner, hostPath)
  }

  /** A container's bind mounts: its volumeMounts onto the volume directories of this run. */
  private mountsOf(name: string): ContainerMount[] {
    const obj = this.c.store.get(this.ref)
    const c = (obj?.spec?.containers ?? []).find((x) => x.name === name)
    const out: ContainerMount[] = []
    for (const m of c?.volumeMounts ?? []) {
      const data = this.volumeDirs.get(m.name)
      const storage = this.storageDirs?.get(m.name)
      const source = data ?? storage
      if (source === undefined) throw new OrcError('not_found', `container ${name}: volume ${m.name} has not been prepared`)
      if (data !== undefined) {
        out.push({ source, destination: m.mountPath, readOnly: true })
        continue
      }
      const owner = this.c.runtime(this.spec!.runtime).hostIdsOf({ ...(this.spec!.unsafe.includes('root') ? { rootInside: true } : {}) })
      out.push({ source: m.subPath !== undefined ? subPathOf(source, m.subPath, owner) : source, destination: m.mountPath, readOnly: m.readOnly === true })
    }
    return out
  }

  /**
   * /etc/resolv.conf and /etc/hosts bound read-only into a container, written afresh (the pod's
   * address may have changed). Left out, with a warning, where they cannot be: no tmpfs for the
   * files, or an image whose /etc or file there is a symlink (it may point out of the image).
   */
  private dnsMountsOf(cs: ContainerState): ContainerMount[] {
    if (this.c.dnsFiles === undefined || this.c.dataFiles === undefined || this.uid === undefined) return []
    const files = this.c.dnsFiles(this.ref.namespace, this.ref.name, this.net?.mode === 'ipv6' ? this.net.ipv6 : undefined)
    if (files === undefined) return []
    const rootfs = cs.image?.rootfs
    try {
      // The runtime makes the mount points too; a failure here leaves the pod with the image's files instead of failing it.
      if (rootfs !== undefined) for (const f of ['/etc/resolv.conf', '/etc/hosts']) ensureMountPoint(rootfs, f, true)
      const paths = this.c.dataFiles.writeDnsFiles(this.uid, files)
      return [
        { source: paths.resolvConf, destination: '/etc/resolv.conf', readOnly: true, file: true },
        { source: paths.hosts, destination: '/etc/hosts', readOnly: true, file: true },
      ]
    } catch (err) {
      this.log.warn({ ...this.fields(), err: String(err) }, 'the pod keeps its image resolv.conf and hosts')
      return []
    }
  }

  private async startRun(obj: Stored<Pod>, gen: number, why?: string): Promise<void> {
    // The digests pinned for this revision (by this node, or by the node that ran it before a
    // failover) stay in the status from the first write on: pull-image reuses them.
    const pins = new Map([...this.imagePins].filter(([, p]) => p.revision === this.revision))
    for (const p of recordedPins(obj.status, this.revision)) if (!pins.has(p.name)) pins.set(p.name, p)
    this.imagePins = pins
    const graph = this.buildGraph(obj, gen)
    const run = new WorkflowRun(graph, {
      clock: this.c.clock,
      id: `pod/${this.ref.name}@${this.revision}`,
      log: this.c.log,
    })
    this.run = run
    this.runState = 'running'
    this.runReason = undefined
    run.onChange(() => {
      if (gen !== this.gen) return
      this.snapshot = run.snapshot()
      this.writeStatus('lifecycle progress', { defer: true })
    })
    this.snapshot = run.snapshot()
    // The first start here of a pod whose status still describes another copy (the node it ran on
    // before an ha move or a re-pin, or this node's copy that an agent restart found gone) replaces
    // that status at once rather than after the progress window: until then `orc get pod` showed
    // the old copy's phase and address on this node, and its service names answered that address.
    const inherited = !this.startedHere && describesACopy(obj.status)
    this.startedHere = true
    this.writeStatus(why === undefined ? `start revision ${this.revision}` : `start revision ${this.revision}: ${why}`, { defer: !inherited })
    void run.reach('running').then((res) => this.enqueue(() => this.runFinished(gen, run, res)))
  }

  private async runFinished(gen: number, run: WorkflowRun, res: ReachResult): Promise<void> {
    if (gen !== this.gen) return
    this.snapshot = run.snapshot()
    if (res.reached) {
      this.runState = 'reached'
      this.runningRevision = this.revision
      this.runRetryMs = this.c.tunables.runRetryMs
      this.log.info({ ...this.fields(), runtime: this.spec?.runtime }, 'pod running')
      this.writeStatus(`running revision ${this.revision}`)
      return
    }
    this.runState = 'failed'
    this.runReason = res.reason
    this.log.warn({ ...this.fields(), reason: res.reason }, 'pod lifecycle failed')
    await this.stopContainers('lifecycle failed')
    for (const cs of this.containers.values()) {
      cs.stopping = false
      if (cs.state === 'running') cs.state = 'waiting'
    }
    if (gen !== this.gen) return
    this.writeStatus(`failed: ${res.reason ?? 'unknown'}`)
    if (this.spec?.restartPolicy === 'Never') return
    const delay = this.runRetryMs
    this.runRetryMs = Math.min(this.runRetryMs * 2, this.c.tunables.maxRunRetryMs)
    this.runRetryTimer = this.c.clock.setTimeout(() => {
      this.runRetryTimer = undefined
      void this.enqueue(async () => {
        if (gen !== this.gen) return
        const cur = this.c.store.get(this.ref)
        if (!cur || !assignedTo(cur, this.c.nodeName)) return
        this.gen++
        await this.startRun(cur, this.gen)
      })
    }, delay)
  }

  private clearRunRetry(): void {
    if (this.runRetryTimer !== undefined) this.c.clock.clearTimeout(this.runRetryTimer)
    this.runRetryTimer = undefined
  }

  // ---- containers ----

  private async startContainer(cs: ContainerState): Promise<void> {
    const spec = this.spec!
    const rt = this.c.runtime(spec.runtime)
    if (!cs.image) {
      // An adopted pod's restart: no check-security ran in this agent, so the grant is checked here.
      const cur = this.c.store.get(this.ref)
      const hostPath = this.hostPathGranted || (cur !== undefined && (await this.grantRefusal(cur)) === undefined)
      const pin = this.imagePins.get(cs.spec.name)
      cs.image = await this.c.images.resolve(cs.spec.image, new AbortController().signal, { hostPath, ...(pin ? { digest: pin.digest } : {}) })
    }
    // An adopted pod's restart: its Configs and Secrets are resolved (and its volumes written) now.
    if (this.data === undefined && this.c.dataLookup !== undefined) await this.resolveData(true)
    if (this.storageDirs === undefined && this.usesStorage()) this.storageDirs = await this.prepareStorage()
    const env = this.data?.env.get(cs.spec.name)
    const cmd = containerCommand(env === undefined ? cs.spec : { ...cs.spec, env }, cs.image)
    const mounts = [...this.mountsOf(cs.spec.name), ...this.dnsMountsOf(cs)]
    const old = rt.status(cs.id)
    if (old) {
      if (old.state === 'running') await rt.stop(cs.id, { graceMs: spec.graceMs })
      await rt.remove(cs.id)
    }
    const run: ContainerRunSpec = {
      id: cs.id,
      image: cs.image.rootfs,
      command: cmd.argv,
      env: cmd.env,
      logDir: this.logDirOf(this.uid!, cs.spec.name),
      revision: this.revision ?? 0,
      hostname: this.ref.name,
      ...(cmd.workingDir !== undefined ? { workingDir: cmd.workingDir } : {}),
      ...(mounts.length > 0 ? { mounts } : {}),
      ...(cs.spec.resources ? { resources: cs.spec.resources } : {}),
      defaultResources: podDefaultResourcesOf(this.c.store.list('Cluster')),
      ...(spec.unsafe.includes('root') ? { rootInside: true } : {}),
      ...(this.net?.mode === 'ipv6' ? { netnsPath: this.net.netnsPath } : {}),
      ...this.fenceOf(),
    }
    cs.stopping = false
    const h = await rt.start(run)
    cs.state = 'running'
    cs.reason = undefined
    cs.pid = h.pid
    cs.startedAt = h.startedAt
    cs.exitCode = undefined
    cs.signal = undefined
    cs.finishedAt = undefined
    this.log.info({ ...this.fields(), container: cs.spec.name, pid: h.pid, restarts: cs.restarts }, 'container started')
    this.startProbes(cs)
    // Inside a run this is progress (the run's own `running revision N` follows); a restart of a
    // container in a running pod is news of its own.
    this.writeStatus(`container ${cs.spec.name} started`, { defer: this.runState === 'running' })
  }

  // ---- probes ----

  /** Start the probes of a container that just started (or was adopted running). */
  private startProbes(cs: ContainerState): void {
    this.stopProbes(cs)
    cs.startupFailure = undefined
    if (cs.spec.probes === undefined) {
      cs.started = true
      cs.ready = true
      return
    }
    cs.started = false
    cs.ready = false
    const name = cs.spec.name
    const probes = new ContainerProbes(
      this.c.clock,
      cs.spec.probes,
      (p) => this.probeCheck(cs, p),
      {
        started: () =>
          void this.enqueue(() => {
            if (cs.probes !== probes) return
            cs.started = true
            this.notifyStartup()
            if (cs.spec.probes?.startupProbe !== undefined) this.writeStatus(`container ${name}: startup probe passed`)
          }),
        readiness: (ready, why) =>
          void this.enqueue(() => {
            if (cs.probes !== probes) return
            cs.ready = ready
            cs.readyWhy = why
            this.log.info({ ...this.fields(), container: name, ready, why }, 'container readiness')
            this.writeStatus(`container ${name}: ${why}`)
          }),
        startupFailed: (why) =>
          void this.enqueue(async () => {
            if (cs.probes !== probes) return
            this.log.warn({ ...this.fields(), container: name, why }, 'container startup probe failed')
            if (this.runState === 'running') {
              // The startup-probe unit fails with it: orc why names it; the run is retried.
              cs.startupFailure = why
              this.notifyStartup()
              return
            }
            await this.killForProbe(cs, why)
          }),
        livenessFailed: (why) =>
          void this.enqueue(async () => {
            if (cs.probes !== probes) return
            this.log.warn({ ...this.fields(), container: name, why }, 'container liveness probe failed: restarting it')
            await this.killForProbe(cs, why)
          }),
      },
      PROBE_START_ALLOWANCE_MS,
    )
    cs.probes = probes
    probes.start()
  }

  private stopProbes(cs: ContainerState): void {
    cs.probes?.stop()
    cs.probes = undefined
    cs.started = false
    cs.ready = false
  }

  /** A probe of this container: exec inside its sandbox, or TCP/HTTP from inside its network namespace. */
  private probeCheck(cs: ContainerState, p: Probe): ProbeCheck {
    return async (signal) => {
      const rt = this.c.runtime(this.spec?.runtime ?? 'sandbox')
      const st = rt.status(cs.id)
      if (st === undefined || st.state !== 'running') return { ok: false, output: 'the container is not running' }
      if (p.exec !== undefined) return this.execProbe(rt, cs, p.exec.command, probeTiming(p).timeoutMs, signal)
      const net = this.net
      const netns = net?.mode === 'ipv6' ? net.netnsPath : containerNetnsOf(st.pid)
      if (netns === undefined) return { ok: false, output: 'found no network namespace of the container' }
      const hosts = net?.mode === 'ipv6' ? [net.ipv6, '127.0.0.1', '::1'] : ['127.0.0.1', '::1']
      return probeInNetns(p, { netns, hosts, timeoutMs: probeTiming(p).timeoutMs, startAllowanceMs: PROBE_START_ALLOWANCE_MS, signal })
    }
  }

  /**
   * An exec probe: passes on exit 0. The command gets timeoutSeconds plus the time to enter the
   * sandbox (PROBE_START_ALLOWANCE_MS); its output (first 200 characters) is what the status shows.
   */
  private async execProbe(
    rt: Runtime,
    cs: ContainerState,
    command: string[],
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<{ ok: boolean; output: string }> {
    if (signal.aborted) return { ok: false, output: 'cancelled' }
    try {
      const r = await rt.exec(cs.id, { command, timeoutMs: timeoutMs + PROBE_START_ALLOWANCE_MS, maxOutputBytes: 4096 })
      const text = `${r.stdout.toString('utf8')} ${r.stderr.toString('utf8')}`.trim().replace(/\s+/g, ' ').slice(0, 200)
      if (r.timedOut) return { ok: false, output: `timed out after ${timeoutMs / 1000}s` }
      const how = r.code !== null ? `exit ${r.code}` : `signal ${r.signal ?? 'unknown'}`
      return { ok: r.code === 0, output: text === '' ? how : `${how}: ${text}` }
    } catch (err) {
      return { ok: false, output: `exec: ${(err as Error).message}` }
    }
  }

  /** A probe failed: stop the container; its exit goes through the restart policy with this reason. */
  private async killForProbe(cs: ContainerState, why: string): Promise<void> {
    if (cs.state !== 'running' || cs.stopping) return
    cs.probeKill = why
    this.stopProbes(cs)
    try {
      await this.c.runtime(this.spec?.runtime ?? 'sandbox').stop(cs.id, { graceMs: this.spec?.graceMs ?? 10_000 })
    } catch (err) {
      this.log.warn({ ...this.fields(), container: cs.spec.name, err: String(err) }, 'stop container after a failed probe')
    }
  }

  private notifyStartup(): void {
    for (const l of [...this.startupListeners]) l()
  }

  /** The startup-probe unit: every container started, or the first startup failure. */
  private waitStarted(gen: number, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        this.startupListeners.delete(check)
        signal.removeEventListener('abort', onAbort)
      }
      const onAbort = () => {
        done()
        reject(signal.reason)
      }
      const check = () => {
        if (gen !== this.gen) {
          done()
          return resolve()
        }
        const all = [...this.containers.values()]
        for (const c of all) {
          const why =
            c.startupFailure ??
            (c.state === 'exited' && c.timer === undefined ? `exited (${c.exitCode ?? c.signal ?? 'unknown'}) before its startup probe passed` : undefined)
          if (why !== undefined) {
            done()
            return reject(new OrcError('unavailable', `container ${c.spec.name}: ${why}`))
          }
        }
        if (all.every((c) => c.started)) {
          done()
          resolve()
        }
      }
      signal.addEventListener('abort', onAbort, { once: true })
      this.startupListeners.add(check)
      check()
    })
  }

  /** The watchdog of an ha pod's container (ContainerRunSpec.fence). */
  private fenceOf(): { fence?: ContainerFence } {
    const obj = this.c.store.get(this.ref)
    const ha = obj ? this.haOf(obj) : undefined
    return ha === undefined ? {} : { fence: this.c.fence!.containerFence(ha.haAfterMs, ha.graceMs) }
  }

  private async onExit(id: string, exit: ExitStatus, whileAway = false): Promise<void> {
    const cs = [...this.containers.values()].find((c) => c.id === id)
    if (!cs || cs.stopping || (cs.state !== 'running' && !whileAway)) return
    const killedFor = cs.probeKill
    cs.probeKill = undefined
    this.stopProbes(cs)
    cs.lastTermination = {
      reason: killedFor ?? (exit.code !== null ? `exit ${exit.code}` : exit.signal ? `signal ${exit.signal}` : 'ended'),
      at: iso(exit.finishedAt)!,
      ...(exit.code !== null ? { exitCode: exit.code } : {}),
      ...(exit.signal ? { signal: exit.signal } : {}),
    }
    cs.state = 'exited'
    cs.exitCode = exit.code
    cs.signal = exit.signal
    cs.finishedAt = exit.finishedAt
    cs.pid = undefined
    const policy = this.spec?.restartPolicy ?? 'Always'
    const failed = exit.code !== 0
    this.log.info({ ...this.fields(), container: cs.spec.name, code: exit.code, signal: exit.signal, whileAway }, 'container exited')
    if (policy === 'Always' || (policy === 'OnFailure' && failed)) {
      const t = this.c.tunables
      if (cs.startedAt !== undefined && exit.finishedAt - cs.startedAt >= t.restartBackoffResetMs) cs.backoffMs = t.restartBackoffMs
      const delay = cs.backoffMs
      cs.backoffMs = Math.min(cs.backoffMs * 2, t.maxRestartBackoffMs)
      cs.state = 'waiting'
      cs.reason = `restarting in ${Math.round(delay / 100) / 10}s (${killedFor ?? `back-off after exit ${exit.code ?? exit.signal ?? 'unknown'}`})`
      const gen = this.gen
      cs.timer = this.c.clock.setTimeout(() => {
        cs.timer = undefined
        void this.enqueue(() => this.restartContainer(gen, cs))
      }, delay)
    }
    this.notifyStartup()
    this.writeStatus(killedFor !== undefined ? `container ${cs.spec.name} stopped: ${killedFor}` : `container ${cs.spec.name} exited`)
  }

  private async restartContainer(gen: number, cs: ContainerState): Promise<void> {
    if (gen !== this.gen || cs.stopping || cs.state !== 'waiting') return
    const obj = this.c.store.get(this.ref)
    if (!obj || !assignedTo(obj, this.c.nodeName)) return
    cs.restarts++
    try {
      await this.startContainer(cs)
    } catch (err) {
      this.log.warn({ ...this.fields(), container: cs.spec.name, err: String(err) }, 'restart container')
      await this.onExit(cs.id, { code: null, signal: null, finishedAt: this.c.clock.now() }, true)
      cs.reason = `restart failed: ${(err as Error).message}`
      this.writeStatus(`container ${cs.spec.name} restart failed`)
    }
  }

  // ---- status ----

  phase(): PodPhase {
    if (this.stopping) return 'Stopping'
    if (this.fenced !== undefined) return 'Fenced'
    if (this.runState === 'none') return 'Pending'
    if (this.runState === 'running') return this.imageError !== undefined || this.waitingForVolumes ? 'Pending' : 'Starting'
    // Refused by the two-party rule, or waiting for a Config or Secret: it never started.
    if (this.runState === 'failed')
      return this.refusedByPolicy || this.waitingForData || this.waitingForVolumes || this.imageError !== undefined ? 'Pending' : 'Failed'
    const cs = [...this.containers.values()]
    if (cs.length > 0 && cs.every((c) => c.state === 'exited')) return cs.every((c) => c.exitCode === 0) ? 'Succeeded' : 'Failed'
    return 'Running'
  }

  /** The pod's Ready condition now: Running, every container running, started and ready. */
  private readyCondition(phase: PodPhase): PodCondition {
    const all = [...this.containers.values()]
    const names = (l: ContainerState[]) => l.map((c) => c.spec.name).join(', ')
    let status: 'True' | 'False' = 'False'
    let reason: string
    let message: string | undefined
    const notRunning = all.filter((c) => c.state !== 'running')
    const notStarted = all.filter((c) => c.state === 'running' && c.started !== true)
    const notReady = all.filter((c) => c.state === 'running' && c.started === true && c.ready !== true)
    if (phase !== 'Running') {
      reason = 'PodNotRunning'
      message = `phase ${phase}`
    } else if (notRunning.length > 0) {
      reason = 'ContainersNotRunning'
      message = `container ${names(notRunning)} not running`
    } else if (notStarted.length > 0) {
      reason = 'StartupProbePending'
      message = `container ${names(notStarted)}: startup probe has not passed yet`
    } else if (notReady.length > 0) {
      reason = 'ReadinessProbeFailed'
      message = notReady.map((c) => `container ${c.spec.name}: ${c.readyWhy ?? 'readiness probe has not passed yet'}`).join('; ')
    } else {
      status = 'True'
      reason = 'ContainersReady'
    }
    const prev = this.readyCond
    const lastTransitionTime = prev !== undefined && prev.status === status ? prev.lastTransitionTime : iso(this.c.clock.now())!
    this.readyCond = { type: 'Ready', status, reason, ...(message !== undefined ? { message } : {}), lastTransitionTime }
    return this.readyCond
  }

  private writeStatus(reason: string, opts: { defer?: boolean } = {}): void {
    const phase = this.phase()
    const status: Record<string, unknown> = {
      phase,
      reason: this.fenced ?? (this.runState === 'failed' ? this.runReason : this.runState === 'running' ? this.imageError : undefined),
      runningRevision: this.runningRevision,
      targetRevision: this.revision,
      specHash: this.hash,
      containers: [...this.containers.values()].map((c) => {
        const o: Record<string, unknown> = { name: c.spec.name, state: c.state, restarts: c.restarts }
        if (c.pid !== undefined && c.state === 'running') o.pid = c.pid
        if (c.exitCode !== undefined) o.exitCode = c.exitCode
        if (c.signal) o.signal = c.signal
        if (c.startedAt !== undefined) o.startedAt = iso(c.startedAt)
        if (c.finishedAt !== undefined && c.state !== 'running') o.finishedAt = iso(c.finishedAt)
        if (c.reason !== undefined && c.state === 'waiting') o.reason = c.reason
        o.ready = c.state === 'running' && c.started === true && c.ready === true
        if (c.lastTermination !== undefined) o.lastTermination = c.lastTermination
        return o
      }),
      conditions: [this.readyCondition(phase)],
      workflow: this.snapshot,
      network: this.net === undefined ? undefined : this.net.mode === 'ipv6' ? { ipv6: this.net.ipv6 } : { loopbackOnly: true, reason: this.net.reason },
      configRefs: this.refRevisions === undefined || Object.keys(this.refRevisions).length === 0 ? undefined : this.refRevisions,
      images: this.imagePins.size === 0 ? undefined : [...this.imagePins.values()],
    }
    this.writer.set(status, `${reason} (phase ${phase})`, opts)
  }
}

const DIGEST = /^sha256:[a-f0-9]{64}$/

/** Whether a pod's stored status describes a copy that ran (a phase past Pending, or an address). */
export function describesACopy(status: unknown): boolean {
  const st = (status ?? {}) as { phase?: unknown; network?: unknown }
  return (typeof st.phase === 'string' && st.phase !== 'Pending') || (st.network !== undefined && st.network !== null)
}

/** The image pins a status records for spec revision `revision` (written by any node: checked here). */
export function recordedPins(status: unknown, revision: number | undefined): PodImagePin[] {
  const list = (status as { images?: unknown } | undefined)?.images
  if (!Array.isArray(list) || revision === undefined) return []
  return list.filter(
    (p): p is PodImagePin =>
      typeof p === 'object' &&
      p !== null &&
      typeof p.name === 'string' &&
      typeof p.image === 'string' &&
      typeof p.digest === 'string' &&
      DIGEST.test(p.digest) &&
      p.revision === revision,
  )
}

/**
 * The host directory of a mount's `subPath` inside volume directory `root`, made (owned by the pod)
 * when missing. Every component is checked after the real path is taken: a symlink the pod left
 * in the volume cannot lead the bind outside it. (A pod swapping a directory for a symlink between
 * this check and the bind is a window this does not close: docs/storage.md.)
 */
export function subPathOf(root: string, subPath: string, owner: { uid: number; gid: number }): string {
  if (subPath.startsWith('/') || subPath.split('/').some((x) => x === '' || x === '.' || x === '..'))
    throw new OrcError('invalid', `subPath ${subPath}: a relative path with no empty, . or .. component`)
  const realRoot = realpathSync(root)
  let cur = realRoot
  for (const part of subPath.split('/')) {
    const next = join(cur, part)
    if (!existsSync(next)) {
      mkdirSync(next, { mode: 0o770 })
      if (process.getuid?.() === 0) chownSync(next, owner.uid, owner.gid)
    }
    const real = realpathSync(next)
    if (real !== realRoot && !real.startsWith(`${realRoot}/`)) throw new OrcError('forbidden', `subPath ${subPath} leaves its volume (through a symlink)`)
    if (!statSync(real).isDirectory()) throw new OrcError('invalid', `subPath ${subPath} is not a directory in the volume`)
    cur = real
  }
  return cur
}
