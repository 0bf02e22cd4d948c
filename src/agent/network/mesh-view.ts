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
    async connectOver(peerId, ip) {
      const addr = mesh
        .members()
        .find((m) => m.peerId === peerId)
        ?.addresses.find((a) => ipOfMultiaddr(a) === ip && /\/tcp\/\d+$/.test(a))
      if (addr === undefined) return false
      try {
        // A second connection besides the one libp2p chose (force): both ends then see it.
        await mesh.libp2p.dial(multiaddr(`${addr}/p2p/${peerIdFromString(peerId).toString()}`), { force: true, signal: AbortSignal.timeout(10_000) })
        return true
      } catch {
        return false
      }
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
