/** Reading /proc: process identity (pid + start time), trees and pid namespaces. */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'

export interface ProcStat {
  pid: number
  ppid: number
  /** Start time in clock ticks after boot (field 22); with the pid it identifies one process. */
  startTicks: number
  state: string
}

/** Parse /proc/<pid>/stat; comm may hold spaces and parentheses, so split after the last ')'. */
export function parseProcStat(text: string): ProcStat | undefined {
  const open = text.indexOf('(')
  const close = text.lastIndexOf(')')
  if (open < 0 || close < open) return undefined
  const pid = Number(text.slice(0, open).trim())
  const rest = text.slice(close + 2).split(' ')
  // rest[0] is field 3 (state); field N is rest[N - 3]
  const state = rest[0] ?? ''
  const ppid = Number(rest[1])
  const startTicks = Number(rest[19])
  if (!Number.isInteger(pid) || !Number.isFinite(startTicks)) return undefined
  return { pid, ppid, startTicks, state }
}

export function readProcStat(pid: number, procRoot = '/proc'): ProcStat | undefined {
  try {
    return parseProcStat(readFileSync(`${procRoot}/${pid}/stat`, 'utf8'))
  } catch {
    return undefined
  }
}

/** True when `pid` is alive and is the same process that started at `startTicks` (not a zombie). */
export function isSameProcessAlive(pid: number, startTicks: number, procRoot = '/proc'): boolean {
  const st = readProcStat(pid, procRoot)
  return st !== undefined && st.startTicks === startTicks && st.state !== 'Z' && st.state !== 'X'
}

export function listProcs(procRoot = '/proc'): ProcStat[] {
  const out: ProcStat[] = []
  for (const name of readdirSync(procRoot)) {
    if (!/^[0-9]+$/.test(name)) continue
    const st = readProcStat(Number(name), procRoot)
    if (st) out.push(st)
  }
  return out
}

/** All descendants of `root` (not including it), parents before children. */
export function descendants(root: number, procs: ProcStat[] = listProcs()): number[] {
  const kids = new Map<number, number[]>()
  for (const p of procs) {
    const list = kids.get(p.ppid)
    if (list) list.push(p.pid)
    else kids.set(p.ppid, [p.pid])
  }
  const out: number[] = []
  const queue = [...(kids.get(root) ?? [])]
  while (queue.length > 0) {
    const pid = queue.shift()!
    out.push(pid)
    queue.push(...(kids.get(pid) ?? []))
  }
  return out
}

/** The pid of `pid` as seen in its innermost pid namespace (last NSpid entry). */
export function innerPid(pid: number, procRoot = '/proc'): number | undefined {
  try {
    const status = readFileSync(`${procRoot}/${pid}/status`, 'utf8')
    const line = status.split('\n').find((l) => l.startsWith('NSpid:'))
    if (!line) return undefined
    const parts = line.slice(6).trim().split(/\s+/)
    return Number(parts[parts.length - 1])
  } catch {
    return undefined
  }
}

export function pidNamespace(pid: number | 'self', procRoot = '/proc'): string | undefined {
  try {
    return readlinkSync(`${procRoot}/${pid}/ns/pid`)
  } catch {
    return undefined
  }
}

export function signalPid(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(pid, signal)
    return true
  } catch {
    return false
  }
}
