/** The node network: WireGuard mesh between nodes and pod networking on each (see docs/networking.md). */

export { type DownResponse, networkRoutes } from './api.ts'
export {
  type DownPlan,
  type FederatedTunnelReport,
  type MeshView,
  type NetworkReport,
  type NetworkState,
  NodeNetwork,
  type NodeNetworkComponents,
  type PodAttachment,
  type PodNetworkHooks,
  type TunnelReport,
} from './controller.ts'
export { MAX_SHARED_SERVICES, planSharedServices, type SharedServicesPlan } from './federated-services.ts'
export {
  type FederatedPeer,
  type FederatedPlan,
  type FederatedScopeInput,
  type FederationRouteSource,
  planFederatedPeers,
  readSummaryNetwork,
} from './federation.ts'
export { removeNetworkLeftovers } from './leftovers.ts'
export { connectOver, meshViewOf } from './mesh-view.ts'
export {
  NETWORK_DEFAULTS,
  NETWORK_DOWN_FILE,
  NETWORK_NAMES_FILE,
  type NetworkMode,
  type NetworkSetup,
  parseNetworkMode,
  WIREGUARD_KEY_FILE,
} from './options.ts'
export {
  chooseEndpoint,
  decideSubnet,
  endpointsFromMultiaddrs,
  ipv6Probes,
  type NetworkNames,
  networkNamesFor,
  type PublishedNetwork,
  planPeers,
  readPublishedNetwork,
  unadvertisedRanges,
} from './plan.ts'
