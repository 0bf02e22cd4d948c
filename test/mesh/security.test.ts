import assert from 'node:assert/strict'
import { test } from 'node:test'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { streamChannel } from '../../src/mesh/host.ts'
import { type ApiHandler, initCluster, Mesh, SYNC_PROTOCOL, storeTopic } from '../../src/mesh/index.ts'
import { Tag, writeBytes, writeJson } from '../../src/mesh/wire.ts'
import { credentialPeer, DocReplica, Fixture, seededRandom, waitFor } from './helpers.ts'

async function dialOutcome(m: Mesh, target: Mesh): Promise<'connected' | 'refused'> {
  const id = peerIdFromString(target.peerId)
  await m.libp2p.peerStore.merge(id, { multiaddrs: target.addresses().map((a) => multiaddr(a)) })
  try {
    // With Noise's early muxer negotiation the dialer may finish its upgrade before the listener's
    // gater closes the connection, so "connected" means a stream round trip works.
    await m.libp2p.dial(id, { signal: AbortSignal.timeout(3000) })
    await m.libp2p.services.ping.ping(id, { signal: AbortSignal.timeout(3000) })
    return 'connected'
  } catch {
    return 'refused'
  }
}

/** A node with the cluster's PSK (or another) that was never admitted. */
async function stranger(fx: Fixture, a: Mesh, psk = a.cluster.psk, extra = {}): Promise<Mesh> {
  const opts = await fx.base('stranger', extra)
  const m = await Mesh.create(opts, { clusterId: a.clusterId, createdAt: 0, adminKeys: [], psk }, a.peerId)
  fx.track(m)
  await m.libp2p.start()
  return m
}

test('a member sending garbage on gossip and sync is disconnected, then banned; the others keep working', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const ra = new DocReplica(),
    rb = new DocReplica(),
    rr = new DocReplica()
  const { mesh: a } = await fx.create('a', { scopes: { cluster: ra } })
  const b = await fx.join('b', a, { scopes: { cluster: rb } })
  const rogue = await fx.join('rogue', a, { scopes: { cluster: rr } })
  await waitFor('rogue connected to A and B', () => [a, b].every((m) => m.libp2p.getConnections().some((c) => c.remotePeer.toString() === rogue.peerId)))
  await waitFor('A and B know rogue subscribes', () =>
    [a, b].every((m) => m.libp2p.services.pubsub.getSubscribers(storeTopic(a.clusterId, 'cluster')).some((p) => p.toString() === rogue.peerId)),
  )
  const misbehaved: { at: string; peerId: string; banned: boolean }[] = []
  a.on('peer:misbehaved', (e) => misbehaved.push({ at: 'a', ...e }))
  b.on('peer:misbehaved', (e) => misbehaved.push({ at: 'b', ...e }))

  // 1. Garbage on gossip: rejected by the validator (not forwarded), sender disconnected.
  await rogue.libp2p.services.pubsub.publish(storeTopic(a.clusterId, 'cluster'), new Uint8Array([0xff, 0xff, 0xff, 0xff, 7, 7]))
  await waitFor('A scored the rogue down', () => misbehaved.some((e) => e.at === 'a' && e.peerId === rogue.peerId))
  assert.equal(misbehaved.find((e) => e.at === 'a')!.banned, false)

  // 2. Garbage over sync: a well-formed session whose update is junk. Second offence: banned.
  const garbageSync = async () => {
    const stream = await rogue.libp2p.dialProtocol(peerIdFromString(a.peerId), SYNC_PROTOCOL, { signal: AbortSignal.timeout(3000) })
    const ch = streamChannel(stream, 1 << 20)
    await writeJson(ch, Tag.hello, { v: 1, scope: 'cluster', members: [] })
    await writeBytes(ch, Tag.state, rr.encodeSyncState())
    for (;;) {
      const f = await ch.read()
      if (f === null || f[0] === Tag.end) break
    }
    await writeBytes(ch, Tag.chunk, new Uint8Array([0xff, 0xfe, 0xfd, 0xfc, 1, 2, 3]))
    await writeBytes(ch, Tag.end, new Uint8Array(0))
  }
  // The first hang-up may still be in flight when we dial again: retry until a session gets through.
  await waitFor('a garbage sync session reached A', async () => {
    await garbageSync().catch(() => undefined)
    return misbehaved.some((e) => e.at === 'a' && e.banned)
  })
  await waitFor('A banned the rogue', () => misbehaved.some((e) => e.at === 'a' && e.banned))
  await waitFor('A has no connection to the rogue', () => !a.libp2p.getConnections().some((c) => c.remotePeer.toString() === rogue.peerId))
  assert.equal(await dialOutcome(rogue, a), 'refused')

  // Only the rogue was blamed: the garbage was not forwarded between A and B.
  assert.ok(misbehaved.every((e) => e.peerId === rogue.peerId))
  // A and B still replicate with each other.
  ra.set('after', 1)
  rb.set('after-b', 2)
  await waitFor('A and B converge', () => rb.get('after') === 1 && ra.get('after-b') === 2)
  assert.equal(ra.get('after-b'), 2)
})

