/**
 * The node's DNS resolver: UDP and TCP on each listen address, answers from the zone
 * (answer.ts), everything else forwarded to the upstream resolvers, a token bucket per source
 * address (REFUSED beyond it). Pod traffic is untrusted: every datagram and TCP frame goes through
 * `answerQuery`, which never throws; a socket error is logged and the server keeps running.
 */
import { createSocket, type RemoteInfo, type Socket } from 'node:dgram'
import * as net from 'node:net'
import { isIPv6 } from 'node:net'
import type { Logger } from 'pino'
import type { Clock, Random } from '../../effects/index.ts'
import { OrcError, wrapError } from '../../model/index.ts'
import type { IpPrefix } from '../ip.ts'
import { answerQuery, errorResponse } from './answer.ts'
import type { DnsZone } from './zone.ts'

export interface DnsListen {
  host: string
  port: number
}

export interface DnsServerOptions {
  /** The zone now (built lazily by the caller from the store). */
  zone(): DnsZone
  cluster?: IpPrefix
  /** Upstream resolvers (`ip` or `[ip]:port` already split). */
  upstreams: DnsListen[]
  ttl: number
  /** Queries a second per source address, and the burst above it; beyond: REFUSED. */
  rateLimit: { perSecond: number; burst: number }
  /** How long an upstream may take before the next is asked (ms). */
  upstreamTimeoutMs: number
}

export interface DnsServerComponents {
  clock: Clock
  random: Random
  logger: Logger
}

export interface DnsStats {
  queries: number
  answered: number
  forwarded: number
  refused: number
  formerr: number
  dropped: number
  servfail: number
}

/** Sources tracked at once by the rate limiter; the oldest are forgotten beyond this. */
const MAX_SOURCES = 16_384
/** Forwarded queries waiting for an upstream at once; beyond: SERVFAIL. */
const MAX_PENDING = 4096
const TCP_IDLE_MS = 10_000
/** Cached answers at most (then the cache starts again: a flood of distinct names cannot grow it). */
const ANSWER_CACHE_MAX = 4096
const MAX_TCP_CONNECTIONS = 512

/** A token bucket per source address. */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>()
  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    private readonly now: () => number,
  ) {}

  allow(source: string): boolean {
    const t = this.now()
    let b = this.buckets.get(source)
    if (b === undefined) {
      if (this.buckets.size >= MAX_SOURCES) this.buckets.delete(this.buckets.keys().next().value!)
      b = { tokens: this.burst, at: t }
    } else {
      this.buckets.delete(source) // re-insert: the map's order is least recently seen first
      b.tokens = Math.min(this.burst, b.tokens + ((t - b.at) / 1000) * this.perSecond)
      b.at = t
    }
    this.buckets.set(source, b)
    if (b.tokens < 1) return false
    b.tokens -= 1
    return true
  }
}

interface Pending {
  reply(bytes: Buffer): void
  clientId: number
  query: Buffer
  upstream: number
  timer: unknown
}

export class DnsServer {
  /** Answers by query (its bytes after the id, and the transport), for the zone they came from. */
  private readonly cache = new Map<string, Buffer>()
  private cacheZone: DnsZone | undefined
  private readonly udp: Socket[] = []
  private readonly tcp: net.Server[] = []
  private readonly connections = new Set<net.Socket>()
  private upstream4: Socket | undefined
  private upstream6: Socket | undefined
  private readonly pending = new Map<number, Pending>()
  private readonly limiter: RateLimiter
  private readonly log: Logger
  readonly stats: DnsStats = { queries: 0, answered: 0, forwarded: 0, refused: 0, formerr: 0, dropped: 0, servfail: 0 }
  private stopped = false

  constructor(
    private readonly c: DnsServerComponents,
    private readonly o: DnsServerOptions,
  ) {
    this.log = c.logger.child({ module: 'dns' })
    this.limiter = new RateLimiter(o.rateLimit.perSecond, o.rateLimit.burst, () => c.clock.now())
  }

