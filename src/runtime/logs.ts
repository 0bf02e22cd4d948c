/**
 * Container logs: stdout and stderr of a container go straight into one append-only file per pod
 * revision (`<logDir>/<revision>.log`), opened by the runtime and inherited by the container, so
 * output is neither lost nor blocked while the agent restarts. The agent bounds the files by
 * copy-and-truncate rotation (`N.log` → `N.log.1` → … , `maxFiles` in total): the writer keeps its
 * O_APPEND descriptor and continues at offset 0. The price: bytes written between the copy and the
 * truncate (microseconds) can be lost, and a file may overshoot maxBytes until the next check.
 */
import {
  closeSync,
  copyFileSync,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  watch,
} from 'node:fs'
import { join } from 'node:path'
import { type Clock, every, systemClock, unrefTimers } from '../effects/index.ts'
import type { LogRotation } from './options.ts'

export function logFilePath(logDir: string, revision: number): string {
  return join(logDir, `${revision}.log`)
}

/** Open (create) the live log file for appending; the fd is handed to the container. */
export function openLogFile(logDir: string, revision: number): number {
  mkdirSync(logDir, { recursive: true })
  return openSync(logFilePath(logDir, revision), 'a', 0o640)
}

/** Revisions with log files in `logDir`, ascending. */
export function listLogRevisions(logDir: string): number[] {
  let names: string[] = []
  try {
    names = readdirSync(logDir)
  } catch {
    return []
  }
  const revs = new Set<number>()
  for (const n of names) {
    const m = /^([0-9]+)\.log(\.[0-9]+)?$/.exec(n)
    if (m) revs.add(Number(m[1]))
  }
  return [...revs].sort((a, b) => a - b)
}

/** Existing files of one revision, oldest first. */
export function logFilesOf(logDir: string, revision: number): string[] {
  const live = logFilePath(logDir, revision)
  const rotated: { n: number; path: string }[] = []
  try {
    for (const name of readdirSync(logDir)) {
      const m = new RegExp(`^${revision}\\.log\\.([0-9]+)$`).exec(name)
      if (m) rotated.push({ n: Number(m[1]), path: join(logDir, name) })
    }
  } catch {
    return []
  }
  rotated.sort((a, b) => b.n - a.n)
  const out = rotated.map((r) => r.path)
  if (existsSync(live)) out.push(live)
  return out
}

/** Rotate the live file if it exceeds maxBytes. Returns true when it rotated. */
export function rotateIfNeeded(logDir: string, revision: number, rot: Pick<LogRotation, 'maxBytes' | 'maxFiles'>): boolean {
  const live = logFilePath(logDir, revision)
  let size: number
  try {
    size = statSync(live).size
  } catch {
    return false
  }
  if (size <= rot.maxBytes) return false
  const keep = Math.max(1, rot.maxFiles) - 1 // rotated files kept besides the live one
  if (keep > 0) {
    rmSync(`${live}.${keep}`, { force: true })
    for (let i = keep - 1; i >= 1; i--) {
      if (existsSync(`${live}.${i}`)) renameSync(`${live}.${i}`, `${live}.${i + 1}`)
    }
    copyFileSync(live, `${live}.1`)
  }
  truncateSync(live, 0)
  // drop anything beyond the bound left by an earlier, larger maxFiles
  for (const f of logFilesOf(logDir, revision)) {
    const m = /\.log\.([0-9]+)$/.exec(f)
    if (m && Number(m[1]) > keep) rmSync(f, { force: true })
  }
  return true
}

export interface ReadLogOptions {
  /** Which revision; default the newest that has logs. */
  revision?: number
  /** Only the last N lines. */
  tail?: number
}

function pickRevision(logDir: string, revision?: number): number | undefined {
  if (revision !== undefined) return revision
  const revs = listLogRevisions(logDir)
  return revs[revs.length - 1]
}

function splitLines(text: string): string[] {
  if (text === '') return []
  const lines = text.split('\n')
  if (lines[lines.length - 1] === '') lines.pop()
  return lines
}

/** All retained lines of a revision (rotated files first), or the last `tail`. */
export function readLogLines(logDir: string, opts: ReadLogOptions = {}): string[] {
  const rev = pickRevision(logDir, opts.revision)
  if (rev === undefined) return []
  const text = logFilesOf(logDir, rev)
    .map((f) => {
      try {
        return readFileSync(f, 'utf8')
      } catch {
        return ''
      }
    })
    .join('')
  const lines = splitLines(text)
  return opts.tail === undefined ? lines : opts.tail <= 0 ? [] : lines.slice(-opts.tail)
}

