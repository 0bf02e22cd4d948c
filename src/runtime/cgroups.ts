/**
 * Per-container cgroups, nested under the agent's own cgroup (never at the hierarchy root, so a
 * supervisor that confines the agent also confines its pods). Works per controller with cgroup v1
 * (each controller its own hierarchy, as on hybrid hosts) or cgroup v2 (one unified tree).
 */
import { accessSync, constants, existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { ContainerResources, EnforcedLimits } from './types.ts'

export type Controller = 'pids' | 'memory' | 'cpu'
export const CONTROLLERS: Controller[] = ['pids', 'memory', 'cpu']

export interface ControllerPlace {
  version: 1 | 2
  /** Directory under which per-container cgroups are made (`<agent cgroup>/<name>`). */
  parent: string
}

export interface CgroupLayout {
  places: Partial<Record<Controller, ControllerPlace>>
  /**
   * cgroup v1 `cpuacct` (CPU time accounting for `orc top`) when it is its own hierarchy; where it
   * is mounted with `cpu` (or on v2, where cpu.stat counts) the cpu place serves.
   */
  cpuacct?: ControllerPlace
  /** Why a controller is not usable, for capability reports. */
  reasons: Partial<Record<Controller, string>>
}

interface SelfLine {
  controllers: string[]
  path: string
}

function parseSelfCgroup(text: string): SelfLine[] {
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [, ctl = '', ...rest] = l.split(':')
      return { controllers: ctl === '' ? [] : ctl.split(','), path: rest.join(':') }
    })
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK)
    return true
  } catch {
    return false
  }
}

/** Where each controller can be used from this process; inspects /proc/self/cgroup and the mounts. */
export function detectCgroupLayout(root = '/sys/fs/cgroup', selfFile = '/proc/self/cgroup', name = 'orc'): CgroupLayout {
  const places: CgroupLayout['places'] = {}
  const reasons: CgroupLayout['reasons'] = {}
  let lines: SelfLine[] = []
  try {
    lines = parseSelfCgroup(readFileSync(selfFile, 'utf8'))
  } catch (_err) {
    for (const c of CONTROLLERS) reasons[c] = `cannot read ${selfFile}`
    return { places, reasons }
  }
  const unified = lines.find((l) => l.controllers.length === 0)
  const v2root = existsSync(join(root, 'cgroup.controllers'))
    ? root
    : existsSync(join(root, 'unified', 'cgroup.controllers'))
      ? join(root, 'unified')
      : undefined
  for (const c of CONTROLLERS) {
    const v1 = lines.find((l) => l.controllers.includes(c))
    if (v1) {
      const mount = [join(root, v1.controllers.join(',')), join(root, c)].find((p) => existsSync(p))
      if (!mount) {
        reasons[c] = `cgroup v1 ${c} hierarchy not mounted under ${root}`
        continue
      }
      const own = join(mount, v1.path)
      if (!writable(own)) {
        reasons[c] = `cgroup v1 ${c}: ${own} not writable (needs root or delegation)`
        continue
      }
      places[c] = { version: 1, parent: join(own, name) }
      continue
    }
    if (unified && v2root) {
      const own = join(v2root, unified.path)
      let available: string[] = []
      try {
        available = readFileSync(join(own, 'cgroup.controllers'), 'utf8').trim().split(/\s+/)
      } catch {}
      if (!available.includes(c)) {
        reasons[c] = `cgroup v2: controller ${c} not available in ${own}`
        continue
      }
      if (!writable(own)) {
        reasons[c] = `cgroup v2 ${own} not writable (needs root or delegation)`
        continue
      }
      places[c] = { version: 2, parent: join(own, name) }
      continue
    }
    reasons[c] = `no cgroup hierarchy has the ${c} controller`
  }
  const acct = lines.find((l) => l.controllers.includes('cpuacct'))
  let cpuacct: ControllerPlace | undefined
  if (acct && !acct.controllers.includes('cpu')) {
    const mount = [join(root, acct.controllers.join(',')), join(root, 'cpuacct')].find((p) => existsSync(p))
    if (mount && writable(join(mount, acct.path))) cpuacct = { version: 1, parent: join(mount, acct.path, name) }
  }
  return { places, reasons, ...(cpuacct ? { cpuacct } : {}) }
}

