/**
 * The dashboard's composed views: what one page shows, gathered from several API calls in one
 * answer. Each part the page can do without (the mesh of an agent without one, a route this
 * user may not call) is left out with the reason in `problems`, so the rest still shows.
 */
import { objectParams } from '../../agent/index.ts'
import type { Pod } from '../../model/index.ts'
import type { Stored } from '../../store/index.ts'
import { criticalChain, explainWhy, formatCriticalChain, formatWhy, parseWorkflowSnapshot, type WorkflowSnapshot } from '../../workflow/index.ts'
import { callRoute } from '../call.ts'
import { toYaml } from '../format.ts'
import { fetchMembers, podNodeOf, unreachableNodes } from '../liveness.ts'
import type { ApiCaller } from '../remote.ts'

type Problems = Record<string, string>

function optional<T>(problems: Problems, part: string, p: Promise<T>): Promise<T | undefined> {
  return p.catch((err: unknown) => {
    problems[part] = err instanceof Error ? err.message : String(err)
    return undefined
  })
}

/** The cluster map: nodes, this node's mesh peers and WireGuard tunnels, federations. */
export async function clusterMap(client: ApiCaller, now: number) {
  const problems: Problems = {}
  const [status, nodes, members, network, federations] = await Promise.all([
    optional(problems, 'status', callRoute(client, 'status')),
    callRoute(client, 'listObjects', { kind: 'Node' }),
    optional(problems, 'members', fetchMembers(client)),
    optional(problems, 'network', callRoute(client, 'network')),
    optional(problems, 'federations', callRoute(client, 'federations')),
  ])
  return {
    now,
    self: status?.node.name,
    cluster: status?.node.cluster,
    version: status?.node.version,
    mesh: status?.mesh,
    nodes: nodes.items,
    members: members ?? [],
    peers: status?.peers ?? [],
    network: network ? { state: network.state, reason: network.reason, iface: network.iface, prefix: network.prefix, endpoints: network.endpoints } : undefined,
    tunnels: network?.tunnels ?? [],
    federated: network?.federated ?? [],
    federations: federations?.federations ?? [],
    problems,
  }
}

/** A pod's page: the object, its spec as YAML, placement, events, and `orc why` with the critical chain. */
export async function podPage(client: ApiCaller, namespace: string, name: string, now: number) {
  const problems: Problems = {}
  const { object } = await callRoute(client, 'getObject', objectParams({ kind: 'Pod', namespace, name }))
  const pod = object as Stored<Pod>
  const [placement, events, members] = await Promise.all([
    optional(problems, 'placement', callRoute(client, 'podPlacement', { ns: namespace, name })),
    optional(problems, 'events', callRoute(client, 'events', {}, { query: { target: `pod/${name}`, namespace, limit: 200 } })),
    optional(problems, 'members', fetchMembers(client)),
  ])
  const node = podNodeOf(pod)
  const lost = node === undefined || members === undefined ? undefined : unreachableNodes(members, now).get(node)
  let workflow: WorkflowSnapshot | undefined
  let why
  if (pod.status?.workflow !== undefined) {
    try {
      workflow = parseWorkflowSnapshot(pod.status.workflow)
      const subject = `pod/${name}`
      // Durations of what still runs are measured up to now, as `orc why` does.
      const running = workflow.units.some((u) => u.state === 'running' || u.state === 'waiting') && workflow.cancelled === undefined
      const at = running ? Math.max(now, workflow.at) : workflow.at
      const explanation = explainWhy(workflow, 'running', { subject, now: at })
      const chain = criticalChain(workflow, 'running', { subject, now: at })
      why = { explanation, chain, text: formatWhy(explanation), chainText: formatCriticalChain(chain) }
    } catch (err) {
      problems.why = (err as Error).message
    }
  }
  return {
    now,
    pod,
    specYaml: toYaml(pod.spec),
    node,
    nodeLiveness: lost,
    placement,
    events: events?.events ?? [],
    workflow,
    why,
    problems,
  }
}
