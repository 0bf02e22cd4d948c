/**
 * controller:ingress running the `tcp-proxy` controller on this node: for every Ingress that names
 * tcp-proxy and this node, a listener per port and family on the node's wildcard address, proxying
 * to the backend service's ready endpoints (proxy.ts). It re-plans on every change of Ingresses,
 * Services, Pods or this Node, and on a tick (a port in use may be freed), and reports in
 * `Ingress.status.nodes.<this node>` — the only field it writes, and the only one other nodes
 * accept from it (src/store/trust.ts).
 */
import { type NetworkInterfaceInfo, networkInterfaces } from 'node:os'
import type { Logger } from 'pino'
import { type Clock, every, type Random, unrefTimers } from '../../effects/index.ts'
import { type IngressNodeStatus, type IngressStatus, isPlainObject, OrcError } from '../../model/index.ts'
import { addressInPrefix, clusterPrefix, EGRESS_IPV4_PREFIX, parsePrefix } from '../../net/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import {
  clusterEndpointReach,
  type EndpointReach,
  type Family,
  INGRESS_CONTROLLER,
  nodeStatusOf,
  type PlannedListener,
  planIngressListeners,
  TCP_PROXY,
} from './plan.ts'
import { TcpProxy } from './proxy.ts'

export interface IngressComponents {
  store: ObjectStore
  nodeName: string
  clock: Clock
  random: Random
  log: Logger
  /** The node's interfaces (os.networkInterfaces by default): where `status` says it listens. */
  interfaces?: () => NodeJS.Dict<NetworkInterfaceInfo[]>
  /** Re-plan this often without a change (default 10 s): retries a port that was in use. */
  tickMs?: number
  /** Bind address per family (default 0.0.0.0 and ::); tests bind loopback. */
  bindHosts?: Partial<Record<Family, string>>
  /**
   * This cluster's name in the federation that shares namespace `ns`, or undefined when it is not
   * shared: a shared service's backends are its ready pods in this cluster only (`store` is then
   * the routed store, which holds the shared namespaces' Services and Pods).
   */
  clusterOf?(ns: string): string | undefined
  /**
   * The node network's federated ingress address (docs/federation.md, "Ingress"): `want` says
   * whether this node serves a shared service (then the node gets the address and other clusters
   * route it), `source` the address once it is up, `routed` whether an address of another cluster
   * is routed here. With no ready endpoint in this cluster, the proxy connects from `source` to the
   * routed ones.
   */
  federatedIngress?: {
    want(on: boolean): void
    source(): string | undefined
    routed(address: string): boolean
  }
}

const LINK_LOCAL = parsePrefix('fe80::/10')

/** Bind errors as a user reads them. */
function bindError(err: unknown, port: number, family: Family): string {
  const code = (err as { code?: string }).code
  if (code === 'EADDRINUSE') return `port ${port} (${family}) is already in use on this node`
  if (code === 'EACCES') return `port ${port} (${family}): permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)`
  if (code === 'EADDRNOTAVAIL' || code === 'EAFNOSUPPORT') return `port ${port} (${family}): this node has no ${family} address`
  return `port ${port} (${family}): ${String((err as Error).message ?? err)}`
}

export class IngressController {
  private readonly proxy: TcpProxy
  private readonly bound = new Map<string, { addresses: string[] } | { error: string }>()
  private unsubscribe: (() => void) | undefined
  private stopTick: (() => void) | undefined
  private pending = false
  private chain: Promise<void> = Promise.resolve()
  private stopped = false

  constructor(private readonly c: IngressComponents) {
    this.proxy = new TcpProxy(c.log, c.random)
  }

  async start(): Promise<void> {
    this.unsubscribe = this.c.store.onChange((keys) => {
      if (keys.some((k) => k.startsWith('Ingress/') || k.startsWith('Service/') || k.startsWith('Pod/') || k === `Node//${this.c.nodeName}`)) this.changed()
    })
    this.stopTick = every(unrefTimers(this.c.clock), this.c.tickMs ?? 10_000, () => this.changed())
    this.changed()
    await this.chain
  }

  async stop(): Promise<void> {
    this.stopped = true
    this.unsubscribe?.()
    this.stopTick?.()
    await this.chain.catch(() => {})
    await this.proxy.closeAll()
  }

  /** Wait for the passes queued so far (tests). */
  settled(): Promise<void> {
    return this.chain
  }

  private changed(): void {
    if (this.stopped || this.pending) return
    this.pending = true
    setImmediate(() => {
      this.pending = false
      if (this.stopped) return
      this.chain = this.chain.then(() => this.reconcile()).catch((err) => this.c.log.warn({ err: String(err) }, 'ingress reconcile failed'))
    })
  }

