/** The node network's view of the mesh: members, their liveness, and where libp2p sees them. */
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
    alivePeers: () =>
      new Set(
        mesh
          .members()
          .filter((m) => !m.self && m.state === 'alive')
          .map((m) => m.peerId),
      ),
  }
}
