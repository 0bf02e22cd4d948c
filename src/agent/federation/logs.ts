/**
 * `orc logs` of a pod in a shared namespace, from any node of any member cluster: the pod's node is
 * `node@cluster`. This node answers itself when it runs the pod; another node of this cluster is
 * asked over the cluster's mesh (as for the cluster's own pods); a node of another cluster over the
 * federation's mesh (FederationManager.forwardLogs).
 */
import { type ApiResponse, OrcError, type Query } from '../../model/index.ts'
import { forwardTimeoutMs, forwardToPodNode, type LogsProxyComponents } from '../pods/logs-proxy.ts'
import { Passthrough, type RouteHandler, type RouteHandlers } from '../router.ts'
import type { ScopeRouter } from './routed-store.ts'
import { sharedPodNode } from './scheduling.ts'

export interface SharedLogsComponents {
  nodeName: string
  router: Pick<ScopeRouter, 'scopeOf'>
  /** Ask a node of another member cluster (FederationManager.forwardLogs). */
  forwardLogs(ns: string, pod: string, node: string, query: Record<string, string>, timeoutMs: number): Promise<ApiResponse>
  /** The cluster mesh's forwarding to members (cluster.ts); absent on a node without a mesh. */
  clusterProxy?: LogsProxyComponents
}

function flat(q: Query | undefined): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(q ?? {})) {
    const last = Array.isArray(v) ? v[v.length - 1] : v
    if (last !== undefined) out[k] = last
  }
  return out
}

/**
 * The logs route: shared pods as above; every other pod goes to `next` (the cluster's forwarding).
 * `local` answers for pods this node runs (and says why it cannot for one not bound yet).
 */
export function sharedPodLogs(c: SharedLogsComponents, local: RouteHandler<'podLogs'>, next: RouteHandler<'podLogs'>): RouteHandler<'podLogs'> {
  return async (call) => {
    const { ns, name } = call.params
    const scope = c.router.scopeOf(ns)
    const pod = scope?.store.get({ kind: 'Pod', namespace: ns, name })
    if (scope === undefined || pod === undefined) return next(call)
    const node = sharedPodNode(pod)
    const at = node?.lastIndexOf('@') ?? -1
    if (node === undefined || at <= 0 || node === `${c.nodeName}@${scope.cluster}`) return local(call)
    const timeoutMs = forwardTimeoutMs(call.req.query)
    if (node.slice(at + 1) !== scope.cluster) return new Passthrough(await c.forwardLogs(ns, name, node, flat(call.req.query), timeoutMs))
    if (c.clusterProxy === undefined) return local(call)
    // Another node of this cluster: the cluster's forwarding, told the node by its name in the cluster.
    const proxy = c.clusterProxy
    const here = node.slice(0, at)
    const store = {
      get: ((ref) =>
        ref.kind === 'Pod' && ref.namespace === ns && ref.name === name
          ? { ...pod, spec: { ...pod.spec, placement: { ...pod.spec?.placement, node: here } } }
          : proxy.store.get(ref)) as LogsProxyComponents['store']['get'],
    }
    const res = await forwardToPodNode({ ...proxy, store }, call.req, ns, name, timeoutMs)
    return res !== undefined ? new Passthrough(res) : local(call)
  }
}

const STREAM_ROUTES = ['podExec', 'podExecIo', 'podPortForward', 'podPortForwardIo'] as const

/**
 * exec and port-forward sessions do not reach pods of shared namespaces yet (docs/federation.md,
 * "Not built yet"): say so, instead of "not found" from the cluster's own store.
 */
export function refuseSharedStreams(router: Pick<ScopeRouter, 'scopeOf'>, handlers: RouteHandlers): RouteHandlers {
  const out: RouteHandlers = { ...handlers }
  for (const name of STREAM_ROUTES) {
    const h = handlers[name] as RouteHandler<typeof name> | undefined
    if (h === undefined) continue
    out[name] = (async (call: Parameters<RouteHandler<typeof name>>[0]) => {
      const { ns, name: pod } = call.params as { ns: string; name: string }
      const scope = router.scopeOf(ns)
      if (scope !== undefined)
        throw new OrcError(
          'unavailable',
          `pod/${pod} is in namespace ${ns}, shared with federation ${scope.federation}: orc exec and port-forward do not reach pods of shared namespaces yet`,
          { namespace: ns, name: pod },
        )
      return h(call as never)
    }) as never
  }
  return out
}
