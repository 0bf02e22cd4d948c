/**
 * This node's storage for pods (docs/storage.md): the `mount-volumes` unit of each pod calls
 * `prepare` (emptyDir, hostPath and persistent Volume sources to host directories) and `release`
 * when the pod leaves the node. Persistent Volumes are attached here — placed on this node at their
 * first attach — and the attach and detach are written to the Volume's status by this node
 * (controller:volume), so `orc history volume/NAME` shows who had it when.
 *
 * It also keeps the Volumes whose data lives here: a deleted Volume's data is moved aside for the
 * grace period (`orc volume restore` takes it back) and removed after; scheduled snapshots.
 */
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { type Clock, type CommandRunner, every } from '../../effects/index.ts'
import {
  keyOf,
  lastRunBetween,
  OrcError,
  type Pod,
  parseCron,
  parseQuantity,
  refOf,
  refOfKey,
  type VirtualMachine,
  type Volume,
  type VolumeSnapshotEntry,
  type VolumeStatus,
  vmNodeOf,
  volumeBytes,
  volumeRefsOf,
} from '../../model/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { finishedForGood, podVolumeUses } from '../sched/index.ts'
import { ExecDrivers } from './driver.ts'
import { formatBytes, LocalVolumes } from './local.ts'
import { type ReplicaPeer, VolumeReplication } from './replicas.ts'

export const VOLUME_CONTROLLER = 'controller:volume'
/** A deleted Volume's data is kept this long (`orc volume restore` within it). */
export const DEFAULT_VOLUME_GRACE_MS = 24 * 3600_000
const DEFAULT_SNAPSHOTS_TO_KEEP = 3

export interface VolumeServiceComponents {
  store: ObjectStore
  nodeName: string
  dataDir: string
  clock: Clock
  log: Logger
  run: CommandRunner
  isRoot: boolean
  /** Directory volumes only (no loop devices). */
  noLoop?: boolean
  driverDir?: string
  driverTimeoutMs?: number
  graceMs?: number
  /** This agent has caught up with its cluster (until then it deletes nothing it does not see). */
  caughtUp?(): boolean
  /** The other members, for replicated volumes (none: a single node keeps no replicas). */
  peer?: ReplicaPeer
  /** The block QMP socket of VM `namespace/name`'s qemu while it runs on this node (block-level replication of its Volume disks). */
  vmBlockQmp?(namespace: string, name: string): string | undefined
}

type Owner = { uid: number; gid: number }

function podKeyOf(p: { metadata: { namespace?: string; name: string } }): string {
  return `${p.metadata.namespace ?? 'default'}/${p.metadata.name}`
}

/** What a VM that has a Volume as its disk writes in `status.attachedTo` (a pod writes `ns/name`). */
export function vmHolderKey(namespace: string, name: string): string {
  return `vm/${namespace}/${name}`
}

/** A VM holder (`vm/ns/name`: three parts; a pod of namespace `vm` is `vm/name`). */
function isVmHolder(holder: string | undefined): boolean {
  return holder?.startsWith('vm/') === true && holder.split('/').length === 3
}

/** A holder as a user reads it: `pod NAME` or `vm/NAME`. */
function holderText(holder: string): string {
  return isVmHolder(holder) ? `vm/${holder.split('/')[2]}` : `pod ${holder.split('/')[1]}`
}

export class VolumeService {
  readonly local: LocalVolumes
  readonly drivers: ExecDrivers
  /** `ns/volume` → `ns/pod`: the writer attached on this node (the single-writer lock). */
  private readonly held = new Map<string, string>()
  /** Driver volumes mounted here: `ns/volume` → target directory. */
  private readonly driverMounts = new Map<string, string>()
  private unsub: (() => void) | undefined
  private stopTimer: (() => void) | undefined
  private readonly graceMs: number
  /** Replicated volumes (spec.replicas > 1), in a cluster. */
  readonly replication: VolumeReplication | undefined
  private stopSyncTimer: (() => void) | undefined

