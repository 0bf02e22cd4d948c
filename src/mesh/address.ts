/**
 * What users type for an address — a multiaddr, `host:port`, `[v6]:port`, a bare IP or DNS name —
 * made into the TCP multiaddrs libp2p dials and listens on. DNS names are resolved here (with an
 * injected resolver) so a dial never depends on libp2p's DNS support.
 */
import { lookup } from 'node:dns/promises'
import { BlockList, isIP } from 'node:net'
import { multiaddr } from '@multiformats/multiaddr'
import { OrcError } from '../model/index.ts'

/** Port orc listens on by default (TCP). Not used by any common service (serf/swarm use 7946). */
export const DEFAULT_PORT = 7419

/** Default listen addresses of an agent: every IPv4 and IPv6 interface, TCP 7419. */
export const DEFAULT_LISTEN = [`/ip4/0.0.0.0/tcp/${DEFAULT_PORT}`, `/ip6/::/tcp/${DEFAULT_PORT}`]

/** The join host (join.ts) listens this many ports below the mesh: 7417 by default. */
export const JOIN_PORT_OFFSET = 2

/**
 * The join host's default listen addresses: the mesh's, `JOIN_PORT_OFFSET` ports below (a mesh on
 * port 0, a free port, gets a free one too). Addresses without a TCP port are left out.
 */
export function joinListenFor(listen: readonly string[]): string[] {
  const out: string[] = []
  for (const a of listen) {
    const m = /\/tcp\/([0-9]+)/.exec(a)
    if (m === null) continue
    const port = Number(m[1])
    out.push(a.replace(/\/tcp\/[0-9]+/, `/tcp/${port === 0 ? 0 : Math.max(0, port - JOIN_PORT_OFFSET)}`))
  }
  return [...new Set(out)]
}

/** `addr` (a TCP multiaddr) with its port replaced by `port`. */
export function withTcpPort(addr: string, port: number): string {
  return addr.replace(/\/tcp\/[0-9]+/, `/tcp/${port}`)
}

/** The TCP port of a multiaddr, if it names one. */
export function tcpPortOf(addr: string): number | undefined {
  const m = /\/tcp\/([0-9]+)/.exec(addr)
  return m === null ? undefined : Number(m[1])
}

export type Resolver = (host: string) => Promise<string[]>

export const systemResolver: Resolver = async (host) => (await lookup(host, { all: true })).map((a) => a.address)

function ipMultiaddr(ip: string, port: number): string {
  return `/${isIP(ip) === 6 ? 'ip6' : 'ip4'}/${ip}/tcp/${port}`
}

function parsePort(text: string, input: string): number {
  const port = Number(text)
  if (!/^[0-9]+$/.test(text) || port > 65535) throw new OrcError('invalid', `${JSON.stringify(input)}: port must be 0–65535`)
  return port
}

/** Split `host:port`, `[v6]:port`, `v6`, `host` into host and port (default when absent). */
export function splitHostPort(input: string, defaultPort = DEFAULT_PORT): { host: string; port: number } {
  const s = input.trim()
  const bracket = /^\[([^\]]+)\](?::(\d+))?$/.exec(s)
  if (bracket) return { host: bracket[1]!, port: bracket[2] !== undefined ? parsePort(bracket[2], input) : defaultPort }
  if (isIP(s) === 6) return { host: s, port: defaultPort }
  const i = s.lastIndexOf(':')
  if (i < 0) return { host: s, port: defaultPort }
  return { host: s.slice(0, i), port: parsePort(s.slice(i + 1), input) }
}

function checkMultiaddr(s: string): string {
  try {
    return multiaddr(s).toString()
  } catch (err) {
    throw new OrcError('invalid', `${JSON.stringify(s)} is not a valid multiaddr`, {}, err)
  }
}

/** A listen address (`/ip4/…/tcp/…` or `ip:port`) as a multiaddr. Listening needs an IP, not a name. */
export function parseListenAddress(input: string): string {
  if (input.startsWith('/')) return checkMultiaddr(input)
  const { host, port } = splitHostPort(input)
  if (isIP(host) === 0) throw new OrcError('invalid', `listen address ${JSON.stringify(input)}: give an IP address and port, like 0.0.0.0:${DEFAULT_PORT}`)
  return ipMultiaddr(host, port)
}

