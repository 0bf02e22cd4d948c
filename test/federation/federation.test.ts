// In-process federation tests: two clusters (one node each, real LevelDB stores) federated over
// real libp2p hosts on loopback. What a user would notice: shared objects show up on the other
// cluster with who wrote them, private ones never do, forged authorship is refused, a used token
// admits nobody else, a stranger cannot connect, and leaving stops replication but keeps copies.

import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { checkAuthorship } from '../../src/agent/federation/index.ts'
import { formatFederation } from '../../src/cli/commands/federation.ts'
import { createJoinerGater } from '../../src/mesh/gater.ts'
import { createHost, createJoinHost, streamChannel } from '../../src/mesh/host.ts'
import { JOIN_PROTOCOL } from '../../src/mesh/index.ts'
import { joinRequestFromToken, requestJoin } from '../../src/mesh/join.ts'
import { resolveTunables } from '../../src/mesh/options.ts'
import { encodePsk } from '../../src/mesh/psk.ts'
import { pod } from '../helpers/store.ts'
import { fastTunables, waitFor } from '../mesh/helpers.ts'
import { clusterRef, federated, inNs, ref, side } from './helpers.ts'

test('a shared write reaches the other cluster with its cluster and author; private objects never do', async (t) => {
  const { a, b } = await federated(t)
  const t0 = Date.now()
  await a.api.apply(inNs('shared', pod('web')), { author: 'user:alice', reason: 'deploy', now: Date.now() })
  await a.api.apply(inNs('default', pod('secret')), { author: 'user:alice', now: Date.now() })
  await waitFor('shared/web on cluster cloud', () => b.api.get(ref('shared', 'web')) !== undefined)
  const ms = Date.now() - t0
  t.diagnostic(`federated write visible on the other cluster after ${ms} ms`)
  const hist = await b.api.history(ref('shared', 'web'))
  assert.equal(hist[0]!.author, 'user:alice@home')
  assert.equal(hist[0]!.reason, 'deploy')
  // A few more, one at a time, for the figure (not asserted: tests never assert on speed).
  const lat: number[] = []
  for (let i = 0; i < 20; i++) {
    const s = Date.now()
    await a.api.apply(inNs('shared', pod(`w${i}`)), { author: 'user:alice', now: Date.now() })
    await waitFor(`shared/w${i} on cloud`, () => b.api.get(ref('shared', `w${i}`)) !== undefined)
    lat.push(Date.now() - s)
  }
  lat.sort((x, y) => x - y)
  t.diagnostic(`federated write (apply on home → visible on cloud), 20 writes: median ${lat[10]} ms, max ${lat[19]} ms`)
  for (let i = 0; i < 20; i++) await a.api.delete(ref('shared', `w${i}`), { author: 'user:alice', now: Date.now() })
  // The other way: cloud writes, home sees `@cloud`.
  await b.api.apply(inNs('shared', pod('api')), { author: 'user:bob', now: Date.now() })
  await waitFor('shared/api on cluster home', () => a.api.get(ref('shared', 'api')) !== undefined)
  assert.equal((await a.api.history(ref('shared', 'api')))[0]!.author, 'user:bob@cloud')
  // The private object stays in home's own scope: not in the federation document, not on cloud.
  assert.ok(a.store.get(ref('default', 'secret')))
  assert.equal(b.api.get(ref('default', 'secret')), undefined)
  assert.deepEqual(
    a.fm
      .get('shared')!
      .store.list('Pod')
      .map((p) => p.metadata.name)
      .sort(),
    ['api', 'web'],
  )
  // The shared objects are not in either cluster's own scope.
  assert.equal(a.store.get(ref('shared', 'web')), undefined)
  // Listing across namespaces shows both.
  assert.deepEqual(
    a.api
      .list('Pod')
      .map((p) => `${p.metadata.namespace}/${p.metadata.name}`)
      .sort(),
    ['default/secret', 'shared/api', 'shared/web'],
  )
  // A user cannot claim another cluster's name through the API.
  await assert.rejects(
    a.api.apply(inNs('shared', pod('x')), { author: 'user:mallory@cloud', now: Date.now() }),
    /names cluster cloud, but this is cluster home/,
  )
  // Both clusters list the federation with both clusters in it.
  const st = a.fm.status('shared')
  assert.deepEqual(st.clusters!.map((c) => c.name).sort(), ['cloud', 'home'])
})

