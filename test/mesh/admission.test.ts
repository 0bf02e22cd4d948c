// Membership that stays removed, and who gets a connection (issue #17, deliverables 4 and 5): a
// removed node is refused at the gater and by the join protocol whatever token it presents; the
// mesh port admits members and the remote CLI only, a PSK holder gets nothing there; the join host
// takes trial connections only while a token is live, bounded per source; the remote CLI never starves.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { peerIdFromString } from '@libp2p/peer-id'
import { preSharedKey } from '@libp2p/pnet'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2p } from 'libp2p'
import type { Clock } from '../../src/effects/index.ts'
import { createJoinerGater } from '../../src/mesh/gater.ts'
import { createJoinHost, streamChannel } from '../../src/mesh/host.ts'
import {
  type ApiHandler,
  callRemoteApi,
  decodeRemoteCredential,
  decodeToken,
  encodeRemoteCredential,
  JOIN_PROTOCOL,
  type Mesh,
  meshDefaults,
  startMesh,
} from '../../src/mesh/index.ts'
import { joinRequestFromToken, requestJoin } from '../../src/mesh/join.ts'
import { encodePsk } from '../../src/mesh/psk.ts'
import { DocReplica, Fixture, fastTunables, waitFor } from './helpers.ts'

function manualClock(start = Date.now()): Clock & { advance(ms: number): void } {
  let now = start
  return {
    now: () => now,
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
    advance(ms) {
      now += ms
    },
  }
}

function retoken(token: string, change: (c: any) => void): string {
  const c: any = decodeToken(token)
  change(c)
  return 'orcjoin1.' + Buffer.from(JSON.stringify(c)).toString('base64url')
}

/**
 * `from` presents `token` at `issuer`'s join host with its own key, as `orc join` does: the answer
 * (with the PSK, if any), or why it failed.
 */
async function presentToken(from: Mesh, issuer: Mesh, token: string): Promise<'admitted' | string> {
  const client = await createJoinHost({ privateKey: from.privateKey, listen: [], gater: createJoinerGater(issuer.peerId), tunables: from.tunables })
  await client.start()
  try {
    const id = peerIdFromString(issuer.peerId)
    await client.peerStore.merge(id, { multiaddrs: issuer.joinAddresses().map((a) => multiaddr(a)) })
    const stream = await client.dialProtocol(id, JOIN_PROTOCOL, { signal: AbortSignal.timeout(3000) })
    await requestJoin(streamChannel(stream, 1 << 20), joinRequestFromToken(decodeToken(token), from.opts.name, from.addresses()))
    return 'admitted'
  } catch (err) {
    return (err as Error).message
  } finally {
    await client.stop()
  }
}

/**
 * Whether `from` gets a working connection to `to` — its mesh port, or with `port: 'join'` its join
 * host (a ping round trip, or the join protocol's negotiation there; the gater may close late).
 */
async function connects(
  from: Pick<Libp2p, 'dial' | 'peerStore' | 'dialProtocol'> & { services: any },
  to: Mesh,
  port: 'mesh' | 'join' = 'mesh',
): Promise<boolean> {
  const id = peerIdFromString(to.peerId)
  await from.peerStore.merge(id, { multiaddrs: (port === 'join' ? to.joinAddresses() : to.addresses()).map((a) => multiaddr(a)) })
  if (port === 'join') {
    try {
      // The stream stays open, unanswered (a refused join would close the connection and free its slot).
      await from.dialProtocol(id, JOIN_PROTOCOL, { signal: AbortSignal.timeout(3000) })
      return true
    } catch {
      return false
    }
  }
  try {
    await from.dial(id, { signal: AbortSignal.timeout(3000) })
    await from.services.ping.ping(id, { signal: AbortSignal.timeout(3000) })
    return true
  } catch {
    return false
  }
}

const connectedTo = (m: Mesh, peerId: string) => m.libp2p.getConnections().some((c) => c.remotePeer.toString() === peerId)

