import { formatCpu, formatMemory } from './quantity.ts'

/**
 * Which of the VirtualMachines pinned to one node may start (pure): the node's VM controller asks
 * before it boots a guest. Pods bound to the node and guests already running hold their share; the
 * guests waiting to start are admitted oldest first (creation time, then namespace/name) while they
 * fit in what is left. A VM admitted earlier in that order counts against a later one even before it
 * boots, so two VMs applied at once resolve the same way every time; a running guest is never
 * stopped to make room (it holds what it has until it stops or is deleted).
 */

/** What one VM holds of its node: cpu in millicores, memory in bytes (guest and qemu's allowance). */
export interface VmClaim {
  /** `namespace/name`. */
  name: string
  cpu: number
  mem: number
  /** Creation time (ms): older VMs start first. */
  createdAt: number
  /** The guest runs now (or is starting or stopping): it holds its share whatever the order. */
  running: boolean
}

export interface NodeRoom {
  name: string
  /** Allocatable cpu (millicores) and memory (bytes); undefined: the node recorded none, nothing is refused. */
  cpu?: number
  mem?: number
}

/** Sum of the requests of the pods bound to the node (not finished for good). */
export interface PodsHeld {
  count: number
  cpu: number
  mem: number
}

/** Per VM name: undefined when it may start, else why not (one line, for `status.reason`). */
export function admitVms(node: NodeRoom, pods: PodsHeld, vms: readonly VmClaim[]): Map<string, string | undefined> {
  const out = new Map<string, string | undefined>()
  const held: VmClaim[] = vms.filter((v) => v.running).sort(byAge)
  for (const v of held) out.set(v.name, undefined)
  for (const v of vms.filter((x) => !x.running).sort(byAge)) {
    const why = refusal(node, pods, held, v)
    out.set(v.name, why)
    if (why === undefined) held.push(v)
  }
  return out
}

function byAge(a: VmClaim, b: VmClaim): number {
  return a.createdAt - b.createdAt || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
}

/**
 * `needs 2.1Gi memory; node n1 has 1.2Gi free of 4Gi (pods 512Mi, vm/default/other 1.1Gi)`, or
 * undefined when `v` fits beside the pods and `held`.
 */
function refusal(node: NodeRoom, pods: PodsHeld, held: readonly VmClaim[], v: VmClaim): string | undefined {
  const parts: string[] = []
  for (const [what, alloc, fmt, unit] of [
    ['cpu', node.cpu, formatCpu, ' cpu'],
    ['mem', node.mem, formatMemory, ' memory'],
  ] as const) {
    if (alloc === undefined) continue
    const podsUse = what === 'cpu' ? pods.cpu : pods.mem
    const others = held.filter((h) => h[what] > 0)
    const free = alloc - podsUse - others.reduce((s, h) => s + h[what], 0)
    if (v[what] <= free) continue
    const holders = [
      ...(pods.count > 0 ? [`${pods.count} pod${pods.count === 1 ? '' : 's'} ${fmt(podsUse)}`] : []),
      ...others.map((h) => `vm/${h.name} ${fmt(h[what])}`),
    ]
    parts.push(
      `needs ${fmt(v[what])}${unit}; node ${node.name} has ${fmt(Math.max(0, free))} free of ${fmt(alloc)}${holders.length > 0 ? ` (${holders.join(', ')})` : ''}`,
    )
  }
  return parts.length === 0 ? undefined : parts.join('; ')
}
