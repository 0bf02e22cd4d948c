/**
 * The files of a pod's Config and Secret volumes, on a tmpfs: a Secret's clear values never touch
 * the node's disk. One directory per pod (`<base>/<pod uid>/<volume>`), written afresh by each
 * lifecycle run, bound read-only into the containers, removed with the pod. Secret files are 0400
 * and their directories 0500, owned by the host uid the pod's containers run as; Config files 0444.
 */
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, renameSync, rmdirSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { OrcError } from '../../model/index.ts'
import { isTmpfs } from '../../runtime/index.ts'
import type { ResolvedVolume } from './refs.ts'

/** The pod's resolv.conf and hosts, beside its volumes. */
const DNS_DIR = '_dns'

export class PodDataFiles {
  constructor(
    /** A directory on a tmpfs (default `/dev/shm/orc-<hash of the data dir>`). */
    readonly base: string,
  ) {}

  private ensureBase(): void {
    const parent = dirname(this.base)
    if (!isTmpfs(parent)) throw new OrcError('unavailable', `${parent} is not a tmpfs: refusing to write Secret files there (they would reach the disk)`)
    // 0711: the containers' uid traverses it to its own directory; nobody lists it.
    mkdirSync(this.base, { recursive: true, mode: 0o711 })
    chmodSync(this.base, 0o711)
  }

  /** Where a pod's volumes are. */
  dirOf(podUid: string): string {
    return join(this.base, podUid)
  }

  /** Write a pod's volumes afresh (replacing what an earlier run wrote); returns each volume's host directory. */
  write(podUid: string, volumes: readonly ResolvedVolume[], owner: { uid: number; gid: number }): Map<string, string> {
    this.ensureBase()
    const podDir = this.dirOf(podUid)
    rmSync(podDir, { recursive: true, force: true })
    mkdirSync(podDir, { mode: 0o711 })
    chmodSync(podDir, 0o711)
    const out = new Map<string, string>()
    const asRoot = process.getuid?.() === 0
    const own = (p: string) => {
      if (asRoot) chownSync(p, owner.uid, owner.gid)
    }
    for (const v of volumes) {
      const dir = join(podDir, v.name)
      const dirMode = v.secret ? 0o500 : 0o555
      const fileMode = v.secret ? 0o400 : 0o444
      const dirs = new Set<string>([dir])
      mkdirSync(dir, { mode: 0o700 })
      for (const f of v.files) {
        const path = join(dir, f.path)
        if (!path.startsWith(`${dir}/`)) throw new OrcError('invalid', `volume ${v.name}: path ${f.path} leaves the volume`)
        for (let d = dirname(path); d.startsWith(dir) && !dirs.has(d); d = dirname(d)) dirs.add(d)
        mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
        writeFileSync(path, f.data, { mode: 0o600 })
        chmodSync(path, fileMode)
        own(path)
      }
      // Directories last, deepest first: once 0500 the agent (root aside) could not write in them.
      for (const d of [...dirs].sort((a, b) => b.length - a.length)) {
        chmodSync(d, dirMode)
        own(d)
      }
      out.set(v.name, dir)
    }
    return out
  }

  /**
   * Write the pod's `/etc/resolv.conf` and `/etc/hosts` (`<pod dir>/_dns/`: no volume name starts
   * with `_`), world-readable, afresh on every container start; returns each file's host path.
   */
  writeDnsFiles(podUid: string, files: { resolvConf: string; hosts: string }): { resolvConf: string; hosts: string } {
    this.ensureBase()
    const podDir = this.dirOf(podUid)
    if (!existsSync(podDir)) mkdirSync(podDir, { mode: 0o711 })
    const dir = join(podDir, DNS_DIR)
    mkdirSync(dir, { recursive: true, mode: 0o755 })
    chmodSync(dir, 0o755)
    const out = { resolvConf: join(dir, 'resolv.conf'), hosts: join(dir, 'hosts') }
    // Replaced by rename: a container that has the old file bound keeps reading a whole one.
    for (const [path, text] of [
      [out.resolvConf, files.resolvConf],
      [out.hosts, files.hosts],
    ] as const) {
      writeFileSync(`${path}.tmp`, text, { mode: 0o644 })
      chmodSync(`${path}.tmp`, 0o644)
      renameSync(`${path}.tmp`, path)
    }
    return out
  }

  /** The volume directories a previous agent wrote for this pod, if all are still there (adopted containers bind them). */
  existing(podUid: string, names: readonly string[]): Map<string, string> | undefined {
    const out = new Map<string, string>()
    for (const n of names) {
      const dir = join(this.dirOf(podUid), n)
      if (!existsSync(dir)) return undefined
      out.set(n, dir)
    }
    return out
  }

  /** Remove a pod's files (pod stopped for good, deleted, or moved away). */
  remove(podUid: string): void {
    const dir = this.dirOf(podUid)
    if (!existsSync(dir)) return
    // 0500 directories: an unprivileged agent makes them writable again to remove what is inside.
    if (process.getuid?.() !== 0) chmodTree(dir)
    rmSync(dir, { recursive: true, force: true })
    // The node-wide directory goes with its last pod (rmdir refuses while another pod has files).
    try {
      rmdirSync(this.base)
    } catch {}
  }
}

function chmodTree(dir: string): void {
  try {
    chmodSync(dir, 0o700)
  } catch {
    return
  }
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) chmodTree(join(dir, e.name))
}