test('a removed node is refused whatever token it presents (its own, expired, or a fresh one) and gets no new writes', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const clock = manualClock()
  const ra = new DocReplica(),
    rb = new DocReplica(),
    rc = new DocReplica()
  const { mesh: a } = await fx.create('a', { scopes: { cluster: ra }, clock })
  // B joins with a multi-use token, as the probe did.
  const multi = await a.createToken({ ttlMs: 10 * 60_000, uses: 5 })
  const { joinMesh } = await import('../../src/mesh/index.ts')
  const b = fx.track(await joinMesh({ ...(await fx.base('b', { scopes: { cluster: rb } })), token: multi.token }))
  const c = await fx.join('c', a, { scopes: { cluster: rc } })
  ra.set('before', 1)
  await waitFor('B and C replicate', () => rb.get('before') === 1 && rc.get('before') === 1)

  // The tombstone reaches every member (the agent applies Cluster.status.removedPeers on each node).
  await Promise.all([a.removeMember(b.peerId), c.removeMember(b.peerId)])
  await waitFor('A and C closed their connections to B', () => !connectedTo(a, b.peerId) && !connectedTo(c, b.peerId))

  // B, still running with its identity, presents a fresh valid token and its own (revoked) token:
  // both refused, neither consumed.
  const fresh = await a.createToken({ ttlMs: 10 * 60_000, uses: 1 })
  assert.notEqual(await presentToken(b, a, fresh.token), 'admitted', 'a fresh valid token does not let a removed node back in')
  assert.notEqual(await presentToken(b, a, multi.token), 'admitted', 'nor its own token')
  assert.equal((await a.listTokens()).find((r) => r.id === fresh.id)?.usesLeft, 1, 'the fresh token was not used up')
  assert.equal(a.isMember(b.peerId), false)
  assert.ok(!a.members().some((m) => m.peerId === b.peerId))

  // New writes reach the members, never B.
  ra.set('after', 2)
  await waitFor('C receives the write', () => rc.get('after') === 2)
  await c.syncNow()
  await b.syncNow().catch(() => undefined)
  assert.equal(rb.get('after'), undefined, 'nothing reaches the removed node')
  // And nothing B writes is taken in.
  rb.set('from-removed', 1)
  await b.syncNow().catch(() => undefined)
  rc.set('from-c', 1)
  await waitFor('A receives a member write', () => ra.get('from-c') === 1)
  assert.equal(ra.get('from-removed'), undefined)

  // Its own token after it expired (the claim forged forward), while another token is live.
  const live = await a.createToken({ ttlMs: 60 * 60_000, uses: 1 })
  clock.advance(11 * 60_000)
  const expired = retoken(multi.token, (x) => (x.exp = Date.now() + 3_600_000))
  assert.notEqual(await presentToken(b, a, expired), 'admitted', 'nor its own token once expired')
  assert.equal((await a.listTokens()).find((r) => r.id === live.id)?.usesLeft, 1)
  assert.equal(a.isMember(b.peerId), false)
})

test("a removed peer's connection is refused at the gater, also after the node restarts", async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const base = await fx.base('a')
  const { createCluster } = await import('../../src/mesh/index.ts')
  const created = await createCluster(base)
  let a = created.mesh
  const b = await fx.join('b', a)
  await a.removeMember(b.peerId)
  await waitFor('A closed its connection to B', () => !connectedTo(a, b.peerId))
  // A join is open (a live token): a stranger would get a trial connection; the removed peer does not.
  await a.createToken({ ttlMs: 60_000, uses: 1 })
  assert.equal(await connects(b.libp2p, a), false, 'refused at the gater')
  // Restarted, before anything syncs: the local copy of the removal is enforced at once.
  const addrs = a.addresses()
  await a.stop()
  a = fx.track(await startMesh({ ...base, listen: addrs }))
  assert.equal(a.isRemoved(b.peerId), true)
  await a.createToken({ ttlMs: 60_000, uses: 1 })
  assert.equal(await connects(b.libp2p, a), false, 'refused after the restart')
  assert.equal(connectedTo(a, b.peerId), false)
})

