import assert from 'node:assert/strict'
import { test } from 'node:test'
import { peerIdFromString } from '@libp2p/peer-id'
import { HEARTBEAT_PROTOCOL } from '../../src/mesh/gossip.ts'
import type { Mesh } from '../../src/mesh/index.ts'
import { Fixture, fastTunables, stateOf, transitionsOf, waitFor } from './helpers.ts'

// Failure detection runs on the wall clock, so on a loaded machine (2 cores, other test files) a
// stalled event loop looks like a quiet member. Each test waits on conditions with deadlines derived
// from the intervals it configures, and the tests that must see no suspicion give the detector a
// window of many heartbeats (the fast fixtures' 900 ms is six; one failed under load).

/** Tunables with a suspect window of `heartbeats` heartbeat intervals (dead at twice that). */
function patientTunables(heartbeats: number) {
  const suspectAfterMs = heartbeats * fastTunables.heartbeatIntervalMs!
  return { suspectAfterMs, deadAfterMs: 2 * suspectAfterMs }
}

test('a stopped node becomes suspect, then dead, on the others; members() reports rtt and addresses', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const { mesh: a } = await fx.create('a')
  const b = await fx.join('b', a)
  const c = await fx.join('c', a)
  await waitFor('all alive', () => [a, b].every((m) => [a, b, c].every((o) => stateOf(m, o.peerId) === 'alive')))
  // A ping of each member must have come back: on a loaded machine (a full suite, two files at
  // once) pings time out and are retried on the short schedule, so this gets a generous deadline.
  await waitFor('rtt measured and heartbeats heard', () => a.members().every((x) => x.rttMs !== null && x.lastSeen !== null), 30_000)
  const cView = a.members().find((x) => x.peerId === c.peerId)!
  assert.ok(cView.addresses.some((ad) => ad.startsWith('/ip4/127.0.0.1/tcp/')))
  assert.ok(cView.lastSeen !== null)

  // Transitions are recorded as they happen: polling for "both suspect" could miss the window
  // between suspect and dead on a slow machine.
  const cAt = new Map([a, b].map((m) => [m, transitionsOf(m, c.peerId)]))
  const deadAt = [a, b].map((m) => transitionsOf(m, m === a ? b.peerId : a.peerId))
  await c.stop()
  const deadline = 5 * fastTunables.deadAfterMs!
  await waitFor('A and B declare C dead', () => stateOf(a, c.peerId) === 'dead' && stateOf(b, c.peerId) === 'dead', deadline)
  // Events follow on the next heartbeat tick.
  await waitFor('A and B emitted the dead event', () => [...cAt.values()].every((path) => path.includes('dead')), deadline)
  // C goes suspect before dead and is never declared dead early. (While it is stopping, a late
  // heartbeat or ping reply may briefly bring it back from suspect to alive on a loaded machine.)
  for (const [m, path] of cAt) {
    assert.deepEqual(path.slice(-2), ['suspect', 'dead'], `${m.peerId === a.peerId ? 'A' : 'B'}: ${path.join(' → ')}`)
    assert.equal(path.filter((s) => s === 'dead').length, 1, `${m.peerId === a.peerId ? 'A' : 'B'}: ${path.join(' → ')}`)
  }
  // The survivors still see each other alive, and never thought each other dead.
  await waitFor('A and B see each other alive', () => stateOf(a, b.peerId) === 'alive' && stateOf(b, a.peerId) === 'alive', deadline)
  assert.ok(
    deadAt.every((path) => !path.includes('dead')),
    `survivors: ${deadAt.map((p) => p.join(' → ')).join('; ')}`,
  )
})

test('heartbeats go straight to connected members; one without the heartbeat protocol (an older orc) hears them by gossip', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const tunables = patientTunables(20)
  const { mesh: a } = await fx.create('a', { tunables })
  const b = await fx.join('b', a, { tunables })
  const c = await fx.join('c', a, { tunables })
  const heardBy = (m: Mesh, path: 'direct' | 'gossip') => {
    const from = new Map<string, number>()
    m.on('heartbeat', (h) => h.direction === 'in' && h.path === path && from.set(h.peerId, (from.get(h.peerId) ?? 0) + 1))
    return from
  }
  const directAtA = heardBy(a, 'direct')
  await waitFor('A hears B and C directly', () => directAtA.has(b.peerId) && directAtA.has(c.peerId))

  // C turns into an older orc: no heartbeat protocol. Its connections are cut so streams reopen.
  await c.libp2p.unhandle(HEARTBEAT_PROTOCOL)
  for (const o of [a, b]) await c.libp2p.hangUp(peerIdFromString(o.peerId))
  const gossipAtC = heardBy(c, 'gossip')
  await waitFor('C hears A and B by gossip', () => gossipAtC.has(a.peerId) && gossipAtC.has(b.peerId), 4 * tunables.suspectAfterMs)
  // From then on, for more than a whole suspect window counted in heartbeats heard (not in wall
  // time, which a loaded machine stretches), C never loses sight of A or B.
  const states: string[] = []
  c.on('member:state', (tr) => states.push(`${tr.name}:${tr.to}`))
  const window = tunables.suspectAfterMs / fastTunables.heartbeatIntervalMs! + 2
  const start = new Map(gossipAtC)
  const heardSince = (p: string) => (gossipAtC.get(p) ?? 0) - (start.get(p) ?? 0)
  await waitFor(
    `C hears ${window} more heartbeats of A and of B by gossip`,
    () => heardSince(a.peerId) >= window && heardSince(b.peerId) >= window,
    10 * tunables.suspectAfterMs,
  )
  assert.equal(stateOf(c, a.peerId), 'alive')
  assert.equal(stateOf(c, b.peerId), 'alive')
  assert.ok(!states.some((s) => s.endsWith(':suspect') || s.endsWith(':dead')), `C saw: ${states.join(', ')}`)
})

test('a member whose heartbeats arrive directly is pinged only for its round trip; one heard by gossip is pinged on the short interval', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  // "Heard directly" means within suspectAfterMs: twenty heartbeats, so a stalled event loop does
  // not send A back to pinging B.
  const tunables = { pingIntervalMs: 300, directPingIntervalMs: 60_000, ...patientTunables(20) }
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
  // A's one ping for B's round-trip time is done.
  await waitFor('A knows its round trip to B', () => a.members().find((m) => m.peerId === b.peerId)?.rttMs != null)
  // C turns into an older orc (no heartbeat protocol): it hears A and B by gossip from then on.
  await c.libp2p.unhandle(HEARTBEAT_PROTOCOL)
  for (const o of [a, b]) await c.libp2p.hangUp(peerIdFromString(o.peerId))
  await waitFor('C connected to A again', () => c.libp2p.getConnections(peerIdFromString(a.peerId)).length > 0)
  pinged.clear()
  // Once the last direct heartbeat C had from A is older than suspectAfterMs, C pings A every
  // pingIntervalMs; all that time A hears B directly and does not ping it.
  const cToA = () => pinged.get(`${c.peerId}>${a.peerId}`) ?? 0
  await waitFor('C pings A, which it hears by gossip, three times', () => cToA() >= 3, 10 * (tunables.suspectAfterMs + 3 * tunables.pingIntervalMs))
  assert.equal(
    pinged.get(`${a.peerId}>${b.peerId}`) ?? 0,
    0,
    `A pinged B, which it hears directly, on the short interval (C pinged A ${cToA()} times meanwhile)`,
  )
  assert.notEqual(a.members().find((m) => m.peerId === b.peerId)?.rttMs, null, 'B still has a round-trip time at A')
})
