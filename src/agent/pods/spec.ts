/**
 * What the lifecycle controller reads from a Pod object: its containers as runtime specs, its
 * restart policy and grace period, and whether it belongs to this node. Pure functions of the
 * object, so they are tested without a store.
 */
import { createHash } from 'node:crypto'
import { field, type OrcObject, type UnsafeFeature } from '../../model/index.ts'
import { resourcesFromLimits, type ContainerResources } from '../../runtime/index.ts'

export type RestartPolicy = 'Always' | 'OnFailure' | 'Never'

export interface PodContainerSpec {
  name: string
  image: string
  command?: string[]
  args?: string[]
  env?: Record<string, string>
  workingDir?: string
  resources?: ContainerResources
}

export interface PodSpecView {
  containers: PodContainerSpec[]
  restartPolicy: RestartPolicy
  runtime: 'sandbox' | 'oci'
  graceMs: number
  unsafe: UnsafeFeature[]
  pin?: string
}

export const DEFAULT_GRACE_SECONDS = 10

function strings(v: unknown): string[] | undefined {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : undefined
}

export function podSpecOf(obj: OrcObject): PodSpecView {
  const containers = (field(obj, 'spec.containers') as Record<string, unknown>[] | undefined) ?? []
  const grace = field(obj, 'spec.terminationGracePeriodSeconds')
  return {
    containers: containers.map((c) => {
      const out: PodContainerSpec = { name: String(c.name), image: String(c.image) }
      const command = strings(c.command)
      const args = strings(c.args)
      if (command && command.length > 0) out.command = command
      if (args && args.length > 0) out.args = args
      if (Array.isArray(c.env)) {
        out.env = Object.fromEntries((c.env as { name: string; value?: string }[]).map((e) => [e.name, e.value ?? '']))
      }
      if (typeof c.workingDir === 'string') out.workingDir = c.workingDir
      const limits = (c.resources as { limits?: Record<string, unknown> } | undefined)?.limits
      if (limits) out.resources = resourcesFromLimits(limits as Parameters<typeof resourcesFromLimits>[0])
      return out
    }),
    restartPolicy: (field(obj, 'spec.restartPolicy') as RestartPolicy | undefined) ?? 'Always',
    runtime: (field(obj, 'spec.runtime') as 'sandbox' | 'oci' | undefined) ?? 'sandbox',
    graceMs: (typeof grace === 'number' ? grace : DEFAULT_GRACE_SECONDS) * 1000,
    unsafe: (strings(field(obj, 'spec.security.unsafe')) ?? []) as UnsafeFeature[],
    ...(typeof field(obj, 'spec.placement.node') === 'string' ? { pin: field(obj, 'spec.placement.node') as string } : {}),
  }
}

/** Identity of a spec: a change of it restarts the pod in place. */
export function specHash(obj: OrcObject): string {
  return createHash('sha256').update(JSON.stringify(obj.spec ?? {})).digest('hex').slice(0, 16)
}

/** The runtime's container id: unique per pod (uid) and container. */
export function containerIdOf(podUid: string, container: string): string {
  return `${podUid}.${container}`
}

/**
 * Does this pod run on `node`? A pin (`spec.placement.node`) decides alone; otherwise the
 * scheduler's binding (`status.node`).
 */
export function assignedTo(obj: OrcObject, node: string): boolean {
  const pin = field(obj, 'spec.placement.node')
  if (typeof pin === 'string' && pin !== '') return pin === node
  return field(obj, 'status.node') === node
}