export interface ContainerCgroups {
  /** cgroup.procs files the container's first process writes its pid into before exec. */
  procsFiles: string[]
  dirs: string[]
  enforced: EnforcedLimits
}

function ensureV2Subtree(parent: string, c: Controller): void {
  // parent = <own>/orc; enable the controller for <own>/orc's children and for <own>'s children.
  for (const dir of [join(parent, '..'), parent]) {
    const ctl = readFileSync(join(dir, 'cgroup.subtree_control'), 'utf8')
    if (!ctl.split(/\s+/).includes(c)) writeFileSync(join(dir, 'cgroup.subtree_control'), `+${c}`)
  }
}

/**
 * Make the container's cgroups and write its limits. Each cgroup is made even without its limit: the
 * pids one lets stop() find every process of the container, the memory and cpu (cpuacct) ones
 * account its use. Throws when a write fails.
 */
export function createContainerCgroups(layout: CgroupLayout, id: string, res: ContainerResources = {}): ContainerCgroups {
  const out: ContainerCgroups = { procsFiles: [], dirs: [], enforced: {} }
  // memory and cpu cgroups even without limits: they account the container's use (`orc top`)
  const want: (Controller | 'cpuacct')[] = ['pids', 'memory', 'cpu', 'cpuacct']
  for (const c of want) {
    const place = c === 'cpuacct' ? layout.cpuacct : layout.places[c]
    if (!place) continue
    const dir = join(place.parent, id)
    mkdirSync(place.parent, { recursive: true })
    if (place.version === 2 && c !== 'cpuacct') ensureV2Subtree(place.parent, c)
    mkdirSync(dir, { recursive: true })
    out.dirs.push(dir)
    const via = place.version === 1 ? 'cgroup-v1' : 'cgroup-v2'
    if (c === 'pids' && res.pids !== undefined) {
      writeFileSync(join(dir, 'pids.max'), String(res.pids))
      out.enforced.pids = via
    }
    if (c === 'memory' && res.memoryBytes !== undefined) {
      const bytes = String(Math.floor(res.memoryBytes))
      if (place.version === 1) {
        writeFileSync(join(dir, 'memory.limit_in_bytes'), bytes)
        // also cap swap where the kernel accounts it, else the limit just pushes pages to swap
        if (existsSync(join(dir, 'memory.memsw.limit_in_bytes'))) {
          try {
            writeFileSync(join(dir, 'memory.memsw.limit_in_bytes'), bytes)
          } catch {}
        }
      } else {
        writeFileSync(join(dir, 'memory.max'), bytes)
        if (existsSync(join(dir, 'memory.swap.max'))) writeFileSync(join(dir, 'memory.swap.max'), '0')
      }
      out.enforced.memoryBytes = via
    }
    if (c === 'cpu' && res.cpu !== undefined) {
      const period = 100_000
      const quota = Math.max(1000, Math.round(res.cpu * period))
      if (place.version === 1) {
        writeFileSync(join(dir, 'cpu.cfs_period_us'), String(period))
        writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(quota))
      } else {
        writeFileSync(join(dir, 'cpu.max'), `${quota} ${period}`)
      }
      out.enforced.cpu = via
    }
    out.procsFiles.push(join(dir, 'cgroup.procs'))
  }
  return out
}