/** A stranger with a fresh random identity: holding the cluster's PSK (for the mesh port), or without pnet (for the join host). */
async function strangerHost(psk?: Uint8Array): Promise<Libp2p<{ ping: any }>> {
  const { ping } = await import('@libp2p/ping')
  return createLibp2p({
    addresses: { listen: [] },
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    ...(psk !== undefined ? { connectionProtector: preSharedKey({ psk: encodePsk(psk), timeout: 2000 }) } : {}),
    connectionManager: { dialTimeout: 2000, reconnectRetries: 0 },
    services: { ping: ping() },
  })
}

test('a flood of strangers at the join host takes at most 4 trial slots from one address and leaves the remote CLI working', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const handler: ApiHandler = async (req) => ({ status: 200, body: { path: req.path } })
  // The default trial limits, and trials that last: the flood holds its slots for the whole test.
  const { mesh: a, adminCredential } = await fx.create('a', {
    apiHandler: handler,
    tunables: { ...fastTunables, maxProbationPerSource: 4, probationStartsPerSourcePerMinute: 12, probationMs: 60_000 },
  })
  await a.createToken({ ttlMs: 10 * 60_000, uses: 1 }) // a join is open: the join host takes trials
  const flood = await Promise.all(Array.from({ length: 20 }, () => strangerHost()))
  t.after(() => Promise.all(flood.map((h) => h.stop())))
  const held = (await Promise.all(flood.map((h) => connects(h, a, 'join')))).filter(Boolean).length
  // PSK holders at the mesh port (any old token held the PSK): nothing, token live or not.
  const pskHolders = await Promise.all(Array.from({ length: 4 }, () => strangerHost(a.cluster.psk)))
  t.after(() => Promise.all(pskHolders.map((h) => h.stop())))
  assert.equal((await Promise.all(pskHolders.map((h) => connects(h, a)))).filter(Boolean).length, 0, 'the mesh port admits members only')

  const credential = decodeRemoteCredential(encodeRemoteCredential(a.cluster, adminCredential))
  let ok = 0
  for (let i = 0; i < 8; i++) {
    const r = await callRemoteApi({ addrs: a.addresses(), credential, req: { method: 'GET', path: `/v1/call/${i}` }, dialTimeoutMs: 2000 }).catch(
      () => undefined,
    )
    if (r?.status === 200) ok++
  }
  assert.equal(ok, 8, 'every remote CLI call succeeds')
  assert.ok(held >= 1 && held <= 4, `between 1 and 4 trial connections from one address, got ${held}`)
  // The flood hangs up: its slots are free again at once (not when its probation would have ended).
  await Promise.all(flood.map((h) => h.stop()))
  const late = await strangerHost()
  t.after(() => late.stop())
  await waitFor('a freed trial slot is taken', () => connects(late, a, 'join'))
  assert.equal(meshDefaults.maxProbationPerSource, 4)
})

test('the join host takes a connection only while a token is live; the mesh port never takes a PSK holder', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const handler: ApiHandler = async () => ({ status: 200, body: {} })
  const { mesh: a, adminCredential } = await fx.create('a', { apiHandler: handler, tunables: { ...fastTunables, tokenGraceMs: 0 } })
  const s = await strangerHost()
  const p = await strangerHost(a.cluster.psk)
  t.after(() => Promise.all([s.stop(), p.stop()]))
  assert.equal(await connects(s, a, 'join'), false, 'no token: the join host refuses')
  assert.equal(await connects(p, a), false, 'no token: the mesh port refuses a PSK holder')
  const tok = await a.createToken({ ttlMs: 60_000, uses: 1 })
  assert.equal(await connects(s, a, 'join'), true, 'a live token: a trial connection to the join host')
  assert.equal(await connects(p, a), false, 'a live token: the mesh port still refuses a PSK holder')
  await s.hangUp(peerIdFromString(a.peerId))
  await a.revokeToken(tok.id)
  const s2 = await strangerHost()
  t.after(() => s2.stop())
  assert.equal(await connects(s2, a, 'join'), false, 'its token revoked: refused again')
  // The remote CLI is no stranger: it connects with no token live.
  const credential = decodeRemoteCredential(encodeRemoteCredential(a.cluster, adminCredential))
  const r = await callRemoteApi({ addrs: a.addresses(), credential, req: { method: 'GET', path: '/v1/status' } })
  assert.equal(r.status, 200)
})
