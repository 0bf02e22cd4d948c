export { DNS_DEFAULTS, type DnsSetup, dnsSetupFromEnv, parseDnsListen } from './options.ts'
export { ClusterDns, type ClusterDnsComponents } from './resolver.ts'
