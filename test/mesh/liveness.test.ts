import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Fixture, waitFor, stateOf } from './helpers.ts'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Mesh, MemberTransition } from '../../src/mesh/index.ts'
import { HEARTBEAT_PROTOCOL } from '../../src/mesh/gossip.ts'

test('a stopped node becomes suspect, then dead, on the others; members() reports rtt and addresses', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const { mesh: a } = await fx.create('a')
  const b = await fx.join('b', a)
  const c = await fx.join('c', a)
  await waitFor('all alive', () => [a, b].every((m) => [a, b, c].every((o) => stateOf(m, o.peerId) === 'alive')))
  await waitFor('rtt measured and heartbeats heard', () =>
    a.members().every((x) => x.rttMs !== null && x.lastSeen !== null),
  )
  const cView = a.members().find((x) => x.peerId === c.peerId)!
  assert.ok(cView.addresses.some((ad) => ad.startsWith('/ip4/127.0.0.1/tcp/')))
  assert.ok(cView.lastSeen !== null)

  const seen: MemberTransition[] = []
  a.on('member:state', (tr) => seen.push(tr))
  await c.stop()
  await waitFor('A and B suspect C', () => stateOf(a, c.peerId) === 'suspect' && stateOf(b, c.peerId) === 'suspect')
  await waitFor('A and B declare C dead', () => stateOf(a, c.peerId) === 'dead' && stateOf(b, c.peerId) === 'dead')
  // Events follow on the next heartbeat tick.
  await waitFor('A emitted the dead event', () => seen.some((x) => x.peerId === c.peerId && x.to === 'dead'))
  // C goes suspect before dead and is never declared dead early. (While it is stopping, a late
  // heartbeat or ping reply may briefly bring it back from suspect to alive on a loaded machine.)
  const path = seen.filter((x) => x.peerId === c.peerId).map((x) => x.to)
  assert.deepEqual(path.slice(-2), ['suspect', 'dead'], `transitions: ${path.join(' → ')}`)
  assert.equal(path.filter((s) => s === 'dead').length, 1, `transitions: ${path.join(' → ')}`)
  // The survivors still see each other alive.
  assert.equal(stateOf(a, b.peerId), 'alive')
  assert.equal(stateOf(b, a.peerId), 'alive')
})

test('heartbeats go straight to connected members; one without the heartbeat protocol (an older orc) hears them by gossip', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const { mesh: a } = await fx.create('a')
  const b = await fx.join('b', a)
  const c = await fx.join('c', a)
  const heardBy = (m: Mesh, path: 'direct' | 'gossip') => {
    const from = new Set<string>()
    m.on('heartbeat', (h) => h.direction === 'in' && h.path === path && from.add(h.peerId))
    return from
  }
  const directAtA = heardBy(a, 'direct')
  await waitFor('A hears B and C directly', () => directAtA.has(b.peerId) && directAtA.has(c.peerId))

  // C turns into an older orc: no heartbeat protocol. Its connections are cut so streams reopen.
  await c.libp2p.unhandle(HEARTBEAT_PROTOCOL)
  for (const o of [a, b]) await c.libp2p.hangUp(peerIdFromString(o.peerId))
  const gossipAtC = heardBy(c, 'gossip')
  const states: string[] = []
  c.on('member:state', (tr) => states.push(`${tr.name}:${tr.to}`))
  await waitFor('C hears A and B by gossip', () => gossipAtC.has(a.peerId) && gossipAtC.has(b.peerId))
  // Over three suspect windows C never loses sight of A or B.
  await new Promise((r) => setTimeout(r, 3 * 900))
  assert.equal(stateOf(c, a.peerId), 'alive')
  assert.equal(stateOf(c, b.peerId), 'alive')
  assert.ok(!states.some((s) => s.endsWith(':suspect') || s.endsWith(':dead')), `C saw: ${states.join(', ')}`)
})

test('a member whose heartbeats arrive directly is pinged only for its round trip; one heard by gossip is pinged on the short interval', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const tunables = { pingIntervalMs: 300, directPingIntervalMs: 60_000 }
  const { mesh: a } = await fx.create('a', { tunables })
  const b = await fx.join('b', a, { tunables })
  const c = await fx.join('c', a, { tunables })
  const pinged = new Map<string, number>()
  for (const m of [a, c]) {
    const ping = m.libp2p.services.ping as unknown as { ping: (peer: { toString(): string }, ...rest: unknown[]) => Promise<number> }
    const orig = ping.ping.bind(ping)
    ping.ping = (peer, ...rest) => {
      const k = `${m.peerId}>${peer.toString()}`
      pinged.set(k, (pinged.get(k) ?? 0) + 1)
      return orig(peer, ...rest)
    }
  }
  const direct = new Set<string>()
  a.on('heartbeat', (h) => h.direction === 'in' && h.path === 'direct' && direct.add(h.peerId))
  await waitFor('A hears B directly', () => direct.has(b.peerId))
  // C turns into an older orc (no heartbeat protocol): it hears A and B by gossip from then on.
  await c.libp2p.unhandle(HEARTBEAT_PROTOCOL)
  for (const o of [a, b]) await c.libp2p.hangUp(peerIdFromString(o.peerId))
  await waitFor('C connected to A again', () => c.libp2p.getConnections(peerIdFromString(a.peerId)).length > 0)
  await new Promise((r) => setTimeout(r, 1200)) // any direct heartbeat C had from A is now stale
  pinged.clear()
  await new Promise((r) => setTimeout(r, 2000))
  assert.equal(pinged.get(`${a.peerId}>${b.peerId}`) ?? 0, 0, 'A pinged B, which it hears directly, on the short interval')
  const cToA = pinged.get(`${c.peerId}>${a.peerId}`) ?? 0
  assert.ok(cToA >= 3, `C, hearing A by gossip, pinged it ${cToA} times in 2 s`)
  assert.notEqual(a.members().find((m) => m.peerId === b.peerId)?.rttMs, null, 'B still has a round-trip time at A')
})
