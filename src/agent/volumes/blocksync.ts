/**
 * Block-level replication of a Volume while a VM has it as its disk (docs/storage.md, "Replication
 * of VM disks"). The file-level sync cannot run then: the ext4 image is the guest's, unmounted from
 * the host. Instead, on the primary, qemu itself takes a point-in-time copy of what changed:
 *
 *   - a dirty bitmap per replica node (`orc-sync-NODE`, QMP `block-dirty-bitmap-add`) records the
 *     guest's writes since that replica's last sync;
 *   - the first sync (and any after qemu restarted, the bitmap being gone, or the replica's copy not
 *     being the one the bitmap counts from) is a full backup, started in one transaction with the
 *     bitmap's creation; the next ones are incremental backups of the bitmap (`sync: incremental`);
 *   - the backup job writes into a local temporary qcow2 (the delta), point-in-time as of the job's
 *     start (copy-before-write: crash-consistent, like a power cut; ext4's journal handles that);
 *   - `qemu-img map --output=json` of the delta gives its allocated extents: only those travel.
 *
 * Here: the delta's ranges and pieces and the checks of a received sync (pure), and the file work
 * they need (taking the delta through QMP, reading its ranges, applying the journal); replicas.ts drives the sync and the replica's side.
 */
import { chmodSync, chownSync, closeSync, fsyncSync, openSync, readFileSync, readSync, rmSync, writeSync } from 'node:fs'
import type { CommandRunner } from '../../effects/index.ts'
import { isPlainObject, OrcError } from '../../model/index.ts'
import { QmpClient } from '../../runtime/index.ts'

/** A range the replica writes: `[start, length, 'd']` (its bytes follow in the data) or `[start, length, 'z']` (zeros). */
export type BlockRange = [number, number, 'd' | 'z']

/** A range of the delta: where its bytes lie in the delta's qcow2 file (`src`), for a data range. */
export interface DeltaRange {
  start: number
  length: number
  zero: boolean
  src?: number
}

/** One extent of `qemu-img map --output=json`. */
export interface MapExtent {
  start: number
  length: number
  present?: boolean
  zero: boolean
  data: boolean
  offset?: number
}

/** Ranges are 512-byte aligned (sectors); a data range at most this long (a piece holds whole ranges). */
export const MAX_DATA_RANGE = 4 * 1024 * 1024
/** The uid qemu runs as (`-runas nobody`): it opens the delta file. */
const QEMU_UID = 65534

/**
 * The ranges a replica writes, from the map of a backup's delta: written data (split in ranges of at
 * most `maxRange`), written zeros, and — for a full backup only — what the job left unwritten
 * (qemu skips zeros of the source on a fresh target): zeros too. In an incremental backup an
 * unwritten extent is unchanged.
 */
export function deltaRanges(extents: readonly MapExtent[], full: boolean, maxRange = MAX_DATA_RANGE): DeltaRange[] {
  const out: DeltaRange[] = []
  const push = (r: DeltaRange) => {
    const last = out[out.length - 1]
    if (r.zero && last?.zero && last.start + last.length === r.start) last.length += r.length
    else out.push(r)
  }
  for (const e of [...extents].sort((a, b) => a.start - b.start)) {
    if (e.length <= 0) continue
    const present = e.present ?? (e.data || e.zero)
    if (!present) {
      if (full) push({ start: e.start, length: e.length, zero: true })
      continue
    }
    if (!e.data) {
      push({ start: e.start, length: e.length, zero: true })
      continue
    }
    if (e.offset === undefined) throw new OrcError('unavailable', `the delta's extent at ${e.start} has no offset in its file (compressed?)`)
    for (let at = 0; at < e.length; at += maxRange) push({ start: e.start + at, length: Math.min(maxRange, e.length - at), zero: false, src: e.offset + at })
  }
  return out
}

/** The ranges in pieces of at most `chunkBytes` of data each (zero ranges go with the piece they fall in). */
export function planPieces(ranges: readonly DeltaRange[], chunkBytes: number): DeltaRange[][] {
  const pieces: DeltaRange[][] = []
  let cur: DeltaRange[] = []
  let bytes = 0
  for (const r of ranges) {
    const len = r.zero ? 0 : r.length
    if (cur.length > 0 && bytes + len > chunkBytes) {
      pieces.push(cur)
      cur = []
      bytes = 0
    }
    cur.push(r)
    bytes += len
  }
  if (cur.length > 0 || pieces.length === 0) pieces.push(cur)
  return pieces
}

/** The bytes of a data range's source, read from the delta file. */
export function readRanges(file: string, ranges: readonly DeltaRange[]): Buffer {
  const parts: Buffer[] = []
  const fd = openSync(file, 'r')
  try {
    for (const r of ranges) {
      if (r.zero) continue
      const buf = Buffer.alloc(r.length)
      let got = 0
      while (got < r.length) {
        const n = readSync(fd, buf, got, r.length - got, r.src! + got)
        if (n === 0) throw new OrcError('unavailable', `the delta file ends before ${r.src! + got}`)
        got += n
      }
      parts.push(buf)
    }
  } finally {
    closeSync(fd)
  }
  return Buffer.concat(parts)
}

