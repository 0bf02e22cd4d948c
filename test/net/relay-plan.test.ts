/**
 * NAT paths in the node network plan (pure): which peers are relayed, through whom, and what
 * WireGuard is then told. Both ends of a relayed pair must pick the same relay, or the answers come
 * back through a peer whose allowed-ips do not hold the sender and WireGuard drops them.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { decideSubnet } from '../../src/agent/network/index.ts'
import { chooseRelay, endpointsFromMultiaddrs, judgeInbound, type PublishedNetwork, planPeers, readPublishedNetwork } from '../../src/agent/network/plan.ts'
import { clusterPrefix, formatPrefix, generateKeyPair, nodePrefix } from '../../src/net/index.ts'
import { seededBytes } from '../helpers/store.ts'

const cluster = clusterPrefix('c0ffee00c0ffee00c0ffee00c0ffee00')
const key = (peerId: string) => generateKeyPair(seededBytes([...peerId].reduce((a, c) => a * 31 + c.charCodeAt(0), 7) % 100_000)).publicKey
const prefixOf = (subnet: number) => formatPrefix(nodePrefix(cluster, subnet))

function node(peerId: string, subnet: number, extra: Partial<PublishedNetwork> = {}): PublishedNetwork {
  return { name: peerId, peerId, publicKey: key(peerId), subnet, endpoints: [], removed: false, ...extra }
}

/** pub (10) reaches both NAT'd homes (20, 30) and sees their NAT mappings; the homes reach only pub. */
function natPair(extra: { pub2?: boolean; homesReachEachOther?: boolean } = {}): PublishedNetwork[] {
  const nodes = [
    node('pub', 10, {
      endpoints: ['198.18.0.1:51820'],
      reach: new Set([20, 30, ...(extra.pub2 ? [40] : [])]),
      seen: new Map([
        [20, '198.18.0.253:51820'],
        [30, '198.18.0.252:41000'],
      ]),
    }),
    node('home1', 20, { endpoints: ['10.77.0.2:51820'], reach: new Set([10, ...(extra.pub2 ? [40] : []), ...(extra.homesReachEachOther ? [30] : [])]) }),
    node('home2', 30, { endpoints: ['10.78.0.2:51820'], reach: new Set([10, ...(extra.pub2 ? [40] : [])]) }),
  ]
  if (extra.pub2) nodes.push(node('pub2', 40, { endpoints: ['198.18.0.2:51820'], reach: new Set([10, 20, 30]) }))
  return nodes
}

function plan(self: string, nodes: PublishedNetwork[], observed: Record<string, string> = {}) {
  const { owners } = decideSubnet(cluster, self, nodes)
  return planPeers(cluster, self, nodes, owners, new Map(Object.entries(observed)))
}

test("two NAT'd nodes that do not reach each other route through the member both reach, on both sides", () => {
  const nodes = natPair()
  const fromHome1 = plan('home1', nodes, { pub: '198.18.0.1' })
  const toHome2 = fromHome1.find((p) => p.peerId === 'home2')!
  const toPub = fromHome1.find((p) => p.peerId === 'pub')!
  assert.equal(toHome2.path, 'relayed')
  assert.equal(toHome2.via?.name, 'pub')
  // A /64 can be on one peer only: it moves to the relay; the direct peer keeps trying (keepalive).
  assert.deepEqual(toHome2.wg.allowedIps, [])
  assert.equal(toHome2.wg.persistentKeepalive, 25)
  assert.deepEqual(toPub.wg.allowedIps, [prefixOf(10), prefixOf(30)])
  assert.equal(toPub.path, 'direct')
  // The other end decides the same.
  const fromHome2 = plan('home2', nodes, { pub: '198.18.0.1' })
  assert.equal(fromHome2.find((p) => p.peerId === 'home1')!.via?.name, 'pub')
  assert.deepEqual(fromHome2.find((p) => p.peerId === 'pub')!.wg.allowedIps, [prefixOf(10), prefixOf(20)])
  // The relay itself routes both directly: it forwards between its peers.
  const fromPub = plan('pub', nodes, { home1: '198.18.0.253', home2: '198.18.0.252' })
  assert.ok(fromPub.every((p) => p.path === 'peer-dials' && p.wg.allowedIps.length === 1))
})

test("each NAT'd node is configured with the other's NAT mapping as a member sees it (hole punching)", () => {
  const toHome2 = plan('home1', natPair(), { pub: '198.18.0.1' }).find((p) => p.peerId === 'home2')!
  assert.equal(toHome2.wg.endpoint, '198.18.0.252:41000')
  assert.equal(toHome2.punched, true)
})

test("a public node that does not see a NAT'd peer on the mesh waits for it to dial, never fights its mapping", () => {
  const nodes = natPair({ pub2: true })
  const toHome1 = plan('pub2', nodes, {}).find((p) => p.peerId === 'home1')!
  assert.equal(toHome1.path, 'peer-dials')
  assert.equal(toHome1.wg.endpoint, undefined)
})

