import { isIP } from 'node:net'
import { OrcError } from '../../model/index.ts'
import { type DnsListen, normalizeDomain } from '../../net/index.ts'

/** The node's DNS resolver (docs/services.md). */
export interface DnsSetup {
  /** `false`: no resolver, pods keep their image's resolv.conf. Default on. */
  enabled?: boolean
  /** The cluster domain: `SERVICE.NS.svc.DOMAIN` (default `cluster.local`; `ORC_CLUSTER_DOMAIN`). */
  domain?: string
  /**
   * Addresses besides the cluster DNS address to answer on (`ORC_DNS_LISTEN=127.0.0.1:5353`):
   * for `dig` on the node, and for nodes without pod networking. A bind that fails stops the agent.
   */
  listen?: DnsListen[]
  /** Upstream resolvers for every other name (default: the nameservers of `resolvConf`; `ORC_DNS_UPSTREAM`). */
  upstreams?: DnsListen[]
  /** The host's resolv.conf (default /etc/resolv.conf). */
  resolvConf?: string
  /** TTL of answers and of negative answers, seconds (default 3: a moved pod is seen within it). */
  ttl?: number
  /** Per source address (default 2000/s, burst 4000); beyond: REFUSED. */
  rateLimit?: { perSecond: number; burst: number }
}

export const DNS_DEFAULTS = {
  domain: 'cluster.local',
  resolvConf: '/etc/resolv.conf',
  ttl: 3,
  rateLimit: { perSecond: 2000, burst: 4000 },
  upstreamTimeoutMs: 2000,
  /** How often the cluster DNS address is tried until the node network has put it up. */
  bindRetryMs: 1000,
} as const

/** `host:port`, `[v6]:port`, or a bare IP (port 53). */
export function parseDnsListen(text: string, what: string): DnsListen {
  const t = text.trim()
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(t) ?? /^([^:]+):(\d+)$/.exec(t)
  const host = m ? m[1]! : t
  const port = m?.[2] !== undefined ? Number(m[2]) : 53
  if (isIP(host) === 0 || !Number.isInteger(port) || port < 0 || port > 65535)
    throw new OrcError('invalid', `${what} ${JSON.stringify(text)}: give ip:port, [ipv6]:port or an IP`)
  return { host, port }
}

/** The DNS setup from the environment (`ORC_DNS=off`, `ORC_DNS_LISTEN`, `ORC_DNS_UPSTREAM`, `ORC_DNS_RATE_LIMIT`, `ORC_CLUSTER_DOMAIN`). */
export function dnsSetupFromEnv(env: NodeJS.ProcessEnv): DnsSetup {
  const list = (v: string | undefined, what: string) =>
    (v ?? '')
      .split(',')
      .filter((x) => x.trim() !== '')
      .map((x) => parseDnsListen(x, what))
  const out: DnsSetup = {}
  if (env.ORC_DNS === 'off') out.enabled = false
  const listen = list(env.ORC_DNS_LISTEN, 'ORC_DNS_LISTEN')
  if (listen.length > 0) out.listen = listen
  const up = list(env.ORC_DNS_UPSTREAM, 'ORC_DNS_UPSTREAM')
  if (up.length > 0) out.upstreams = up
  if (env.ORC_DNS_RATE_LIMIT) {
    const m = /^(\d+)(?::(\d+))?$/.exec(env.ORC_DNS_RATE_LIMIT.trim())
    if (!m || Number(m[1]) < 1)
      throw new OrcError('invalid', `ORC_DNS_RATE_LIMIT ${JSON.stringify(env.ORC_DNS_RATE_LIMIT)}: give queries a second per source, optionally :burst`)
    out.rateLimit = { perSecond: Number(m[1]), burst: Number(m[2] ?? Number(m[1]) * 2) }
  }
  if (env.ORC_CLUSTER_DOMAIN) {
    const d = normalizeDomain(env.ORC_CLUSTER_DOMAIN)
    if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$/.test(d) || d.length > 200)
      throw new OrcError('invalid', `ORC_CLUSTER_DOMAIN ${JSON.stringify(env.ORC_CLUSTER_DOMAIN)}: not a DNS name`)
    out.domain = d
  }
  return out
}