export interface FollowLogOptions extends ReadLogOptions {
  signal?: AbortSignal
  /** Fallback poll period besides inotify. Default 250 ms. */
  pollMs?: number
  /** Clock of the poll timer (default the system clock). */
  clock?: Clock
}

/**
 * The bytes of a file from offset `from` to its end, and its size; undefined when it cannot be
 * opened. A file shorter than `from` (truncated, rotated) gives no bytes and its size.
 */
export function readFileFrom(path: string, from: number): { bytes: Buffer; size: number } | undefined {
  let fd: number
  try {
    fd = openSync(path, 'r')
  } catch {
    return undefined
  }
  try {
    const size = fstatSync(fd).size
    if (size <= from) return { bytes: Buffer.alloc(0), size }
    const buf = Buffer.alloc(size - from)
    let got = 0
    while (got < buf.length) {
      const n = readSync(fd, buf, got, buf.length - got, from + got)
      if (n === 0) break
      got += n
    }
    return { bytes: buf.subarray(0, got), size }
  } finally {
    closeSync(fd)
  }
}

function readRange(path: string, from: number): { data: string; end: number } {
  const r = readFileFrom(path, from)
  if (r === undefined) return { data: '', end: from }
  if (r.size <= from) return { data: '', end: r.size }
  return { data: r.bytes.toString('utf8'), end: from + r.bytes.length }
}

/**
 * Yield the retained lines (or the last `tail`), then every new line as it is written, across
 * rotations, until `signal` aborts. A partial last line is held until its newline arrives.
 */
export async function* followLog(logDir: string, opts: FollowLogOptions = {}): AsyncGenerator<string> {
  const rev = pickRevision(logDir, opts.revision) ?? 0
  const live = logFilePath(logDir, rev)
  const pollMs = opts.pollMs ?? 250
  let offset = 0
  try {
    offset = statSync(live).size
  } catch {}
  // Initial lines: everything up to `offset` in the live file plus rotated files.
  const initial = readLogLines(logDir, { revision: rev, tail: opts.tail })
  let carry = ''
  {
    // If the live file ends without a newline, hold its last partial line for the follow phase.
    const head = readRange(live, 0)
    if (head.data !== '' && !head.data.endsWith('\n')) {
      carry = head.data.slice(head.data.lastIndexOf('\n') + 1)
      if (initial.length > 0 && initial[initial.length - 1] === carry) initial.pop()
    }
    offset = head.end
  }
  for (const l of initial) yield l
  if (opts.signal?.aborted) return

  let wake: (() => void) | undefined
  const kick = () => {
    const w = wake
    wake = undefined
    w?.()
  }
  let watcher: ReturnType<typeof watch> | undefined
  try {
    mkdirSync(logDir, { recursive: true })
    watcher = watch(logDir, () => kick())
  } catch {}
  // an abandoned follower must not keep the process alive; abort releases it even if never resumed
  const stopPolling = every(unrefTimers(opts.clock ?? systemClock), pollMs, kick)
  watcher?.unref()
  const onAbort = () => {
    stopPolling()
    watcher?.close()
    kick()
  }
  opts.signal?.addEventListener('abort', onAbort)
  // Rotation is copy-then-truncate: detect it by a new N.log.1 (fresh inode) or a shrunken file.
  const rotatedIno = () => {
    try {
      return statSync(`${live}.1`).ino
    } catch {
      return undefined
    }
  }
  let lastIno = rotatedIno()
  try {
    while (!opts.signal?.aborted) {
      let size = 0
      try {
        size = statSync(live).size
      } catch {}
      let data = ''
      const ino = rotatedIno()
      if (size < offset || ino !== lastIno) {
        lastIno = ino
        // rotated: the tail we had not read yet is at the end of N.log.1
        const rotated = readRange(`${live}.1`, offset)
        data += rotated.data
        offset = 0
      }
      const fresh = readRange(live, offset)
      data += fresh.data
      offset = fresh.end
      if (data !== '') {
        const text = carry + data
        const parts = text.split('\n')
        carry = parts.pop() ?? ''
        for (const l of parts) yield l
        continue
      }
      await new Promise<void>((resolve) => (wake = resolve))
    }
  } finally {
    stopPolling()
    watcher?.close()
    opts.signal?.removeEventListener('abort', onAbort)
  }
}
