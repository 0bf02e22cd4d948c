/** The peers table of `orc status` and `orc doctor`: each member, how this node reaches it, what it runs. */

import type { Mesh } from '../../mesh/index.ts'
import { byCodeUnits } from '../../model/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import type { PeerRow } from '../api-types.ts'

export type { PeerRow } from '../api-types.ts'

export interface PeersComponents {
  store: ObjectStore
  nodeName: string
  version: string
  now: () => number
  mesh?: Mesh
}

export function peerRows(d: PeersComponents): PeerRow[] {
  const mesh = d.mesh
  const pods = new Map<string, number>()
  for (const p of d.store.list('Pod')) {
    const n = (p.status as Record<string, unknown> | undefined)?.node
    if (typeof n === 'string') pods.set(n, (pods.get(n) ?? 0) + 1)
  }
  const versionOf = (name: string): string | null => {
    const v = (d.store.get({ kind: 'Node', namespace: '', name })?.status as Record<string, unknown> | undefined)?.version
    return typeof v === 'string' ? v : null
  }
  if (mesh === undefined) {
    return [
      {
        name: d.nodeName,
        peerId: '',
        self: true,
        state: 'alive',
        path: 'self',
        latencyMs: null,
        lastSeen: d.now(),
        handshakeAt: null,
        addresses: [],
        version: d.version,
        pods: pods.get(d.nodeName) ?? 0,
      },
    ]
  }
  const conns = new Map<string, { relayed: boolean; openedAt: number }>()
  for (const c of mesh.libp2p.getConnections()) {
    const id = c.remotePeer.toString()
    const relayed = c.limits !== undefined || c.remoteAddr.toString().includes('/p2p-circuit')
    const openedAt = c.timeline.open
    const cur = conns.get(id)
    // Prefer a direct connection over a relayed one; among equals the newest handshake.
    if (cur === undefined || (cur.relayed && !relayed) || (cur.relayed === relayed && openedAt > cur.openedAt)) conns.set(id, { relayed, openedAt })
  }
  return mesh
    .members()
    .map((m): PeerRow => {
      const c = conns.get(m.peerId)
      return {
        name: m.name,
        peerId: m.peerId,
        self: m.self,
        state: m.state,
        path: m.self ? 'self' : c === undefined ? 'gossip' : c.relayed ? 'relayed' : 'direct',
        latencyMs: m.self ? null : m.rttMs,
        lastSeen: m.self ? d.now() : m.lastSeen,
        handshakeAt: c?.openedAt ?? null,
        addresses: m.addresses,
        version: versionOf(m.name),
        pods: pods.get(m.name) ?? 0,
      }
    })
    .sort((a, b) => Number(b.self) - Number(a.self) || byCodeUnits(a.name, b.name))
}
