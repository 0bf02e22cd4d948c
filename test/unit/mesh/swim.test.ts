import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { decodeSwimMessage, encodeSwimMessage } from '../../../src/mesh/gossip.ts'
import { SwimDetector, type SwimMessage, suspicionMinMs, suspicionTimeoutMs, swimDefaults } from '../../../src/mesh/swim.ts'

/** A tiny seeded generator (mulberry32). */
function rng(seed: number): (n: number) => number {
  let s = seed >>> 0
  return (n) => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n)
  }
}

/** Fake signatures: `id:inc`; a liar can only write someone else's id into it. */
const sign = (id: string) => (inc: number) => `${id}:${inc}`
const verify = (id: string, inc: number, sig: string) => sig === `${id}:${inc}`

/**
 * N detectors on a manual clock with a 10 ms network; `drop(from, to)` loses a message. Every node
 * advances every 50 ms. Counts messages sent per node.
 */
class Net {
  now = 0
  readonly nodes = new Map<string, SwimDetector>()
  readonly up = new Set<string>()
  sent = 0
  drop: (from: string, to: string, m: SwimMessage) => boolean = () => false
  private queue: { at: number; from: string; to: string; msg: SwimMessage }[] = []

  constructor(n: number, seed: number, opts: Partial<typeof swimDefaults> = {}, full?: () => boolean) {
    const ids = Array.from({ length: n }, (_, i) => `node-${String(i).padStart(12, '0')}`)
    ids.forEach((id, i) => {
      const d = new SwimDetector(id, { ...swimDefaults, ...opts }, { random: rng(seed * 100 + i), sign: sign(id), verify, full }, 1)
      for (const o of ids) d.add(o, 0)
      this.nodes.set(id, d)
      this.up.add(id)
    })
  }

  id(i: number): string {
    return [...this.nodes.keys()][i]!
  }

  private send(from: string, outs: { to: string; msg: SwimMessage }[]): void {
    for (const o of outs) {
      this.sent++
      if (this.drop(from, o.to, o.msg)) continue
      this.queue.push({ at: this.now + 10, from, to: o.to, msg: o.msg })
    }
  }

  run(ms: number): void {
    const end = this.now + ms
    while (this.now < end) {
      this.now += 10
      const due = this.queue.filter((q) => q.at <= this.now)
      this.queue = this.queue.filter((q) => q.at > this.now)
      for (const q of due) if (this.up.has(q.to)) this.send(q.to, this.nodes.get(q.to)!.receive(q.from, q.msg, this.now))
      if (this.now % 50 === 0) for (const [id, d] of this.nodes) if (this.up.has(id)) this.send(id, d.advance(this.now))
    }
  }

  stateOf(observer: number, subject: number): string | undefined {
    return this.nodes.get(this.id(observer))!.view(this.id(subject))?.state
  }
}

test('Lifeguard timeouts: min scales with log10 N, confirmations bring max down to min', () => {
  assert.equal(suspicionMinMs({ suspicionMult: 4, probeIntervalMs: 1000 }, 5), 4000)
  assert.equal(suspicionMinMs({ suspicionMult: 4, probeIntervalMs: 1000 }, 100), 8000)
  assert.equal(suspicionTimeoutMs(0, 3, 4000, 24000), 24000)
  assert.equal(suspicionTimeoutMs(3, 3, 4000, 24000), 4000)
  const one = suspicionTimeoutMs(1, 3, 4000, 24000)
  assert.ok(one < 24000 && one > 4000)
})

test('a healthy cluster stays alive everywhere, and each node sends about the same whatever N', () => {
  const perNode: number[] = []
  for (const n of [8, 32]) {
    const net = new Net(n, 7)
    net.run(30_000)
    for (let a = 0; a < n; a++) for (let b = 0; b < n; b++) if (a !== b) assert.equal(net.stateOf(a, b), 'alive', `seed 7 n ${n}: ${a} sees ${b}`)
    perNode.push(net.sent / n / 30)
  }
  // One probe a period: a ping out and an ack back per probe, on average two messages a node a second.
  for (const r of perNode) assert.ok(r > 1.5 && r < 2.5, `messages/s per node ${perNode.join(', ')}`)
})