  constructor(private readonly c: VolumeServiceComponents) {
    this.local = new LocalVolumes({ base: join(c.dataDir, 'volumes'), run: c.run, isRoot: c.isRoot, ...(c.noLoop ? { noLoop: true } : {}) })
    this.drivers = new ExecDrivers({ dir: c.driverDir ?? join(c.dataDir, 'volume-drivers'), run: c.run, timeoutMs: c.driverTimeoutMs ?? 30_000 })
    this.graceMs = c.graceMs ?? DEFAULT_VOLUME_GRACE_MS
    this.replication =
      c.peer === undefined
        ? undefined
        : new VolumeReplication({
            store: c.store,
            nodeName: c.nodeName,
            dataDir: c.dataDir,
            clock: c.clock,
            log: c.log,
            local: this.local,
            peer: c.peer,
            writeStatus: (vol, fields, reason) => this.mustWriteStatus(vol, fields as Partial<VolumeStatus>, reason),
            heldHere: (ns, name) => {
              const holder = this.held.get(`${ns}/${name}`)
              return holder !== undefined && this.holds(holder, name)
            },
            heldByVm: (ns, name) => {
              const st = (this.c.store.get({ kind: 'Volume', namespace: ns, name })?.status ?? {}) as VolumeStatus
              const holder = this.held.get(`${ns}/${name}`) ?? st.attachedTo
              if (holder === undefined || !isVmHolder(holder) || !this.holds(holder, name)) return undefined
              const vm = holder.split('/')[2]!
              const qmp = this.c.vmBlockQmp?.(ns, vm)
              return { vm, ...(qmp !== undefined ? { qmp } : {}) }
            },
            run: c.run,
          })
  }

  start(): void {
    this.unsub = this.c.store.onChange((keys) => {
      const vols = keys.filter((k) => k.startsWith('Volume/'))
      if (vols.length > 0) void this.reconcile(vols).catch((err) => this.c.log.warn({ err: String(err) }, 'volume reconcile'))
    })
    this.stopTimer = every(this.c.clock, 15_000, () => void this.tick().catch((err) => this.c.log.warn({ err: String(err) }, 'volume tick')))
    void this.local
      .thawAll()
      .then(() => this.tick())
      .catch((err) => this.c.log.warn({ err: String(err) }, 'volume tick'))
    const repl = this.replication
    repl?.dropLeftovers()
    if (repl !== undefined)
      this.stopSyncTimer = every(this.c.clock, 1_000, () => void repl.tick().catch((err) => this.c.log.warn({ err: String(err) }, 'replicas')))
  }

  stop(): void {
    this.unsub?.()
    this.stopTimer?.()
    this.stopSyncTimer?.()
  }

  // ---- pods ----

  /**
   * The host directory of each of the pod's emptyDir, hostPath and Volume sources (by volume name).
   * `hostPathGranted`: check-security found the grant. Throws with the reason the pod waits for.
   */
  async prepare(pod: Stored<Pod>, podUid: string, owner: Owner, hostPathGranted: boolean): Promise<Map<string, string>> {
    const out = new Map<string, string>()
    for (const v of pod.spec?.volumes ?? []) {
      if (v.emptyDir !== undefined) out.set(v.name, await this.emptyDir(podUid, v.name, v.emptyDir, owner))
      else if (v.hostPath !== undefined) {
        if (!hostPathGranted) throw new OrcError('forbidden', `volume ${v.name}: hostPath ${v.hostPath.path} needs a SecurityPolicy grant of hostPath`)
        out.set(v.name, hostDir(v.hostPath.path, v.hostPath.type === 'DirectoryOrCreate'))
      } else if (v.volume !== undefined) {
        const writer = podVolumeUses(pod.spec).find((u) => u.name === v.volume!.name)?.writer ?? true
        out.set(v.name, await this.attach(pod, v.volume.name, owner, writer))
      }
    }
    return out
  }

