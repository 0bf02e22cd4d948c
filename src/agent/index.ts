// The agent's public surface. The daemon itself (store, Yjs, LevelDB, pino) is loaded only when an
// agent starts, so a CLI command that merely talks to the socket starts ~120 ms faster.
import type { Agent, AgentComponents } from './agent.ts'
import type { AgentOptions } from './options.ts'

/** Open the store, record this node (and cluster, on a fresh data dir), serve the local API. */
export async function startAgent(opts: AgentOptions, components: AgentComponents = {}): Promise<Agent> {
  const { startAgent: start } = await import('./agent.ts')
  return start(opts, components)
}

export type { Agent, AgentComponents, OpenStore } from './agent.ts'
export { stopOnSignals } from './signals.ts'
export { nodeNameFromHostname, ORC_VERSION, NODE_CONTROLLER } from './node-info.ts'
export { createApiHandler, errorBody, httpStatusOf, parseRev } from './api.ts'
export type { RouteHandlers, RouteHandler, RouteCall } from './router.ts'
export type { ApiHandler, ApiRequest, ApiResponse, ApiComponents, ApiErrorBody, ApplyResultItem, ApplyOutcome, NodeInfo, Query } from './api.ts'
export { serveOnSocket, MAX_REQUEST_BYTES } from './http.ts'
export type { SocketServer } from './http.ts'
export { agentOptionsFromEnv, defaultDataDir, readPid, resolveSocketPath, socketPathOf, SOCKET_FILE, PID_FILE, DEFAULT_CLUSTER_NAME } from './options.ts'
export type { AgentOptions } from './options.ts'
export { parseNetworkMode, type NetworkMode, type NetworkSetup } from './network/options.ts'
export { removeNetworkLeftovers, NETWORK_DOWN_FILE, type DownResponse, type NetworkReport, type TunnelReport } from './network/index.ts'
// Types only: cluster.ts loads libp2p, which the socket-only CLI commands must not pay for.
export type { ClusterNode, MeshSetup } from './cluster.ts'
// Pods: controller:lifecycle and what the CLI needs to explain pods.
export { AGENT_CONTROLLERS, checkAgentControllers } from './controllers.ts'
export type { PodLifecycle } from './pods/controller.ts'
export type { PodTunables } from './pods/options.ts'
// Operator tools: the HTTP listener's options, doctor, events, metrics (heavy parts load on use).
export { DEFAULT_HTTP_LISTEN, DEFAULT_HTTP_PORT, parseHttpListen } from './ops/options.ts'
export type { HttpListenOption } from './ops/options.ts'
export type { NodeOps, PeerRow } from './ops/node-ops.ts'
export type { Finding, Severity } from './ops/doctor.ts'
export type { ClusterEvent } from './ops/events.ts'
export type { RolloutView } from './deployments/index.ts'
export type { FederationView } from './federation/index.ts'
export { parsePrometheusText, type Sample } from './ops/metrics.ts'

/** `orc doctor` without an agent: what this machine can tell on its own. */
export async function localDoctorFindings(dataDir: string): Promise<import('./ops/doctor.ts').Finding[]> {
  const { hostFindings, portFindings } = await import('./ops/doctor.ts')
  return [
    ...(await hostFindings(dataDir)),
    ...(await portFindings([
      { port: 7419, what: 'mesh', flag: '--listen ADDR' },
      { port: 7418, what: 'install and metrics listener', flag: '--http-listen ADDR' },
    ])),
  ]
}
// netsim runs the federation's store routing and the testbed the node flags, as the agent does.
export { routedStore, type FederatedScope } from './federation/routed-store.ts'
export { NODE_FLAGS } from './ops/node-flags.ts'
// The route table (data and types only): the CLI builds its calls from it.
export { ROUTES, MEMBER_ROUTES, pathOf, objectParams } from './routes.ts'
export type { RouteName, RouteSpec, Permission, ParamsOf, QueryOf, BodyOf, ResponseOf, StatusView, MeshStatus, LogsAnswer, LogsQuery, TokenView } from './routes.ts'
// netsim runs each simulated node's real binder on virtual time.
export { Binder, type ViewBuilder } from './pods/binder.ts'
export { buildSchedView, type NodeMember } from './sched/index.ts'
export { buildFederatedSchedView } from './federation/scheduling.ts'
