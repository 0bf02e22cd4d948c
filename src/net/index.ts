/** Public surface of src/net: addressing (pure), route diffing (pure), and the drivers. */
export {
  type IpFamily,
  type IpAddress,
  type IpPrefix,
  parseIPv6,
  parseIPv4,
  parseIp,
  formatIPv6,
  formatIPv4,
  formatIp,
  canonicalIp,
  parsePrefix,
  formatPrefix,
  canonicalPrefix,
  prefixNetwork,
  prefixMask,
  prefixContains,
  prefixCovers,
} from './ip.ts'
export {
  type SubnetId,
  RESERVED_SUBNETS,
  clusterPrefix,
  nodePrefix,
  subnetOf,
  candidateSubnet,
  chooseNodeSubnet,
  settleSubnetCollision,
  settleSubnetClaims,
  nodeGateway,
  randomPodAddress,
  EGRESS_IPV4_PREFIX,
  EGRESS_IPV4_GATEWAY,
  chooseEgressIPv4,
  addressInPrefix,
} from './addressing.ts'
export {
  type Route,
  type RouteDiff,
  diffRoutes,
  applyRouteDiff,
  normalizeRoute,
  routeKey,
  isEmptyDiff,
} from './routes.ts'
export {
  type ProcessTable,
  procfsProcessTable,
} from './exec.ts'
export { type WireGuardKeyPair, generateKeyPair, publicKeyOf, isWireGuardKey } from './keys.ts'
export {
  type NetComponents,
  type WireGuardDriverOptions,
  type PodNetworkDriverOptions,
  ORC_ROUTE_PROTOCOL,
} from './options.ts'
export {
  type WireGuardMode,
  type WireGuardPeer,
  type WireGuardConfig,
  type WireGuardSetResult,
  type WireGuardPeerStatus,
  type WireGuardStatus,
  type WireGuardDriver,
  WireGuardLinkDriver,
  parseWgDump,
  renderWgConfig,
  normalizeWireGuardConfig,
  canonicalEndpoint,
} from './wireguard.ts'
export {
  type PodNetwork,
  type PodNetworkConfig,
  type PodNetworkState,
  type PodNetworkSetResult,
  type PodNetworkDriver,
  type PodNetworkDownOptions,
  NetnsPodNetworkDriver,
  hostVethName,
} from './podnet.ts'
export { renderEgressRuleset } from './nft.ts'
export { FakeWireGuardDriver, FakePodNetworkDriver, recordingRunner, type RecordedCommand } from './fake.ts'