test('a handshake either side reports makes the pair direct again', () => {
  const toHome2 = plan('home1', natPair({ homesReachEachOther: true }), { pub: '198.18.0.1' }).find((p) => p.peerId === 'home2')!
  assert.equal(toHome2.path, 'direct')
  assert.equal(toHome2.via, undefined)
  assert.deepEqual(toHome2.wg.allowedIps, [prefixOf(30)])
  assert.equal(toHome2.wg.endpoint, '198.18.0.252:41000', 'still the NAT mapping that worked')
})

test('public nodes still shaking hands are not relayed: only pairs with a node seen behind NAT are', () => {
  const nodes = [
    node('a', 10, { endpoints: ['198.18.0.1:51820'], reach: new Set([30]) }),
    node('b', 20, { endpoints: ['198.18.0.2:51820'], reach: new Set([30]) }),
    node('c', 30, { endpoints: ['198.18.0.3:51820'], reach: new Set([10, 20]) }),
  ]
  const peers = plan('a', nodes)
  assert.ok(peers.every((p) => p.path === 'direct' && p.wg.allowedIps.length === 1))
})

test("a public node and a NAT'd one are never relayed, even before their first handshake", () => {
  const nodes = natPair({ pub2: true })
  nodes.find((n) => n.peerId === 'pub2')!.reach = new Set([10, 30])
  nodes.find((n) => n.peerId === 'home1')!.reach = new Set([10])
  const fromPub2 = plan('pub2', nodes, { home1: '198.18.0.253' }).find((p) => p.peerId === 'home1')!
  assert.equal(fromPub2.path, 'peer-dials')
  const fromHome1 = plan('home1', nodes, { pub: '198.18.0.1', pub2: '198.18.0.2' }).find((p) => p.peerId === 'pub2')!
  assert.equal(fromHome1.path, 'direct')
  assert.equal(fromHome1.wg.endpoint, '198.18.0.2:51820')
})

/**
 * pub (10) reaches fw (20, a public address behind a firewall that drops unsolicited UDP: it
 * reaches pub because it sends first) and home (30, behind NAT, seen by pub). home dials fw and is
 * dropped; fw has no endpoint for home and waits for it to dial.
 */
function firewalledPair(extra: { firewalled?: boolean; reachEachOther?: boolean } = {}): PublishedNetwork[] {
  return [
    node('pub', 10, { endpoints: ['198.18.0.1:51820'], reach: new Set([20, 30]), seen: new Map([[30, '198.18.0.253:40000']]) }),
    node('fw', 20, {
      endpoints: ['198.18.0.2:51820'],
      reach: new Set([10, ...(extra.reachEachOther ? [30] : [])]),
      ...(extra.firewalled !== false ? { firewalled: true } : {}),
    }),
    node('home', 30, { endpoints: ['10.77.0.2:51820'], reach: new Set([10]) }),
  ]
}

test("a public node that reports itself firewalled and a NAT'd node are relayed through the member both reach, on both ends", () => {
  const nodes = firewalledPair()
  const fromFw = plan('fw', nodes, { pub: '198.18.0.1', home: '198.18.0.253' })
  const toHome = fromFw.find((p) => p.peerId === 'home')!
  assert.equal(toHome.path, 'relayed')
  assert.equal(toHome.via?.name, 'pub')
  assert.deepEqual(toHome.wg.allowedIps, [])
  assert.equal(toHome.wg.endpoint, undefined, 'it still waits for home to dial (a firewall opened later lets the pair go direct)')
  assert.deepEqual(fromFw.find((p) => p.peerId === 'pub')!.wg.allowedIps, [prefixOf(10), prefixOf(30)])
  const fromHome = plan('home', nodes, { pub: '198.18.0.1', fw: '198.18.0.2' })
  const toFw = fromHome.find((p) => p.peerId === 'fw')!
  assert.equal(toFw.via?.name, 'pub')
  assert.equal(toFw.wg.endpoint, '198.18.0.2:51820', 'its keepalives keep trying the direct path')
  assert.deepEqual(fromHome.find((p) => p.peerId === 'pub')!.wg.allowedIps, [prefixOf(10), prefixOf(20)])
  // The relay routes both directly.
  assert.ok(plan('pub', nodes, { fw: '198.18.0.2', home: '198.18.0.253' }).every((p) => p.path !== 'relayed' && p.wg.allowedIps.length === 1))
})

test("without the firewalled report, or once the pair reaches each other, a public and a NAT'd node stay direct", () => {
  const unreported = plan('home', firewalledPair({ firewalled: false }), { pub: '198.18.0.1', fw: '198.18.0.2' }).find((p) => p.peerId === 'fw')!
  assert.equal(unreported.path, 'direct')
  assert.deepEqual(unreported.wg.allowedIps, [prefixOf(20)])
  const reached = plan('home', firewalledPair({ reachEachOther: true }), { pub: '198.18.0.1', fw: '198.18.0.2' }).find((p) => p.peerId === 'fw')!
  assert.equal(reached.path, 'direct')
  // A firewalled node and a public one: the public one is dialled by it, never relayed.
  const fromPub = plan('pub', firewalledPair(), { fw: '198.18.0.2', home: '198.18.0.253' }).find((p) => p.peerId === 'fw')!
  assert.equal(fromPub.path, 'direct')
})