/**
 * The ranges of a received piece, checked (peer input): `[start, length, 'd'|'z']`, 512-byte
 * aligned, inside an image of `imageBytes`, and data ranges adding up to `dataBytes`.
 */
export function checkBlockRanges(raw: unknown, dataBytes: number, imageBytes: number): BlockRange[] {
  if (!Array.isArray(raw) || raw.length > 1_000_000) throw new OrcError('invalid', 'ranges: a list of [start, length, "d"|"z"]')
  let sum = 0
  const out: BlockRange[] = []
  for (const [i, r] of raw.entries()) {
    const ok =
      Array.isArray(r) &&
      r.length === 3 &&
      Number.isSafeInteger(r[0]) &&
      Number.isSafeInteger(r[1]) &&
      r[0] >= 0 &&
      r[1] > 0 &&
      r[0] % 512 === 0 &&
      r[1] % 512 === 0 &&
      (r[2] === 'd' || r[2] === 'z')
    if (!ok) throw new OrcError('invalid', `ranges[${i}]: ${JSON.stringify(r).slice(0, 80)} is not [start, length, "d"|"z"] on 512-byte boundaries`)
    if (r[0] + r[1] > imageBytes) throw new OrcError('invalid', `ranges[${i}]: ${r[0]}+${r[1]} is past the end of the ${imageBytes}-byte image`)
    if (r[2] === 'd') sum += r[1]
    out.push([r[0], r[1], r[2]])
  }
  if (sum !== dataBytes) throw new OrcError('invalid', `ranges: the data ranges add up to ${sum} bytes, the piece holds ${dataBytes}`)
  return out
}

/** The journal of a received block sync: the whole sync staged, applied (again, after a crash) to the copy's image. */
export interface BlockJournal {
  kind: 'block'
  id: string
  /** The staged data: every data range's bytes, in order. */
  data: string
  /** The staged ranges: one JSON list a line (a piece each). */
  ranges: string
}

/** Read a journal's staged ranges (each line a piece's list). */
export function stagedRanges(file: string): BlockRange[] {
  const text = readFileSync(file, 'utf8')
  return text
    .split('\n')
    .filter((l) => l !== '')
    .flatMap((l) => JSON.parse(l) as BlockRange[])
}

/** Zero ranges at least this long are zeroed by `fallocate --zero-range` (no bytes written; the space stays reserved). */
export const ZERO_RANGE_MIN = 1024 * 1024

/**
 * Write a staged block sync into `image` (the replica's copy, unmounted): each data range from the
 * staged data in order, zeros for a zero range (a long one through `zeroRange`, e.g. `fallocate
 * --zero-range`, written as zeros if that fails); then fsync. Idempotent: a replay after a crash
 * writes the same bytes again.
 */
export async function applyBlockRanges(
  image: string,
  dataFile: string,
  ranges: readonly BlockRange[],
  zeroRange?: (start: number, length: number) => Promise<boolean>,
): Promise<{ bytes: number }> {
  const img = openSync(image, 'r+')
  const data = openSync(dataFile, 'r')
  let pos = 0
  let bytes = 0
  const zeros = Buffer.alloc(1024 * 1024)
  const buf = Buffer.alloc(MAX_DATA_RANGE)
  try {
    for (const [start, length, kind] of ranges) {
      if (kind === 'z' && length >= ZERO_RANGE_MIN && zeroRange !== undefined && (await zeroRange(start, length))) continue
      for (let done = 0; done < length; ) {
        if (kind === 'z') {
          const n = Math.min(zeros.length, length - done)
          writeAll(img, zeros, n, start + done)
          done += n
          continue
        }
        const n = Math.min(buf.length, length - done)
        let got = 0
        while (got < n) {
          const r = readSync(data, buf, got, n - got, pos + got)
          if (r === 0) throw new OrcError('invalid', `the staged data of a block sync ends at ${pos + got}`)
          got += r
        }
        writeAll(img, buf, n, start + done)
        pos += n
        done += n
        bytes += n
      }
    }
    // Durable, the zeroed ranges included (fsync covers the inode, whoever changed it).
    fsyncSync(img)
  } finally {
    closeSync(img)
    closeSync(data)
  }
  return { bytes }
}

function writeAll(fd: number, buf: Buffer, n: number, at: number): void {
  let w = 0
  while (w < n) w += writeSync(fd, buf, w, n - w, at + w)
}

/** What qemu says of one drive (`query-block`). */
interface BlockInfo {
  device?: string
  inserted?: { file?: string; image?: { filename?: string }; 'dirty-bitmaps'?: { name: string }[] }
}

/** The bitmap that counts a replica node's writes. */
export function bitmapName(node: string): string {
  return `orc-sync-${node}`
}