/**
 * A peer to dial (multiaddr, `host:port`, DNS name) as multiaddrs without `/p2p/…`. Names are
 * resolved to every address they have.
 */
export async function resolvePeerAddress(input: string, resolve: Resolver = systemResolver): Promise<string[]> {
  const s = input.trim()
  if (s === '') throw new OrcError('invalid', 'peer address is empty')
  if (s.startsWith('/')) return [checkMultiaddr(s).replace(/\/p2p\/[^/]+$/, '')]
  const { host, port } = splitHostPort(s)
  if (isIP(host) !== 0) return [ipMultiaddr(host, port)]
  let ips: string[]
  try {
    ips = await resolve(host)
  } catch (err) {
    throw new OrcError('unavailable', `resolve ${host}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { host }, err)
  }
  if (ips.length === 0) throw new OrcError('unavailable', `resolve ${host}: no addresses`, { host })
  return ips.map((ip) => ipMultiaddr(ip, port))
}

/** Addresses no other machine can reach this node at: loopback, link-local, unspecified. */
const LOCAL_ONLY: Array<[string, number, 'ipv4' | 'ipv6']> = [
  ['127.0.0.0', 8, 'ipv4'],
  ['169.254.0.0', 16, 'ipv4'],
  ['0.0.0.0', 32, 'ipv4'],
  ['::1', 128, 'ipv6'],
  ['fe80::', 10, 'ipv6'],
  ['::', 128, 'ipv6'],
  ['::ffff:127.0.0.0', 104, 'ipv6'],
]
const LOOPBACK = new BlockList()
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4')
LOOPBACK.addSubnet('::1', 128, 'ipv6')

function ipOfMultiaddr(ma: string): { ip: string; family: 'ipv4' | 'ipv6' } | undefined {
  const m = /^\/(ip4|ip6)\/([^/]+)/.exec(ma)
  if (m === null || isIP(m[2]!) === 0) return undefined
  return { ip: m[2]!, family: m[1] === 'ip4' ? 'ipv4' : 'ipv6' }
}

/**
 * The addresses a node advertises to members — heartbeats, join requests, tokens, WireGuard
 * endpoints — out of the multiaddrs it listens on (`addrs`; a wildcard listener expands to every
 * interface's). Left out: loopback, link-local and unspecified addresses, and any in
 * `privateRanges` (CIDRs: the node's pod egress network and the cluster's ULA, which orc's own
 * WireGuard interface and pod gateways carry). Another node cannot reach this one there, and a
 * member dialing 127.0.0.1 or 10.88.0.1 reaches itself. An address `named` explicitly (--listen,
 * --announce) is kept whatever it is (loopback tests, a chosen interface). When nothing else is
 * left the loopback addresses stay: a machine without a network still advertises something it can
 * be dialed at. Addresses that are not IP (a simulator's transport) pass through.
 */
export function advertisableAddresses(addrs: readonly string[], named: readonly string[], privateRanges: readonly string[] = []): string[] {
  const hidden = new BlockList()
  for (const [net, len, family] of LOCAL_ONLY) hidden.addSubnet(net, len, family)
  for (const cidr of privateRanges) {
    const [net, len] = cidr.split('/')
    const family = isIP(net ?? '') === 6 ? 'ipv6' : 'ipv4'
    hidden.addSubnet(net!, Number(len ?? (family === 'ipv6' ? 128 : 32)), family)
  }
  const chosen = new BlockList()
  for (const l of named) {
    const a = ipOfMultiaddr(l)
    if (a !== undefined && a.ip !== '0.0.0.0' && a.ip !== '::') chosen.addAddress(a.ip, a.family)
  }
  const out: string[] = []
  const loopback: string[] = []
  for (const ma of addrs) {
    const a = ipOfMultiaddr(ma)
    if (a === undefined || chosen.check(a.ip, a.family) || !hidden.check(a.ip, a.family)) out.push(ma)
    else if (LOOPBACK.check(a.ip, a.family)) loopback.push(ma)
  }
  return out.length > 0 ? out : loopback
}
