/** Pod resource quantities (`500m`, `2`, `128Mi`, `1G`) to runtime limits. */
import { parseQuantity } from '../model/index.ts'
import type { ContainerResources } from './types.ts'

export { parseQuantity }

/** From a container's `resources.limits` (cpu in cores, memory in bytes, pids a count). */
export function resourcesFromLimits(limits: { cpu?: string | number; memory?: string | number; pids?: number } | undefined): ContainerResources {
  const out: ContainerResources = {}
  if (limits?.cpu !== undefined) out.cpu = parseQuantity(limits.cpu)
  if (limits?.memory !== undefined) out.memoryBytes = Math.floor(parseQuantity(limits.memory))
  if (limits?.pids !== undefined) out.pids = limits.pids
  return out
}