/**
 * Take a delta of the guest's disk `image` (the Volume's disk.img) from the qemu behind QMP socket
 * `qmp` into `target` (made here: an empty qcow2 of `sizeBytes`, owned by the uid qemu runs as):
 * incremental of the replica's bitmap when `incremental` and the bitmap is there, else full (the
 * bitmap made afresh in the same transaction). `at`: a moment before the copy's point in time.
 */
export async function takeDelta(o: {
  qmp: string
  image: string
  node: string
  incremental: boolean
  target: string
  sizeBytes: number
  run: CommandRunner
  now(): number
  jobId: string
  timeoutMs?: number
}): Promise<{ at: number; full: boolean; ranges: DeltaRange[] }> {
  const timeoutMs = o.timeoutMs ?? 30 * 60_000
  rmSync(o.target, { force: true })
  const made = await o.run('qemu-img', ['create', '-q', '-f', 'qcow2', o.target, String(o.sizeBytes)], { timeoutMs: 60_000 })
  if (made.exitCode !== 0) throw new OrcError('unavailable', `make the delta file: qemu-img exited ${made.exitCode}: ${made.stderr.trim()}`)
  chmodSync(o.target, 0o600)
  if (process.getuid?.() === 0) chownSync(o.target, QEMU_UID, QEMU_UID)
  const qmp = await QmpClient.connect(o.qmp)
  const bitmap = bitmapName(o.node)
  let full = true
  let at = 0
  try {
    const blocks = (await qmp.execute('query-block')) as BlockInfo[]
    const drive = blocks.find((b) => b.inserted?.file === o.image || b.inserted?.image?.filename === o.image)
    if (drive?.device === undefined || drive.device === '') throw new OrcError('unavailable', `qemu has no drive of ${o.image}`)
    const has = (drive.inserted?.['dirty-bitmaps'] ?? []).some((b) => b.name === bitmap)
    // Jobs of an earlier sync this agent did not finish (it restarted) are dismissed.
    for (const j of ((await qmp.execute('query-jobs')) as { id: string; status: string }[]) ?? [])
      if (j.id.startsWith('orc-sync-') && j.status === 'concluded') await qmp.execute('job-dismiss', { id: j.id }).catch(() => undefined)
    const backup = { device: drive.device, 'job-id': o.jobId, target: o.target, format: 'qcow2', mode: 'existing', 'auto-dismiss': false }
    full = !(o.incremental && has)
    at = o.now()
    if (full) {
      if (has) await qmp.execute('block-dirty-bitmap-remove', { node: drive.device, name: bitmap })
      // The bitmap starts counting at the moment the full copy is taken.
      await qmp.execute('transaction', {
        actions: [
          { type: 'block-dirty-bitmap-add', data: { node: drive.device, name: bitmap } },
          { type: 'drive-backup', data: { ...backup, sync: 'full' } },
        ],
      })
    } else await qmp.execute('drive-backup', { ...backup, sync: 'incremental', bitmap })
    const ev = await qmp.waitEvent(
      (e) => (e.event === 'BLOCK_JOB_COMPLETED' || e.event === 'BLOCK_JOB_CANCELLED') && e.data.device === o.jobId,
      timeoutMs,
      `end of backup job ${o.jobId}`,
    )
    await qmp.execute('job-dismiss', { id: o.jobId }).catch(() => undefined)
    if (ev.event === 'BLOCK_JOB_CANCELLED') throw new OrcError('unavailable', `backup job ${o.jobId} was cancelled`)
    if (typeof ev.data.error === 'string') throw new OrcError('unavailable', `backup job ${o.jobId}: ${ev.data.error}`)
  } catch (err) {
    // The next sync is a full one (the bitmap may have lost what this one took).
    await qmp.execute('query-block').then(
      (b) => {
        const d = (b as BlockInfo[]).find((x) => x.inserted?.file === o.image || x.inserted?.image?.filename === o.image)
        if (d?.device && (d.inserted?.['dirty-bitmaps'] ?? []).some((x) => x.name === bitmap))
          return qmp.execute('block-dirty-bitmap-remove', { node: d.device, name: bitmap })
      },
      () => undefined,
    )
    throw err
  } finally {
    qmp.close()
  }
  const map = await o.run('qemu-img', ['map', '--output=json', o.target], { timeoutMs: 120_000 })
  if (map.exitCode !== 0) throw new OrcError('unavailable', `map the delta: qemu-img exited ${map.exitCode}: ${map.stderr.trim()}`)
  let extents: unknown
  try {
    extents = JSON.parse(map.stdout)
  } catch {
    throw new OrcError('unavailable', 'map the delta: qemu-img gave no JSON')
  }
  if (!Array.isArray(extents) || !extents.every((e) => isPlainObject(e))) throw new OrcError('unavailable', 'map the delta: not a list of extents')
  return { at, full, ranges: deltaRanges(extents as unknown as MapExtent[], full) }
}