  /** Listen on `addr` (UDP and TCP). Throws the bind error (EADDRNOTAVAIL while the address is not up yet). */
  async listen(addr: DnsListen): Promise<DnsListen> {
    const type = isIPv6(addr.host) ? 'udp6' : 'udp4'
    const sock = createSocket({ type, reuseAddr: false, ipv6Only: type === 'udp6' })
    await new Promise<void>((resolve, reject) => {
      sock.once('error', reject)
      sock.bind({ address: addr.host, port: addr.port, exclusive: true }, () => {
        sock.off('error', reject)
        resolve()
      })
    }).catch((err) => {
      sock.close()
      throw wrapError(`listen on udp [${addr.host}]:${addr.port}`, err, 'unavailable')
    })
    const port = sock.address().port
    const server = net.createServer({ pauseOnConnect: false }, (s) => this.onTcp(s))
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen({ host: addr.host, port, ipv6Only: type === 'udp6', exclusive: true }, () => {
        server.off('error', reject)
        resolve()
      })
    }).catch((err) => {
      sock.close()
      throw wrapError(`listen on tcp [${addr.host}]:${port}`, err, 'unavailable')
    })
    sock.on('message', (msg, rinfo) => this.onUdp(sock, msg, rinfo))
    sock.on('error', (err) => this.log.warn({ err: String(err) }, 'dns udp socket'))
    server.on('error', (err) => this.log.warn({ err: String(err) }, 'dns tcp listener'))
    server.maxConnections = MAX_TCP_CONNECTIONS
    this.udp.push(sock)
    this.tcp.push(server)
    this.log.info({ host: addr.host, port }, 'dns listening')
    return { host: addr.host, port }
  }

  async stop(): Promise<void> {
    this.stopped = true
    for (const p of this.pending.values()) this.c.clock.clearTimeout(p.timer)
    this.pending.clear()
    for (const s of this.connections) s.destroy()
    for (const s of [...this.udp, this.upstream4, this.upstream6]) {
      try {
        s?.close()
      } catch {
        // closed already
      }
    }
    await Promise.all(this.tcp.map((t) => new Promise<void>((r) => t.close(() => r()))))
    this.udp.length = 0
    this.tcp.length = 0
  }

  /** Handle one query from `source`; `reply` sends the answer back the way it came. */
  handle(bytes: Buffer, source: string, transport: 'udp' | 'tcp', reply: (b: Buffer) => void): void {
    if (this.stopped) return
    this.stats.queries++
    if (!this.limiter.allow(source)) {
      const r = errorResponse(bytes, 'REFUSED')
      this.stats.refused++
      if (r) reply(r)
      return
    }
    const zone = this.o.zone()
    // Answers from the zone are a function of the zone and the query's bytes after its id: a repeat
    // (clients ask the same names over and over) is the cached answer with the query's id.
    if (zone !== this.cacheZone) {
      this.cache.clear()
      this.cacheZone = zone
    }
    const key = bytes.length >= 12 && bytes.length <= 512 ? `${transport}${bytes.toString('latin1', 2)}` : undefined
    const hit = key !== undefined ? this.cache.get(key) : undefined
    if (hit !== undefined) {
      const r = Buffer.from(hit)
      bytes.copy(r, 0, 0, 2)
      this.stats.answered++
      reply(r)
      return
    }
    let outcome: ReturnType<typeof answerQuery>
    try {
      outcome = answerQuery(bytes, { zone, cluster: this.o.cluster, ttl: this.o.ttl, transport, recursion: this.o.upstreams.length > 0 })
    } catch (err) {
      // answerQuery is written never to throw; a bug must not take the resolver down.
      this.log.error({ err: String(err) }, 'dns answer failed')
      const r = errorResponse(bytes, 'SERVFAIL')
      this.stats.servfail++
      if (r) reply(r)
      return
    }
    if (outcome.action === 'drop') {
      this.stats.dropped++
      return
    }
    if (outcome.action === 'answer') {
      if (outcome.rcode === 'FORMERR') this.stats.formerr++
      else {
        this.stats.answered++
        if (key !== undefined && outcome.rcode !== 'SERVFAIL') {
          if (this.cache.size >= ANSWER_CACHE_MAX) this.cache.clear()
          this.cache.set(key, outcome.response)
        }
      }
      reply(outcome.response)
      return
    }
    this.stats.forwarded++
    if (transport === 'tcp') void this.forwardTcp(bytes, 0, reply)
    else this.forwardUdp(bytes, outcome.id, reply)
  }

  private onUdp(sock: Socket, msg: Buffer, rinfo: RemoteInfo): void {
    this.handle(msg, rinfo.address, 'udp', (b) => sock.send(b, rinfo.port, rinfo.address, () => {}))
  }

  private onTcp(s: net.Socket): void {
    this.connections.add(s)
    s.setTimeout(TCP_IDLE_MS, () => s.destroy())
    s.on('error', () => s.destroy())
    s.on('close', () => this.connections.delete(s))
    let buf = Buffer.alloc(0)
    const source = s.remoteAddress ?? '?'
    s.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk])
      while (buf.length >= 2) {
        const len = buf.readUInt16BE(0)
        if (buf.length < 2 + len) break
        const msg = buf.subarray(2, 2 + len)
        buf = buf.subarray(2 + len)
        this.handle(msg, source, 'tcp', (b) => {
          if (s.destroyed) return
          const head = Buffer.alloc(2)
          head.writeUInt16BE(b.length)
          s.write(Buffer.concat([head, b]))
        })
      }
      // More than a whole maximal frame buffered and still incomplete cannot happen; a client
      // sending a huge length then trickling is cut by the idle timeout.
      if (buf.length > 65537) s.destroy()
    })
  }

  private upstreamSocket(family: 4 | 6): Socket {
    const cur = family === 6 ? this.upstream6 : this.upstream4
    if (cur !== undefined) return cur
    const sock = createSocket(family === 6 ? 'udp6' : 'udp4')
    sock.on('message', (msg, rinfo) => this.onUpstream(msg, rinfo))
    sock.on('error', (err) => this.log.warn({ err: String(err) }, 'dns upstream socket'))
    sock.bind(0)
    if (family === 6) this.upstream6 = sock
    else this.upstream4 = sock
    return sock
  }

  private freeId(): number | undefined {
    for (let i = 0; i < 64; i++) {
      const b = this.c.random(2)
      const id = (b[0]! << 8) | b[1]!
      if (!this.pending.has(id)) return id
    }
    return undefined
  }

  private forwardUdp(query: Buffer, clientId: number, reply: (b: Buffer) => void): void {
    const id = this.pending.size < MAX_PENDING ? this.freeId() : undefined
    if (id === undefined) {
      this.servfail(query, reply)
      return
    }
    const p: Pending = { reply, clientId, query: Buffer.from(query), upstream: 0, timer: undefined }
    this.pending.set(id, p)
    this.sendUpstream(id, p)
  }

  private sendUpstream(id: number, p: Pending): void {
    const up = this.o.upstreams[p.upstream]
    if (up === undefined) {
      this.pending.delete(id)
      this.servfail(p.query, p.reply)
      return
    }
    const out = Buffer.from(p.query)
    out.writeUInt16BE(id, 0)
    this.upstreamSocket(isIPv6(up.host) ? 6 : 4).send(out, up.port, up.host, () => {})
    p.timer = this.c.clock.setTimeout(() => {
      if (this.pending.get(id) !== p) return
      p.upstream++
      this.sendUpstream(id, p)
    }, this.o.upstreamTimeoutMs)
  }

  private onUpstream(msg: Buffer, rinfo: RemoteInfo): void {
    if (msg.length < 12) return
    const id = msg.readUInt16BE(0)
    const p = this.pending.get(id)
    if (p === undefined) return
    // Only the upstream asked may answer (a spoofed answer from elsewhere is ignored).
    const up = this.o.upstreams[p.upstream]
    if (up === undefined || up.port !== rinfo.port || normalizeHost(up.host) !== normalizeHost(rinfo.address)) return
    this.c.clock.clearTimeout(p.timer)
    this.pending.delete(id)
    const out = Buffer.from(msg)
    out.writeUInt16BE(p.clientId, 0)
    p.reply(out)
  }

  private async forwardTcp(query: Buffer, first: number, reply: (b: Buffer) => void): Promise<void> {
    for (let i = first; i < this.o.upstreams.length; i++) {
      const up = this.o.upstreams[i]!
      try {
        reply(await tcpExchange(up, query, this.o.upstreamTimeoutMs))
        return
      } catch {
        // next upstream
      }
    }
    this.servfail(query, reply)
  }

  private servfail(query: Buffer, reply: (b: Buffer) => void): void {
    this.stats.servfail++
    const r = errorResponse(query, 'SERVFAIL')
    if (r) reply(r)
  }
}

