/**
 * `orc top`: CPU and memory of this node (from /proc) and of the pods it runs (from each container's
 * cgroups, through the runtime). A rate needs two readings: `local()` reads, waits a second, reads
 * again. `orc top` on any node asks every live member for its own figures (the member route
 * `topLocal`) and joins them. The last reading also feeds the per-pod metrics. VirtualMachines'
 * qemu processes are read the same way from their own cgroups (`orc top vms`; not in the metrics).
 */
import { readFileSync } from 'node:fs'
import { type Clock, sleep } from '../../effects/index.ts'
import type { Pod } from '../../model/index.ts'
import type { ContainerUsage, Runtime, RuntimeKind } from '../../runtime/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import type { RouteHandlers } from '../router.ts'
import type { TopAnswer, TopNodeRow, TopPodRow } from '../routes.ts'
import { assignedTo, containerIdOf, podSpecOf } from './spec.ts'

export interface PodTopComponents {
  store: Pick<ObjectStore, 'list'>
  nodeName: string
  runtime(kind: RuntimeKind): Runtime
  clock: Clock
  /** The window between the two readings (default 1 s). */
  windowMs?: number
  /** /proc, for tests. */
  procRoot?: string
  /** The running VMs of this node and their qemu's cgroup usage (absent: no VMs shown). */
  vms?: () => { namespace: string; name: string; usage: ContainerUsage }[]
}

/** One container's reading. */
export interface ContainerReading extends ContainerUsage {
  namespace: string
  pod: string
  container: string
}

interface Reading {
  at: number
  /** Node CPU: busy and total jiffies (all CPUs) from /proc/stat. */
  busy: number
  total: number
  containers: ContainerReading[]
  /** One reading per running VM (container `qemu`). */
  vms: ContainerReading[]
}

/** Busy and total jiffies of all CPUs, and the CPU count (/proc/stat). */
export function readProcStatCpu(procRoot = '/proc'): { busy: number; total: number; cores: number } {
  const lines = readFileSync(`${procRoot}/stat`, 'utf8').split('\n')
  const f = (lines.find((l) => l.startsWith('cpu ')) ?? '').trim().split(/\s+/).slice(1).map(Number)
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  const total = f.slice(0, 8).reduce((a, b) => a + (b || 0), 0)
  const idle = (f[3] ?? 0) + (f[4] ?? 0)
  return { busy: total - idle, total, cores: Math.max(1, lines.filter((l) => /^cpu\d+ /.test(l)).length) }
}

/** Memory in use (MemTotal − MemAvailable) and MemTotal, in bytes (/proc/meminfo). */
export function readMeminfo(procRoot = '/proc'): { used: number; total: number } {
  const kb = (key: string, text: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0) * 1024
  const text = readFileSync(`${procRoot}/meminfo`, 'utf8')
  const total = kb('MemTotal', text)
  return { used: Math.max(0, total - kb('MemAvailable', text)), total }
}

export class PodTop {
  private last: Reading | undefined

  constructor(private readonly c: PodTopComponents) {}

  private runningPods(): Stored<Pod>[] {
    return this.c.store.list('Pod').filter((p) => assignedTo(p, this.c.nodeName) && (p.status as { phase?: string } | undefined)?.phase === 'Running')
  }

  private async read(): Promise<Reading> {
    const containers: ContainerReading[] = []
    for (const pod of this.runningPods()) {
      const spec = podSpecOf(pod)
      const rt = this.c.runtime(spec.runtime)
      for (const ct of spec.containers) {
        const u = await rt.usage(containerIdOf(pod.metadata.uid, ct.name)).catch(() => undefined)
        if (u === undefined) continue
        containers.push({ namespace: pod.metadata.namespace ?? 'default', pod: pod.metadata.name, container: ct.name, ...u })
      }
    }
    const vms = (this.c.vms?.() ?? []).map((v) => ({ namespace: v.namespace, pod: v.name, container: 'qemu', ...v.usage }))
    const cpu = readProcStatCpu(this.c.procRoot)
    return { at: this.c.clock.now(), busy: cpu.busy, total: cpu.total, containers, vms }
  }

  /** The most recent reading's containers (for metrics); empty before the first. */
  latest(): ContainerReading[] {
    return this.last?.containers ?? []
  }

  /** Read now and keep it (metrics refresh this way). */
  async refresh(): Promise<void> {
    this.last = await this.read()
  }

  /** This node's figures over a window: two readings `windowMs` apart. */
  async local(): Promise<TopAnswer> {
    const a = await this.read()
    await sleep(this.c.clock, this.c.windowMs ?? 1000)
    const b = await this.read()
    this.last = b
    const seconds = Math.max(0.001, (b.at - a.at) / 1000)
    const cpu = readProcStatCpu(this.c.procRoot)
    const mem = readMeminfo(this.c.procRoot)
    const node: TopNodeRow = {
      node: this.c.nodeName,
      cpuMillis: b.total > a.total ? Math.round(((b.busy - a.busy) / (b.total - a.total)) * cpu.cores * 1000) : 0,
      cpuCores: cpu.cores,
      memoryBytes: mem.used,
      memoryTotalBytes: mem.total,
      pods: this.runningPods().length,
    }
    return { nodes: [node], pods: this.rows(a.containers, b.containers, seconds), vms: this.rows(a.vms, b.vms, seconds), unreachable: [] }
  }