test('the gater keeps out peers that were not admitted; a wrong PSK cannot even connect', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const ra = new DocReplica()
  ra.set('secret', 'x')
  const credentialKeys: string[] = []
  const { mesh: a } = await fx.create('a', { scopes: { cluster: ra }, credentialKeys: () => credentialKeys, tunables: { probationMs: 800 } })

  // No join open: a stranger holding the right PSK is refused at connection time.
  const s1 = await stranger(fx, a)
  assert.equal(await dialOutcome(s1, a), 'refused')
  assert.equal(a.libp2p.getConnections().length, 0)

  // Wrong PSK: the private-network handshake fails, within the dial timeout.
  const s2 = await stranger(fx, a, seededRandom(99)(32))
  const t0 = Date.now()
  assert.equal(await dialOutcome(s2, a), 'refused')
  assert.ok(Date.now() - t0 < 5000)

  // A join open (a live token) changes nothing on the mesh port: joiners go to the join host.
  await a.createToken({ ttlMs: 60_000, uses: 1 })
  const s3 = await stranger(fx, a)
  assert.equal(await dialOutcome(s3, a), 'refused', 'a PSK holder gets no connection to the mesh port, even while a token is live')
  assert.equal(a.libp2p.getConnections().length, 0)

  // A credential peer (the remote CLI's key) gets a connection without being a member, but may not sync.
  const s4 = await credentialPeer(fx, a, credentialKeys)
  assert.equal(await dialOutcome(s4, a), 'connected')
  const syncRefused = await s4.libp2p
    .dialProtocol(peerIdFromString(a.peerId), SYNC_PROTOCOL, { signal: AbortSignal.timeout(3000) })
    .then(async (st) => {
      const ch = streamChannel(st, 1 << 20)
      await writeJson(ch, Tag.hello, { v: 1, scope: 'cluster', members: [] })
      return (await ch.read().catch(() => null)) === null
    })
    .catch(() => true)
  assert.equal(syncRefused, true)
})

test('remote API requests need the admin credential', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const handler: ApiHandler = async (req, ctx) => ({ status: 200, body: { path: req.path, method: req.method, q: req.query, from: ctx.peerId } })
  const { mesh: a, adminCredential } = await fx.create('a', { apiHandler: handler })
  const b = await fx.join('b', a, { apiHandler: handler })

  const res = await b.request(a.peerId, { method: 'GET', path: '/v1/pods', query: { ns: 'default' } }, adminCredential)
  assert.deepEqual(res, { status: 200, body: { path: '/v1/pods', method: 'GET', q: { ns: 'default' }, from: b.peerId } })
  // The joiner learned the admin key at join, so it serves the API too.
  assert.equal((await a.request(b.peerId, { method: 'GET', path: '/v1/nodes' }, adminCredential)).status, 200)

  await assert.rejects(
    b.request(a.peerId, { method: 'GET', path: '/v1/pods' }),
    (err: any) => err.code === 'forbidden' && err.message === 'remote API request refused: no credential presented',
  )
  const other = await initCluster({ dataDir: await fx.dir(), random: seededRandom(7), now: 0 })
  await assert.rejects(
    b.request(a.peerId, { method: 'DELETE', path: '/v1/pods/web' }, other.adminCredential),
    (err: any) => err.code === 'forbidden' && /credential belongs to no user of this cluster/.test(err.message),
  )
  await assert.rejects(b.request(a.peerId, { method: 'GET', path: '/' }, 'orcadmin1.nonsense'), /admin credential is malformed/)
})