  /** `<dataDir>/volumes/.pods/<pod uid>`: the pod's emptyDirs (each directory on the way is 0711: the pod's uid passes through). */
  private emptyDirBase(podUid: string): string {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(podUid)) throw new OrcError('invalid', `pod uid ${JSON.stringify(podUid)} is not one`)
    return join(this.c.dataDir, 'volumes', '.pods', podUid)
  }

  private async emptyDir(podUid: string, name: string, src: { medium?: string; sizeLimit?: string | number }, owner: Owner): Promise<string> {
    const base = this.emptyDirBase(podUid)
    const dir = join(base, name)
    mkdirSync(dir, { recursive: true, mode: 0o770 })
    for (const d of [join(this.c.dataDir, 'volumes'), join(this.c.dataDir, 'volumes', '.pods'), base]) chmodSync(d, 0o711)
    if (src.medium === 'Memory' && !this.local.isMounted(dir)) {
      if (!this.c.isRoot) throw new OrcError('unavailable', `emptyDir ${name} with medium Memory needs a root agent (a tmpfs mount)`)
      const size = src.sizeLimit !== undefined ? Math.ceil(parseQuantity(src.sizeLimit)) : undefined
      const opts = ['nodev', 'nosuid', 'mode=0770', `uid=${owner.uid}`, `gid=${owner.gid}`, ...(size !== undefined ? [`size=${size}`] : [])]
      const r = await this.c.run('mount', ['-t', 'tmpfs', '-o', opts.join(','), 'tmpfs', dir])
      if (r.exitCode !== 0) throw new OrcError('unavailable', `emptyDir ${name}: mount tmpfs: ${r.stderr.trim()}`)
    }
    if (this.c.isRoot) chownSync(dir, owner.uid, owner.gid)
    chmodSync(dir, 0o770)
    return dir
  }

  /** The pod's emptyDirs removed (memory ones unmounted first): the pod left this node for good. */
  async releaseEmptyDirs(podUid: string): Promise<void> {
    const base = this.emptyDirBase(podUid)
    if (!existsSync(base)) return
    for (const name of readdir(base)) {
      const dir = join(base, name)
      if (this.local.isMounted(dir)) {
        const r = await this.c.run('umount', [dir])
        if (r.exitCode !== 0) throw new OrcError('unavailable', `unmount emptyDir ${name}: ${r.stderr.trim()}`)
      }
    }
    rmSync(base, { recursive: true, force: true })
  }

  /**
   * emptyDirs of pods that are gone or bound to another node (their worker may be gone with an
   * agent restart): removed, once this agent has caught up with its cluster.
   */
  private async sweepEmptyDirs(): Promise<void> {
    if (!(this.c.caughtUp?.() ?? true)) return
    const here = new Set(
      this.c.store
        .list('Pod')
        .filter((p) => (p.status?.node ?? p.spec?.placement?.node) === this.c.nodeName)
        .map((p) => p.metadata.uid),
    )
    for (const uid of readdir(join(this.c.dataDir, 'volumes', '.pods'))) {
      if (here.has(uid)) continue
      await this.releaseEmptyDirs(uid).catch((err) => this.c.log.warn({ podUid: uid, err: String(err) }, 'remove emptyDir'))
      this.c.log.info({ podUid: uid }, 'emptyDirs of a pod no longer on this node removed')
    }
  }

  /** Attach Volume `name` to the pod on this node; returns the directory to bind. */
  async attach(pod: Stored<Pod>, name: string, owner: Owner, writer = true): Promise<string> {
    const ns = pod.metadata.namespace ?? 'default'
    // A pod of a federation's shared namespace lives in another store: Volumes are the cluster's own.
    if (this.c.store.get({ kind: 'Pod', namespace: ns, name: pod.metadata.name })?.metadata.uid !== pod.metadata.uid)
      throw new OrcError(
        'invalid',
        `volume ${name}: Volumes are for the cluster's own namespaces; a pod of a federation's shared namespace cannot use one (not built)`,
      )
    const ref = { kind: 'Volume' as const, namespace: ns, name }
    let vol = this.c.store.get(ref)
    if (vol === undefined) throw new OrcError('not_found', `volume ${name} does not exist in namespace ${ns} (orc apply a Volume named ${name})`)
    const me = this.c.nodeName
    let st = (vol.status ?? {}) as VolumeStatus
    let home = st.node ?? vol.spec?.node
    // An ha writer failed over to a node keeping a replica: that replica becomes the primary.
    if (writer && st.node !== undefined && st.node !== me && this.replication !== undefined && (vol.spec?.replicas ?? 1) > 1) {
      await this.replication.promote(vol, { what: `pod ${pod.metadata.name}`, policy: pod.spec?.policy })
      vol = this.c.store.get(ref) ?? vol
      st = (vol.status ?? {}) as VolumeStatus
      home = st.node
    }
    if (home !== undefined && home !== me) throw new OrcError('conflict', `volume ${name} lives on node ${home}, not on this node (${me})`)
    const vk = `${ns}/${name}`
    const pk = podKeyOf(pod)
    if (!writer) {
      // A reader (every mount read-only): beside the writer, on the data that is here already.
      const vmHolder = isVmHolder(st.attachedTo) && this.holds(st.attachedTo!, name) ? st.attachedTo : undefined
      if (vmHolder !== undefined)
        throw new OrcError('conflict', `volume ${name} is the disk of ${holderText(vmHolder)}: no pod may mount it while the VM has it`)
      if (vol.spec?.driver === undefined && this.local.info(vol.metadata.uid) !== undefined) {
        await this.local.ensure({ uid: vol.metadata.uid, namespace: ns, name, sizeBytes: volumeBytes(vol.spec) })
        return this.local.dataOf(vol.metadata.uid)
      }
      if (vol.spec?.driver !== undefined && this.driverMounts.has(vk)) return this.driverMounts.get(vk)!
      throw new OrcError('unavailable', `volume ${name} has no data on this node yet (a reader waits for its first writer)`)
    }
    const holder = this.held.get(vk) ?? st.attachedTo
    if (holder !== undefined && holder !== pk && this.holds(holder, name)) {
      throw new OrcError('conflict', `volume ${name} is in use by ${holderText(holder)} (one writer at a time)`)
    }
    this.held.set(vk, pk)
    const sizeBytes = volumeBytes(vol.spec)
    let path: string
    const statusExtra: Partial<VolumeStatus> = {}
    try {
      if (vol.spec?.driver !== undefined) path = await this.attachDriver(vol)
      else {
        const info = await this.local.ensure({ uid: vol.metadata.uid, namespace: ns, name, sizeBytes }, owner)
        path = this.local.dataOf(vol.metadata.uid)
        statusExtra.backing = info.backing
        statusExtra.backingReason = info.backingReason
        statusExtra.capacityBytes = info.sizeBytes
      }
    } catch (err) {
      this.held.delete(vk)
      await this.writeStatus(
        vol,
        { node: home ?? undefined, phase: home === undefined ? 'Pending' : st.phase, reason: (err as Error).message.slice(0, 300) },
        `attach to pod ${pod.metadata.name} failed`,
      )
      throw err
    }
    if (st.attachedTo !== pk || st.node !== me || st.phase !== 'Attached') {
      await this.writeStatus(
        vol,
        { node: me, phase: 'Attached', attachedTo: pk, attachedAt: new Date(this.c.clock.now()).toISOString(), reason: undefined, ...statusExtra },
        `attached to pod ${pod.metadata.name} on node ${me}`,
      )
    }
    return path
  }

  /**
   * Attach Volume `name` to VM `vm` on this node as its disk; returns the ext4 image file qemu opens.
   * Only a local loop Volume, on this node (or placed here now; or, replicated, promoted here from a
   * replica for an `ha` VM failed over), that no pod mounts: it is unmounted from the host while the
   * guest has it (two kernels on one ext4 corrupt it); its replicas are then synced at block level.
   */
  async attachToVm(vm: Stored<VirtualMachine>, name: string): Promise<string> {
    const ns = vm.metadata.namespace ?? 'default'
    const ref = { kind: 'Volume' as const, namespace: ns, name }
    let vol = this.c.store.get(ref)
    if (vol === undefined) throw new OrcError('not_found', `volume ${name} does not exist in namespace ${ns} (orc apply a Volume named ${name})`)
    if (vol.spec?.driver !== undefined) throw new OrcError('invalid', `volume ${name} uses driver ${vol.spec.driver}: only a local Volume can be a VM disk`)
    const me = this.c.nodeName
    let st = (vol.status ?? {}) as VolumeStatus
    // An ha VM failed over to a node keeping a replica: that replica becomes the primary.
    if (st.node !== undefined && st.node !== me && this.replication !== undefined && (vol.spec?.replicas ?? 1) > 1) {
      await this.replication.promote(vol, { what: `vm/${vm.metadata.name}`, policy: vm.spec?.policy })
      vol = this.c.store.get(ref) ?? vol
      st = (vol.status ?? {}) as VolumeStatus
    }
    const home = st.node ?? vol.spec?.node
    if (home !== undefined && home !== me) throw new OrcError('conflict', `volume ${name} lives on node ${home}, not on this VM's node (${me})`)
    const vk = `${ns}/${name}`
    const hk = vmHolderKey(ns, vm.metadata.name)
    const holder = this.held.get(vk) ?? st.attachedTo
    if (holder !== undefined && holder !== hk && this.holds(holder, name))
      throw new OrcError('conflict', `volume ${name} is in use by ${holderText(holder)}: a VM disk needs it to itself (waiting until it is free)`)
    // Taken now (no await since the check): a pod's attach sees it at once.
    this.held.set(vk, hk)
    let info: Awaited<ReturnType<LocalVolumes['ensure']>>
    const uid = vol.metadata.uid
    const take = async () => {
      // Made (and mounted) on first use; an existing one is not mounted again only to be unmounted.
      const i = this.local.info(uid) ?? (await this.local.ensure({ uid, namespace: ns, name, sizeBytes: volumeBytes(vol.spec) }))
      if (i.backing !== 'loop')
        throw new OrcError('unavailable', `volume ${name} is a directory volume (${i.backingReason ?? 'no loop backing'}): a VM disk needs its ext4 image`)
      await this.local.unmount(uid)
      return i
    }
    try {
      // Never while a file-level copy for the replicas reads the mounted image.
      info = this.replication !== undefined ? await this.replication.exclusive(uid, take) : await take()
    } catch (err) {
      this.held.delete(vk)
      const reason = (err as Error).message.slice(0, 300)
      if (st.reason !== reason) await this.writeStatus(vol, { reason }, `attach to vm ${vm.metadata.name} failed`)
      throw err
    }
    if (st.attachedTo !== hk || st.node !== me || st.phase !== 'Attached')
      await this.writeStatus(
        vol,
        {
          node: me,
          phase: 'Attached',
          attachedTo: hk,
          attachedAt: new Date(this.c.clock.now()).toISOString(),
          reason: undefined,
          backing: info.backing,
          capacityBytes: info.sizeBytes,
        },
        `attached to vm ${vm.metadata.name} on node ${me} as a disk`,
      )
    return join(this.local.dirOf(vol.metadata.uid), 'disk.img')
  }

  /** The VM halted or left this node: the Volumes it has as disks (but `keep`) are detached (a pod may mount them again). */
  async releaseFromVm(vm: { namespace: string; name: string }, keep: readonly string[] = []): Promise<void> {
    const hk = vmHolderKey(vm.namespace, vm.name)
    for (const v of this.c.store.list('Volume', vm.namespace)) {
      const st = (v.status ?? {}) as VolumeStatus
      const vk = `${vm.namespace}/${v.metadata.name}`
      if (keep.includes(v.metadata.name) || (st.attachedTo !== hk && this.held.get(vk) !== hk)) continue
      if (this.held.get(vk) === hk) this.held.delete(vk)
      if (st.attachedTo === hk && st.node === this.c.nodeName)
        await this.writeStatus(
          v,
          { phase: 'Available', attachedTo: undefined, attachedAt: undefined },
          `detached from vm ${vm.name} on node ${this.c.nodeName}`,
        )
    }
  }

  /**
   * Does holder `ns/pod` (or `vm/ns/name`) still hold Volume `volume` on this node: exists, still
   * names it, bound here, not finished (a VM: not Halted).
   */
  private holds(podKey: string, volume: string): boolean {
    if (isVmHolder(podKey)) {
      const [, namespace, name] = podKey.split('/') as [string, string, string]
      const vm = this.c.store.get({ kind: 'VirtualMachine', namespace, name })
      return (
        vm?.spec !== undefined &&
        vmNodeOf(vm) === this.c.nodeName &&
        vm.spec.runStrategy !== 'Halted' &&
        (vm.spec.disks ?? []).some((d) => d.volume?.name === volume)
      )
    }
    const [namespace, name] = podKey.split('/') as [string, string]
    const p = this.c.store.get({ kind: 'Pod', namespace, name })
    if (p === undefined || !volumeRefsOf(p.spec).includes(volume)) return false
    const node = p.status?.node ?? p.spec?.placement?.node
    if (node !== this.c.nodeName) return false
    return !finishedForGood(p.status?.phase, p.spec?.restartPolicy)
  }

  private async attachDriver(vol: Stored<Volume>): Promise<string> {
    const ns = vol.metadata.namespace ?? 'default'
    const target = join(this.c.dataDir, 'volumes', '.driver', vol.metadata.uid)
    mkdirSync(target, { recursive: true, mode: 0o711 })
    const req = this.driverRequest(vol)
    await this.drivers.call(vol.spec!.driver!, { ...req, op: 'attach' })
    await this.drivers.call(vol.spec!.driver!, { ...req, op: 'mount', target })
    this.driverMounts.set(`${ns}/${vol.metadata.name}`, target)
    return target
  }

  private driverRequest(vol: Stored<Volume>) {
    return {
      volume: {
        namespace: vol.metadata.namespace ?? 'default',
        name: vol.metadata.name,
        uid: vol.metadata.uid,
        sizeBytes: volumeBytes(vol.spec),
        options: { ...(vol.spec?.options ?? {}) },
      },
      node: this.c.nodeName,
    }
  }

  /** The pod left this node (stopped for good, deleted, moved): its Volumes are detached. */
  async release(pod: { metadata: { namespace?: string; name: string } }): Promise<void> {
    const pk = podKeyOf(pod)
    for (const [vk, holder] of [...this.held]) {
      if (holder !== pk) continue
      this.held.delete(vk)
      const [namespace, name] = vk.split('/') as [string, string]
      const vol = this.c.store.get({ kind: 'Volume', namespace, name })
      const target = this.driverMounts.get(vk)
      if (vol?.spec?.driver !== undefined && target !== undefined) {
        this.driverMounts.delete(vk)
        const req = this.driverRequest(vol)
        try {
          await this.drivers.call(vol.spec.driver, { ...req, op: 'unmount', target })
          await this.drivers.call(vol.spec.driver, { ...req, op: 'detach' })
        } catch (err) {
          this.c.log.warn({ volume: vk, err: String(err) }, 'volume driver detach')
        }
      }
      // Only the volume's node writes its status (after a failover this node is a replica).
      const vst = vol?.status as VolumeStatus | undefined
      if (vol !== undefined && vst?.attachedTo === pk && vst.node === this.c.nodeName)
        await this.writeStatus(
          vol,
          { phase: 'Available', attachedTo: undefined, attachedAt: undefined },
          `detached from pod ${pod.metadata.name} on node ${this.c.nodeName}`,
        )
    }
  }

  private async writeStatus(vol: Stored<Volume>, fields: Partial<VolumeStatus>, reason: string): Promise<void> {
    try {
      await this.mustWriteStatus(vol, fields, reason)
    } catch (err) {
      this.c.log.debug({ volume: keyOf(refOf(vol)), err: String(err) }, 'write volume status')
    }
  }

  /** As writeStatus, but a refused write throws. */
  private async mustWriteStatus(vol: Stored<Volume>, fields: Partial<VolumeStatus>, reason: string): Promise<void> {
    const ref = { kind: 'Volume', namespace: vol.metadata.namespace ?? 'default', name: vol.metadata.name }
    const cur = this.c.store.get(ref)
    if (cur === undefined || cur.metadata.uid !== vol.metadata.uid) throw new OrcError('not_found', `volume/${vol.metadata.name} is gone`)
    await this.c.store.patch(
      ref,
      Object.entries(fields).map(([k, v]) => ({ path: ['status', k], value: v })),
      { author: VOLUME_CONTROLLER, reason, now: this.c.clock.now() },
    )
  }

  // ---- the volumes whose data is here ----

  /** Volumes changed: a deleted one's data is moved aside; a restore takes it back. */
  async reconcile(keys?: readonly string[]): Promise<void> {
    const now = this.c.clock.now()
    const byUid = new Map(this.c.store.list('Volume').map((v) => [v.metadata.uid, v]))
    // Deleted (seen deleted now, or — once caught up — any local data with no Volume of its uid).
    const changed = keys === undefined ? undefined : new Set(keys.map((k) => refOfKey(k)).map((r) => `${r.namespace}/${r.name}`))
    const sweep = keys === undefined && (this.c.caughtUp?.() ?? true)
    for (const uid of this.localUids()) {
      if (byUid.has(uid)) continue
      const info = this.local.info(uid)
      if (info === undefined) continue
      if (!sweep && !changed?.has(`${info.namespace}/${info.name}`)) continue
      if (await this.local.trash(uid, now)) {
        this.c.log.info({ volume: `${info.namespace}/${info.name}`, uid }, 'volume deleted: data kept for the grace period')
      }
    }
    // Restores addressed to this node.
    for (const v of byUid.values()) {
      const from = v.spec?.restoreFrom
      if (from === undefined || v.spec?.node !== this.c.nodeName || this.local.info(v.metadata.uid) !== undefined) continue
      const st = (v.status ?? {}) as VolumeStatus
      try {
        const info = this.local.restore(from, v.metadata.uid)
        // Mounted again at once (a loop volume): its files are where they were before the delete.
        await this.local.ensure({ uid: v.metadata.uid, namespace: info.namespace, name: info.name, sizeBytes: info.sizeBytes })
        await this.writeStatus(
          v,
          {
            node: this.c.nodeName,
            phase: 'Available',
            backing: info.backing,
            capacityBytes: info.sizeBytes,
            reason: undefined,
            ...(this.local.snapshots(v.metadata.uid).length > 0 ? { snapshots: this.local.snapshots(v.metadata.uid) } : {}),
          },
          `data of deleted volume ${from} restored on node ${this.c.nodeName}`,
        )
      } catch (err) {
        if (st.phase !== 'Failed') await this.writeStatus(v, { node: this.c.nodeName, phase: 'Failed', reason: (err as Error).message }, 'restore failed')
      }
    }
  }

  private localUids(): string[] {
    const base = join(this.c.dataDir, 'volumes')
    return readdir(base).filter((n) => !n.startsWith('.'))
  }

  /** Runs every 15 s: deletions, the grace period, emptyDirs left behind, scheduled snapshots. */
  async tick(): Promise<void> {
    const now = this.c.clock.now()
    await this.reconcile()
    for (const uid of this.local.purge(now, this.graceMs)) this.c.log.info({ uid }, 'deleted volume purged after its grace period')
    await this.sweepEmptyDirs()
    // A writer that finished or left without a teardown here (a Job's pod, an agent restart): detached.
    for (const v of this.c.store.list('Volume')) {
      const st = (v.status ?? {}) as VolumeStatus
      if (st.node !== this.c.nodeName || st.attachedTo === undefined || this.holds(st.attachedTo, v.metadata.name)) continue
      const vk = `${v.metadata.namespace ?? 'default'}/${v.metadata.name}`
      if (this.held.get(vk) === st.attachedTo) this.held.delete(vk)
      await this.writeStatus(
        v,
        { phase: 'Available', attachedTo: undefined, attachedAt: undefined },
        `detached from ${holderText(st.attachedTo)}: it finished or left node ${this.c.nodeName}`,
      )
    }
    // Scheduled snapshots of the volumes that live here.
    for (const v of this.c.store.list('Volume')) {
      const sched = v.spec?.snapshotSchedule
      const st = (v.status ?? {}) as VolumeStatus
      if (sched === undefined || st.node !== this.c.nodeName) continue
      const since = Date.parse(st.lastScheduledSnapshot ?? v.metadata.createdAt)
      let due: number | undefined
      try {
        due = lastRunBetween(parseCron(sched), Number.isNaN(since) ? now - 60_000 : since, now, 'UTC')
      } catch {
        continue
      }
      if (due === undefined) continue
      try {
        await this.snapshot(v.metadata.namespace ?? 'default', v.metadata.name, `auto-${new Date(due).toISOString().replace(/[:.]/g, '-')}`, due)
      } catch (err) {
        this.c.log.warn({ volume: v.metadata.name, err: String(err) }, 'scheduled snapshot')
        await this.writeStatus(
          v,
          { lastScheduledSnapshot: new Date(due).toISOString(), reason: `scheduled snapshot: ${(err as Error).message}`.slice(0, 300) },
          'scheduled snapshot failed',
        )
      }
    }
  }

  private localVolume(ns: string, name: string): Stored<Volume> {
    const vol = this.c.store.get({ kind: 'Volume', namespace: ns, name })
    if (vol === undefined) throw new OrcError('not_found', `volume/${name} not found in namespace ${ns}`)
    if (vol.spec?.driver !== undefined)
      throw new OrcError('invalid', `volume/${name} uses driver ${vol.spec.driver}: snapshots of driver volumes are the driver's (not built here)`)
    if (this.local.info(vol.metadata.uid) === undefined) throw new OrcError('not_found', `volume/${name} has no data yet (it is made when a pod first uses it)`)
    // A VM's disk is not mounted on the host: mounting it for a copy beside the guest would corrupt it.
    const holder = (vol.status as VolumeStatus | undefined)?.attachedTo
    if (isVmHolder(holder) && this.holds(holder!, name))
      throw new OrcError('conflict', `volume/${name} is the disk of ${holderText(holder!)}: halt it (runStrategy: Halted) first`)
    return vol
  }

  /**
   * A snapshot (a tar under `.snapshots/<uid>/NAME.tar`): a loop volume is frozen while it is
   * copied (consistent with a writer attached); a directory volume only while no pod has it.
   */
  async snapshot(ns: string, name: string, snapName?: string, scheduledAt?: number): Promise<VolumeSnapshotEntry> {
    const vol = this.localVolume(ns, name)
    const st = (vol.status ?? {}) as VolumeStatus
    const info = this.local.info(vol.metadata.uid)!
    const attached = st.attachedTo !== undefined && this.holds(st.attachedTo, name)
    if (attached && info.backing !== 'loop')
      throw new OrcError(
        'conflict',
        `volume/${name} is a directory volume in use by pod ${st.attachedTo!.split('/')[1]}: it cannot be frozen; stop the pod to snapshot it`,
      )
    const now = this.c.clock.now()
    const sn = snapName ?? `snap-${new Date(now).toISOString().replace(/[:.]/g, '-')}`
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(sn)) throw new OrcError('invalid', `snapshot name ${JSON.stringify(sn)}: letters, digits, . _ -`)
    const dir = this.local.snapshotDirOf(vol.metadata.uid)
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    const file = join(dir, `${sn}.tar`)
    if (existsSync(file)) throw new OrcError('conflict', `volume/${name} already has a snapshot ${sn}`)
    const bytes = await this.local.tarTo(vol.metadata.uid, file, attached && info.backing === 'loop')
    const entry: VolumeSnapshotEntry = { name: sn, at: new Date(now).toISOString(), bytes, consistency: attached ? 'freeze' : 'stopped' }
    const keep = vol.spec?.snapshotsToKeep ?? DEFAULT_SNAPSHOTS_TO_KEEP
    const all = [...(st.snapshots ?? []), entry]
    const dropped = scheduledAt !== undefined ? all.filter((s) => s.name.startsWith('auto-')).slice(0, -keep) : []
    writeFileSync(join(dir, `${sn}.json`), `${JSON.stringify(entry)}\n`, { mode: 0o600 })
    for (const d of dropped) for (const ext of ['tar', 'json']) rmSync(join(dir, `${d.name}.${ext}`), { force: true })
    await this.writeStatus(
      vol,
      {
        snapshots: all.filter((s) => !dropped.includes(s)),
        ...(scheduledAt !== undefined ? { lastScheduledSnapshot: new Date(scheduledAt).toISOString() } : {}),
      },
      `snapshot ${sn} taken (${formatBytes(bytes)}, ${entry.consistency})`,
    )
    return entry
  }

  /** Put a snapshot's files back (no pod may have the volume). */
  async restoreSnapshot(ns: string, name: string, snapName: string): Promise<void> {
    const vol = this.localVolume(ns, name)
    const st = (vol.status ?? {}) as VolumeStatus
    if (st.attachedTo !== undefined && this.holds(st.attachedTo, name))
      throw new OrcError('conflict', `volume/${name} is in use by pod ${st.attachedTo.split('/')[1]}: stop it before restoring a snapshot`)
    const file = join(this.local.snapshotDirOf(vol.metadata.uid), `${snapName}.tar`)
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(snapName) || !existsSync(file))
      throw new OrcError('not_found', `volume/${name} has no snapshot ${snapName} (orc describe volume/${name} lists them)`)
    await this.local.ensure({ uid: vol.metadata.uid, namespace: ns, name, sizeBytes: volumeBytes(vol.spec) })
    await this.local.untarFrom(vol.metadata.uid, file)
    await this.writeStatus(vol, { reason: undefined }, `snapshot ${snapName} restored`)
  }

  /** A tar of the volume now (frozen while copied), in a temporary file the caller streams and removes. */
  async exportTar(ns: string, name: string): Promise<string> {
    const vol = this.localVolume(ns, name)
    const st = (vol.status ?? {}) as VolumeStatus
    const info = this.local.info(vol.metadata.uid)!
    const attached = st.attachedTo !== undefined && this.holds(st.attachedTo, name)
    if (attached && info.backing !== 'loop') throw new OrcError('conflict', `volume/${name} is a directory volume in use: stop the pod to export it`)
    const dir = join(this.c.dataDir, 'volumes', '.export')
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    const file = join(dir, `${vol.metadata.uid}-${this.c.clock.now()}.tar`)
    await this.local.tarTo(vol.metadata.uid, file, attached)
    return file
  }

  /** The uid of the deleted Volume NS/NAME whose data this node keeps, if any (newest). */
  deletedOf(ns: string, name: string): { uid: string; at: number } | undefined {
    return this.local
      .deleted()
      .filter((d) => d.info?.namespace === ns && d.info?.name === name && this.c.clock.now() - d.at < this.graceMs)
      .sort((a, b) => b.at - a.at)[0]
  }
}

function readdir(dir: string): string[] {
  try {
    return readdirSync(dir)
  } catch {
    return []
  }
}

/** A hostPath directory: must exist (or is made), must be a directory; its real path is bound. */
function hostDir(path: string, create: boolean): string {
  if (!existsSync(path)) {
    if (!create) throw new OrcError('not_found', `hostPath ${path} does not exist on this node (type DirectoryOrCreate makes it)`)
    mkdirSync(path, { recursive: true, mode: 0o755 })
  }
  const real = realpathSync(path)
  if (!lstatSync(real).isDirectory()) throw new OrcError('invalid', `hostPath ${path} is not a directory`)
  return real
}
