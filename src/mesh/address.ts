/**
 * What users type for an address — a multiaddr, `host:port`, `[v6]:port`, a bare IP or DNS name —
 * made into the TCP multiaddrs libp2p dials and listens on. DNS names are resolved here (with an
 * injected resolver) so a dial never depends on libp2p's DNS support.
 */
import { lookup } from 'node:dns/promises'
import { isIP } from 'node:net'
import { multiaddr } from '@multiformats/multiaddr'
import { OrcError } from '../model/index.ts'

/** Port orc listens on by default (TCP). Not used by any common service (serf/swarm use 7946). */
export const DEFAULT_PORT = 7419

/** Default listen addresses of an agent: every IPv4 and IPv6 interface, TCP 7419. */
export const DEFAULT_LISTEN = [`/ip4/0.0.0.0/tcp/${DEFAULT_PORT}`, `/ip6/::/tcp/${DEFAULT_PORT}`]

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