  /** Rows per pod (or VM) from two readings `seconds` apart: CPU as a rate, memory as the last reading. */
  private rows(a: ContainerReading[], b: ContainerReading[], seconds: number): TopPodRow[] {
    const key = (r: ContainerReading) => `${r.namespace}/${r.pod}/${r.container}`
    const before = new Map(a.map((r) => [key(r), r]))
    const pods = new Map<string, TopPodRow>()
    for (const r of b) {
      const prev = before.get(key(r))
      const millis = r.cpuSeconds !== null && prev?.cpuSeconds != null ? Math.max(0, ((r.cpuSeconds - prev.cpuSeconds) / seconds) * 1000) : null
      const podKey = `${r.namespace}/${r.pod}`
      let row = pods.get(podKey)
      if (row === undefined) {
        row = { namespace: r.namespace, name: r.pod, node: this.c.nodeName, cpuMillis: null, cpuSeconds: null, memoryBytes: null, containers: [] }
        pods.set(podKey, row)
      }
      row.containers.push({ name: r.container, cpuMillis: millis === null ? null : Math.round(millis), cpuSeconds: r.cpuSeconds, memoryBytes: r.memoryBytes })
      const add = (x: number | null, y: number | null) => (y === null ? x : (x ?? 0) + y)
      row.cpuMillis = add(row.cpuMillis, millis === null ? null : Math.round(millis))
      row.cpuSeconds = add(row.cpuSeconds, r.cpuSeconds)
      row.memoryBytes = add(row.memoryBytes, r.memoryBytes)
    }
    return [...pods.values()]
  }
}

/** Members that answer `topLocal` (cluster.askMembers), or none outside a cluster. */
export type AskMembers = (path: string, timeoutMs: number) => Promise<{ node: string; status?: number; body?: unknown; error?: string }[]>

/** Most rows of each list one member's answer may add (a node runs far fewer pods). */
const MAX_MEMBER_ROWS = 10_000
const MAX_CONTAINERS = 64

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)
const figure = (v: unknown): boolean => v === null || (typeof v === 'number' && Number.isFinite(v) && v >= 0)
const text = (v: unknown): boolean => typeof v === 'string' && v.length > 0 && v.length <= 253

function nodeRowOk(r: unknown): r is TopNodeRow {
  return isObj(r) && text(r.node) && ['cpuMillis', 'cpuCores', 'memoryBytes', 'memoryTotalBytes', 'pods'].every((k) => typeof r[k] === 'number' && figure(r[k]))
}

function podRowOk(r: unknown): r is TopPodRow {
  return (
    isObj(r) &&
    text(r.namespace) &&
    text(r.name) &&
    text(r.node) &&
    figure(r.cpuMillis) &&
    figure(r.cpuSeconds) &&
    figure(r.memoryBytes) &&
    Array.isArray(r.containers) &&
    r.containers.length <= MAX_CONTAINERS &&
    r.containers.every((c) => isObj(c) && text(c.name) && figure(c.cpuMillis) && figure(c.cpuSeconds) && figure(c.memoryBytes))
  )
}

/**
 * A member's answer to `topLocal`, checked: a member reports its own node only (`node` is the
 * member the answer came from), each row has the shape and finite, non-negative figures, and no
 * list exceeds MAX_MEMBER_ROWS. What fails is dropped and counted, not shown.
 */
export function memberTopRows(member: string, body: Partial<TopAnswer>): { nodes: TopNodeRow[]; pods: TopPodRow[]; vms: TopPodRow[]; dropped: number } {
  let dropped = 0
  const keep = <T extends { node: string }>(rows: unknown, ok: (r: unknown) => r is T): T[] => {
    if (!Array.isArray(rows)) return []
    const out: T[] = []
    for (const r of rows) {
      if (out.length < MAX_MEMBER_ROWS && ok(r) && r.node === member) out.push(r)
      else dropped++
    }
    return out
  }
  const nodes = keep(body.nodes, nodeRowOk)
  const pods = keep(body.pods, podRowOk)
  const vms = keep(body.vms, podRowOk)
  return { nodes, pods, vms, dropped }
}

/** The top routes: this node's own figures, and the cluster's (this node's joined with every live member's). */
export function topRoutes(top: () => PodTop, askMembers?: () => AskMembers | undefined) {
  return {
    topLocal: () => top().local(),
    top: async () => {
      const ask = askMembers?.()
      const [own, others] = await Promise.all([top().local(), ask ? ask('/v1/top/local', 15_000) : Promise.resolve([])])
      const out: TopAnswer = { nodes: [...own.nodes], pods: [...own.pods], vms: [...(own.vms ?? [])], unreachable: [] }
      for (const o of others) {
        const body = o.body as Partial<TopAnswer> | undefined
        if (o.error !== undefined || o.status !== 200 || !Array.isArray(body?.nodes) || !Array.isArray(body?.pods)) {
          const msg = o.error ?? ((body as { error?: { message?: string } } | undefined)?.error?.message || `answered ${o.status}`)
          out.unreachable.push({ node: o.node, error: msg })
          continue
        }
        // A member of an older version answers without VMs.
        const rows = memberTopRows(o.node, body)
        out.nodes.push(...rows.nodes)
        out.pods.push(...rows.pods)
        out.vms!.push(...rows.vms)
        if (rows.dropped > 0) out.unreachable.push({ node: o.node, error: `answered ${rows.dropped} malformed rows or rows about other nodes (not shown)` })
      }
      return out
    },
  } satisfies RouteHandlers
}
