import type { WorkflowGraph } from './graph.ts'

/**
 * The standard targets. A pod: `storage` and `network` are independent stages, `running` needs
 * both. A node: `ready` needs `network-online` (its tunnels up). Controllers attach units with
 * `wantedBy` and may add intermediate targets of their own.
 */
export const POD_TARGETS = ['storage', 'network', 'running'] as const
export const NODE_TARGETS = ['network-online', 'ready'] as const

export function addPodTargets(g: WorkflowGraph): WorkflowGraph {
  return g
    .addTarget({ name: 'storage', description: 'volumes and image filesystem prepared' })
    .addTarget({ name: 'network', description: 'pod network namespace and address configured' })
    .addTarget({ name: 'running', description: 'containers started', requires: ['storage', 'network'] })
}

export function addNodeTargets(g: WorkflowGraph): WorkflowGraph {
  return g
    .addTarget({ name: 'network-online', description: 'WireGuard tunnels and routes up' })
    .addTarget({ name: 'ready', description: 'node accepts pods', requires: ['network-online'] })
}
