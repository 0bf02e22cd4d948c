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
export type { ApiComponents, ApiErrorBody, ApiHandler, ApiRequest, ApiResponse, ApplyOutcome, ApplyResultItem, NodeInfo, Query } from './api.ts'
export { createApiHandler, errorBody, httpStatusOf, parseRev } from './api.ts'
export type { ImageInspectView, ImageListRow, ImagePullView } from './api-types.ts'
// Types only: cluster.ts loads libp2p, which the socket-only CLI commands must not pay for.
export type { ClusterNode, MeshSetup } from './cluster.ts'
// Pods: controller:lifecycle and what the CLI needs to explain pods.
export { AGENT_CONTROLLERS, checkAgentControllers } from './controllers.ts'
export type { RolloutView } from './deployments/index.ts'
export type { FederationGovernanceView, FederationProposalView, FederationView } from './federation/index.ts'
export type { SocketServer } from './http.ts'
export { MAX_REQUEST_BYTES, serveOnSocket } from './http.ts'
export { podIndex } from './jobs/index.ts'
export {
  type DownResponse,
  type FederatedTunnelReport,
  NETWORK_DOWN_FILE,
  type NetworkReport,
  removeNetworkLeftovers,
  type TunnelReport,
} from './network/index.ts'
export { type NetworkMode, type NetworkSetup, parseNetworkMode } from './network/options.ts'
export { NODE_CONTROLLER, nodeNameFromHostname, ORC_VERSION } from './node-info.ts'
export type { Finding, Severity } from './ops/doctor.ts'
export type { ClusterEvent } from './ops/events.ts'
export { parsePrometheusText, type Sample } from './ops/metrics.ts'
export type { NodeOps, PeerRow } from './ops/node-ops.ts'
export type { HttpListenOption } from './ops/options.ts'
// Operator tools: the HTTP listener's options, doctor, events, metrics (heavy parts load on use).
export { DEFAULT_HTTP_LISTEN, DEFAULT_HTTP_PORT, parseHttpListen } from './ops/options.ts'
export type { AgentOptions } from './options.ts'
export { agentOptionsFromEnv, DEFAULT_CLUSTER_NAME, defaultDataDir, PID_FILE, readPid, resolveSocketPath, SOCKET_FILE, socketPathOf } from './options.ts'
export type { PodLifecycle } from './pods/controller.ts'
export type { PodTunables } from './pods/options.ts'
export type { RouteCall, RouteHandler, RouteHandlers } from './router.ts'
export { type NodeAllocation, nodeAllocation } from './sched/index.ts'
export { stopOnSignals } from './signals.ts'

/** `orc doctor` without an agent: what this machine can tell on its own. */
export async function localDoctorFindings(dataDir: string): Promise<import('./ops/doctor.ts').Finding[]> {
  const { hostFindings, portFindings } = await import('./ops/doctor.ts')
  return [
    ...(await hostFindings(dataDir)),
    ...(await portFindings([
      { port: 7419, what: 'mesh', flag: '--listen ADDR' },
      { port: 7418, what: 'install and metrics listener', flag: '--http-listen ADDR' },
      { port: 7417, what: 'join listener', flag: '--join-listen ADDR' },
    ])),
  ]
}
// Ingress: the tcp-proxy controller, and what the CLI needs to explain an Ingress.
export { clusterEndpointReach, explainIngress, IngressController, TCP_PROXY } from './ingress/index.ts'
export type {
  BodyOf,
  LogsAnswer,
  LogsQuery,
  MeshStatus,
  ParamsOf,
  Permission,
  PodStreamIoAnswer,
  PodStreamIoBody,
  QueryOf,
  ResponseOf,
  RouteName,
  RouteSpec,
  StatusView,
  TokenView,
  TopAnswer,
} from './routes.ts'
// The route table (data and types only): the CLI builds its calls from it.
export { MEMBER_ROUTES, matchPattern, objectParams, pathOf, patternOf, ROUTES } from './routes.ts'