test('a federation token admits one cluster: a second use is refused, and a stranger with the PSK cannot connect', async (t) => {
  const a = await side(t, 'a1', 'home', { tokenGraceMs: 0 })
  const b = await side(t, 'b1', 'cloud')
  const c = await side(t, 'c1', 'edge')
  await a.fm.create({ name: 'shared', namespaces: ['shared'], author: 'user:alice' })
  const { token } = await a.fm.token('shared')
  await b.fm.join({ token, author: 'user:bob' })
  await assert.rejects(c.fm.join({ token, author: 'user:carol' }), /refused|used|revoked|expired/i)
  assert.equal(c.fm.list().length, 0)
  // A node joining as a cluster already in the federation is refused, even with a fresh token.
  const t2 = await a.fm.token('shared')
  await assert.rejects(c.fm.join({ token: t2.token, as: 'cloud', author: 'user:carol' }), /already in (this|federation)/)
  assert.equal(c.fm.list().length, 0)
  // A node join token is not a federation token.
  await assert.rejects(c.fm.join({ token: 'orcjoin1.xyz', author: 'user:carol' }), /node join token/)

  // A stranger holding the federation PSK (leaked some other way: tokens do not carry it) and a
  // fresh key is refused by the mesh port's gater, with a token live and without.
  const home = a.fm.get('shared')!.mesh
  const stranger = await createHost({
    privateKey: await generateKeyPair('Ed25519'),
    psk: encodePsk(home.cluster.psk),
    listen: ['/ip4/127.0.0.1/tcp/0'],
    gater: {},
    tunables: resolveTunables(fastTunables),
    appSpecificScore: () => 0,
  })
  t.after(() => stranger.stop())
  await stranger.start()
  await stranger.peerStore.merge(peerIdFromString(home.peerId), { multiaddrs: home.addresses().map((x) => multiaddr(x)) })
  const syncs = async () => {
    const conn = await stranger.dial(peerIdFromString(home.peerId), { signal: AbortSignal.timeout(3000) })
    await stranger.dialProtocol(conn.remotePeer, '/orc/sync/1.0.0', { signal: AbortSignal.timeout(3000) })
  }
  await assert.rejects(syncs(), 'a token live: the mesh port still refuses a PSK holder')
  for (const tk of await home.listTokens()) if (tk.uses > 0) await home.revokeToken(tk.id).catch(() => undefined)
  await assert.rejects(syncs(), 'no token live: the mesh port refuses a PSK holder')
})

/** The claims of a federation token as JSON (what anyone who sees it can read). */
const claimsOf = (token: string) => JSON.parse(Buffer.from(token.slice('orcfed2.'.length), 'base64url').toString('utf8'))
const fedToken = (claims: object) => `orcfed2.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`

/**
 * Present a federation token's claims at `addrs` to `issuer` over the join protocol, from a fresh
 * key, as `orc federation join` does: "answered" (with "+key" when the PSK came back) or the error.
 */
async function present(claims: any, issuer = claims.issuer as string, addrs = claims.addrs as string[]): Promise<string> {
  const host = await createJoinHost({
    privateKey: await generateKeyPair('Ed25519'),
    listen: [],
    gater: createJoinerGater(issuer),
    tunables: resolveTunables({ ...fastTunables, dialTimeoutMs: 3000 }),
  })
  await host.start()
  try {
    const id = peerIdFromString(issuer)
    await host.peerStore.merge(id, { multiaddrs: addrs.map((x) => multiaddr(x)) })
    const stream = await host.dialProtocol(id, JOIN_PROTOCOL, { signal: AbortSignal.timeout(5000) })
    const res = await requestJoin(streamChannel(stream, 1 << 20), joinRequestFromToken(claims, 'thief@edge', []))
    return `answered${res.psk !== undefined ? '+key' : ''}`
  } catch (err) {
    return (err as Error).message
  } finally {
    await host.stop()
  }
}

