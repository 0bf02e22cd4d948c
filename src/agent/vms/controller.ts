/**
 * controller:vm — runs the VirtualMachines pinned (`spec.node`) or bound (`status.node`, by the
 * scheduler: docs/runtimes.md, "Placement and failover") to this node: each revision of a
 * VM's spec is one lifecycle run (src/workflow) with the pod targets and these units:
 *
 *   resolve-kernel → storage;  prepare-disks (with spec.disks or spec.cloudInit) → storage;
 *   sandbox-network → create-tap → network;
 *   start-qemu (requires storage, network) → running;  wait-console-marker (with spec.readyMarker) → running
 *
 * The run's snapshot goes into `status.workflow`, so `orc why vm/NAME` explains it on any node as
 * for pods. A changed spec stops the guest (ACPI power-down over QMP, SIGKILL after the grace) and
 * boots the new one; `runStrategy: Halted` stops it; a guest that powers off by itself boots again
 * (runStrategy Always) after a back-off. Guests outlive an agent restart: the next agent re-adopts
 * them (QemuRuntime.recover) and keeps their network namespace.
 */
import { existsSync, readdirSync, readFileSync, realpathSync, rmSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import type { Logger } from 'pino'
import { type Clock, type CommandRunner, sleep, type TimerHandle } from '../../effects/index.ts'
import {
  type ObjectRef,
  OrcError,
  type VirtualMachine,
  type VirtualMachinePhase,
  type VirtualMachineSpec,
  VM_DEFAULT_GRACE_SECONDS,
  vmMemoryBytes,
  vmNodeOf,
} from '../../model/index.ts'
import { EGRESS_IPV4_GATEWAY } from '../../net/index.ts'
import {
  type CgroupUsage,
  type ContainerFence,
  logFilePath,
  type QemuRuntime,
  readFileFrom,
  type VmAccel,
  type VmCgroup,
  type VmDrive,
} from '../../runtime/index.ts'
import { admitVms, canonicalJson, type FenceDecision, type VmClaim } from '../../sched/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { addPodTargets, type ReachResult, WorkflowGraph, WorkflowRun, type WorkflowSnapshot } from '../../workflow/index.ts'
import type { PodAttachment, PodNetworkHooks } from '../network/index.ts'
import { StatusWriter } from '../pods/status.ts'
import { nodeAllocation } from '../sched/index.ts'
import { consoleSocketPath } from './console.ts'
import { prepareVmDisks, type VmDiskStatus, type VmVolumeHooks } from './disks.ts'
import { ensureVmTap, guestMac, VM_TAP } from './tap.ts'

export const VM_CONTROLLER = 'controller:vm'
/** The guest's default gateway: the node side of every pod's veth (PODNET_DEFAULTS.hostLinkLocal). */
const GUEST_GATEWAY = 'fe80::1'
/** The node side of every pod's egress IPv4 link (src/net/addressing.ts). */
const GUEST_GATEWAY4 = EGRESS_IPV4_GATEWAY

export interface VmTunables {
  /** How long start-qemu waits for qemu's QMP socket (qemu up, guest starting). */
  startTimeoutMs: number
  /** How long wait-console-marker waits for spec.readyMarker on the console (TCG boots are slow). */
  markerTimeoutMs: number
  /** Back-off before a guest that powered off (or a failed run) is booted again; doubles to maxRestartMs. */
  restartMs: number
  maxRestartMs: number
  /** Progress writes wait this long for a settling write (as pods: progressWriteMs). */
  progressWriteMs: number
}

export const VM_TUNABLES: VmTunables = { startTimeoutMs: 30_000, markerTimeoutMs: 600_000, restartMs: 5_000, maxRestartMs: 300_000, progressWriteMs: 1_000 }

export interface VmControllerComponents {
  store: ObjectStore
  nodeName: string
  clock: Clock
  log: Logger
  runtime: QemuRuntime
  /** The node's pod network (a netns and an IPv6 address per VM); absent: VMs get no NIC. */
  network?: PodNetworkHooks
  /** ip/nsenter for the tap device. */
  run: CommandRunner
  /** `<data-dir>/vms/<uid>`: console logs. */
  vmDir(uid: string): string
  /** The node's image stores (`<data-dir>/images`, ORC_IMAGE_STORES): where kernels and initrds are found by name. */
  imageStores: readonly string[]
  /** The node's Volumes as VM disks (absent: a `volume` disk fails prepare-disks). */
  volumes?: VmVolumeHooks
  /** One value of a Secret of a namespace, opened with the node's keyring (cloud-init's SSH keys). */
  secretValue?(namespace: string, name: string, key: string): Buffer
  tunables?: Partial<VmTunables>
  /**
   * Self-fencing of unpinned `ha` VMs, as of `ha` pods (the pods' Fence, src/agent/pods/fence.ts):
   * whether one may run here now, and its qemu's watchdog. Absent: no fencing (unit tests).
   */
  fence?: {
    decide(haAfterMs: number, graceMs: number, starting?: boolean): FenceDecision
    containerFence(haAfterMs: number, graceMs: number): ContainerFence
    /**
     * Whether this agent has caught up with its cluster since it started: until then it writes no
     * VM status (its replica may say a VM is still its own after it moved away), as for pods.
     */
    caughtUp(): boolean
  }
  /** The cluster's haAfterSeconds (Cluster.spec.scheduling; default 30): an `ha` VM's default. */
  haAfterSeconds?: () => number
}

/** An unpinned `ha` VM is fenced (pinned ones never move, so nobody else may start them). */
function fencedVm(spec: VirtualMachineSpec | undefined): boolean {
  return spec !== undefined && spec.policy === 'ha' && (spec.node === undefined || spec.node === '')
}

type Ref = ObjectRef<'VirtualMachine'>

/**
 * A boot file (kernel or initrd) as a host path: by name in an image store, or a path under /boot or
 * a store. Under /boot only a file every user of the node may read: qemu opens it as root before it
 * drops to `nobody`, and the guest would hand its bytes to whoever may create VMs (a 0600
 * System.map, a grub.cfg with a password hash).
 */
export function resolveBootFile(f: { image?: string; path?: string }, stores: readonly string[], what: string, bootDir = '/boot'): string {
  const allowed = [bootDir, ...stores]
  let p: string | undefined
  if (f.image !== undefined) {
    p = stores.map((s) => join(s, f.image!)).find((c) => existsSync(c))
    if (p === undefined) throw new OrcError('not_found', `${what} image ${f.image} is not in the node's image stores (${stores.join(', ')})`)
  } else if (f.path !== undefined) p = f.path
  else throw new OrcError('invalid', `${what}: give image or path`)
  let real: string
  try {
    real = realpathSync(p)
  } catch {
    throw new OrcError('not_found', `${what} ${p} does not exist on this node`)
  }
  const under = (a: string) => {
    try {
      return real.startsWith(`${realpathSync(a)}/`)
    } catch {
      return false
    }
  }
  if (!allowed.some(under))
    throw new OrcError('forbidden', `${what} ${p} is outside ${bootDir} and the node's image stores (${stores.join(', ')}): the guest would read it`)
  const st = statSync(real)
  if (!st.isFile()) throw new OrcError('invalid', `${what} ${p} is not a file`)
  if (!stores.some(under) && (st.mode & 0o004) === 0)
    throw new OrcError('forbidden', `${what} ${p} is not readable by every user of this node (mode ${(st.mode & 0o777).toString(8)}): the guest would read it`)
  return real
}

/**
 * A check of whether `marker` has appeared in a growing log file that reads only what was appended
 * since the last check (with an overlap for a marker split between two reads): a booting guest's
 * console was read whole four times a second. A file that shrank was rotated (copy-and-truncate):
 * the rest of the copy (`file.1`) is read from where the last check stopped, then the file anew.
 */
export function markerScanner(file: string, marker: string): () => boolean {
  const needle = Buffer.from(marker)
  let offset = 0
  let carry = Buffer.alloc(0)
  const readFrom = (path: string, from: number): Buffer | undefined => {
    const r = readFileFrom(path, from)
    return r === undefined || r.size < from ? undefined : r.bytes
  }
  const scan = (chunk: Buffer): boolean => {
    const text = Buffer.concat([carry, chunk])
    if (text.includes(needle)) return true
    carry = text.subarray(Math.max(0, text.length - (needle.length - 1)))
    return false
  }
  return () => {
    let chunk = readFrom(file, offset)
    if (chunk === undefined) {
      // Rotated (or not there yet): finish the copy, then start the live file over.
      const rest = readFrom(`${file}.1`, offset)
      if (rest !== undefined && scan(rest)) return true
      offset = 0
      carry = Buffer.alloc(0)
      chunk = readFrom(file, 0)
      if (chunk === undefined) return false
    }
    offset += chunk.length
    return scan(chunk)
  }
}

/**
 * The kernel command line orc boots with: the user's, the serial console, and the guest's pod
 * addresses — its IPv6 (gateway the node's link-local) and its node-local egress IPv4 (gateway
 * 10.88.0.1, masqueraded by the node as a pod's is).
 */
export function guestCmdline(spec: Pick<VirtualMachineSpec, 'kernel'>, net: { ipv6: string; ipv4?: string } | undefined): string {
  const parts = [spec.kernel?.cmdline ?? '']
  if (!/(^|\s)console=/.test(parts[0]!)) parts.push('console=ttyS0')
  if (net !== undefined) parts.push(`orc.ipv6=${net.ipv6}`, `orc.gateway=${GUEST_GATEWAY}`)
  if (net?.ipv4 !== undefined) parts.push(`orc.ipv4=${net.ipv4}`, `orc.gateway4=${GUEST_GATEWAY4}`)
  return parts.filter((x) => x !== '').join(' ')
}

/** The directories under `root` (`<data-dir>/vms`) of VM uids not in `uids`. */
export function staleVmDirs(root: string, uids: ReadonlySet<string>): string[] {
  let names: string[]
  try {
    names = readdirSync(root)
  } catch {
    return []
  }
  return names.filter((n) => !uids.has(n)).map((n) => join(root, n))
}

/** Identity of what a guest boots (everything but runStrategy, which only says whether). */
export function vmSpecHash(spec: VirtualMachineSpec): string {
  const { runStrategy: _r, ...rest } = spec
  // canonicalJson sorts keys at every depth (a top-level key list as JSON.stringify's replacer
  // dropped every nested field: a new kernel or initrd hashed the same and never rebooted the guest).
  return canonicalJson(rest)
}

class VmWorker {
  private chain: Promise<void> = Promise.resolve()
  private gen = 0
  private uid: string | undefined
  private hash: string | undefined
  private revision: number | undefined
  private runningRevision: number | undefined
  private run: WorkflowRun | undefined
  private snapshot: WorkflowSnapshot | undefined
  private phase: VirtualMachinePhase = 'Pending'
  private reason: string | undefined
  private net: PodAttachment | undefined
  private kernel: string | undefined
  private initrd: string | undefined
  /** The drives prepare-disks made for this run, and what status.disks says of them. */
  private drives: VmDrive[] | undefined
  private disks: VmDiskStatus[] | undefined
  private accel: { accel: VmAccel; reason: string } | undefined
  private pid: number | undefined
  /** qemu's cgroup and limits, as the runtime made them. */
  private cgroup: VmCgroup | undefined
  private startedAt: number | undefined
  private restarts = 0
  private lastStop: { at: string; how: string; detail?: string } | undefined
  private retryTimer: TimerHandle | undefined
  private retryMs: number
  /** Set while this worker stops the guest itself: its exit is not a power-off to restart from. */
  private stopping = false
  /** The guest does not fit on the node now: the controller reconciles again when pods or VMs change. */
  waitingForRoom = false
  /** prepare-disks found a Volume held by another (a pod): Pending, tried again when a Volume changes. */
  private waitingForVolume = false
  private readonly writer: StatusWriter<'VirtualMachine'>
  done = false

  constructor(
    private readonly c: VmControllerComponents,
    private readonly t: VmTunables,
    readonly ref: Ref,
    /** Why the guest may not start now (the node's room, VmController.refusal), or undefined. */
    private readonly refusal: (ref: Ref) => string | undefined,
  ) {
    this.retryMs = t.restartMs
    const mine = (o: VirtualMachine) => vmNodeOf(o) === c.nodeName && (c.fence?.caughtUp() ?? true)
    this.writer = new StatusWriter<'VirtualMachine'>(c.store, ref, c.clock, c.log, mine, t.progressWriteMs, VM_CONTROLLER)
  }

  /** The guest holds its share of the node: it runs, or is booting or stopping. */
  holdsRoom(): boolean {
    return this.phase === 'Starting' || this.phase === 'Running' || this.phase === 'Stopping'
  }

  /**
   * Whether the guest fits beside the node's pods and other VMs now. If not: Pending with the reason
   * in status (written once per reason), and the worker waits for the controller to call again.
   */
  private hasRoom(): boolean {
    const why = this.refusal(this.ref)
    this.waitingForRoom = why !== undefined
    if (why === undefined) return true
    this.phase = 'Pending'
    if (this.reason !== why) {
      this.reason = why
      this.c.log.info({ ...this.fields(), reason: why }, 'vm waits for room on its node')
      this.writeStatus(`waiting for room: ${why}`)
    }
    return false
  }

  private fields(): Record<string, unknown> {
    return { kind: 'VirtualMachine', ns: this.ref.namespace, name: this.ref.name, rev: this.revision }
  }

  enqueue(fn: () => Promise<void> | void): Promise<void> {
    const next = this.chain.then(fn).catch((err) => this.c.log.error({ ...this.fields(), err }, 'vm worker step failed'))
    this.chain = next
    return next
  }

  reconcile(): Promise<void> {
    return this.enqueue(() => this.reconcileNow())
  }

  /** A guest of a previous agent is still running: take it over if it runs what the spec says. */
  adopt(pid: number, startedAt: number, accel: VmAccel, cgroup: VmCgroup | undefined): Promise<void> {
    return this.enqueue(async () => {
      const obj = this.c.store.get(this.ref)
      const st = obj?.status
      if (obj === undefined || obj.spec === undefined || vmNodeOf(obj) !== this.c.nodeName || st?.specHash !== vmSpecHash(obj.spec)) return
      this.uid = obj.metadata.uid
      this.hash = st.specHash as string
      this.revision = this.runningRevision = typeof st.runningRevision === 'number' ? st.runningRevision : obj.metadata.revision
      this.pid = pid
      this.cgroup = cgroup
      this.startedAt = startedAt
      this.accel = { accel, reason: typeof st.accelReason === 'string' ? st.accelReason : '' }
      this.restarts = typeof st.restarts === 'number' ? st.restarts : 0
      this.snapshot = st.workflow as WorkflowSnapshot | undefined
      if (Array.isArray(st.disks)) this.disks = st.disks as VmDiskStatus[]
      this.phase = 'Running'
      if (this.c.network !== undefined && obj.spec.network !== 'none' && this.uid !== undefined)
        this.net = await this.c.network.attachPod(this.uid, typeof st.ipv6 === 'string' ? st.ipv6 : undefined)
      this.c.log.info({ ...this.fields(), pid }, 'vm re-adopted')
      this.writeStatus('re-adopted after an agent restart')
    })
  }

  private status(): Record<string, unknown> {
    const a = this.accel
    const up = this.holdsRoom()
    const cg = up ? this.cgroup : undefined
    // status.node is the binding (controller:scheduler), not this controller's.
    return {
      phase: this.phase,
      accel: a?.accel,
      accelReason: a?.reason,
      pid: up ? this.pid : undefined,
      limits:
        cg === undefined
          ? undefined
          : { ...cg.limits, cgroup: cg.dirs, enforced: cg.enforced, ...(cg.unenforced !== undefined ? { unenforced: cg.unenforced } : {}) },
      ipv6: this.net?.mode === 'ipv6' ? this.net.ipv6 : undefined,
      network: this.net?.mode === 'loopback' ? `none: ${this.net.reason}` : undefined,
      disks: this.disks,
      runningRevision: this.runningRevision,
      targetRevision: this.revision,
      specHash: this.hash,
      reason: this.reason,
      restarts: this.restarts,
      startedAt: this.startedAt === undefined ? undefined : new Date(this.startedAt).toISOString(),
      lastStop: this.lastStop,
      workflow: this.snapshot,
    }
  }

  private writeStatus(reason: string, defer = false): void {
    this.writer.set(this.status(), reason, { defer })
  }

  private async reconcileNow(): Promise<void> {
    if (this.done) return
    const obj = this.c.store.get(this.ref)
    const node = vmNodeOf(obj)
    if (obj?.spec === undefined || node !== this.c.nodeName || (this.uid !== undefined && obj.metadata.uid !== this.uid)) {
      await this.teardown(obj === undefined ? 'deleted' : node === undefined ? 'unbound from this node' : `now bound to node ${node}`)
      // A new object of the same name (deleted and applied again) starts afresh.
      if (obj?.spec !== undefined && node === this.c.nodeName) return this.reconcileNow()
      this.done = true
      return
    }
    const spec = obj.spec
    this.uid = obj.metadata.uid
    const hash = vmSpecHash(spec)
    if (spec.runStrategy === 'Halted') {
      if (this.phase !== 'Stopped' || this.hash !== hash) {
        this.gen++
        await this.stopGuest('runStrategy Halted')
        // A halted VM's Volumes are free for pods (it attaches them again when it runs).
        await this.releaseVolumes()
        this.clearRetry()
        this.hash = hash
        this.phase = 'Stopped'
        this.waitingForRoom = false
        this.runningRevision = undefined
        this.reason = 'runStrategy is Halted'
        this.writeStatus('halted')
      }
      return
    }
    // Unchanged: running, starting, or waiting out the back-off before booting again (a status write
    // of ours lands here too, and must not cut the back-off short).
    const idle = this.phase === 'Stopped' || this.phase === 'Pending' || this.phase === 'Fenced'
    if (this.hash === hash && (this.retryTimer !== undefined || !idle)) return
    // Pending with a hash: waiting for room (Fenced: for a quorum), nothing runs.
    const why = this.hash === undefined || idle ? undefined : 'spec changed'
    if (why !== undefined) {
      this.gen++
      await this.stopGuest(why)
    }
    this.clearRetry()
    // A new spec starts counting afresh; the same one (it waited for room) keeps its count.
    if (this.hash !== hash) {
      this.restarts = 0
      this.retryMs = this.t.restartMs
    }
    this.hash = hash
    if (!this.hasRoom() || !this.mayStart(spec)) return
    await this.startRun(obj, why)
  }

  /** The fence's window for this VM: its haAfter and stop grace (ms). */
  private fenceTimes(spec: VirtualMachineSpec): { haAfterMs: number; graceMs: number } {
    const haAfter = spec.haAfterSeconds ?? this.c.haAfterSeconds?.() ?? 30
    return { haAfterMs: haAfter * 1000, graceMs: (spec.terminationGracePeriodSeconds ?? VM_DEFAULT_GRACE_SECONDS) * 1000 }
  }

  /**
   * An unpinned `ha` VM starts only where the fence allows (this node hears a quorum, and has for a
   * while: FENCE_SETTLE_MS). Else Fenced with the reason; the controller's fence tick tries again.
   */
  private mayStart(spec: VirtualMachineSpec): boolean {
    this.waitingForQuorum = false
    if (!fencedVm(spec) || this.c.fence === undefined) return true
    const { haAfterMs, graceMs } = this.fenceTimes(spec)
    const d = this.c.fence.decide(haAfterMs, graceMs, true)
    if (d.run) return true
    this.waitingForQuorum = true
    this.phase = 'Fenced'
    if (this.reason !== d.reason) {
      this.reason = d.reason
      this.c.log.warn({ ...this.fields(), reason: d.reason }, 'vm not started: fenced')
      this.writeStatus(d.reason)
    }
    return false
  }

  /** Waiting for this node to hear a quorum before it boots an `ha` VM (mayStart). */
  waitingForQuorum = false

  /**
   * The fence tick (once a second): an `ha` VM's guest stops once this node has not heard a quorum
   * for its fence window (ACPI power-down at the fence's SIGTERM time, killed at its end), as an
   * `ha` pod's containers do; a fenced one starts again once the quorum is heard (mayStart).
   */
  fenceTick(): Promise<void> | undefined {
    if (this.done || this.c.fence === undefined) return undefined
    // A status held back until this agent caught up with its cluster is written now (if still ours).
    this.writer.reassert(true)
    if (this.waitingForQuorum) return this.reconcile()
    if (!this.holdsRoom()) return undefined
    const spec = this.c.store.get(this.ref)?.spec
    if (!fencedVm(spec)) return undefined
    const { haAfterMs, graceMs } = this.fenceTimes(spec!)
    const d = this.c.fence.decide(haAfterMs, graceMs, false)
    if (d.run) return undefined
    return this.enqueue(async () => {
      if (!this.holdsRoom()) return
      const f = this.c.fence!.containerFence(haAfterMs, graceMs)
      this.gen++
      this.clearRetry()
      await this.stopGuest(d.reason, Math.max(0, (f.killAfterSeconds - f.termAfterSeconds) * 1000))
      this.phase = 'Fenced'
      this.runningRevision = undefined
      this.reason = d.reason
      this.waitingForQuorum = true
      this.c.log.warn({ ...this.fields(), reason: d.reason }, 'vm fenced')
      this.writeStatus(`fenced: ${d.reason}`)
    })
  }

  private clearRetry(): void {
    if (this.retryTimer !== undefined) this.c.clock.clearTimeout(this.retryTimer)
    this.retryTimer = undefined
  }

  private async startRun(obj: Stored<VirtualMachine>, why?: string): Promise<void> {
    const gen = ++this.gen
    this.revision = obj.metadata.revision
    this.phase = 'Starting'
    this.waitingForVolume = false
    this.reason = undefined
    const run = new WorkflowRun(this.buildGraph(obj.spec!, gen), { clock: this.c.clock, id: `vm/${this.ref.name}@${this.revision}`, log: this.c.log })
    this.run = run
    run.onChange(() => {
      if (gen !== this.gen) return
      this.snapshot = run.snapshot()
      this.writeStatus('lifecycle progress', true)
    })
    this.snapshot = run.snapshot()
    this.writeStatus(`start revision ${this.revision}${why ? `: ${why}` : ''}`, true)
    void run.reach('running').then((res) => this.enqueue(() => this.runFinished(gen, run, res)))
  }

  private async runFinished(gen: number, run: WorkflowRun, res: ReachResult): Promise<void> {
    if (gen !== this.gen) return
    this.snapshot = run.snapshot()
    if (res.reached) {
      this.phase = 'Running'
      this.runningRevision = this.revision
      this.retryMs = this.t.restartMs
      this.c.log.info({ ...this.fields(), accel: this.accel?.accel, pid: this.pid }, 'vm running')
      this.writeStatus(`running revision ${this.revision}`)
      return
    }
    this.c.log.warn({ ...this.fields(), reason: res.reason }, 'vm lifecycle failed')
    await this.stopGuest('lifecycle failed', 0)
    if (gen !== this.gen) return
    this.phase = this.waitingForVolume ? 'Pending' : 'Failed'
    this.reason = res.reason
    this.writeStatus(`failed: ${res.reason ?? 'unknown'}`)
    this.scheduleRestart(gen)
  }

  private scheduleRestart(gen: number): void {
    const delay = this.retryMs
    this.retryMs = Math.min(this.retryMs * 2, this.t.maxRestartMs)
    this.clearRetry()
    this.retryTimer = this.c.clock.setTimeout(() => {
      this.retryTimer = undefined
      void this.enqueue(() => this.bootAgain(gen))
    }, delay)
  }

  private async bootAgain(gen: number): Promise<void> {
    const cur = this.c.store.get(this.ref)
    if (gen !== this.gen || cur?.spec === undefined || vmNodeOf(cur) !== this.c.nodeName || cur.spec.runStrategy === 'Halted') return
    if (!this.hasRoom() || !this.mayStart(cur.spec)) return
    this.restarts++
    await this.startRun(cur, 'boot again')
  }

  /** A Volume changed: a guest waiting for one (held by a pod) tries again now rather than after its back-off. */
  volumeChanged(): void {
    if (!this.waitingForVolume || this.retryTimer === undefined) return
    this.clearRetry()
    const gen = this.gen
    void this.enqueue(() => this.bootAgain(gen))
  }

  /** qemu ended on its own (the guest powered off, crashed, or qemu failed). */
  exited(pid: number, exit: { code: number | null; signal: string | null }): void {
    void this.enqueue(() => {
      // Stopped by this worker (pid cleared), or an older guest: not a power-off to boot again from.
      if (this.stopping || this.done || this.pid !== pid) return
      const gen = this.gen
      const detail = exit.signal ? `qemu killed by ${exit.signal}` : `qemu exited with status ${exit.code}`
      this.lastStop = { at: new Date(this.c.clock.now()).toISOString(), how: 'exited', detail: `${detail} (the guest powered off or qemu failed)` }
      this.pid = undefined
      if (this.phase === 'Starting') return // the running unit fails with the console's last lines
      this.phase = 'Stopped'
      this.runningRevision = undefined
      this.reason = `${detail}; booting again (runStrategy Always)`
      this.writeStatus(`guest stopped: ${detail}`)
      this.scheduleRestart(gen)
    })
  }

  private buildGraph(spec: VirtualMachineSpec, gen: number): WorkflowGraph {
    const g = addPodTargets(new WorkflowGraph())
    const wantsNet = spec.network !== 'none'
    g.addUnit({
      name: 'resolve-kernel',
      description: "the kernel (and initrd) found in the node's image stores or under /boot (none with bootDisk)",
      wantedBy: ['storage'],
      timeoutMs: 5_000,
      run: async () => {
        this.kernel = spec.kernel === undefined ? undefined : resolveBootFile(spec.kernel, this.c.imageStores, 'kernel')
        this.initrd = spec.initrd === undefined ? undefined : resolveBootFile(spec.initrd, this.c.imageStores, 'initrd')
      },
    })
    if ((spec.disks ?? []).length > 0 || spec.cloudInit !== undefined)
      g.addUnit({
        name: 'prepare-disks',
        description: 'the disks as files: sparse raw files, qcow2 overlays over images, Volumes attached (unmounted from the node), the cloud-init seed',
        wantedBy: ['storage'],
        // The seed's network-config carries the guest's address.
        ...(spec.cloudInit !== undefined ? { after: ['sandbox-network'] } : {}),
        timeoutMs: 120_000,
        run: async () => {
          const obj = this.c.store.get(this.ref)
          if (obj === undefined || this.uid === undefined) throw new OrcError('not_found', 'the VM is gone')
          const net =
            this.net?.mode === 'ipv6'
              ? {
                  ipv6: this.net.ipv6,
                  gateway: GUEST_GATEWAY,
                  mac: guestMac(this.uid),
                  ...(this.net.ipv4 !== undefined ? { ipv4: this.net.ipv4, gateway4: GUEST_GATEWAY4 } : {}),
                }
              : undefined
          const r = await prepareVmDisks(
            {
              run: this.c.run,
              resolveImage: (image, what) => resolveBootFile({ image }, this.c.imageStores, what),
              ...(this.c.volumes ? { volumes: this.c.volumes } : {}),
              ...(this.c.secretValue ? { secretValue: this.c.secretValue } : {}),
            },
            { ...obj, spec },
            join(this.c.vmDir(this.uid), 'disks'),
            net,
          ).catch((err: unknown) => {
            // In use by a pod (or on another node): not a failure of the VM's own, it waits for the Volume.
            if (err instanceof OrcError && err.code === 'conflict' && gen === this.gen) this.waitingForVolume = true
            throw err
          })
          if (gen !== this.gen) return
          this.drives = r.drives
          this.disks = r.status
        },
      })
    else {
      this.drives = undefined
      this.disks = undefined
    }
    g.addUnit({
      name: 'sandbox-network',
      description: "the VM's network namespace and its IPv6 address in the node's /64, as a pod's (none with network: none or no node network)",
      wantedBy: ['network'],
      timeoutMs: 30_000,
      run: async () => {
        if (!wantsNet || this.c.network === undefined || this.uid === undefined) {
          this.net = wantsNet ? { mode: 'loopback', reason: 'this node has no pod network' } : undefined
          return
        }
        const prev = this.c.store.get(this.ref)?.status?.ipv6
        const hint = this.net?.mode === 'ipv6' ? this.net.ipv6 : typeof prev === 'string' ? prev : undefined
        const net = await this.c.network.attachPod(this.uid, hint)
        if (gen === this.gen) this.net = net
      },
    })
    g.addUnit({
      name: 'create-tap',
      description: `${VM_TAP} for the guest's NIC, bridged with the namespace's pod interface`,
      requires: ['sandbox-network'],
      wantedBy: ['network'],
      timeoutMs: 15_000,
      run: async () => {
        if (this.net?.mode !== 'ipv6') return
        const changed = await ensureVmTap(this.c.run, 'nsenter', this.net.netnsPath)
        if (changed.length > 0) this.c.log.debug({ ...this.fields(), changed }, 'vm tap configured')
      },
    })
    g.addUnit({
      name: 'start-qemu',
      description: 'qemu started (KVM where it works, else TCG emulation) and answering on its QMP socket',
      requires: ['storage', 'network'],
      wantedBy: ['running'],
      timeoutMs: this.t.startTimeoutMs,
      run: async ({ signal }) => this.startQemu(spec, gen, signal),
    })
    if (spec.readyMarker !== undefined)
      g.addUnit({
        name: 'wait-console-marker',
        description: `the guest printed ${JSON.stringify(spec.readyMarker)} on its serial console`,
        requires: ['start-qemu'],
        wantedBy: ['running'],
        timeoutMs: this.t.markerTimeoutMs,
        run: async ({ signal }) => this.waitMarker(spec.readyMarker!, signal),
      })
    return g
  }

  private logDir(): string {
    return join(this.c.vmDir(this.uid!), 'console')
  }

  private async startQemu(spec: VirtualMachineSpec, gen: number, signal: AbortSignal): Promise<void> {
    const rt = this.c.runtime
    const unavailable = await rt.unavailable()
    if (unavailable !== undefined) throw new OrcError('unavailable', unavailable)
    this.accel = await rt.accel(this.kernel)
    if (gen !== this.gen || signal.aborted) return
    const net = this.net?.mode === 'ipv6' ? this.net : undefined
    const h = await rt.start({
      id: this.uid!,
      revision: this.revision!,
      logDir: this.logDir(),
      ...(this.kernel !== undefined ? { kernel: this.kernel } : {}),
      ...(this.initrd !== undefined ? { initrd: this.initrd } : {}),
      cmdline: guestCmdline(spec, net),
      cpus: spec.cpus ?? 1,
      memoryMiB: Math.floor(vmMemoryBytes(spec) / 2 ** 20),
      accel: this.accel.accel,
      ...(net ? { net: { netnsPath: net.netnsPath, tap: VM_TAP, mac: guestMac(this.uid!) } } : {}),
      ...(this.drives !== undefined && this.drives.length > 0 ? { disks: this.drives } : {}),
      consoleSocket: consoleSocketPath(this.c.vmDir(this.uid!)),
      // An ha VM's qemu stops by itself once the lease runs out, even if this agent is dead.
      ...(fencedVm(spec) && this.c.fence !== undefined
        ? { fence: this.c.fence.containerFence(this.fenceTimes(spec).haAfterMs, this.fenceTimes(spec).graceMs) }
        : {}),
    })
    this.pid = h.pid
    this.cgroup = h.cgroup
    this.startedAt = h.startedAt
    let ended = false
    void h.exited.then((e) => {
      ended = true
      this.exited(h.pid, e)
    })
    // Up once qemu listens on its QMP socket; an early exit fails the unit with what qemu said.
    for (;;) {
      if (ended) throw new OrcError('unavailable', `qemu exited at start: ${this.consoleTail(3) || 'no output'}`)
      if (existsSync(rt.qmpSocketOf(this.uid!))) return
      if (signal.aborted) return
      await sleep(this.c.clock, 100)
    }
  }

  private consoleTail(n: number): string {
    try {
      const text = readFileSync(logFilePath(this.logDir(), this.revision!), 'utf8')
      return text.trimEnd().split('\n').slice(-n).join(' | ').slice(0, 300)
    } catch {
      return ''
    }
  }

  private async waitMarker(marker: string, signal: AbortSignal): Promise<void> {
    const seen = markerScanner(logFilePath(this.logDir(), this.revision!), marker)
    while (!signal.aborted) {
      if (seen()) return
      if (this.c.runtime.running(this.uid!) === undefined)
        throw new OrcError('unavailable', `the guest stopped before printing the marker: ${this.consoleTail(3)}`)
      await sleep(this.c.clock, 250)
    }
  }

  /** Stop the guest if it runs: ACPI power-down, SIGKILL after the grace (graceMs, default the spec's). */
  private async stopGuest(why: string, graceMs?: number): Promise<void> {
    this.run?.cancel(why)
    const id = this.uid
    if (id === undefined || this.c.runtime.running(id) === undefined) return
    const spec = this.c.store.get(this.ref)?.spec
    const grace = graceMs ?? (spec?.terminationGracePeriodSeconds ?? VM_DEFAULT_GRACE_SECONDS) * 1000
    this.phase = 'Stopping'
    this.writeStatus(`stopping: ${why}`)
    this.stopping = true
    try {
      const r = await this.c.runtime.stop(id, grace)
      this.lastStop = { at: new Date(this.c.clock.now()).toISOString(), how: r.how, detail: `${why}: ${r.detail}` }
      this.c.log.info({ ...this.fields(), how: r.how, why }, 'vm stopped')
    } finally {
      this.stopping = false
    }
    this.pid = undefined
    this.c.runtime.remove(id)
  }

  /** The VM left this node (deleted or moved): stop it, drop its network and files. */
  async teardown(why: string): Promise<void> {
    this.gen++
    this.clearRetry()
    await this.stopGuest(why)
    await this.releaseVolumes()
    if (this.uid !== undefined) {
      this.c.runtime.remove(this.uid)
      if (this.net?.mode === 'ipv6')
        await this.c.network?.detachPod(this.uid).catch((err) => this.c.log.warn({ ...this.fields(), err: String(err) }, 'remove vm network'))
      rmSync(this.c.vmDir(this.uid), { recursive: true, force: true })
    }
    this.writer.cancelDeferred()
    this.net = undefined
    this.uid = undefined
    this.hash = undefined
    this.phase = 'Pending'
    this.waitingForRoom = false
    this.waitingForQuorum = false
    this.c.log.info({ ...this.fields(), why }, 'vm removed from node')
  }

  /** The Volumes this VM has as disks are let go on this node (it halted, or left). */
  private async releaseVolumes(): Promise<void> {
    await this.c.volumes
      ?.releaseFromVm({ namespace: this.ref.namespace, name: this.ref.name })
      .catch((err) => this.c.log.warn({ ...this.fields(), err: String(err) }, 'release vm volumes'))
  }

  /** qemu's CPU and memory from its cgroup while the guest runs (`orc top vms`). */
  usage(): { namespace: string; name: string; usage: CgroupUsage } | undefined {
    const u = this.uid === undefined || this.done ? undefined : this.c.runtime.usage(this.uid)
    return u === undefined ? undefined : { namespace: this.ref.namespace, name: this.ref.name, usage: u }
  }

  /** Agent shutdown: leave the guest running for the next agent. */
  async release(): Promise<void> {
    this.done = true
    this.clearRetry()
    this.gen++
    await this.writer.settled()
  }
}

export class VmController {
  private readonly t: VmTunables
  private readonly workers = new Map<string, VmWorker>()
  private unsubscribe: (() => void) | undefined
  private stopped = false
  private fenceTimer: TimerHandle | undefined

  constructor(private readonly c: VmControllerComponents) {
    this.t = { ...VM_TUNABLES, ...c.tunables }
  }

  private workerFor(ref: Ref): VmWorker {
    const k = `${ref.namespace}/${ref.name}`
    let w = this.workers.get(k)
    if (w === undefined || w.done) {
      w = new VmWorker(this.c, this.t, ref, (r) => this.refusal(r))
      this.workers.set(k, w)
    }
    return w
  }

  /** Re-adopt guests a previous agent left running, then reconcile every VM of this node. */
  async start(): Promise<void> {
    const found = this.c.runtime.recover()
    const byUid = new Map(this.c.store.list('VirtualMachine').map((v) => [v.metadata.uid, v]))
    for (const h of found.running) {
      const vm = byUid.get(h.id)
      // Its VM is gone, or runs elsewhere now (moved or re-pinned while this agent was down; this
      // replica holds this node's own bindings, so "elsewhere" is not a stale view of them): stop it.
      if (vm === undefined || vmNodeOf(vm) !== this.c.nodeName) {
        await this.dropCopy(h.id, vm === undefined ? 'its VirtualMachine is gone' : `bound to node ${vmNodeOf(vm) ?? '<none>'} now`, true)
        continue
      }
      const w = this.workerFor({ kind: 'VirtualMachine', namespace: vm.metadata.namespace ?? 'default', name: vm.metadata.name })
      await w.adopt(h.pid, h.startedAt, h.accel, h.cgroup)
      void h.exited.then((e) => w.exited(h.pid, e))
    }
    for (const e of found.ended) {
      const vm = byUid.get(e.id)
      if (vm === undefined || vmNodeOf(vm) !== this.c.nodeName) await this.dropCopy(e.id, 'ended while no agent ran; its VM is not on this node', false)
      else this.c.runtime.remove(e.id)
    }
    // VMs deleted while no agent ran: their consoles and disks go too (this node saw each of them, or
    // it would have no directory for it, and its store no longer has it).
    for (const dir of staleVmDirs(dirname(this.c.vmDir('_')), new Set(byUid.keys()))) {
      rmSync(dir, { recursive: true, force: true })
      this.c.log.info({ dir }, 'files of a deleted vm removed')
    }
    if (this.c.fence !== undefined) {
      const tick = () => {
        if (this.stopped) return
        for (const w of this.workers.values()) void w.fenceTick()
        this.fenceTimer = this.c.clock.setTimeout(tick, 1000)
      }
      this.fenceTimer = this.c.clock.setTimeout(tick, 1000)
    }
    this.unsubscribe = this.c.store.onChange((keys) => {
      // Room may have freed (a pod or VM deleted or finished, the node's capacity changed): the
      // guests waiting for it look again.
      if (keys.some((k) => k.startsWith('Pod/') || k.startsWith('VirtualMachine/') || k === `Node//${this.c.nodeName}`)) {
        for (const w of this.workers.values()) if (w.waitingForRoom) void this.reconcileRef(w.ref)
      }
      if (keys.some((k) => k.startsWith('Volume/'))) for (const w of this.workers.values()) w.volumeChanged()
      for (const key of keys) {
        if (!key.startsWith('VirtualMachine/')) continue
        const [, namespace, ...rest] = key.split('/')
        void this.reconcileRef({ kind: 'VirtualMachine', namespace: namespace ?? 'default', name: rest.join('/') })
      }
    })
    await Promise.all(
      this.c.store
        .list('VirtualMachine')
        .filter((v) => vmNodeOf(v) === this.c.nodeName)
        .map((v) => this.reconcileRef({ kind: 'VirtualMachine', namespace: v.metadata.namespace ?? 'default', name: v.metadata.name })),
    )
  }

  /**
   * A guest a previous agent left whose VM is not this node's any more: stop it (no power-down: the
   * VM runs elsewhere), and drop its network namespace and console logs. It writes nothing in the
   * VM: its status is the other node's.
   */
  private async dropCopy(uid: string, why: string, running: boolean): Promise<void> {
    if (running) await this.c.runtime.stop(uid, 0)
    this.c.runtime.remove(uid)
    await this.c.network?.detachPod(uid).catch((err) => this.c.log.warn({ uid, err: String(err) }, 'remove vm network'))
    rmSync(this.c.vmDir(uid), { recursive: true, force: true })
    this.c.log.warn({ uid, why, running }, running ? 'stopped a guest left by the previous agent' : 'removed a guest left by the previous agent')
  }

  private async reconcileRef(ref: Ref): Promise<void> {
    if (this.stopped) return
    const k = `${ref.namespace}/${ref.name}`
    const obj = this.c.store.get(ref)
    // Only VMs of this node, and workers that must let go of theirs.
    if (vmNodeOf(obj) !== this.c.nodeName && !this.workers.has(k)) return
    const w = this.workerFor(ref)
    await w.reconcile()
    if (w.done && this.workers.get(k) === w) this.workers.delete(k)
  }

  /** The running guests' qemu usage, for `orc top vms`. */
  usage(): { namespace: string; name: string; usage: CgroupUsage }[] {
    return [...this.workers.values()].flatMap((w) => w.usage() ?? [])
  }

  /**
   * Why `ref` may not start now: the node's capacity less the requests of the pods bound here and the
   * VMs that hold room or come first (admitVms: running guests, then oldest first). Undefined: it fits
   * (or the node recorded no capacity). Synchronous, so a worker's check and its start are one step.
   */
  refusal(ref: Ref): string | undefined {
    const me = this.c.nodeName
    const node = this.c.store.get({ kind: 'Node', namespace: '', name: me })
    if (node === undefined) return undefined
    const a = nodeAllocation(node, this.c.store.list('Pod'), this.c.store.list('VirtualMachine'))
    const self = `${ref.namespace}/${ref.name}`
    const claims: VmClaim[] = a.vms.map((v) => ({ ...v, running: v.name !== self && this.workers.get(v.name)?.holdsRoom() === true }))
    return admitVms({ name: me, ...a.capacity }, a.pods, claims).get(self)
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.fenceTimer !== undefined) this.c.clock.clearTimeout(this.fenceTimer)
    this.unsubscribe?.()
    await Promise.all([...this.workers.values()].map((w) => w.release()))
    this.c.runtime.close()
  }
}
