/** Pod resource quantities (`500m`, `2`, `128Mi`, `1G`) to runtime limits. */
import { OrcError } from '../model/index.ts'
import type { ContainerResources } from './types.ts'

const SUFFIX: Record<string, number> = { '': 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4 }

export function parseQuantity(q: string | number): number {
  if (typeof q === 'number') return q
  const m = /^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti)?$/.exec(q)
  if (!m) throw new OrcError('invalid', `not a quantity: ${JSON.stringify(q)}`)
  return Number(m[1]) * SUFFIX[m[2] ?? '']!
}

/** From a container's `resources.limits` (cpu in cores, memory in bytes, pids a count). */
export function resourcesFromLimits(limits: { cpu?: string | number; memory?: string | number; pids?: number } | undefined): ContainerResources {
  const out: ContainerResources = {}
  if (limits?.cpu !== undefined) out.cpu = parseQuantity(limits.cpu)
  if (limits?.memory !== undefined) out.memoryBytes = Math.floor(parseQuantity(limits.memory))
  if (limits?.pids !== undefined) out.pids = limits.pids
  return out
}
