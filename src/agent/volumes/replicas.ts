/**
 * Replicated Volumes, the node's side (docs/storage.md, "Replication").
 *
 * On the primary (`status.node`): the replica nodes are chosen (replication.ts) and written to
 * `status.replicas`; every `syncIntervalSeconds` each replica gets the files that changed since its
 * copy — the primary asks for the replica's manifest, freezes its ext4 (fsfreeze), walks it, tars
 * the changed files, thaws, and sends the tar in pieces over the member API. When the replica has
 * applied it, the primary records `status.replicas.NODE.syncedAt` (the moment of the frozen copy).
 *
 * On a replica: the copy is a volume like the primary's (the same ext4 image, mounted, no pod on
 * it). A sync is received whole into a file first, then applied through a journal (`apply.json`,
 * replayed after a crash), so the copy is always at one complete sync point of the primary.
 *
 * While a VM on the primary has the volume as its disk (unmounted from the host), the copies are
 * taken at block level instead (blocksync.ts): qemu's incremental backup of a dirty bitmap, sent as
 * block ranges and applied by the replica to its copy of the image, unmounted, through the same
 * kind of journal. When the VM lets go, the file-level sync resumes (the replica mounts its copy again).
 *
 * Promotion (an `ha` pod or VM failed over here): `promote` makes this node the primary.
 */
