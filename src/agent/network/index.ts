/** The node network: WireGuard mesh between nodes and pod networking on each (see docs/networking.md). */
export { NodeNetwork, type NodeNetworkComponents, type MeshView, type PodAttachment, type PodNetworkHooks, type NetworkReport, type TunnelReport, type NetworkState, type DownPlan, type FederatedTunnelReport } from './controller.ts'
export { networkRoutes, type DownResponse } from './api.ts'
export { removeNetworkLeftovers } from './leftovers.ts'
export { meshViewOf } from './mesh-view.ts'
export { parseNetworkMode, NETWORK_DEFAULTS, NETWORK_NAMES_FILE, NETWORK_DOWN_FILE, WIREGUARD_KEY_FILE, type NetworkMode, type NetworkSetup } from './options.ts'
export { networkNamesFor, unadvertisedRanges, decideSubnet, planPeers, chooseEndpoint, readPublishedNetwork, endpointsFromMultiaddrs, type NetworkNames, type PublishedNetwork } from './plan.ts'
export { planFederatedPeers, readSummaryNetwork, type FederationRouteSource, type FederatedScopeInput, type FederatedPeer, type FederatedPlan } from './federation.ts'
