// Mesh benchmark (in-process, loopback TCP). Prints one figure per line.
// Run: node --import tsx --import ./test/setup.ts test/mesh/bench/replication.ts

import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { Mesh } from '../../../src/mesh/index.ts'
import { DocReplica, Fixture, seededRandom, waitFor } from '../helpers.ts'

const fx = new Fixture()
const ra = new DocReplica(),
  rb = new DocReplica(),
  rc = new DocReplica()
for (let i = 0; i < 10_000; i++) ra.set(`obj/${i}`, { i, spec: { image: 'busybox', replicas: 1 } })
const { mesh: a } = await fx.create('a', { scopes: { cluster: ra } })

let t0 = performance.now()
const b = await fx.join('b', a, { scopes: { cluster: rb } })
console.log(`join_with_10k_objects_ms ${(performance.now() - t0).toFixed(0)}`)
const c = await fx.join('c', b, { scopes: { cluster: rc } })
await waitFor('mesh', () => [a, b, c].every((m) => m.libp2p.getConnections().length >= 2) && rc.map.size === 10_000, 30_000)

function arrival(r: DocReplica, k: string, v: unknown): Promise<void> {
  return new Promise((resolve) => {
    if (r.get(k) === v) return resolve()
    const on = () => {
      if (r.get(k) === v) {
        r.doc.off('update', on)
        resolve()
      }
    }
    r.doc.on('update', on)
  })
}
const lat: number[] = []
for (let i = 0; i < 200; i++) {
  const t = performance.now()
  ra.set(`w/${i}`, i)
  await Promise.all([rb, rc].map((r) => arrival(r, `w/${i}`, i)))
  lat.push(performance.now() - t)
}
lat.sort((x, y) => x - y)
console.log(`gossip_write_to_all_p50_ms ${lat[100].toFixed(1)}`)
console.log(`gossip_write_to_all_p99_ms ${lat[198].toFixed(1)}`)

t0 = performance.now()
const rd = new DocReplica()
await fx.join('d', a, { scopes: { cluster: rd } })
console.log(`anti_entropy_10k_objects_join_ms ${(performance.now() - t0).toFixed(0)}`)

const opts = await fx.base('wrongpsk')
const s = fx.track(await Mesh.create(opts, { clusterId: a.clusterId, createdAt: 0, adminKeys: [], psk: seededRandom(5)(32) }, a.peerId))
await s.libp2p.start()
const id = peerIdFromString(a.peerId)
await s.libp2p.peerStore.merge(id, { multiaddrs: a.addresses().map((x) => multiaddr(x)) })
t0 = performance.now()
await s.libp2p
  .dial(id, { signal: AbortSignal.timeout(10_000) })
  .then(() => s.libp2p.services.ping.ping(id))
  .catch(() => undefined)
console.log(`wrong_psk_refused_ms ${(performance.now() - t0).toFixed(0)}`)
await fx.close()
