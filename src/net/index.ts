/** Public surface of src/net: addressing (pure), route diffing (pure), and the drivers. */

export {
  addressInPrefix,
  candidateSubnet,
  chooseEgressIPv4,
  chooseNodeSubnet,
  clusterPrefix,
  EGRESS_IPV4_GATEWAY,
  EGRESS_IPV4_PREFIX,
  federatedIngressAddress,
  nodeGateway,
  nodePrefix,
  RESERVED_SUBNETS,
  randomPodAddress,
  type SubnetId,
  settleSubnetClaims,
  settleSubnetCollision,
  subnetOf,
} from './addressing.ts'
export { answerQuery, errorResponse, MAX_QUERY_BYTES, type QueryOutcome, RCODE, type Rcode } from './dns/answer.ts'
export { clusterDnsAddress, type PodDnsFiles, type PodDnsInput, podDnsFiles } from './dns/resolv.ts'
export {
  type DnsListen,
  DnsServer,
  type DnsServerComponents,
  type DnsServerOptions,
  type DnsStats,
  RateLimiter,
  upstreamsFromResolvConf,
} from './dns/server.ts'
export { addressOfReverse, buildZone, type DnsZone, normalizeDomain, reverseName, type ZoneInput } from './dns/zone.ts'
export {
  type ProcessTable,
  procfsProcessTable,
} from './exec.ts'
export { FakePodNetworkDriver, FakeServiceNatDriver, FakeWireGuardDriver, type RecordedCommand, recordingRunner } from './fake.ts'
export {
  canonicalIp,
  canonicalPrefix,
  formatIPv4,
  formatIPv6,
  formatIp,
  formatPrefix,
  host128,
  type IpAddress,
  type IpFamily,
  type IpPrefix,
  parseIPv4,
  parseIPv6,
  parseIp,
  parsePrefix,
  prefixContains,
  prefixCovers,
  prefixMask,
  prefixNetwork,
} from './ip.ts'
export { generateKeyPair, isWireGuardKey, publicKeyOf, type WireGuardKeyPair } from './keys.ts'
export { renderEgressRuleset } from './nft.ts'
export {
  type NetComponents,
  ORC_ROUTE_PROTOCOL,
  type PodNetworkDriverOptions,
  type WireGuardDriverOptions,
} from './options.ts'
export {
  hostVethName,
  NetnsPodNetworkDriver,
  type PodNetwork,
  type PodNetworkConfig,
  type PodNetworkDownOptions,
  type PodNetworkDriver,
  type PodNetworkSetResult,
  type PodNetworkState,
} from './podnet.ts'
export {
  applyRouteDiff,
  diffRoutes,
  isEmptyDiff,
  normalizeRoute,
  type Route,
  type RouteDiff,
  routeKey,
} from './routes.ts'
export {
  federationVirtualRange,
  hasVirtualAddress,
  NftServiceNatDriver,
  planVirtualServices,
  renderServiceRuleset,
  SERVICE_ROUTE_PROTOCOL,
  type ServiceNatConfig,
  type ServiceNatDriver,
  type ServiceRulesetOptions,
  servicesWithSharedAddress,
  serviceVirtualAddress,
  serviceVirtualRange,
  sharedServiceVirtualAddress,
  type VirtualAddressService,
  type VirtualPort,
  type VirtualService,
} from './services.ts'
export {
  canonicalEndpoint,
  normalizeWireGuardConfig,
  parseWgDump,
  renderWgConfig,
  type WireGuardConfig,
  type WireGuardDriver,
  WireGuardLinkDriver,
  type WireGuardMode,
  type WireGuardPeer,
  type WireGuardPeerStatus,
  type WireGuardSetResult,
  type WireGuardStatus,
} from './wireguard.ts'
