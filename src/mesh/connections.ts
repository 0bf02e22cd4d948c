/**
 * Connections to members: which members we are connected to, and keeping a connection to each
 * member we want one with (every member up to fullMeshMax, a random `partialMeshDegree` beyond),
 * redialing with backoff. Liveness runs keep() on its upkeep tick; it owns no timers itself.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { Logger } from 'pino'
import type { Clock, Random } from '../effects/index.ts'
import { shortError } from './deadline.ts'
import type { MeshLibp2p } from './host.ts'
import type { MemberDirectory } from './members.ts'
import { chooseConnections } from './membership.ts'
import type { MeshTunables } from './options.ts'

export interface ConnectionsComponents {
  libp2p: Pick<MeshLibp2p, 'getConnections' | 'peerStore' | 'dial'>
  peerId: string
  clock: Clock
  random: Random
  tunables: MeshTunables
  log: Logger
  directory: Pick<MemberDirectory, 'list' | 'get'>
  isMember: (peerId: string) => boolean
  isBanned: (peerId: string, now: number) => boolean
}

export class MemberConnections {
  private readonly backoff = new Map<string, { until: number; failures: number }>()

  constructor(private readonly c: ConnectionsComponents) {}

  /** Members (not us) with an open connection. */
  connected(): string[] {
    const out = new Set<string>()
    for (const conn of this.c.libp2p.getConnections()) {
      const p = conn.remotePeer.toString()
      if (p !== this.c.peerId && this.c.isMember(p)) out.add(p)
    }
    return [...out]
  }

  /** A member connected (either side dialed): its dial backoff is over. */
  connectedTo(peerId: string): void {
    this.backoff.delete(peerId)
  }

  /**
   * Dial the members we want a connection to and lack, skipping those still backing off. The dials
   * start at once; the promise settles when all are done (a failed dial only backs off).
   */
  keep(connected: Set<string>, now: number): Promise<unknown> {
    const candidates = this.c.directory
      .list()
      .map((m) => m.peerId)
      .filter((p) => p !== this.c.peerId && !this.c.isBanned(p, now))
    const want = chooseConnections({
      candidates,
      connected,
      fullMeshMax: this.c.tunables.fullMeshMax,
      degree: this.c.tunables.partialMeshDegree,
      random: this.c.random,
    })
    const dials: Promise<void>[] = []
    for (const p of want) {
      if (connected.has(p)) continue
      const b = this.backoff.get(p)
      if (b !== undefined && b.until > now) continue
      dials.push(this.dial(p))
    }
    return Promise.all(dials)
  }

  private async dial(p: string): Promise<void> {
    const info = this.c.directory.get(p)
    if (info === undefined || info.addresses.length === 0) return
    const id = peerIdFromString(p)
    try {
      await this.c.libp2p.peerStore.merge(id, { multiaddrs: info.addresses.map((a) => multiaddr(a)) })
      await this.c.libp2p.dial(id, { signal: AbortSignal.timeout(this.c.tunables.dialTimeoutMs) })
      this.backoff.delete(p)
    } catch (err) {
      const failures = (this.backoff.get(p)?.failures ?? 0) + 1
      const wait = Math.min(60_000, this.c.tunables.maintainIntervalMs * 2 ** Math.min(failures - 1, 5))
      this.backoff.set(p, { until: this.c.clock.now() + wait, failures })
      this.c.log.debug({ peer: p, err: shortError(err), failures }, 'dial member failed')
    }
  }
}
