/**
 * Local Volumes on this node's disk (docs/storage.md). One directory per volume uid under
 * `<dataDir>/volumes/`:
 *
 *   <uid>/volume.json   who it is (namespace, name, size, backing)
 *   <uid>/disk.img      the ext4 image (loop backing), `fallocate`d: its size is reserved on disk
 *   <uid>/mnt/          where the image is mounted (loop), or the data itself (directory backing)
 *   .deleted/<uid>/     a deleted volume, kept for the grace period (`deletedAt` inside)
 *   .snapshots/<uid>/   tar snapshots
 *
 * Effects: files through node:fs, everything else (fallocate, mkfs.ext4, mount, umount, fsfreeze,
 * tar) through the injected command runner, so unit tests fake them.
 */
import {
  chmodSync,
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statfsSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import type { CommandRunner } from '../../effects/index.ts'
import { OrcError, type VolumeBacking, type VolumeSnapshotEntry } from '../../model/index.ts'

export interface LocalVolumeInfo {
  uid: string
  namespace: string
  name: string
  sizeBytes: number
  backing: VolumeBacking
  backingReason?: string
}

export interface LocalVolumesComponents {
  /** `<dataDir>/volumes`. */
  base: string
  run: CommandRunner
  /** Mounts need root; an unprivileged agent makes directory volumes. */
  isRoot: boolean
  /** Force directory backing (tests of the fallback; a node without loop devices). */
  noLoop?: boolean
  /** `/proc/self/mountinfo` text (tests give their own). */
  mountinfo?: () => string
}

const UID = /^[A-Za-z0-9_-]{1,64}$/

function checkUid(uid: string): void {
  if (!UID.test(uid)) throw new OrcError('invalid', `volume uid ${JSON.stringify(uid)} is not one`)
}

async function must(run: CommandRunner, cmd: string, args: string[], what: string, timeoutMs = 60_000): Promise<string> {
  const r = await run(cmd, args, { timeoutMs })
  if (r.exitCode !== 0)
    throw new OrcError('unavailable', `${what}: ${cmd} exited ${r.exitCode}: ${(r.stderr || r.stdout).trim().split('\n').slice(-2).join(' ')}`)
  return r.stdout
}

export class LocalVolumes {
  constructor(private readonly c: LocalVolumesComponents) {}

  dirOf(uid: string): string {
    checkUid(uid)
    return join(this.c.base, uid)
  }
  /** Where pods bind the volume: the mounted image, or the directory. */
  dataOf(uid: string): string {
    return join(this.dirOf(uid), 'mnt')
  }
  private trashOf(uid: string): string {
    checkUid(uid)
    return join(this.c.base, '.deleted', uid)
  }
  snapshotDirOf(uid: string): string {
    checkUid(uid)
    return join(this.c.base, '.snapshots', uid)
  }

  /** What is stored for a uid, if anything. */
  info(uid: string): LocalVolumeInfo | undefined {
    try {
      return JSON.parse(readFileSync(join(this.dirOf(uid), 'volume.json'), 'utf8')) as LocalVolumeInfo
    } catch {
      return undefined
    }
  }

  isMounted(path: string): boolean {
    const text = this.c.mountinfo?.() ?? readFileSync('/proc/self/mountinfo', 'utf8')
    // Field 5 is the mount point (octal escapes for spaces; our paths have none).
    return text.split('\n').some((l) => l.split(' ')[4] === path)
  }

  /** Free bytes of the filesystem holding the volumes. */
  freeBytes(): number {
    mkdirSync(this.c.base, { recursive: true, mode: 0o711 })
    const s = statfsSync(this.c.base)
    return Number(s.bavail) * Number(s.bsize)
  }

  /**
   * Make the volume ready to bind (idempotent): created on first use — an ext4 image of `sizeBytes`
   * mounted by loop, or a directory where that is not possible (the reason is returned) — and
   * mounted again after a reboot. Its root is owned by `owner` (the pod's host uid), mode 0770.
   */
  async ensure(v: { uid: string; namespace: string; name: string; sizeBytes: number }, owner?: { uid: number; gid: number }): Promise<LocalVolumeInfo> {
    const mnt = this.dataOf(v.uid)
    let info = this.info(v.uid)
    if (info === undefined) info = await this.create(v)
    if (info.backing === 'loop' && !this.isMounted(mnt)) await this.mountImage(v.uid, v.name)
    if (owner === undefined) return info
    if (this.c.isRoot) chownSync(mnt, owner.uid, owner.gid)
    chmodSync(mnt, 0o770)
    return info
  }

  /**
   * Mount the ext4 image. A mount writes to it (the journal replayed, the superblock's counts): a
   * replica's copy is no longer the block-level sync point it recorded (`block-base`), which goes first.
   */
  private async mountImage(uid: string, name: string): Promise<void> {
    this.setBlockBase(uid, undefined)
    await must(this.c.run, 'mount', ['-o', 'loop,nodev,nosuid', join(this.dirOf(uid), 'disk.img'), this.dataOf(uid)], `mount volume ${name}`)
  }

  /** The block-level sync a replica's unmounted copy is exactly at (blocksync.ts), if any. */
  blockBase(uid: string): string | undefined {
    try {
      const id = readFileSync(join(this.dirOf(uid), 'block-base'), 'utf8').trim()
      return id === '' ? undefined : id
    } catch {
      return undefined
    }
  }

  /** Record (or with undefined, forget) the block-level sync the copy is at (written whole: rename). */
  setBlockBase(uid: string, id: string | undefined): void {
    const file = join(this.dirOf(uid), 'block-base')
    if (id === undefined) {
      rmSync(file, { force: true })
      return
    }
    writeFileSync(`${file}.new`, `${id}\n`, { mode: 0o600 })
    renameSync(`${file}.new`, file)
  }

  /** The ext4 image of a loop volume. */
  imageOf(uid: string): string {
    return join(this.dirOf(uid), 'disk.img')
  }

  private async create(v: { uid: string; namespace: string; name: string; sizeBytes: number }): Promise<LocalVolumeInfo> {
    const dir = this.dirOf(v.uid)
    const free = this.freeBytes()
    let backing: VolumeBacking = 'loop'
    let backingReason: string | undefined
    if (this.c.noLoop) [backing, backingReason] = ['directory', 'loop backing turned off for this agent']
    else if (!this.c.isRoot) [backing, backingReason] = ['directory', 'the agent is not root: no loop mount (size not enforced)']
    else if (!existsSync('/dev/loop-control')) [backing, backingReason] = ['directory', 'no /dev/loop-control on this node (size not enforced)']
    if (backing === 'loop' && v.sizeBytes > free)
      throw new OrcError('unavailable', `volume ${v.name} needs ${formatBytes(v.sizeBytes)} but the node has ${formatBytes(free)} free under ${this.c.base}`, {
        need: v.sizeBytes,
        free,
      })
    mkdirSync(this.c.base, { recursive: true, mode: 0o711 })
    chmodSync(this.c.base, 0o711)
    const tmp = join(this.c.base, `.new-${v.uid}`)
    rmSync(tmp, { recursive: true, force: true })
    mkdirSync(join(tmp, 'mnt'), { recursive: true, mode: 0o711 })
    chmodSync(tmp, 0o711)
    if (backing === 'loop') {
      const img = join(tmp, 'disk.img')
      try {
        await must(this.c.run, 'fallocate', ['-l', String(v.sizeBytes), img], `reserve ${formatBytes(v.sizeBytes)} for volume ${v.name}`)
        await must(this.c.run, 'mkfs.ext4', ['-q', '-F', '-m', '0', '-L', v.name.slice(0, 16), img], `make the filesystem of volume ${v.name}`, 120_000)
      } catch (err) {
        rmSync(tmp, { recursive: true, force: true })
        throw err
      }
    }
    const info: LocalVolumeInfo = {
      uid: v.uid,
      namespace: v.namespace,
      name: v.name,
      sizeBytes: v.sizeBytes,
      backing,
      ...(backingReason ? { backingReason } : {}),
    }
    writeFileSync(join(tmp, 'volume.json'), `${JSON.stringify(info)}\n`, { mode: 0o600 })
    renameSync(tmp, dir)
    return info
  }

  /**
   * Thaw every mounted loop volume: an agent killed during a snapshot or a replica sync leaves its
   * volume frozen (writes blocked). At start no freeze of this agent is in progress.
   */
  async thawAll(): Promise<void> {
    if (!existsSync(this.c.base)) return
    for (const uid of readdirSync(this.c.base)) {
      if (uid.startsWith('.') || this.info(uid)?.backing !== 'loop' || !this.isMounted(this.dataOf(uid))) continue
      await this.c.run('fsfreeze', ['-u', this.dataOf(uid)], { timeoutMs: 10_000 }).catch(() => undefined)
    }
  }

  /** Unmount (a loop volume); the data stays. */
  async unmount(uid: string): Promise<void> {
    const mnt = this.dataOf(uid)
    if (this.isMounted(mnt)) await must(this.c.run, 'umount', [mnt], `unmount volume ${uid}`)
  }

  /** A deleted volume: unmounted and moved aside with the time, until `purge` or `restore`. */
  async trash(uid: string, now: number): Promise<boolean> {
    const dir = this.dirOf(uid)
    if (!existsSync(dir)) return false
    await this.unmount(uid)
    mkdirSync(join(this.c.base, '.deleted'), { recursive: true, mode: 0o700 })
    writeFileSync(join(dir, 'deletedAt'), new Date(now).toISOString())
    renameSync(dir, this.trashOf(uid))
    return true
  }

  /** Take a deleted volume's data back under a new uid (the restored Volume's). */
  restore(fromUid: string, toUid: string): LocalVolumeInfo {
    const from = this.trashOf(fromUid)
    if (!existsSync(from)) throw new OrcError('not_found', `no deleted volume ${fromUid} on this node (cleaned after its grace period, or never here)`)
    const to = this.dirOf(toUid)
    if (existsSync(to)) throw new OrcError('conflict', `volume ${toUid} already has data on this node`)
    rmSync(join(from, 'deletedAt'), { force: true })
    const info = { ...(JSON.parse(readFileSync(join(from, 'volume.json'), 'utf8')) as LocalVolumeInfo), uid: toUid }
    writeFileSync(join(from, 'volume.json'), `${JSON.stringify(info)}\n`, { mode: 0o600 })
    renameSync(from, to)
    // Its snapshots follow it.
    if (existsSync(this.snapshotDirOf(fromUid))) renameSync(this.snapshotDirOf(fromUid), this.snapshotDirOf(toUid))
    return info
  }

  /** The snapshots kept for a volume (each `NAME.tar` has its entry beside it, `NAME.json`). */
  snapshots(uid: string): VolumeSnapshotEntry[] {
    const dir = this.snapshotDirOf(uid)
    if (!existsSync(dir)) return []
    return readdirSync(dir)
      .filter((f) => f.endsWith('.json'))
      .flatMap((f) => {
        try {
          return [JSON.parse(readFileSync(join(dir, f), 'utf8')) as VolumeSnapshotEntry]
        } catch {
          return []
        }
      })
      .sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0))
  }

  /** The deleted volumes and when they were deleted (ms). */
  deleted(): { uid: string; at: number; info?: LocalVolumeInfo }[] {
    const d = join(this.c.base, '.deleted')
    if (!existsSync(d)) return []
    return readdirSync(d).flatMap((uid) => {
      try {
        const at = Date.parse(readFileSync(join(d, uid, 'deletedAt'), 'utf8').trim())
        let info: LocalVolumeInfo | undefined
        try {
          info = JSON.parse(readFileSync(join(d, uid, 'volume.json'), 'utf8')) as LocalVolumeInfo
        } catch {}
        return [{ uid, at: Number.isNaN(at) ? 0 : at, ...(info ? { info } : {}) }]
      } catch {
        return [{ uid, at: 0 }]
      }
    })
  }

  /** Remove deleted volumes older than the grace period; returns the uids removed. */
  purge(now: number, graceMs: number): string[] {
    const out: string[] = []
    for (const d of this.deleted()) {
      if (now - d.at < graceMs) continue
      rmSync(this.trashOf(d.uid), { recursive: true, force: true })
      rmSync(this.snapshotDirOf(d.uid), { recursive: true, force: true })
      out.push(d.uid)
    }
    return out
  }

  /**
   * A tar of the volume's files at `file`. `freeze`: the mounted ext4 is frozen (fsfreeze) while
   * tar reads it, so the copy is one moment of the filesystem even with a writer attached; writes
   * block meanwhile. A directory volume cannot be frozen: the caller takes it only with no pod attached.
   */
  async tarTo(uid: string, file: string, freeze: boolean): Promise<number> {
    const mnt = this.dataOf(uid)
    const info = this.info(uid)
    if (info === undefined) throw new OrcError('not_found', `volume ${uid} has no data on this node`)
    if (info.backing === 'loop' && !this.isMounted(mnt)) await this.mountImage(uid, info.name)
    if (freeze) await must(this.c.run, 'fsfreeze', ['-f', mnt], `freeze volume ${info.name}`)
    try {
      await must(this.c.run, 'tar', ['--numeric-owner', '-C', mnt, '-cf', file, '.'], `copy volume ${info.name}`, 30 * 60_000)
    } finally {
      if (freeze) await must(this.c.run, 'fsfreeze', ['-u', mnt], `thaw volume ${info.name}`)
    }
    return statSync(file).size
  }

  /**
   * A tar of only `paths` (a sync's changed files, `./`-relative, each without its children) at
   * `file`, from the volume frozen while tar reads (`freeze`): one moment of the filesystem.
   * `during` runs while it is frozen, before tar (the manifest walk), and returns the paths.
   */
  async tarPaths(uid: string, file: string, freeze: boolean, during: (root: string) => Promise<string[]>): Promise<number> {
    const mnt = this.dataOf(uid)
    const info = this.info(uid)
    if (info === undefined) throw new OrcError('not_found', `volume ${uid} has no data on this node`)
    // An unmounted image (a VM's disk) would walk as an empty directory: the replica would drop every file.
    if (info.backing === 'loop' && !this.isMounted(mnt))
      throw new OrcError('conflict', `volume ${info.name} is not mounted on this node: no file-level copy of it`)
    // Flushed first, so the freeze (which flushes too) blocks the writer only for what came since.
    if (freeze) await must(this.c.run, 'sync', ['-f', mnt], `flush volume ${info.name}`)
    if (freeze) await must(this.c.run, 'fsfreeze', ['-f', mnt], `freeze volume ${info.name}`)
    try {
      const paths = await during(mnt)
      if (paths.length === 0) return 0
      const list = `${file}.list`
      writeFileSync(list, paths.map((p) => `${p}\0`).join(''), { mode: 0o600 })
      try {
        await must(
          this.c.run,
          'tar',
          ['--numeric-owner', '--format=posix', '--no-recursion', '--null', '-C', mnt, '-cf', file, '-T', list],
          `copy volume ${info.name} for its replicas`,
          30 * 60_000,
        )
      } finally {
        rmSync(list, { force: true })
      }
    } finally {
      if (freeze) await must(this.c.run, 'fsfreeze', ['-u', mnt], `thaw volume ${info.name}`)
    }
    return statSync(file).size
  }

  /** A sync's changes applied to the volume: `remove` (relative paths, deepest first) then the tar's files. */
  async applySync(uid: string, tarFile: string | undefined, remove: readonly string[]): Promise<void> {
    const mnt = this.dataOf(uid)
    for (const p of remove) {
      // Every directory on the way must be a real directory of the volume, never a symlink out of it.
      const parts = p.split('/').slice(1, -1)
      let dir = mnt
      let inside = true
      for (const c of parts) {
        dir = join(dir, c)
        try {
          inside = lstatSync(dir).isDirectory()
        } catch {
          inside = false
        }
        if (!inside) break
      }
      if (inside) rmSync(join(mnt, p), { recursive: true, force: true })
    }
    if (tarFile !== undefined) await must(this.c.run, 'tar', ['--numeric-owner', '-p', '-C', mnt, '-xf', tarFile], `apply a sync to volume ${uid}`, 30 * 60_000)
  }

  /** Replace the volume's files with a tar's (a snapshot restore; no pod may have it attached). */
  async untarFrom(uid: string, file: string): Promise<void> {
    const mnt = this.dataOf(uid)
    for (const e of readdirSync(mnt)) if (e !== 'lost+found') rmSync(join(mnt, e), { recursive: true, force: true })
    await must(this.c.run, 'tar', ['--numeric-owner', '-C', mnt, '-xf', file], `restore volume ${uid}`, 30 * 60_000)
  }
}

export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  let v = n
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024
    i++
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`
}