test('a crashed member is suspected, then confirmed dead everywhere within the Lifeguard bound', () => {
  const n = 10
  const net = new Net(n, 3)
  net.run(5_000)
  net.up.delete(net.id(4))
  const t0 = net.now
  const bound = 6 * suspicionMinMs(swimDefaults, n) + (n + 2) * swimDefaults.probeIntervalMs
  let allDead: number | undefined
  while (net.now - t0 < bound + 5_000) {
    net.run(500)
    let dead = 0
    for (let a = 0; a < n; a++) if (a !== 4 && net.stateOf(a, 4) === 'dead') dead++
    if (dead === n - 1) {
      allDead = net.now - t0
      break
    }
  }
  assert.ok(allDead !== undefined && allDead <= bound, `seed 3: dead everywhere after ${allDead} ms (bound ${bound})`)
  // Independent confirmations shorten the suspicion well below its maximum.
  assert.ok(allDead! < 6 * suspicionMinMs(swimDefaults, n), `took ${allDead} ms`)
})

test('an indirect probe saves a member behind a lossy link: no suspicion', () => {
  const n = 6
  const net = new Net(n, 11)
  const a = net.id(0)
  const b = net.id(1)
  // The link between 0 and 1 loses everything, both ways; all other links work.
  net.drop = (f, t) => (f === a && t === b) || (f === b && t === a)
  const transitions: string[] = []
  net.run(40_000)
  for (const d of net.nodes.values()) for (const tr of d.takeTransitions()) transitions.push(`${tr.id} ${tr.from}→${tr.to}`)
  assert.equal(net.stateOf(0, 1), 'alive')
  assert.equal(net.stateOf(1, 0), 'alive')
  assert.deepEqual(transitions, [])
  // 0's evidence of 1 is fresh (it came through the helpers' forwarded acks and the evidence vectors).
  const ev = net.nodes.get(a)!.view(b)!.evidence!
  assert.ok(net.now - ev < 5_000, `evidence ${net.now - ev} ms old`)
})

test('a suspected member refutes with a higher incarnation; a liar cannot raise it for a dead member', () => {
  const n = 5
  const net = new Net(n, 5)
  net.run(3_000)
  const victim = net.id(2)
  const liar = net.id(0)
  const d1 = net.nodes.get(net.id(1))!
  // Member 1 hears a (false) suspicion of 2 at its current incarnation.
  const inc = d1.view(victim)!.inc
  d1.receive(liar, { t: 'ping-req', seq: 1, target: net.id(3), up: [{ id: victim, s: 'suspect', inc, by: liar }] }, net.now)
  assert.equal(d1.view(victim)!.state, 'suspect')
  net.run(10_000)
  assert.equal(d1.view(victim)!.state, 'alive')
  assert.ok(d1.view(victim)!.inc > inc, 'refuted at a higher incarnation')
  assert.ok(net.nodes.get(victim)!.incarnation > inc)

  // Now 2 really crashes and is declared dead; the liar claims it alive at a higher incarnation without its signature.
  net.up.delete(victim)
  net.run(40_000)
  assert.equal(d1.view(victim)!.state, 'dead')
  const dead = d1.view(victim)!.inc
  d1.receive(liar, { t: 'ping-req', seq: 2, target: net.id(3), up: [{ id: victim, s: 'alive', inc: dead + 5, sig: `${liar}:${dead + 5}` }] }, net.now)
  d1.receive(liar, { t: 'ack', seq: 99, inc: dead + 7, sig: 'forged', up: [], of: victim }, net.now)
  assert.equal(d1.view(victim)!.state, 'dead')
  assert.equal(d1.view(victim)!.inc, dead)
  // Updates about strangers and from strangers change nothing.
  assert.deepEqual(d1.receive('stranger', { t: 'ping', seq: 1, inc: 9, sig: 'x', up: [] }, net.now), [])
  d1.receive(liar, { t: 'ping-req', seq: 3, target: net.id(3), up: [{ id: 'stranger', s: 'dead', inc: 1 }] }, net.now)
  assert.equal(d1.view('stranger'), undefined)
})

