/**
 * The node's DNS resolver as an agent component: answers `SERVICE.NS.svc.DOMAIN`, pod names, SRV
 * and PTR from this node's replicated Services and Pods — its cluster's and, through the routed
 * store, its federations' shared namespaces (the zone is rebuilt on the next query after one of
 * them changed), forwards the rest upstream. It listens on the cluster DNS address
 * (subnet 0 of the cluster /48, put on the node's WireGuard interface by the node network and let
 * through the host guard for pods) and on any `listen` address given. It also writes each pod's
 * resolv.conf and hosts (podFiles).
 */
import { readFileSync } from 'node:fs'
import type { Logger } from 'pino'
import { type Clock, type Random, type TimerHandle, unrefTimers } from '../../effects/index.ts'
import { type EndpointService, isOrcError } from '../../model/index.ts'
import {
  buildZone,
  clusterPrefix,
  type DnsListen,
  DnsServer,
  type DnsStats,
  type DnsZone,
  normalizeDomain,
  type PodDnsFiles,
  podDnsFiles,
  serviceVirtualAddress,
  sharedServiceVirtualAddress,
  upstreamsFromResolvConf,
} from '../../net/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import type { Component } from '../component.ts'
import { DNS_DEFAULTS, type DnsSetup } from './options.ts'

export interface ClusterDnsComponents {
  store: ObjectStore
  clock: Clock
  random: Random
  logger: Logger
  /** The cluster id (its /48: the reverse zone and the DNS address). */
  clusterId(): string
  /** The cluster DNS address when this node's pods have a network (NodeNetwork.dnsAddress). */
  dnsAddress(): string | undefined
  /** Whether this node load-balances services' virtual addresses (NodeNetwork.servicesBalanced). */
  servicesBalanced?(): boolean
  /**
   * The id of the federation namespace `ns` is shared with ('' while unknown), or undefined when it
   * is not shared: its ClusterIP services answer their address in the federation's range
   * (sharedServiceVirtualAddress) where this node balances that federation, else the pods' addresses.
   */
  federationOf?(ns: string): string | undefined
  /** The federations (ids) whose shared services this node balances (NodeNetwork.balancedFederations). */
  balancedFederations?(): ReadonlySet<string>
}

export class ClusterDns implements Component {
  readonly name = 'dns'
  private server: DnsServer | undefined
  private zoneCache: DnsZone | undefined
  /** What the cached zone's service answers followed: balancing on, and the federations balanced. */
  private zoneBalanced = ''
  private unsubscribe: (() => void) | undefined
  private bindTimer: TimerHandle | undefined
  private readonly clock: Clock
  private readonly log: Logger
  readonly domain: string
  /** Where it answers (the cluster address once bound). */
  readonly listening: DnsListen[] = []

  constructor(
    private readonly c: ClusterDnsComponents,
    private readonly setup: DnsSetup = {},
  ) {
    this.domain = normalizeDomain(setup.domain ?? DNS_DEFAULTS.domain)
    this.clock = unrefTimers(c.clock)
    this.log = c.logger.child({ module: 'dns' })
  }

  get enabled(): boolean {
    return this.setup.enabled !== false
  }

  get stats(): DnsStats | undefined {
    return this.server?.stats
  }

  async start(): Promise<void> {
    if (!this.enabled) return
    const cluster = clusterPrefix(this.c.clusterId())
    const own = this.c.dnsAddress()
    const upstreams = this.setup.upstreams ?? this.hostUpstreams(own)
    this.server = new DnsServer(
      { clock: this.c.clock, random: this.c.random, logger: this.c.logger },
      {
        zone: () => this.zone(),
        cluster,
        upstreams,
        ttl: this.setup.ttl ?? DNS_DEFAULTS.ttl,
        rateLimit: this.setup.rateLimit ?? DNS_DEFAULTS.rateLimit,
        upstreamTimeoutMs: DNS_DEFAULTS.upstreamTimeoutMs,
      },
    )
    this.unsubscribe = this.c.store.onChange((keys) => {
      if (keys.some((k) => k.startsWith('Pod/') || k.startsWith('Service/'))) this.zoneCache = undefined
    })
    for (const l of this.setup.listen ?? []) this.listening.push(await this.server.listen(l))
    if (own !== undefined) void this.bindClusterAddress(own)
    this.log.info({ domain: this.domain, upstreams: upstreams.map((u) => u.host), cluster: own }, 'dns resolver started')
  }

  async stop(): Promise<void> {
    this.unsubscribe?.()
    if (this.bindTimer !== undefined) this.clock.clearTimeout(this.bindTimer)
    this.bindTimer = undefined
    await this.server?.stop()
    this.server = undefined
  }

  /** A pod's /etc/resolv.conf and /etc/hosts; undefined when the resolver is off (pods keep the image's). */
  podFiles(namespace: string, pod: string, address?: string): PodDnsFiles | undefined {
    if (!this.enabled) return undefined
    const nameserver = this.c.dnsAddress()
    return podDnsFiles({ domain: this.domain, namespace, pod, ...(nameserver ? { nameserver } : {}), ...(address ? { address } : {}) })
  }

  /** The zone now: rebuilt after a Pod or Service changed. */
  zone(): DnsZone {
    const balanced = this.c.servicesBalanced?.() === true
    const federations = balanced ? (this.c.balancedFederations?.() ?? new Set<string>()) : new Set<string>()
    const key = balanced ? `on ${[...federations].sort().join(',')}` : ''
    // Balancing came up (or went away, or a federation's) since the zone was built: its service answers change.
    if (key !== this.zoneBalanced) this.zoneCache = undefined
    if (this.zoneCache === undefined) {
      const cluster = balanced ? clusterPrefix(this.c.clusterId()) : undefined
      this.zoneCache = buildZone({
        domain: this.domain,
        services: this.c.store.list('Service'),
        pods: this.c.store.list('Pod'),
        ...(cluster !== undefined
          ? {
              virtualAddress: (svc: EndpointService) => {
                const fed = this.c.federationOf?.(svc.metadata.namespace ?? 'default')
                if (fed === undefined) return serviceVirtualAddress(svc, cluster)
                return federations.has(fed) ? sharedServiceVirtualAddress(svc, fed) : undefined
              },
            }
          : {}),
      })
      this.zoneBalanced = key
    }
    return this.zoneCache
  }

  private hostUpstreams(own: string | undefined): DnsListen[] {
    const path = this.setup.resolvConf ?? DNS_DEFAULTS.resolvConf
    try {
      return upstreamsFromResolvConf(readFileSync(path, 'utf8'), new Set(own ? [own] : []))
    } catch (err) {
      this.log.warn({ path, err: String(err) }, 'no upstream resolvers: names outside the cluster get SERVFAIL')
      return []
    }
  }

  /** The node network puts the address up with the WireGuard interface: try until it is there. */
  private async bindClusterAddress(host: string): Promise<void> {
    if (this.server === undefined) return
    try {
      this.listening.push(await this.server.listen({ host, port: 53 }))
      this.log.info({ host }, 'dns resolver on the cluster address')
    } catch (err) {
      if (!isOrcError(err, 'unavailable')) throw err
      this.log.debug({ host, err: String(err) }, 'cluster dns address not up yet')
      this.bindTimer = this.clock.setTimeout(() => this.bindClusterAddress(host), DNS_DEFAULTS.bindRetryMs)
    }
  }
}
