/**
 * Replicated Volumes (docs/storage.md, "Replication"): the pure parts — which nodes keep the copies,
 * what a sync must send (a file-level diff of two manifests), and the manifest of a directory tree.
 *
 * A sync is incremental at file level, with rsync's quick check: a file whose type, size, mtime
 * (nanoseconds), mode and owner are the same on both sides is not sent. Changed files travel whole
 * in a tar; paths the replica has and the primary does not (or of another type) are removed.
 */
import { lstat, readdir, readlink } from 'node:fs/promises'
import { join } from 'node:path'
import { hashString, mix32 } from '../../sched/index.ts'

export interface ManifestEntry {
  /** Path relative to the volume root: `.` for the root itself, else `./a/b`. */
  p: string
  /** f: regular file, d: directory, l: symlink. Other types (sockets, fifos, devices) are not copied. */
  t: 'f' | 'd' | 'l'
  /** Size in bytes (files), 0 otherwise. */
  s: number
  /** mtime in nanoseconds (decimal string: more than 2^53). */
  m: string
  mode: number
  u: number
  g: number
  /** Symlink target. */
  l?: string
}

export interface SyncPlan {
  /** Paths to send (in tar order: parents before children). */
  send: string[]
  /** Paths the replica removes before it extracts, deepest first. */
  remove: string[]
  /** Bytes of file content to send. */
  bytes: number
}

function same(a: ManifestEntry, b: ManifestEntry): boolean {
  return a.t === b.t && a.s === b.s && a.m === b.m && a.mode === b.mode && a.u === b.u && a.g === b.g && a.l === b.l
}

function depth(p: string): number {
  return p.split('/').length
}

/** What to send so that `dst` becomes `src`. */
export function planSync(src: readonly ManifestEntry[], dst: readonly ManifestEntry[]): SyncPlan {
  const have = new Map(dst.map((e) => [e.p, e]))
  const want = new Map(src.map((e) => [e.p, e]))
  const send: string[] = []
  let bytes = 0
  for (const e of src) {
    const d = have.get(e.p)
    if (d !== undefined && same(e, d)) continue
    send.push(e.p)
    if (e.t === 'f') bytes += e.s
  }
  // Removed: absent from the source, or of another type there (a file that became a directory).
  const gone = dst.filter((e) => e.p !== '.' && (want.get(e.p)?.t ?? e.t) !== e.t).map((e) => e.p)
  for (const e of dst) if (e.p !== '.' && !want.has(e.p)) gone.push(e.p)
  // A path under one already removed goes with it.
  const sorted = [...new Set(gone)].sort((a, b) => depth(a) - depth(b) || (a < b ? -1 : 1))
  const removed = new Set<string>()
  const remove: string[] = []
  for (const p of sorted) {
    const parts = p.split('/')
    let covered = false
    for (let i = 2; i < parts.length && !covered; i++) covered = removed.has(parts.slice(0, i).join('/'))
    if (covered) continue
    removed.add(p)
    remove.push(p)
  }
  remove.sort((a, b) => depth(b) - depth(a) || (a < b ? -1 : 1))
  // The directories holding what changes are sent too (no content): applying changes their mtime
  // on the replica, and tar sets it back from the primary's.
  if (send.length > 0 || remove.length > 0) {
    const sent = new Set(send)
    for (const p of [...send, ...remove]) {
      const parts = p.split('/')
      for (let i = 2; i < parts.length; i++) {
        const dir = parts.slice(0, i).join('/')
        if (!sent.has(dir) && want.get(dir)?.t === 'd') {
          sent.add(dir)
          send.push(dir)
        }
      }
    }
  }
  send.sort((a, b) => (a === '.' ? -1 : b === '.' ? 1 : a < b ? -1 : a > b ? 1 : 0))
  return { send, remove, bytes }
}

/** A manifest path is one a replica may touch: `./`-relative, no `.`/`..` or empty components. */
export function safeManifestPath(p: unknown): p is string {
  if (typeof p !== 'string' || p.length > 4096 || p.includes('\0')) return false
  if (p === '.') return true
  if (!p.startsWith('./')) return false
  return p
    .slice(2)
    .split('/')
    .every((c) => c !== '' && c !== '.' && c !== '..')
}

/** The manifest of the tree at `root` (the root's own entry first; `lost+found` at the root left out). */
export async function walkManifest(root: string): Promise<ManifestEntry[]> {
  const out: ManifestEntry[] = []
  const visit = async (abs: string, rel: string): Promise<void> => {
    const st = await lstat(abs, { bigint: true })
    // The root's mtime is not compared: tar does not restore it on the replica.
    const base = { p: rel, s: 0, m: rel === '.' ? '0' : String(st.mtimeNs), mode: Number(st.mode & 0o7777n), u: Number(st.uid), g: Number(st.gid) }
    if (st.isSymbolicLink()) out.push({ ...base, t: 'l', l: await readlink(abs) })
    else if (st.isFile()) out.push({ ...base, t: 'f', s: Number(st.size) })
    else if (st.isDirectory()) {
      out.push({ ...base, t: 'd' })
      const names = (await readdir(abs)).sort()
      for (const n of names) {
        if (rel === '.' && n === 'lost+found') continue
        await visit(join(abs, n), rel === '.' ? `./${n}` : `${rel}/${n}`)
      }
    }
  }
  await visit(root, '.')
  return out
}

/**
 * The nodes that keep a volume's copies: the current ones that are still eligible, then the
 * eligible nodes in rendezvous-hash order of (volume uid, node) — deterministic, and a node joining
 * or leaving moves only the copies it takes or held.
 */
export function chooseReplicas(uid: string, primary: string, eligible: readonly string[], count: number, current: readonly string[] = []): string[] {
  const ok = new Set(eligible.filter((n) => n !== primary))
  const keep = current.filter((n) => ok.has(n)).slice(0, count)
  const rest = [...ok]
    .filter((n) => !keep.includes(n))
    .map((n) => [mix32(hashString(uid), hashString(n)), n] as const)
    .sort((a, b) => b[0] - a[0] || (a[1] < b[1] ? -1 : 1))
    .map(([, n]) => n)
  return [...keep, ...rest].slice(0, count)
}