  /** The node's own addresses of a family, not the cluster's, link-local or loopback ones. */
  private nodeAddresses(family: Family): string[] {
    const cluster = this.c.store.list('Cluster')[0]?.spec?.id
    const ula = cluster !== undefined ? clusterPrefix(cluster) : undefined
    const out: string[] = []
    for (const list of Object.values((this.c.interfaces ?? networkInterfaces)())) {
      for (const a of list ?? []) {
        if (a.internal || (a.family === 'IPv4' ? 'IPv4' : 'IPv6') !== family) continue
        if (family === 'IPv6' && (addressInPrefix(a.address, LINK_LOCAL) || (ula && addressInPrefix(a.address, ula)))) continue
        if (family === 'IPv4' && addressInPrefix(a.address, EGRESS_IPV4_PREFIX)) continue
        out.push(a.address)
      }
    }
    return [...new Set(out)].sort()
  }

  /** Endpoints this node can connect to: in a shared namespace, pods of this cluster only. */
  private reach(): EndpointReach | undefined {
    const id = this.c.store.list('Cluster')[0]?.spec?.id
    return this.c.clusterOf === undefined || id === undefined ? undefined : clusterEndpointReach(clusterPrefix(id), this.c.clusterOf)
  }

  private async reconcile(): Promise<void> {
    const me = this.c.store.get({ kind: 'Node', namespace: '', name: this.c.nodeName })
    const node = { metadata: { name: this.c.nodeName, ...(me?.metadata.labels ? { labels: me.metadata.labels } : {}) } }
    const ingresses = this.c.store.list('Ingress')
    // Without an Ingress there is nothing to plan: no list of every Service and Pod on each change
    // (with 5,000 pods that was a quarter of the agent's CPU under a stream of API writes).
    const fi = this.c.federatedIngress
    const across = fi === undefined ? undefined : { source: fi.source(), routed: (a: string) => fi.routed(a) }
    const plan =
      ingresses.length === 0
        ? []
        : planIngressListeners(TCP_PROXY, node, ingresses, this.c.store.list('Service'), this.c.store.list('Pod'), this.reach(), across)
    // A listener whose backend is in a shared namespace: the node keeps its federated ingress address.
    fi?.want(plan.some((l) => this.c.clusterOf?.(l.backend.split('/')[0]!) !== undefined))
    const want = new Map(plan.map((l) => [l.key, l]))
    for (const key of this.proxy.keys()) {
      if (want.has(key)) continue
      await this.proxy.close(key)
      this.bound.delete(key)
      this.c.log.info({ key }, 'ingress listener closed')
    }
    for (const key of [...this.bound.keys()]) if (!want.has(key)) this.bound.delete(key)
    for (const l of plan) {
      const open = this.proxy.get(l.key)
      if (open !== undefined) {
        open.backends = l.backends
        continue
      }
      await this.open(l)
    }
    // Reports: one entry per Ingress this node serves; its entry removed from those it no longer serves.
    const byIngress = new Map<string, PlannedListener[]>()
    for (const l of plan) byIngress.set(l.ingress, [...(byIngress.get(l.ingress) ?? []), l])
    for (const ing of ingresses) {
      if (this.stopped) return
      const name = ing.metadata.name
      const listeners = byIngress.get(name)
      const current = (ing.status as IngressStatus | undefined)?.nodes?.[this.c.nodeName]
      if (listeners === undefined) {
        if (current !== undefined) await this.report(name, undefined)
        continue
      }
      const next = nodeStatusOf(listeners, this.bound)
      const json = JSON.stringify(next)
      const { updatedAt: _, ...cur } = isPlainObject(current) ? (current as IngressNodeStatus) : ({} as IngressNodeStatus)
      // Unchanged reports are not rewritten (updatedAt says when it last changed).
      if (json === JSON.stringify(cur)) continue
      await this.report(name, { ...next, updatedAt: new Date(this.c.clock.now()).toISOString() })
    }
  }

  private async open(l: PlannedListener): Promise<void> {
    const host = this.c.bindHosts?.[l.family] ?? (l.family === 'IPv4' ? '0.0.0.0' : '::')
    try {
      await this.proxy.listen(l.key, host, l.port, l.backends)
      const addresses = this.nodeAddresses(l.family).map((a) => (l.family === 'IPv6' ? `[${a}]:${l.port}` : `${a}:${l.port}`))
      this.bound.set(l.key, { addresses })
      this.c.log.info({ key: l.key, host, port: l.port, backend: l.backend, backends: l.backends.length }, 'ingress listening')
    } catch (err) {
      const error = bindError(err, l.port, l.family)
      if (JSON.stringify(this.bound.get(l.key)) !== JSON.stringify({ error })) this.c.log.warn({ key: l.key, err: error }, 'ingress listener refused')
      this.bound.set(l.key, { error })
    }
  }

  private async report(name: string, value: IngressNodeStatus | undefined): Promise<void> {
    try {
      await this.c.store.patch({ kind: 'Ingress', namespace: '', name }, [{ path: ['status', 'nodes', this.c.nodeName], value }], {
        author: INGRESS_CONTROLLER,
        reason: value === undefined ? 'no longer served here' : value.ready ? 'listening' : 'not ready',
        now: this.c.clock.now(),
      })
    } catch (err) {
      if (err instanceof OrcError && err.code === 'not_found') return
      this.c.log.warn({ ingress: name, err: String(err) }, 'write ingress status')
    }
  }
}