test('a member back from a partition is told it was declared dead and comes back alive everywhere', () => {
  const n = 6
  const net = new Net(n, 9)
  const x = net.id(5)
  net.run(3_000)
  net.drop = (f, t) => f === x || t === x
  net.run(60_000)
  for (let a = 0; a < 5; a++) assert.equal(net.stateOf(a, 5), 'dead', `seed 9: ${a} sees the cut-off member`)
  net.drop = () => false
  net.run(30_000)
  for (let a = 0; a < 5; a++) assert.equal(net.stateOf(a, 5), 'alive', `seed 9: ${a} sees it again`)
  for (let b = 0; b < 5; b++) assert.equal(net.stateOf(5, b), 'alive', `seed 9: it sees ${b} again`)
})

test('evidence of a cut-off member stops at the cut: a quorum counted from it is never newer than the truth', () => {
  const n = 7
  const net = new Net(n, 13)
  net.run(10_000)
  const x = net.id(6)
  const cut = net.now
  net.drop = (f, t) => f === x || t === x
  net.run(20_000)
  for (let a = 0; a < 6; a++) {
    const ev = net.nodes.get(net.id(a))!.view(x)!.evidence!
    assert.ok(ev <= cut + 20, `node ${a} dates its evidence of the cut-off member at ${ev - cut} ms after the cut`)
  }
  // And the cut-off member's evidence of everyone else stops at the cut too.
  for (const v of net.nodes.get(x)!.views()) assert.ok(v.evidence! <= cut + 20)
})

test('SWIM messages round-trip through the codec; anything malformed decodes to undefined, never throws', () => {
  const msgs: SwimMessage[] = [
    { t: 'ping', seq: 1, inc: 5, sig: 'abc', up: [{ id: 'p1', s: 'suspect', inc: 3, by: 'p2' }], ev: { abcdefghij: 20 }, full: true },
    { t: 'ack', seq: 2, inc: 5, sig: 'abc', up: [{ id: 'p1', s: 'alive', inc: 4, sig: 's' }], of: 'p3' },
    { t: 'ping-req', seq: 3, target: 'p4', up: [] },
  ]
  // (JSON round trip: the evidence record is decoded without a prototype.)
  for (const m of msgs) assert.deepEqual(JSON.parse(JSON.stringify(decodeSwimMessage(encodeSwimMessage(m)))), m)
  const bad = [
    '{}',
    '[]',
    'null',
    '{"t":"ping","seq":-1,"inc":1,"sig":"","up":[]}',
    '{"t":"ping","seq":1,"inc":1.5,"sig":"","up":[]}',
    '{"t":"ping","seq":1,"inc":1,"sig":"","up":[{"id":"p","s":"zombie","inc":1}]}',
    '{"t":"ping","seq":1,"inc":1,"sig":"","up":[],"ev":{"k":-3}}',
    '{"t":"ping","seq":1,"inc":1,"sig":"","up":[],"ev":{"a-key-much-too-long":3}}',
    '{"t":"ack","seq":1,"inc":1,"sig":"","up":[],"of":5}',
    '{"t":"ping-req","seq":1,"up":[]}',
    '{"t":"hb","seq":1,"up":[]}',
    `{"t":"ping","seq":1,"inc":1,"sig":"","up":[${Array(65).fill('{"id":"p","s":"dead","inc":1}').join(',')}]}`,
  ]
  for (const b of bad) assert.equal(decodeSwimMessage(new TextEncoder().encode(b)), undefined, b)
  assert.equal(decodeSwimMessage(new Uint8Array([0xff, 0xfe, 0x7b])), undefined)
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 256 }), (b) => {
      decodeSwimMessage(b)
    }),
  )
  fc.assert(
    fc.property(fc.json(), (j) => {
      decodeSwimMessage(new TextEncoder().encode(j))
    }),
  )
})

test('a member that says it is connected to every live member is trusted so only for a while (forwards())', () => {
  const net = new Net(6, 21, {}, () => true)
  net.run(10_000)
  const d0 = net.nodes.get(net.id(0))!
  // Every member exchanged probes with node 0 within those 10 s (6 members, one probe a period each way).
  for (let i = 1; i < 6; i++) assert.ok(d0.fullWithin(net.id(i), net.now, 10_000), `seed 21: member ${i}`)
  assert.ok(!d0.fullWithin(net.id(1), net.now + 60_000, 10_000))
  const plain = new Net(3, 21)
  plain.run(5_000)
  assert.ok(!plain.nodes.get(plain.id(0))!.fullWithin(plain.id(1), plain.now, 10_000))
})