test('a federation token carries no PSK; the joiner gets it at the join host only for a live token, from the host the token names', async (t) => {
  const a = await side(t, 'a1', 'home')
  const b = await side(t, 'b1', 'cloud')
  const c = await side(t, 'c1', 'edge')
  await a.fm.create({ name: 'shared', namespaces: ['shared'], author: 'user:alice' })
  const home = a.fm.get('shared')!.mesh
  const psk = home.cluster.psk
  assert.equal(psk.length, 32)
  const { token } = await a.fm.token('shared')

  // What anyone who sees the token reads: no key, in any encoding; the join host's address and the
  // federation host's peer id.
  assert.match(token, /^orcfed2\./)
  const claims = claimsOf(token)
  assert.deepEqual(Object.keys(claims).sort(), ['addrs', 'cluster', 'exp', 'id', 'issuer', 'secret', 'v'])
  const decoded = Buffer.from(token.slice('orcfed2.'.length), 'base64url').toString('latin1')
  const hex = Buffer.from(psk).toString('hex')
  for (const form of [
    hex,
    hex.toUpperCase(),
    Buffer.from(psk).toString('base64'),
    Buffer.from(psk).toString('base64url'),
    Buffer.from(psk).toString('latin1'),
  ]) {
    assert.equal(token.includes(form), false, 'the PSK is not in the token')
    assert.equal(decoded.includes(form), false, 'nor in its decoded bytes')
  }
  assert.equal(claims.issuer, home.peerId)
  assert.deepEqual(claims.addrs, home.joinAddresses())
  const joinPort = Number(/\/tcp\/(\d+)/.exec(claims.addrs[0])![1])
  const meshPort = Number(/\/tcp\/(\d+)/.exec(home.addresses()[0]!)![1])
  assert.ok(joinPort > 0 && joinPort !== meshPort, `the token names the join port (${joinPort}), not the mesh port (${meshPort})`)
  // `orc federation status` says where (the port to open beside the federation's own).
  assert.match(formatFederation(a.fm.status('shared')), new RegExp(`^  joins at: +${claims.addrs[0]}$`, 'm'))

  // Shown to another node (the token's issuer edited to cloud's federation host, at home's join
  // address): the joiner's Noise handshake fails on home's key; nothing is sent, the use stays.
  await b.fm.create({ name: 'other', namespaces: ['other'], author: 'user:bob' })
  const cloudFed = b.fm.get('other')!.mesh
  const misdirected = fedToken({ ...claims, issuer: cloudFed.peerId })
  await assert.rejects(c.fm.join({ token: misdirected, author: 'user:carol' }), /not the token's issuer/)
  assert.equal(c.fm.list().length, 0)
  // Presented at another node's join host (cloud's, by its own peer id): not its token; no key.
  await b.fm.token('other') // so cloud's join host takes connections
  const elsewhere = await present(claims, cloudFed.peerId, cloudFed.joinAddresses())
  assert.match(elsewhere, /token not recognised/)
  assert.equal((await home.listTokens()).find((r) => r.id === claims.id)!.usesLeft, 1, 'the token still has its use')

  // The real join: the key arrives over Noise at the join host, after redemption.
  const t0 = Date.now()
  await c.fm.join({ token, author: 'user:carol' })
  t.diagnostic(`federation join through the join host: ${Date.now() - t0} ms`)
  assert.deepEqual(c.fm.get('shared')!.mesh.cluster.psk, psk)
  await waitFor('home sees edge in the federation', () => (a.fm.status('shared').clusters ?? []).some((x) => x.name === 'edge'))

  // Used: refused at the join host with the reason, and no key.
  assert.match(await present(claims), /token already used/)
  // Expired: the same.
  const short = await a.fm.token('shared', { ttlMs: 1000 })
  await waitFor('the token to expire', () => Date.now() > claimsOf(short.token).exp + 50)
  const expired = await present(claimsOf(short.token))
  assert.match(expired, /token expired/)
  assert.doesNotMatch(expired, /answered/)
  // Through the CLI's path too: the joiner checks the expiry before dialing anything.
  const d = await side(t, 'd1', 'far')
  await assert.rejects(d.fm.join({ token: short.token, author: 'user:dave' }), /token expired/)
  // An invite of an older orc (the federation PSK inside): refused with the format to ask for.
  const old = `orcfed1.${Buffer.from(JSON.stringify({ ...claims, v: 1, psk: hex })).toString('base64url')}`
  await assert.rejects(d.fm.join({ token: old, author: 'user:dave' }), /older orc \(orcfed1\.….*orcfed2\.…/)
  assert.equal(d.fm.list().length, 0)

  // A token issued before the issuer's agent restarts still reaches its join host after: the join
  // port is kept (here it is checked, then refused only because cluster edge is in already).
  const before = await a.fm.token('shared')
  const joinAt = home.joinAddresses()
  await a.restart()
  assert.deepEqual(a.fm.get('shared')!.mesh.joinAddresses(), joinAt)
  assert.match(await present(claimsOf(before.token)), /cluster named edge is already in/)
})

test('a revision claiming another cluster is refused, and nothing of it is stored', async (t) => {
  const { a, b } = await federated(t)
  const fedB = b.fm.get('shared')!
  const fedA = a.fm.get('shared')!
  // Listen first: gossip carries the forged update to home as soon as it is written.
  const misbehaved = new Promise<string>((res) => fedA.mesh.on('peer:misbehaved', (e) => res(e.reason)))
  // A modified cloud agent writes straight into the federation document as if it were home.
  let forged: Uint8Array | undefined
  const off = fedB.store.onLocalUpdate((u) => (forged ??= u))
  await fedB.store.apply(inNs('shared', pod('evil')), { author: 'user:alice@home', now: Date.now() })
  off()
  assert.ok(forged)
  assert.throws(() => checkAuthorship(forged!, { clusterOfReplica: () => 'cloud' }), /claims author user:alice@home but was made by cluster cloud/)
  await assert.rejects(fedA.store.applyRemote(new Uint8Array([1, 2, 3])), /./)
  // Over the wire: home's mesh refuses it (and scores cloud's node down); nothing is stored.
  await fedB.mesh.syncNow().catch(() => undefined)
  assert.match(await Promise.race([misbehaved, new Promise<string>((r) => setTimeout(() => r('none'), 5000))]), /claims author/)
  assert.equal(a.api.get(ref('shared', 'evil')), undefined)
  assert.equal(fedA.store.list('Pod').length, 0)
})

test('leave stops replication both ways and keeps local copies; the others drop the leaver', async (t) => {
  const { a, b } = await federated(t)
  await a.api.apply(inNs('shared', pod('web')), { author: 'user:alice', now: Date.now() })
  // Placements across clusters: the copies cloud keeps can run in cloud where their author allowed it.
  const placed = {
    both: { clusters: ['home', 'cloud'], preferClusters: ['home'] },
    pinned: { node: 'n1@cloud' },
    'home-only': { clusters: ['home'] },
  }
  for (const [name, placement] of Object.entries(placed))
    await a.api.apply(inNs('shared', pod(name, undefined, { placement })), { author: 'user:alice', now: Date.now() })
  await waitFor('web and the placed pods on cloud', () => ['web', ...Object.keys(placed)].every((n) => b.api.get(ref('shared', n)) !== undefined))
  const homeMesh = a.fm.get('shared')!.mesh
  const cloudPeer = b.fm.get('shared')!.mesh.peerId
  await b.fm.leave('shared', 'user:bob')
  assert.equal(b.fm.list().length, 0)
  // cloud keeps its copy, now in its own scope (and its history says where it came from).
  const kept = b.store.get(ref('shared', 'web'))
  assert.ok(kept, 'the copy stays on the cluster that left')
  assert.equal(b.api.get(ref('shared', 'web'))?.metadata.revisionId, kept.metadata.revisionId)
  assert.match((await b.store.history(ref('shared', 'web')))[0]!.reason, /kept from federation shared/)
  const placementOf = (name: string) => (b.store.get(ref('shared', name))?.spec as any)?.placement
  assert.equal(placementOf('both')?.clusters, undefined, 'cloud is the only cluster now: no clusters constraint')
  assert.equal(placementOf('both')?.preferClusters, undefined)
  assert.match((await b.store.history(ref('shared', 'both')))[0]!.reason, /kept from federation shared \(left\); placement\.clusters \[home, cloud\] dropped/)
  assert.equal(placementOf('pinned')?.node, 'n1', 'a pin to a node of cloud names it by its name in cloud')
  assert.deepEqual(placementOf('home-only')?.clusters, ['home'], 'a pod only home may run stays as its author wrote it')
  // home learns cloud left: its nodes are no longer members, their connection is refused.
  await waitFor('home drops cloud', () => !homeMesh.isMember(cloudPeer) && homeMesh.libp2p.getConnections(peerIdFromString(cloudPeer)).length === 0)
  assert.deepEqual(
    a.fm.status('shared').clusters!.map((c) => c.name),
    ['home'],
  )
  // Neither side's writes reach the other any more.
  await a.api.apply(inNs('shared', pod('after-leave')), { author: 'user:alice', now: Date.now() })
  await b.api.apply(inNs('shared', pod('private-now')), { author: 'user:bob', now: Date.now() })
  await new Promise((r) => setTimeout(r, 1000))
  assert.equal(b.api.get(ref('shared', 'after-leave')), undefined)
  assert.equal(a.api.get(ref('shared', 'private-now')), undefined)
})

test('a cluster removed by the others stops receiving', async (t) => {
  const { a, b } = await federated(t)
  const cloudFed = b.fm.get('shared')!
  await a.fm.remove('shared', 'cloud', 'user:alice')
  const homeMesh = a.fm.get('shared')!.mesh
  await waitFor('home refuses cloud', () => !homeMesh.isMember(cloudFed.mesh.peerId))
  await a.api.apply(inNs('shared', pod('after-removal')), { author: 'user:alice', now: Date.now() })
  await new Promise((r) => setTimeout(r, 1000))
  assert.equal(b.api.get(ref('shared', 'after-removal')), undefined)
  // The removed cluster cannot come back with a new token either.
  const { token } = await a.fm.token('shared')
  const c = await side(t, 'c1', 'cloud2')
  void c
  await assert.rejects(
    (async () => {
      const d = await side(t, 'b9', 'cloud')
      await d.fm.join({ token, author: 'user:bob' })
    })(),
    /removed/,
  )
})

test('a removed cluster joins again once re-admitted (token --readmit proposes it); writes flow both ways again', async (t) => {
  const { a, b } = await federated(t)
  const cloudPeer = b.fm.get('shared')!.mesh.peerId
  await a.fm.remove('shared', 'cloud', 'user:alice')
  const homeMesh = a.fm.get('shared')!.mesh
  await waitFor('home refuses cloud', () => !homeMesh.isMember(cloudPeer))
  await assert.rejects(a.fm.token('shared', { readmit: 'edge' }), /cluster edge was not removed from federation shared/)
  // Cloud may not have heard of its removal (home cut it off): it leaves its copy, then joins again.
  // It may also hear of it between the check and the leave, and drop the copy itself (not_found).
  if (b.fm.get('shared') !== undefined)
    await b.fm.leave('shared', 'user:bob').catch((err) => {
      if (err?.code !== 'not_found') throw err
    })
  const { token } = await a.fm.token('shared', { readmit: 'cloud', author: 'user:alice' })
  const view = await b.fm.join({ token, author: 'user:bob' })
  assert.equal(view.cluster, 'cloud')
  await waitFor('home lists cloud again', () => (a.fm.status('shared').clusters ?? []).some((c) => c.name === 'cloud' && c.connected > 0))
  await a.api.apply(inNs('shared', pod('welcome-back')), { author: 'user:alice', now: Date.now() })
  await b.api.apply(inNs('shared', pod('from-cloud')), { author: 'user:bob', now: Date.now() })
  await waitFor(
    'both writes reach the other side',
    () => b.api.get(ref('shared', 'welcome-back')) !== undefined && a.api.get(ref('shared', 'from-cloud')) !== undefined,
  )
  assert.equal((await a.api.history(ref('shared', 'from-cloud')))[0]!.author, 'user:bob@cloud')
  // The re-admission is a proposal of home's (with two clusters its approval alone passes) in the Federation object's history.
  const fedHist = await a.fm.get('shared')!.store.history({ kind: 'Federation', namespace: '', name: 'shared' })
  assert.ok(
    fedHist.some(
      (h) => /^propose admit-cloud-[0-9a-f]{6}: admit cloud; members home; seen [0-9a-f]{16}\.[0-9]+$/.test(h.reason) && h.author === 'user:alice@home',
    ),
  )
})

test('with two clusters either admin removes the other; a removal without a passed proposal is refused on receipt', async (t) => {
  const { a, b } = await federated(t)
  assert.equal(b.fm.status('shared').creator, 'home', 'cloud learned the creator when it joined')
  assert.match(formatFederation(b.fm.status('shared')), /quorum: +default .*admitting needs 1, removing 1 approval/)
  // A modified agent of cloud deletes home's Cluster object without any proposal.
  const homeRef = clusterRef('home')
  const fa = a.fm.get('shared')!
  const fb = b.fm.get('shared')!
  await waitFor('cloud has home', () => fb.store.get(homeRef) !== undefined)
  const misbehaved = new Promise<string>((res) => fa.mesh.on('peer:misbehaved', (e) => res(e.reason)))
  await fb.store.delete(homeRef, { author: 'controller:federation@cloud', reason: 'forged removal', now: Date.now() })
  await fb.mesh.syncNow().catch(() => undefined)
  // Home refuses it before storing anything (and scores cloud's node down).
  assert.match(
    await Promise.race([misbehaved, new Promise<string>((r) => setTimeout(() => r('none'), 10_000))]),
    /deleted by controller:federation@cloud without a removal proposal/,
  )
  assert.ok(fa.store.get(homeRef), 'home still has its Cluster object')
  assert.ok(!(await fa.store.history(homeRef)).some((h) => h.op === 'delete'), "the forged deletion is not in home's history")
  assert.equal(a.fm.status('shared').state, 'joined')
  assert.ok(fb.mesh.isMember(fa.mesh.peerId), 'cloud does not act on its own forged removal: it keeps home')
})

test('with two clusters the admin of the cluster that did not create the federation removes the creator (one approval)', async (t) => {
  const { a, b } = await federated(t)
  const view = await b.fm.remove('shared', 'home', 'user:bob')
  assert.deepEqual(
    view.clusters!.map((c) => c.name),
    ['cloud'],
  )
  const p = view.governance!.proposals.find((x) => x.action === 'remove')!
  assert.equal(p.state, 'passed')
  assert.deepEqual(
    p.approvals.map((x) => x.author),
    ['user:bob@cloud'],
  )
  // Home learns it was removed and keeps its copies.
  await waitFor('home is removed', () => a.fm.get('shared') === undefined, 30_000)
  const hist = await b.fm.get('shared')!.store.history(clusterRef('home'))
  assert.equal(hist.at(-1)!.reason, `cluster home removed from the federation (proposal ${p.id})`)
  assert.equal(hist.at(-1)!.author, 'user:bob@cloud')
})

test('federation documents prune their tombstones once every member of every cluster vouched; replication goes on', async (t) => {
  const { a, b } = await federated(t)
  const fa = a.fm.get('shared')!
  const fb = b.fm.get('shared')!
  // Overwrite one shared object many times: each overwrite leaves a tombstone.
  await a.api.apply(inNs('shared', pod('churn')), { author: 'user:alice', now: Date.now() })
  for (let i = 0; i < 40; i++) {
    await a.api.patch(ref('shared', 'churn'), [{ path: ['metadata', 'labels', 'step'], value: String(i) }], { author: 'user:alice', now: Date.now() })
  }
  await waitFor(
    'both sides at step 39',
    () => fa.store.get(ref('shared', 'churn'))?.metadata.labels?.step === '39' && fb.store.get(ref('shared', 'churn'))?.metadata.labels?.step === '39',
  )
  const before = fa.store.docStats().structs
  let res: { pruned: number; skipped?: string } = { pruned: 0 }
  await waitFor('home prunes (every member vouched)', async () => {
    res = await a.fm.pruneNow('shared')
    return res.pruned > 0
  })
  assert.ok(res.pruned > 0)
  assert.ok(fa.store.docStats().structs < before, `structs ${fa.store.docStats().structs} < ${before}`)
  assert.equal(fa.store.get(ref('shared', 'churn'))?.metadata.labels?.step, '39', 'the live value is intact')
  assert.ok((await b.fm.pruneNow('shared')).skipped === undefined, 'cloud prunes too')
  // Writes after pruning still reach the other side.
  await b.api.patch(ref('shared', 'churn'), [{ path: ['metadata', 'labels', 'step'], value: 'after' }], { author: 'user:bob', now: Date.now() })
  await waitFor('home sees the write made after pruning', () => fa.store.get(ref('shared', 'churn'))?.metadata.labels?.step === 'after')
  // A member that does not answer holds pruning back (it may hold an old copy).
  await fb.mesh.stop()
  const waiting = await a.fm.pruneNow('shared')
  assert.equal(waiting.pruned, 0)
  assert.match(waiting.skipped ?? '', /did not answer/)
})

test('who may introduce whom: a cluster its own nodes or a new cluster, never a node of another known cluster', async (t) => {
  const { FederationDirectory } = await import('../../src/agent/federation/index.ts')
  const dir = await mkdtemp(join(tmpdir(), 'orc-fed-dir-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const d = new FederationDirectory(dir)
  await d.load()
  const m = (peerId: string, name: string) => ({ peerId, name, addresses: [] })
  await d.add(m('12D3KooWhomeA', 'a1@home'))
  await d.add(m('12D3KooWcloudB', 'b1@cloud'))
  assert.equal(d.vetAdmission(m('12D3KooWhomeA2', 'a2@home'), '12D3KooWhomeA'), true, 'home introduces its own node')
  assert.equal(d.vetAdmission(m('12D3KooWfake', 'evil@home'), '12D3KooWcloudB'), false, 'cloud cannot introduce a node of home')
  assert.equal(d.vetAdmission(m('12D3KooWedge', 'e1@edge'), '12D3KooWcloudB'), true, 'creator not known yet: a new cluster by any member')
  await d.setCreator('home')
  await d.setCreator('cloud')
  assert.equal(d.creator(), 'home', 'the first creator recorded stays')
  assert.equal(d.vetAdmission(m('12D3KooWedge', 'e1@edge'), '12D3KooWcloudB'), false, 'cloud did not create the federation: it admits nobody new')
  assert.equal(d.vetAdmission(m('12D3KooWedge', 'e1@edge'), '12D3KooWhomeA'), true, 'the creating cluster admits a new cluster')
  assert.equal(d.vetAdmission(m('12D3KooWx', 'nocluster'), '12D3KooWhomeA'), false, 'a name without @cluster is refused')
  assert.equal(d.vetAdmission(m('12D3KooWy', 'y@home'), '12D3KooWstranger'), false, 'a non-member introduces nobody')
  // A peer already bound to one cluster cannot be re-introduced as another's.
  assert.equal(d.vetAdmission(m('12D3KooWcloudB', 'b1@edge'), '12D3KooWcloudB'), false)
  // Removing a cluster refuses its nodes from then on, and survives a reload.
  await d.removeCluster('cloud')
  assert.equal(d.has('12D3KooWcloudB'), false)
  const again = new FederationDirectory(dir)
  await again.load()
  assert.equal(again.has('12D3KooWcloudB'), false)
  assert.equal(again.vetAdmission(m('12D3KooWcloudC', 'b2@cloud'), '12D3KooWhomeA'), false)
  assert.equal(again.has('12D3KooWhomeA'), true)
  // With governance (the manager's hook): any member introduces the first node of a cluster whose
  // admission passed; one refused before its admission arrived is handed back once it has.
  const admitted = new Set(['far'])
  again.admitsNew = (c) => admitted.has(c)
  assert.equal(again.vetAdmission(m('12D3KooWfar', 'f1@far'), '12D3KooWhomeA'), true, 'admitted: any member introduces it')
  assert.equal(again.vetAdmission(m('12D3KooWmars', 'm1@mars'), '12D3KooWhomeA'), false, 'not admitted (yet)')
  assert.deepEqual(again.retryDeferred(), [], 'still not admitted')
  assert.equal(again.vetAdmission(m('12D3KooWmars', 'm1@mars'), '12D3KooWhomeA'), false)
  admitted.add('mars')
  assert.deepEqual(
    again.retryDeferred().map((x) => x.name),
    ['m1@mars'],
  )
  await again.add(m('12D3KooWfar', 'f1@far'))
  assert.equal(again.vetAdmission(m('12D3KooWfar2', 'f2@far'), '12D3KooWhomeA'), false, 'far has a member: only far introduces its nodes')
})

test('garbage from a peer is refused with a clear error before the store sees it', () => {
  assert.throws(
    () => checkAuthorship(new Uint8Array([0xff, 0x01, 0x02]), { clusterOfReplica: () => 'home' }),
    (err: any) => err.code === 'invalid' || err.code === 'too_large',
  )
})
