/** The node network: WireGuard mesh between nodes and pod networking on each (see docs/networking.md). */
export { NodeNetwork, type NodeNetworkComponents, type MeshView, type PodAttachment, type PodNetworkHooks, type NetworkReport, type TunnelReport, type NetworkState } from './controller.ts'
export { withNetworkRoutes } from './api.ts'
export { meshViewOf } from './mesh-view.ts'
export { parseNetworkMode, NETWORK_DEFAULTS, NETWORK_NAMES_FILE, WIREGUARD_KEY_FILE, type NetworkMode, type NetworkSetup } from './options.ts'
export { networkNamesFor, decideSubnet, planPeers, chooseEndpoint, readPublishedNetwork, endpointsFromMultiaddrs, type NetworkNames, type PublishedNetwork } from './plan.ts'