import { randomBytes } from 'node:crypto'
import {
  appendFileSync,
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { type Clock, type CommandRunner, execaRunner } from '../../effects/index.ts'
import { OrcError, type Volume, type VolumeReplicaStatus, type VolumeStatus, volumeBytes } from '../../model/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { isForgotten } from '../sched/index.ts'
import { applyBlockRanges, type BlockJournal, checkBlockRanges, planPieces, readRanges, stagedRanges, takeDelta } from './blocksync.ts'
import type { LocalVolumes } from './local.ts'
import { chooseReplicas, type ManifestEntry, planSync, safeManifestPath, walkManifest } from './replication.ts'

/** The default sync interval (the RPO), seconds. */
export const DEFAULT_SYNC_INTERVAL_SECONDS = 15
/** Bytes per sync piece (base64 in JSON, under the member API's 64 MiB). */
export const SYNC_CHUNK_BYTES = 8 * 1024 * 1024
/** A sync that changed nothing writes `syncedAt` at most this often (history stays small). */
const IDLE_STATUS_MS = 60_000

export interface ReplicaPeer {
  /** A member-API request to node `node`; its answer's body, or throws with the reason. */
  request(node: string, req: { method: 'GET' | 'POST'; path: string; query?: Record<string, string>; body?: unknown }, timeoutMs: number): Promise<unknown>
  /** The cluster's nodes that are alive members now (this one included). */
  aliveNodes(): string[]
  /** The node name of mesh peer `peerId` (its Node object's status.peerId), if known. */
  nodeOfPeer(peerId: string): string | undefined
}

export interface ReplicationComponents {
  store: ObjectStore
  nodeName: string
  dataDir: string
  clock: Clock
  log: Logger
  local: LocalVolumes
  peer: ReplicaPeer
  /** Write fields of a Volume's status as controller:volume (throws when the store refuses). */
  writeStatus(vol: Stored<Volume>, fields: Record<string, unknown>, reason: string): Promise<void>
  /** Does a pod on this node still hold volume `ns/name` as its writer? */
  heldHere(ns: string, name: string): boolean
  /** The VM on this node that has volume `ns/name` as its disk, and its qemu's block QMP socket while qemu runs. */
  heldByVm?(ns: string, name: string): { vm: string; qmp?: string } | undefined
  /** Runs qemu-img (block-level syncs). */
  run?: CommandRunner
}

/** Who a promotion is for: the `ha` pod or VM now bound to this node. */
export interface PromotionHolder {
  /** `pod NAME` or `vm/NAME`. */
  what: string
  policy: string | undefined
}

function statusOf(v: Stored<Volume>): VolumeStatus {
  return (v.status ?? {}) as VolumeStatus
}

function replicasOf(st: VolumeStatus): Record<string, VolumeReplicaStatus> {
  const r = st.replicas
  return r !== null && typeof r === 'object' && !Array.isArray(r) ? r : {}
}

function iso(ms: number): string {
  return new Date(ms).toISOString()
}

export class VolumeReplication {
  /** `uid/node` → when its last sync started (ms). */
  private readonly lastSync = new Map<string, number>()
  /** `uid/node` → when `syncedAt` was last written for a sync that changed nothing. */
  private readonly lastIdleWrite = new Map<string, number>()
  /** Volumes (uid) with a sync round in flight. */
  private readonly busy = new Set<string>()
  /** `uid/node` → the block-level sync that replica applied last (its bitmap counts from it). */
  private readonly blockSent = new Map<string, string>()
  /** uid → the tail of the work on its local data that must not overlap (a file-level copy, a VM taking the image). */
  private readonly locks = new Map<string, Promise<unknown>>()

  constructor(private readonly c: ReplicationComponents) {}

  private base(): string {
    return join(this.c.dataDir, 'volumes')
  }
  private replicaDir(uid: string): string {
    this.c.local.dirOf(uid) // checks the uid
    return join(this.base(), '.replicas', uid)
  }

  /** Run `fn` alone among the others given for volume `uid` (a file-level copy and a VM attaching never overlap). */
  exclusive<T>(uid: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(uid) ?? Promise.resolve()
    const next = prev.then(fn, fn)
    const tail = next.catch(() => undefined)
    this.locks.set(uid, tail)
    void tail.then(() => {
      if (this.locks.get(uid) === tail) this.locks.delete(uid)
    })
    return next
  }

  /** At start: delta files of block-level syncs an earlier agent did not finish (syncs run in the agent) are removed. */
  dropLeftovers(): void {
    rmSync(join(this.base(), '.blocksync'), { recursive: true, force: true })
  }

  // ---- the primary ----

  /** Place missing replicas and start the syncs that are due (called every second or so). */
  async tick(): Promise<void> {
    const me = this.c.nodeName
    const now = this.c.clock.now()
    for (const v of this.c.store.list('Volume')) {
      const want = (v.spec?.replicas ?? 1) - 1
      const st = statusOf(v)
      if (want < 1 || st.node !== me || v.spec?.driver !== undefined || this.c.local.info(v.metadata.uid) === undefined) continue
      const current = replicasOf(st)
      const nodes = this.placement(v, want)
      if (nodes.some((n) => current[n] === undefined) || Object.keys(current).length !== nodes.length) {
        const next: Record<string, VolumeReplicaStatus> = {}
        for (const n of nodes) next[n] = current[n] ?? {}
        await this.c.writeStatus(v, { replicas: next }, `replicas on ${nodes.join(', ')} (chosen by node ${me})`).catch(() => undefined)
        continue
      }
      const interval = (v.spec?.syncIntervalSeconds ?? DEFAULT_SYNC_INTERVAL_SECONDS) * 1000
      const due = nodes.filter((n) => now - (this.lastSync.get(`${v.metadata.uid}/${n}`) ?? 0) >= interval)
      if (due.length === 0 || this.busy.has(v.metadata.uid)) continue
      this.busy.add(v.metadata.uid)
      void this.syncRound(v, due)
        .catch((err) => this.c.log.warn({ volume: v.metadata.name, err: String(err) }, 'replica sync'))
        .finally(() => this.busy.delete(v.metadata.uid))
    }
  }

  /** The replica nodes: the current ones (kept while their Node is not forgotten), then chosen among live members. */
  private placement(v: Stored<Volume>, want: number): string[] {
    const gone = new Set(
      this.c.store
        .list('Node')
        .filter(isForgotten)
        .map((n) => n.metadata.name),
    )
    const known = new Set(this.c.store.list('Node').map((n) => n.metadata.name))
    const current = Object.keys(replicasOf(statusOf(v))).filter((n) => !gone.has(n) && n !== this.c.nodeName)
    const alive = this.c.peer.aliveNodes().filter((n) => known.has(n) && !gone.has(n))
    return chooseReplicas(v.metadata.uid, this.c.nodeName, [...new Set([...current, ...alive])], want, current)
  }

  private async syncRound(v: Stored<Volume>, nodes: string[]): Promise<void> {
    for (const node of nodes) {
      const k = `${v.metadata.uid}/${node}`
      this.lastSync.set(k, this.c.clock.now())
      const cur = this.c.store.get({ kind: 'Volume', namespace: v.metadata.namespace ?? 'default', name: v.metadata.name })
      if (cur === undefined || cur.metadata.uid !== v.metadata.uid || statusOf(cur).node !== this.c.nodeName) return
      const prev = replicasOf(statusOf(cur))[node]
      // A VM has the disk but its qemu is not running (booting, restarting): no copy now, and none from a host mount.
      const vm = this.c.heldByVm?.(cur.metadata.namespace ?? 'default', cur.metadata.name)
      if (vm !== undefined && vm.qmp === undefined) continue
      try {
        const r = await this.syncOne(cur, node)
        const idle = r.changed === 0
        const lastIdle = this.lastIdleWrite.get(k) ?? 0
        if (idle && prev?.error === undefined && prev?.syncedAt !== undefined && r.at - lastIdle < IDLE_STATUS_MS) continue
        if (idle) this.lastIdleWrite.set(k, r.at)
        await this.c.writeStatus(
          cur,
          { replicas: { ...replicasOf(statusOf(cur)), [node]: { syncedAt: iso(r.at), lastSentBytes: idle ? (prev?.lastSentBytes ?? 0) : r.bytes } } },
          idle
            ? `replica on ${node} in sync`
            : r.blocks !== undefined
              ? `replica on ${node} synced at block level (${r.blocks}): ${r.changed} ranges, ${r.bytes} bytes sent`
              : `replica on ${node} synced: ${r.changed} changed, ${r.removed} removed, ${r.bytes} bytes sent`,
        )
      } catch (err) {
        const msg = (err as Error).message.slice(0, 300)
        this.c.log.info({ volume: v.metadata.name, node, err: msg }, 'replica sync failed')
        if (prev?.error !== msg)
          await this.c
            .writeStatus(cur, { replicas: { ...replicasOf(statusOf(cur)), [node]: { ...prev, error: msg } } }, `sync to replica on ${node} failed`)
            .catch(() => undefined)
      }
    }
  }

  /** One sync of volume `v` to `node`: what changed since the replica's copy, from a frozen moment. */
  async syncOne(v: Stored<Volume>, node: string): Promise<SyncResult> {
    const ns = v.metadata.namespace ?? 'default'
    const path = `/v1/volumes/${encodeURIComponent(ns)}/${encodeURIComponent(v.metadata.name)}/replica`
    const uid = v.metadata.uid
    const vm = this.c.heldByVm?.(ns, v.metadata.name)
    if (vm !== undefined) return this.syncBlocks(v, node, vm)
    this.blockSent.delete(`${uid}/${node}`)
    const answer = (await this.c.peer.request(node, { method: 'GET', path: `${path}/manifest`, query: { uid } }, 120_000)) as { entries?: unknown }
    const theirs = Array.isArray(answer?.entries) ? (answer.entries as ManifestEntry[]) : []
    const info = this.c.local.info(uid)
    if (info === undefined) throw new OrcError('not_found', `volume ${v.metadata.name} has no data on this node`)
    const dir = join(this.base(), '.sync')
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    const file = join(dir, `${uid}-${node}-${this.c.clock.now()}.tar`)
    let plan = { send: [] as string[], remove: [] as string[], bytes: 0 }
    let at = 0
    try {
      // Mounted and copied with no VM taking the image meanwhile (attachToVm waits for this).
      const size = await this.exclusive(uid, async () => {
        if (this.c.heldByVm?.(ns, v.metadata.name) !== undefined)
          throw new OrcError('conflict', `volume ${v.metadata.name} became a VM's disk: copied at block level next time`)
        await this.c.local.ensure({ uid, namespace: ns, name: v.metadata.name, sizeBytes: info.sizeBytes })
        // A directory volume cannot be frozen: its copy is taken live (files may be of different moments).
        return this.c.local.tarPaths(uid, file, info.backing === 'loop', async (root) => {
          at = this.c.clock.now()
          plan = planSync(await walkManifest(root), theirs)
          return plan.send
        })
      })
      if (plan.send.length === 0 && plan.remove.length === 0) return { at, changed: 0, removed: 0, bytes: 0 }
      const id = `${uid}-${at}`
      let offset = 0
      for (;;) {
        const len = Math.min(SYNC_CHUNK_BYTES, size - offset)
        const data = len > 0 ? readSlice(file, offset, len) : Buffer.alloc(0)
        const done = offset + len >= size
        await this.c.peer.request(
          node,
          {
            method: 'POST',
            path: `${path}/sync`,
            body: { uid, id, offset, data: data.toString('base64'), done, ...(done ? { remove: plan.remove, at: iso(at), hasTar: size > 0 } : {}) },
          },
          done ? 30 * 60_000 : 120_000,
        )
        offset += len
        if (done) break
      }
      return { at, changed: plan.send.length, removed: plan.remove.length, bytes: size }
    } finally {
      rmSync(file, { force: true })
    }
  }

  /**
   * One block-level sync of `v` to `node` while VM `vm` has it as its disk: incremental when the
   * replica's copy is at the last block sync sent to it (and qemu still has that replica's bitmap),
   * full otherwise. The delta is taken by qemu into a temporary qcow2, sent in pieces, then removed.
   */
  private async syncBlocks(v: Stored<Volume>, node: string, vm: { vm: string; qmp?: string }): Promise<SyncResult> {
    const ns = v.metadata.namespace ?? 'default'
    const name = v.metadata.name
    const uid = v.metadata.uid
    if (vm.qmp === undefined) throw new OrcError('unavailable', `volume ${name} is the disk of vm/${vm.vm}, whose qemu is not running: no copy now`)
    const info = this.c.local.info(uid)
    if (info === undefined || info.backing !== 'loop') throw new OrcError('not_found', `volume ${name} has no ext4 image on this node`)
    const path = `/v1/volumes/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/replica`
    const k = `${uid}/${node}`
    const answer = (await this.c.peer.request(node, { method: 'GET', path: `${path}/block`, query: { uid } }, 120_000)) as { base?: unknown }
    const last = this.blockSent.get(k)
    const incremental = last !== undefined && answer?.base === last
    // Until this one is applied there, the bitmap no longer counts from what the replica has.
    this.blockSent.delete(k)
    // qemu runs as nobody: it passes through this directory (0711) to open the delta file (0600, its own).
    const dir = join(this.base(), '.blocksync')
    mkdirSync(dir, { recursive: true, mode: 0o711 })
    chmodSync(dir, 0o711)
    const target = join(dir, `${randomBytes(12).toString('hex')}.qcow2`)
    try {
      const d = await takeDelta({
        qmp: vm.qmp,
        image: this.c.local.imageOf(uid),
        node,
        incremental,
        target,
        sizeBytes: statSync(this.c.local.imageOf(uid)).size,
        run: this.c.run ?? execaRunner,
        now: () => this.c.clock.now(),
        jobId: `orc-sync-${node.replace(/[^A-Za-z0-9_.-]/g, '_')}-${this.c.clock.now()}`,
      })
      const kind = d.full ? 'full' : 'incremental'
      // Nothing written since: the replica is at this moment already.
      if (!d.full && d.ranges.length === 0) {
        this.blockSent.set(k, last!)
        return { at: d.at, changed: 0, removed: 0, bytes: 0, blocks: kind }
      }
      const id = `${uid}-b${d.at}`
      const pieces = planPieces(d.ranges, SYNC_CHUNK_BYTES)
      let offset = 0
      for (const [i, p] of pieces.entries()) {
        const data = readRanges(target, p)
        const done = i === pieces.length - 1
        await this.c.peer.request(
          node,
          {
            method: 'POST',
            path: `${path}/blocksync`,
            body: {
              uid,
              id,
              piece: i,
              offset,
              ranges: p.map((r) => [r.start, r.length, r.zero ? 'z' : 'd']),
              data: data.toString('base64'),
              done,
              ...(i === 0 ? (d.full ? { full: true } : { base: last }) : {}),
              ...(done ? { at: iso(d.at) } : {}),
            },
          },
          done ? 30 * 60_000 : 120_000,
        )
        offset += data.length
      }
      this.blockSent.set(k, id)
      return { at: d.at, changed: d.ranges.length, removed: 0, bytes: offset, blocks: kind }
    } finally {
      rmSync(target, { force: true })
    }
  }

  // ---- a replica ----

  /** Check that `peerId` is the primary of volume NS/NAME and that this node keeps a replica of it. */
  private checkSender(ns: string, name: string, uid: unknown, peerId: string | undefined): Stored<Volume> {
    const vol = this.c.store.get({ kind: 'Volume', namespace: ns, name })
    if (vol === undefined || vol.metadata.uid !== uid) throw new OrcError('not_found', `volume/${name} (uid ${String(uid)}) is not known on this node`)
    const st = statusOf(vol)
    const me = this.c.nodeName
    if (st.node === me) throw new OrcError('conflict', `this node (${me}) is the primary of volume/${name}: it takes no copies (one writer)`)
    if (replicasOf(st)[me] === undefined) throw new OrcError('conflict', `node ${me} keeps no replica of volume/${name}`)
    const from = peerId === undefined ? undefined : this.c.peer.nodeOfPeer(peerId)
    if (from === undefined || from !== st.node)
      throw new OrcError('forbidden', `only the primary of volume/${name} (node ${String(st.node)}) may send it copies, not ${from ?? peerId ?? 'a user'}`)
    if (this.c.heldHere(ns, name)) throw new OrcError('conflict', `a pod on this node still has volume/${name} mounted: no copy is applied under it`)
    return vol
  }

  /** A received sync's id (checked: it names files) and the directory its pieces are staged in (made). */
  private incoming(uid: string, body: Record<string, unknown>): { id: string; dir: string } {
    const id = typeof body.id === 'string' && /^[A-Za-z0-9_-]{1,128}$/.test(body.id) ? body.id : undefined
    if (id === undefined) throw new OrcError('invalid', 'id: a sync id (letters, digits, - and _)')
    const dir = this.replicaDir(uid)
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    return { id, dir }
  }

  /** A new sync (file or block level): a change set left by a crash is applied first, partial transfers dropped. */
  private async startIncoming(uid: string, dir: string): Promise<void> {
    await this.replay(uid)
    for (const f of readdirSync(dir)) if (f.startsWith('incoming-')) rmSync(join(dir, f), { force: true })
  }

  /** The replica's manifest (its copy made first, and a journal left by a crash applied). */
  async manifest(ns: string, name: string, uid: unknown, peerId: string | undefined): Promise<{ entries: ManifestEntry[] }> {
    const vol = this.checkSender(ns, name, uid, peerId)
    if (this.c.local.info(vol.metadata.uid) !== undefined) await this.replay(vol.metadata.uid)
    // Mounted (again, after block-level syncs: the file-level sync resumes on it).
    await this.c.local.ensure({ uid: vol.metadata.uid, namespace: ns, name, sizeBytes: volumeBytes(vol.spec) })
    return { entries: await walkManifest(this.c.local.dataOf(vol.metadata.uid)) }
  }

  /** A piece of a sync; the last one applies it. */
  async receive(ns: string, name: string, body: Record<string, unknown>, peerId: string | undefined): Promise<{ node: string; applied: boolean }> {
    const vol = this.checkSender(ns, name, body.uid, peerId)
    const uid = vol.metadata.uid
    const { id, dir } = this.incoming(uid, body)
    const file = join(dir, `incoming-${id}.tar`)
    const offset = Number(body.offset)
    if (offset === 0) await this.startIncoming(uid, dir)
    const have = existsSync(file) ? statSync(file).size : 0
    if (!Number.isInteger(offset) || offset !== have) throw new OrcError('invalid', `offset ${String(body.offset)}: this node has ${have} bytes of sync ${id}`)
    if (typeof body.data !== 'string') throw new OrcError('invalid', 'data: base64 bytes')
    appendFileSync(file, Buffer.from(body.data, 'base64'), { mode: 0o600 })
    if (body.done !== true) return { node: this.c.nodeName, applied: false }
    const remove = Array.isArray(body.remove) ? body.remove : []
    const bad = remove.find((p) => !safeManifestPath(p) || p === '.')
    if (bad !== undefined) {
      rmSync(file, { force: true })
      throw new OrcError('invalid', `remove: ${JSON.stringify(bad)} is not a path inside the volume`)
    }
    writeFileSync(join(dir, 'apply.json'), `${JSON.stringify({ tar: body.hasTar === false ? undefined : file, remove })}\n`, { mode: 0o600 })
    await this.replay(uid)
    return { node: this.c.nodeName, applied: true }
  }

  /**
   * Apply a received sync recorded in the journal (again, after a crash: removes, extraction and
   * block writes are idempotent). A file-level sync applies to the copy mounted, a block-level one to
   * its image unmounted; after a block-level one the copy is at that sync (`block-base`).
   */
  private async replay(uid: string): Promise<void> {
    const dir = this.replicaDir(uid)
    const journal = join(dir, 'apply.json')
    if (!existsSync(journal)) return
    const j = JSON.parse(readFileSync(journal, 'utf8')) as { kind?: string; tar?: string; remove: string[] } | BlockJournal
    if (j.kind === 'block') {
      const b = j as BlockJournal
      await this.c.local.unmount(uid)
      this.c.local.setBlockBase(uid, undefined)
      const image = this.c.local.imageOf(uid)
      const run = this.c.run ?? execaRunner
      await applyBlockRanges(image, b.data, stagedRanges(b.ranges), async (start, length) => {
        const r = await run('fallocate', ['--zero-range', '--offset', String(start), '--length', String(length), image], { timeoutMs: 120_000 }).catch(
          () => undefined,
        )
        return r?.exitCode === 0
      })
      this.c.local.setBlockBase(uid, b.id)
      rmSync(journal, { force: true })
      for (const f of [b.data, b.ranges]) rmSync(f, { force: true })
      return
    }
    const t = j as { tar?: string; remove: string[] }
    const info = this.c.local.info(uid)
    if (info !== undefined) await this.c.local.ensure({ uid, namespace: info.namespace, name: info.name, sizeBytes: info.sizeBytes })
    await this.c.local.applySync(uid, t.tar !== undefined && existsSync(t.tar) ? t.tar : undefined, t.remove)
    rmSync(journal, { force: true })
    if (t.tar !== undefined) rmSync(t.tar, { force: true })
  }

  /** The block-level sync this replica's copy is at (asked by the primary before a block sync; a journal left by a crash applied first). */
  async blockBase(ns: string, name: string, uid: unknown, peerId: string | undefined): Promise<{ node: string; base?: string }> {
    const vol = this.checkSender(ns, name, uid, peerId)
    if (this.c.local.info(vol.metadata.uid) === undefined) return { node: this.c.nodeName }
    await this.replay(vol.metadata.uid)
    const base = this.c.local.blockBase(vol.metadata.uid)
    return { node: this.c.nodeName, ...(base !== undefined ? { base } : {}) }
  }

  /**
   * A piece of a block-level sync (ranges and their bytes); the last one applies it. The first
   * piece says whether it is full or the sync it builds on (`base`): an incremental sync on a copy
   * that is not exactly at `base` is refused (the primary sends a full one next).
   */
  async receiveBlocks(ns: string, name: string, body: Record<string, unknown>, peerId: string | undefined): Promise<{ node: string; applied: boolean }> {
    const vol = this.checkSender(ns, name, body.uid, peerId)
    const uid = vol.metadata.uid
    const { id, dir } = this.incoming(uid, body)
    const piece = Number(body.piece)
    if (!Number.isInteger(piece) || piece < 0) throw new OrcError('invalid', `piece ${String(body.piece)}: a piece number`)
    const dataFile = join(dir, `incoming-${id}.blk`)
    const rangesFile = join(dir, `incoming-${id}.ranges`)
    if (piece === 0) {
      await this.startIncoming(uid, dir)
      const info = this.c.local.info(uid) ?? (await this.c.local.ensure({ uid, namespace: ns, name, sizeBytes: volumeBytes(vol.spec) }))
      if (info.backing !== 'loop')
        throw new OrcError('unavailable', `the copy of volume/${name} on node ${this.c.nodeName} is a directory: it takes no block-level sync`)
      if (body.full !== true) {
        const have = this.c.local.blockBase(uid)
        if (typeof body.base !== 'string' || have !== body.base)
          throw new OrcError(
            'conflict',
            `the copy of volume/${name} on node ${this.c.nodeName} is not at block sync ${String(body.base)} (it is at ${have ?? 'none'}): a full sync is needed`,
          )
      }
    }
    const have = existsSync(dataFile) ? statSync(dataFile).size : 0
    const pieces = existsSync(rangesFile)
      ? readFileSync(rangesFile, 'utf8')
          .split('\n')
          .filter((l) => l !== '').length
      : 0
    const offset = Number(body.offset)
    if (!Number.isInteger(offset) || offset !== have || piece !== pieces)
      throw new OrcError('invalid', `piece ${piece} at offset ${String(body.offset)}: this node has ${pieces} pieces, ${have} bytes of sync ${id}`)
    if (typeof body.data !== 'string') throw new OrcError('invalid', 'data: base64 bytes')
    const data = Buffer.from(body.data, 'base64')
    const ranges = checkBlockRanges(body.ranges, data.length, statSync(this.c.local.imageOf(uid)).size)
    appendFileSync(dataFile, data, { mode: 0o600 })
    appendFileSync(rangesFile, `${JSON.stringify(ranges)}\n`, { mode: 0o600 })
    if (body.done !== true) return { node: this.c.nodeName, applied: false }
    const j: BlockJournal = { kind: 'block', id, data: dataFile, ranges: rangesFile }
    writeFileSync(join(dir, 'apply.json'), `${JSON.stringify(j)}\n`, { mode: 0o600 })
    await this.replay(uid)
    return { node: this.c.nodeName, applied: true }
  }

  // ---- promotion ----

  /**
   * Make this node the primary of `vol` for the `ha` pod or VM bound here (its writer): allowed only when
   * this node keeps a synced replica and the primary's node is not alive as this node sees it (the
   * scheduler moved the pod because that node was lost for haAfter). Written as a revision by
   * controller:volume with the reason; receivers check the same rule (store/trust.ts).
   */
  async promote(vol: Stored<Volume>, holder: PromotionHolder): Promise<void> {
    const st = statusOf(vol)
    const me = this.c.nodeName
    const old = st.node
    const name = vol.metadata.name
    const mine = replicasOf(st)[me]
    if (old === undefined || old === me) return
    if (mine === undefined) throw new OrcError('conflict', `volume ${name} lives on node ${old}, not on this node (${me}), which keeps no replica of it`)
    if (holder.policy !== 'ha')
      throw new OrcError('conflict', `volume ${name} lives on node ${old}: only an ha pod or vm fails over to a replica (${holder.what} is not ha)`)
    if (mine.syncedAt === undefined) throw new OrcError('unavailable', `volume ${name}: the replica on this node (${me}) was never synced; nothing to promote`)
    if (this.c.peer.aliveNodes().includes(old))
      throw new OrcError('conflict', `volume ${name}: its primary node ${old} is alive; a replica is promoted only when the primary is lost`)
    if (this.c.local.info(vol.metadata.uid) !== undefined) await this.replay(vol.metadata.uid)
    await this.c.local.ensure({ uid: vol.metadata.uid, namespace: vol.metadata.namespace ?? 'default', name, sizeBytes: volumeBytes(vol.spec) })
    const rest: Record<string, VolumeReplicaStatus> = {}
    for (const [n, r] of Object.entries(replicasOf(st))) if (n !== me) rest[n] = r
    // The old primary becomes a replica: resynced from here when it is back.
    rest[old] = {}
    await this.c.writeStatus(
      vol,
      { node: me, phase: 'Available', attachedTo: undefined, attachedAt: undefined, replicas: rest, promotedAt: iso(this.c.clock.now()), promotedFrom: old },
      `replica on node ${me} promoted to primary for ha ${holder.what}: node ${old} is lost (data as of ${mine.syncedAt})`,
    )
    this.c.log.warn({ volume: name, from: old, syncedAt: mine.syncedAt }, 'volume replica promoted to primary')
  }
}

/** What one sync did (`blocks`: a block-level one, full or incremental). */
export interface SyncResult {
  at: number
  changed: number
  removed: number
  bytes: number
  blocks?: 'full' | 'incremental'
}

function readSlice(file: string, offset: number, len: number): Buffer {
  const buf = Buffer.alloc(len)
  const fd = openSync(file, 'r')
  try {
    readSync(fd, buf, 0, len, offset)
  } finally {
    closeSync(fd)
  }
  return buf
}