/** Pids currently in the container's cgroups. */
export function cgroupPids(dirs: string[]): number[] {
  const pids = new Set<number>()
  for (const dir of dirs) {
    try {
      for (const l of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n')) if (l) pids.add(Number(l))
    } catch {}
  }
  return [...pids]
}

/** Remove the container's cgroups (and the runtime's parent once empty). Returns those left. */
export function removeContainerCgroups(dirs: string[]): string[] {
  const left: string[] = []
  for (const dir of dirs) {
    try {
      rmdirSync(dir)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') left.push(dir)
    }
    try {
      rmdirSync(join(dir, '..'))
    } catch {}
  }
  return left
}

/**
 * Remove `<own cgroup>/<name>` in every mounted hierarchy if empty (runc creates its relative
 * cgroupsPath in all v1 hierarchies and leaves the parent behind).
 */
export function removeRuntimeParents(name: string, root = '/sys/fs/cgroup', selfFile = '/proc/self/cgroup'): void {
  let lines: SelfLine[]
  try {
    lines = parseSelfCgroup(readFileSync(selfFile, 'utf8'))
  } catch {
    return
  }
  for (const l of lines) {
    const names = l.controllers.map((c) => c.replace(/^name=/, ''))
    const mounts = l.controllers.length === 0 ? [root, join(root, 'unified')] : [join(root, names.join(',')), ...names.map((n) => join(root, n))]
    for (const m of new Set(mounts)) {
      try {
        rmdirSync(join(m, l.path, name))
      } catch {}
    }
  }
}

export interface CgroupUsage {
  /** CPU time used since the cgroup was made, in seconds (null: no accounting cgroup). */
  cpuSeconds: number | null
  /** Working set: memory in use minus inactive file cache (what `kubectl top` shows), in bytes. */
  memoryBytes: number | null
}

function readNumber(path: string): number | undefined {
  try {
    const n = Number(readFileSync(path, 'utf8').trim())
    return Number.isFinite(n) ? n : undefined
  } catch {
    return undefined
  }
}

function statField(path: string, key: string): number | undefined {
  try {
    const line = readFileSync(path, 'utf8')
      .split('\n')
      .find((l) => l.startsWith(`${key} `))
    const n = Number(line?.split(' ')[1])
    return Number.isFinite(n) ? n : undefined
  } catch {
    return undefined
  }
}

/**
 * CPU and memory of a container from its cgroup directories (v1 cpuacct.usage / memory.usage_in_bytes
 * minus total_inactive_file; v2 cpu.stat usage_usec / memory.current minus inactive_file).
 */
export function readCgroupUsage(dirs: readonly string[]): CgroupUsage {
  let cpuSeconds: number | null = null
  let memoryBytes: number | null = null
  for (const dir of dirs) {
    if (cpuSeconds === null) {
      const ns = readNumber(join(dir, 'cpuacct.usage'))
      const us = ns === undefined ? statField(join(dir, 'cpu.stat'), 'usage_usec') : undefined
      if (ns !== undefined) cpuSeconds = ns / 1e9
      else if (us !== undefined) cpuSeconds = us / 1e6
    }
    if (memoryBytes === null) {
      const v1 = readNumber(join(dir, 'memory.usage_in_bytes'))
      const v2 = v1 === undefined ? readNumber(join(dir, 'memory.current')) : undefined
      const used = v1 ?? v2
      if (used !== undefined) {
        const inactive = statField(join(dir, 'memory.stat'), v1 !== undefined ? 'total_inactive_file' : 'inactive_file') ?? 0
        memoryBytes = Math.max(0, used - inactive)
      }
    }
  }
  return { cpuSeconds, memoryBytes }
}

/**
 * The cgroup directories of a process as the host mounts them (/proc/PID/cgroup joined to the v1
 * hierarchies or the v2 tree): how the oci runtime finds the cgroups runc made.
 */
export function cgroupDirsOfPid(pid: number, root = '/sys/fs/cgroup', procRoot = '/proc'): string[] {
  let lines: SelfLine[]
  try {
    lines = parseSelfCgroup(readFileSync(`${procRoot}/${pid}/cgroup`, 'utf8'))
  } catch {
    return []
  }
  const out: string[] = []
  for (const l of lines) {
    if (l.controllers.length === 0) {
      for (const base of [root, join(root, 'unified')]) if (existsSync(join(base, 'cgroup.controllers'))) out.push(join(base, l.path))
      continue
    }
    if (!l.controllers.some((c) => c === 'memory' || c === 'cpuacct')) continue
    const mount = [join(root, l.controllers.join(',')), ...l.controllers.map((c) => join(root, c))].find((p) => existsSync(p))
    if (mount) out.push(join(mount, l.path))
  }
  return out
}
