/**
 * Requests about a pod of a shared namespace, from any node of any member cluster: the pod's node is
 * `node@cluster`. This node answers itself when it runs the pod; another node of this cluster is
 * asked over the cluster's mesh (as for the cluster's own pods). `orc logs` reaches a node of another
 * cluster too, over the federation's mesh (FederationManager.forwardLogs); exec and port-forward
 * sessions do not leave the cluster (below).
 */
import { type ApiRequest, type ApiResponse, OrcError, type Pod, type Query } from '../../model/index.ts'
import type { Stored } from '../../store/index.ts'
import { forwardTimeoutMs, forwardToPodNode, type LogsProxyComponents } from '../pods/logs-proxy.ts'
import { Passthrough, type RouteHandler, type RouteHandlers } from '../router.ts'
import type { FederatedScope, ScopeRouter } from './routed-store.ts'
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

/** Where a request about pod NS/NAME goes: not a shared pod (undefined), this node, or the pod's node (`node@cluster`). */
type SharedTarget = { at: 'here' } | { at: 'cluster' | 'other'; pod: Stored<Pod>; node: string; scope: FederatedScope }

function sharedTarget(c: Pick<SharedLogsComponents, 'nodeName' | 'router'>, ns: string, name: string): SharedTarget | undefined {
  const scope = c.router.scopeOf(ns)
  const pod = scope?.store.get({ kind: 'Pod', namespace: ns, name })
  if (scope === undefined || pod === undefined) return undefined
  const node = sharedPodNode(pod)
  const at = node?.lastIndexOf('@') ?? -1
  if (node === undefined || at <= 0 || node === `${c.nodeName}@${scope.cluster}`) return { at: 'here' }
  return { at: node.slice(at + 1) === scope.cluster ? 'cluster' : 'other', pod, node, scope }
}

/** Send `req` to the node of this cluster that runs shared pod `pod` (`node@cluster`), over the cluster's forwarding. */
function forwardInCluster(
  proxy: LogsProxyComponents,
  req: ApiRequest,
  pod: Stored<Pod>,
  node: string,
  timeoutMs: number,
  what: string,
): Promise<ApiResponse | undefined> {
  const ns = pod.metadata.namespace ?? 'default'
  const name = pod.metadata.name
  // The cluster's forwarding reads the pod's node from its store: told it by its name in the cluster.
  const here = node.slice(0, node.lastIndexOf('@'))
  const store = {
    get: ((ref) =>
      ref.kind === 'Pod' && ref.namespace === ns && ref.name === name
        ? { ...pod, spec: { ...pod.spec, placement: { ...pod.spec?.placement, node: here } } }
        : proxy.store.get(ref)) as LogsProxyComponents['store']['get'],
  }
  return forwardToPodNode({ ...proxy, store }, req, ns, name, timeoutMs, what)
}

/**
 * The logs route: shared pods as above; every other pod goes to `next` (the cluster's forwarding).
 * `local` answers for pods this node runs (and says why it cannot for one not bound yet).
 */
export function sharedPodLogs(c: SharedLogsComponents, local: RouteHandler<'podLogs'>, next: RouteHandler<'podLogs'>): RouteHandler<'podLogs'> {
  return async (call) => {
    const { ns, name } = call.params
    const t = sharedTarget(c, ns, name)
    if (t === undefined) return next(call)
    if (t.at === 'here') return local(call)
    const timeoutMs = forwardTimeoutMs(call.req.query)
    if (t.at === 'other') return new Passthrough(await c.forwardLogs(ns, name, t.node, flat(call.req.query), timeoutMs))
    if (c.clusterProxy === undefined) return local(call)
    const res = await forwardInCluster(c.clusterProxy, call.req, t.pod, t.node, timeoutMs, 'its logs')
    return res !== undefined ? new Passthrough(res) : local(call)
  }
}

/** Each session route, how long its forwarded exchange may take (a start may wait for a runtime launch; an exchange long-polls up to 20 s), and what it reaches. */
const STREAM_ROUTES = {
  podExec: [30_000, 'exec sessions'],
  podExecIo: [35_000, 'exec sessions'],
  podPortForward: [30_000, 'its ports'],
  podPortForwardIo: [35_000, 'its ports'],
} as const

/**
 * exec and port-forward of shared pods: answered here when this node runs the pod, forwarded to the
 * node of this cluster that does (the cluster's member API, which carries the asking user as for the
 * cluster's own pods). A pod on a node of another member cluster is refused with the reason: that
 * node would have to act for a user of this cluster, whom it does not know and whose roles it
 * cannot check (docs/federation.md). `handlers` are the routes for every other pod.
 */
export function sharedPodStreams(
  c: Pick<SharedLogsComponents, 'nodeName' | 'router' | 'clusterProxy'>,
  local: RouteHandlers,
  handlers: RouteHandlers = local,
): RouteHandlers {
  const out: RouteHandlers = { ...handlers }
  for (const [route, [timeoutMs, what]] of Object.entries(STREAM_ROUTES) as [
    keyof typeof STREAM_ROUTES,
    (typeof STREAM_ROUTES)[keyof typeof STREAM_ROUTES],
  ][]) {
    const next = handlers[route] as RouteHandler<typeof route> | undefined
    const here = local[route] as RouteHandler<typeof route> | undefined
    if (next === undefined || here === undefined) continue
    out[route] = (async (call: Parameters<RouteHandler<typeof route>>[0]) => {
      const { ns, name } = call.params as { ns: string; name: string }
      const t = sharedTarget(c, ns, name)
      if (t === undefined) return next(call as never)
      if (t.at === 'here') return here(call as never)
      if (t.at === 'other') {
        const cluster = t.node.slice(t.node.lastIndexOf('@') + 1)
        throw new OrcError(
          'unavailable',
          `pod/${name} in shared namespace ${ns} runs on node ${t.node}, in cluster ${cluster}: orc exec and port-forward reach only pods on this cluster's (${t.scope.cluster}) nodes; run it against a node of ${cluster}`,
          { namespace: ns, name, node: t.node },
        )
      }
      const res = c.clusterProxy === undefined ? undefined : await forwardInCluster(c.clusterProxy, call.req, t.pod, t.node, timeoutMs, what)
      return res !== undefined ? new Passthrough(res) : here(call as never)
    }) as never
  }
  return out
}
