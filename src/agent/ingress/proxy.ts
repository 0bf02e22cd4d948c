/**
 * The tcp-proxy's data path: a node:net listener per Ingress port and family, each connection
 * forwarded to a ready endpoint chosen at random; an endpoint that refuses or does not answer
 * within the connect timeout is skipped and the next one tried, so a pod that died before the
 * store said so costs a client a retry, not a failed connection. Userspace, so an IPv4 client
 * reaches IPv6-only pods (docs/services.md says why not NAT46).
 */
import { connect, createServer, type Server, type Socket } from 'node:net'
import type { Logger } from 'pino'
import type { Random } from '../../effects/index.ts'
import type { Backend } from './plan.ts'

export interface ProxyListener {
  /** The current ready endpoints (read on each connection, so updates apply at once). */
  backends: Backend[]
  readonly server: Server
}

export interface ProxyOptions {
  /** How long to wait for an endpoint to accept before trying the next (default 3 s). */
  connectTimeoutMs?: number
  /** Endpoints tried per connection (default 3). */
  maxAttempts?: number
}

function shuffled<T>(items: readonly T[], random: Random): T[] {
  const a = [...items]
  for (let i = a.length - 1; i > 0; i--) {
    const b = random(4)
    const j = (((b[0]! << 24) | (b[1]! << 16) | (b[2]! << 8) | b[3]!) >>> 0) % (i + 1)
    ;[a[i], a[j]] = [a[j]!, a[i]!]
  }
  return a
}

/** Connect to the first endpoint of `order` that accepts in time. */
function dialFirst(order: readonly Backend[], timeoutMs: number, log: Logger): Promise<Socket | undefined> {
  return new Promise((resolve) => {
    const next = (i: number): void => {
      const b = order[i]
      if (b === undefined) {
        resolve(undefined)
        return
      }
      const up = connect({ host: b.address, port: b.port, allowHalfOpen: true, ...(b.source !== undefined ? { localAddress: b.source } : {}) })
      const timer = setTimeout(() => up.destroy(new Error('connect timeout')), timeoutMs)
      up.once('connect', () => {
        clearTimeout(timer)
        up.removeAllListeners('error')
        resolve(up)
      })
      up.once('error', (err) => {
        clearTimeout(timer)
        up.destroy()
        log.debug({ pod: b.pod, address: b.address, port: b.port, err: String(err) }, 'endpoint refused; trying the next')
        next(i + 1)
      })
    }
    next(0)
  })
}

export class TcpProxy {
  private readonly listeners = new Map<string, ProxyListener>()
  private readonly sockets = new Set<Socket>()
  private readonly o: Required<ProxyOptions>

  constructor(
    private readonly log: Logger,
    private readonly random: Random,
    options: ProxyOptions = {},
  ) {
    this.o = { connectTimeoutMs: options.connectTimeoutMs ?? 3000, maxAttempts: options.maxAttempts ?? 3 }
  }

  get(key: string): ProxyListener | undefined {
    return this.listeners.get(key)
  }

  keys(): string[] {
    return [...this.listeners.keys()]
  }

  /** Listen on `host:port` (IPv6 only for `::`); rejects with the bind error (EADDRINUSE, EACCES). */
  async listen(key: string, host: string, port: number, backends: Backend[]): Promise<ProxyListener> {
    // Half-open: a client that has sent its request and shut its side (HTTP/1.0 clients, `nc`) still gets the answer.
    const server = createServer({ pauseOnConnect: true, allowHalfOpen: true }, (client) => this.accept(l, client))
    const l: ProxyListener = { backends, server }
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen({ host, port, ipv6Only: host === '::', exclusive: true }, () => {
        server.off('error', reject)
        resolve()
      })
    })
    server.on('error', (err) => this.log.warn({ key, err: String(err) }, 'ingress listener error'))
    this.listeners.set(key, l)
    return l
  }

  async close(key: string): Promise<void> {
    const l = this.listeners.get(key)
    if (l === undefined) return
    this.listeners.delete(key)
    await new Promise<void>((resolve) => l.server.close(() => resolve()))
  }

  async closeAll(): Promise<void> {
    const closing = this.keys().map((k) => this.close(k))
    for (const s of this.sockets) s.destroy()
    await Promise.all(closing)
  }

  private accept(l: ProxyListener, client: Socket): void {
    this.sockets.add(client)
    client.once('close', () => this.sockets.delete(client))
    client.on('error', () => client.destroy())
    const order = shuffled(l.backends, this.random).slice(0, this.o.maxAttempts)
    void dialFirst(order, this.o.connectTimeoutMs, this.log).then((up) => {
      if (up === undefined) {
        client.destroy()
        return
      }
      if (client.destroyed) {
        up.destroy()
        return
      }
      this.sockets.add(up)
      // Ends travel through pipe (half-close kept); a reset on either side resets the other.
      up.once('close', () => this.sockets.delete(up))
      up.on('error', () => client.destroy())
      client.on('error', () => up.destroy())
      client.once('close', () => up.destroy())
      up.setNoDelay(true)
      client.setNoDelay(true)
      client.pipe(up)
      up.pipe(client)
      client.resume()
    })
  }
}