test('judgeInbound: firewalled once peers that must dial wait past the limit and none gets through', () => {
  let w = judgeInbound(new Map(), [{ key: 'a', up: false }], 1000, 30_000)
  assert.deepEqual([w.firewalled, [...w.waits]], [false, [['a', 1000]]])
  w = judgeInbound(w.waits, [{ key: 'a', up: false }], 30_999, 30_000)
  assert.equal(w.firewalled, false)
  w = judgeInbound(w.waits, [{ key: 'a', up: false }], 31_000, 30_000)
  assert.equal(w.firewalled, true)
  // A peer that starts waiting later does not reset the first.
  w = judgeInbound(
    w.waits,
    [
      { key: 'a', up: false },
      { key: 'b', up: false },
    ],
    32_000,
    30_000,
  )
  assert.deepEqual([w.firewalled, w.waits.get('b')], [true, 32_000])
  // One dialled peer that gets through is proof the endpoint takes unsolicited handshakes.
  const through = judgeInbound(
    w.waits,
    [
      { key: 'a', up: false },
      { key: 'b', up: true },
    ],
    40_000,
    30_000,
  )
  assert.deepEqual([through.firewalled, [...through.waits.keys()]], [false, ['a']])
  // Peers no longer dialled are forgotten; nobody to judge by is not firewalled.
  assert.deepEqual(judgeInbound(w.waits, [], 99_000, 30_000), { waits: new Map(), firewalled: false })
  // A peer back to waiting after a handshake waits from then on.
  assert.equal(judgeInbound(through.waits, [{ key: 'b', up: false }], 41_000, 30_000).firewalled, false)
})

test('no member reaches both: no relay, the direct attempt stays', () => {
  const nodes = natPair()
  nodes[0]!.reach = new Set([20])
  const toHome2 = plan('home1', nodes, { pub: '198.18.0.1' }).find((p) => p.peerId === 'home2')!
  assert.equal(toHome2.path, 'direct')
  assert.deepEqual(toHome2.wg.allowedIps, [prefixOf(30)])
})

test('the relay choice is the same from both ends, whatever the member order', () => {
  const nodes0 = natPair({ pub2: true })
  const seenAt = new Map([
    [20, 'x'],
    [30, 'y'],
  ])
  fc.assert(
    fc.property(fc.shuffledSubarray(nodes0, { minLength: nodes0.length }), fc.shuffledSubarray(nodes0, { minLength: nodes0.length }), (o1, o2) => {
      const home1 = nodes0.find((n) => n.peerId === 'home1')!
      const home2 = nodes0.find((n) => n.peerId === 'home2')!
      const a = chooseRelay(
        home1,
        home2,
        o1.filter((n) => n !== home1),
        seenAt,
      )
      const b = chooseRelay(
        home2,
        home1,
        o2.filter((n) => n !== home2),
        seenAt,
      )
      return a !== undefined && a.peerId === b?.peerId && (a.peerId === 'pub' || a.peerId === 'pub2')
    }),
  )
  // Both ends of the planned tunnels agree too.
  const nodes = natPair({ pub2: true })
  const r1 = plan('home1', nodes).find((p) => p.peerId === 'home2')!.via!.peerId
  const r2 = plan('home2', nodes).find((p) => p.peerId === 'home1')!.via!.peerId
  assert.equal(r1, r2)
})

test("reach and seen from a peer's Node status are validated; garbage is dropped, never thrown", () => {
  const obj = (network: unknown) => ({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'n' }, status: { peerId: 'p', network } }) as any
  const p = readPublishedNetwork(
    obj({ reach: [1, 2, 0, -1, 70000, 'x', 2.5, 3], seen: { '5': '1.2.3.4:5', '06': '1.2.3.4:6', x: '1.2.3.4:7', '7': 'host:1', '8': 9 } }),
    new Set(),
  )!
  assert.deepEqual([...p.reach!], [1, 2, 3])
  assert.deepEqual([...p.seen!], [[5, '1.2.3.4:5']])
  assert.equal(p.firewalled, undefined)
  assert.equal(readPublishedNetwork(obj({ firewalled: 'yes' }), new Set())!.firewalled, undefined)
  assert.equal(readPublishedNetwork(obj({ firewalled: true }), new Set())!.firewalled, true)
  fc.assert(
    fc.property(fc.anything(), fc.anything(), (reach, seen) => {
      const r = readPublishedNetwork(obj({ reach, seen }), new Set())!
      return [...(r.reach ?? [])].every((s) => Number.isInteger(s) && s > 0 && s < 0x10000)
    }),
  )
})

test('--announce addresses (what libp2p then reports instead of listen addresses) become endpoints when they are IPs', () => {
  // mesh.addresses() is libp2p's getMultiaddrs(), which lists the announce addresses when given.
  assert.deepEqual(endpointsFromMultiaddrs(['/ip4/203.0.113.5/tcp/7419', '/dns4/example.org/tcp/7419', '/ip6/2001:db8::5/tcp/7419'], 51820), [
    '203.0.113.5:51820',
    '[2001:db8::5]:51820',
  ])
})