function normalizeHost(h: string): string {
  return h.replace(/^::ffff:/, '').toLowerCase()
}

/** One query over TCP to `up`, its answer (without the length prefix). */
function tcpExchange(up: DnsListen, query: Buffer, timeoutMs: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: up.host, port: up.port })
    let buf = Buffer.alloc(0)
    const fail = (err: unknown) => {
      s.destroy()
      reject(err instanceof Error ? err : new OrcError('unavailable', String(err)))
    }
    s.setTimeout(timeoutMs, () => fail(new OrcError('timeout', `upstream ${up.host} did not answer`)))
    s.on('error', fail)
    s.on('connect', () => {
      const head = Buffer.alloc(2)
      head.writeUInt16BE(query.length)
      s.write(Buffer.concat([head, query]))
    })
    s.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk])
      if (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        s.destroy()
        resolve(buf.subarray(2, 2 + buf.readUInt16BE(0)))
      }
    })
    s.on('close', () => reject(new OrcError('unavailable', `upstream ${up.host} closed`)))
  })
}

/** Upstream resolvers from resolv.conf text: its `nameserver` lines, port 53, at most three (as libc). */
export function upstreamsFromResolvConf(text: string, exclude: ReadonlySet<string> = new Set()): DnsListen[] {
  const out: DnsListen[] = []
  for (const line of text.split('\n')) {
    const m = /^\s*nameserver\s+(\S+)/.exec(line)
    if (!m) continue
    const host = m[1]!
    if (!net.isIP(host) || exclude.has(host.replace(/%.*$/, ''))) continue
    out.push({ host, port: 53 })
    if (out.length === 3) break
  }
  return out
}
