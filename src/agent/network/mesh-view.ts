/** The node network's view of the mesh: members, their liveness, and where libp2p sees them. */
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { Mesh } from '../../mesh/index.ts'
import type { MeshView } from './controller.ts'
import { ipOfMultiaddr } from './plan.ts'

export function meshViewOf(mesh: Mesh): MeshView {
  return {
    peerId: mesh.peerId,
    clusterId: mesh.clusterId,
    addresses: () => mesh.addresses(),
    observedIps() {
      const out = new Map<string, string[]>()
      for (const c of mesh.libp2p.getConnections()) {
        if (c.status !== 'open') continue
        const ip = ipOfMultiaddr(c.remoteAddr.toString())
        if (ip === undefined) continue
        const peer = c.remotePeer.toString()
        const ips = out.get(peer) ?? []
        if (!ips.includes(ip)) ips.push(ip)
        out.set(peer, ips)
      }
      return out
    },
    connectOver: (peerId, ip) => connectOver(mesh, peerId, ip),
    alivePeers: () =>
      new Set(
        mesh
          .members()
          .filter((m) => !m.self && m.state === 'alive')
          .map((m) => m.peerId),
      ),
  }
}

/**
 * Open another connection to member `peerId` of `mesh`, at its mesh address on `ip` (a second one
 * besides the connection libp2p chose: `force`, so both ends then see it); whether it worked.
 */
export async function connectOver(mesh: Mesh, peerId: string, ip: string): Promise<boolean> {
  const addr = mesh
    .members()
    .find((m) => m.peerId === peerId)
    ?.addresses.find((a) => ipOfMultiaddr(a) === ip && /\/tcp\/\d+$/.test(a))
  if (addr === undefined) return false
  try {
    await mesh.libp2p.dial(multiaddr(`${addr}/p2p/${peerIdFromString(peerId).toString()}`), { force: true, signal: AbortSignal.timeout(10_000) })
    return true
  } catch {
    return false
  }
}
