/**
 * Relays between federated clusters (pure plan): two nodes of different clusters that run shared
 * pods, both behind NAT, with no handshake between them, route each other's pods through a node of
 * one of their two clusters that reaches both. What a user would notice if it broke: the two pods
 * cannot talk (the three nodes disagree on the relay, or one end keeps the /128s on the dead direct
 * peer), a node of a third cluster (or any node) attracting traffic it has no business carrying, or
 * a relay staying in the path once the two ends reach each other.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import {
  type FederatedPlan,
  type FederatedScopeInput,
  MAX_RELAY_PAIRS,
  MAX_RELAYS_PER_CLUSTER,
  planFederatedPeers,
} from '../../src/agent/network/federation.ts'
import { isPublicEndpoint } from '../../src/agent/network/plan.ts'
import { clusterPrefix, formatPrefix, generateKeyPair, nodePrefix, prefixCovers } from '../../src/net/index.ts'
import { parsePrefix } from '../../src/net/ip.ts'
import { seededBytes } from '../helpers/store.ts'

const ids = { home: 'home0000home0000home0000home0000', away: 'away0000away0000away0000away0000', edge: 'edge0000edge0000edge0000edge0000' }
type C = keyof typeof ids
const net = (c: C) => clusterPrefix(ids[c])
const keys = new Map<number, string>()
const keyOf = (seed: number) => keys.get(seed) ?? keys.set(seed, generateKeyPair(seededBytes(seed)).publicKey).get(seed)!
const prefix = (c: C, subnet: number) => formatPrefix(nodePrefix(net(c), subnet))
const podIp = (c: C, subnet: number, host: number) => prefix(c, subnet).replace('::/64', `::${host.toString(16)}`)

/** A node: its cluster, subnet, key seed; public or behind NAT; the /64s it reports handshakes with. */
interface N {
  c: C
  subnet: number
  seed: number
  nat: boolean
  reach: string[]
}
function summaryOf(n: N) {
  const endpoint = n.nat ? `10.77.0.${n.subnet}:51820` : `198.18.0.${n.subnet}:51820`
  return {
    capacity: { cpu: '1000m', memory: '1' },
    allocatable: { cpu: '1000m', memory: '1' },
    ready: true,
    network: { publicKey: keyOf(n.seed), prefix: prefix(n.c, n.subnet), endpoints: [endpoint], reach: n.reach, ...(n.nat ? { nat: true } : {}) },
  }
}
function pod(name: string, node: string, ipv6: string) {
  return { metadata: { name, namespace: 'shared' }, status: { node, phase: 'Running', network: { ipv6 } } }
}

/** A federation from nodes (`name@cluster` → N) and pods; the scope as `cluster` sees it. */
function scopeOf(nodes: Record<string, N>, pods: unknown[], cluster: C): FederatedScopeInput {
  const clusters = (Object.keys(ids) as C[]).map((c) => ({
    metadata: { name: c },
    spec: { id: ids[c] },
    status: {
      nodes: Object.fromEntries(
        Object.entries(nodes)
          .filter(([, n]) => n.c === c)
          .map(([name, n]) => [name.split('@')[0]!, summaryOf(n)]),
      ),
    },
  }))
  return { federation: 'lab', cluster, clusters, pods, observedIps: new Map() }
}
/** The plan on `me` (its cluster peers: the other nodes of its cluster, with their keys). */
function planOn(me: string, nodes: Record<string, N>, pods: unknown[]): FederatedPlan {
  const self = nodes[me]!
  const clusterPeers = new Map(
    Object.entries(nodes)
      .filter(([name, n]) => n.c === self.c && name !== me)
      .map(([name, n]) => [name.split('@')[0]!, keyOf(n.seed)]),
  )
  return planFederatedPeers([scopeOf(nodes, pods, self.c)], {
    node: me.split('@')[0]!,
    ownCluster: net(self.c),
    ownKeys: new Set([keyOf(self.seed), ...clusterPeers.values()]),
    clusterPeers,
  })
}
const peer = (plan: FederatedPlan, name: string) => plan.peers.find((p) => p.name === name)

/** Every peer of another cluster carries only addresses of that cluster's /48 (the trust invariant). */
function assertOnlyOwnAddresses(plan: FederatedPlan): void {
  for (const p of plan.peers) {
    for (const a of p.wg.allowedIps)
      assert.ok(prefixCovers(net(p.cluster as C), parsePrefix(a, 6)), `${p.name} (cluster ${p.cluster}) carries ${a}, outside its cluster's /48`)
  }
}

// home: p1 (public, subnet 1), h1 (NAT, subnet 2); away: b1 (NAT, subnet 3). Shared pods on h1 and b1.
const H1_POD = podIp('home', 2, 7)
const B1_POD = podIp('away', 3, 9)
const PODS = [pod('a', 'h1@home', H1_POD), pod('b', 'b1@away', B1_POD)]
function lab(over: Partial<Record<string, Partial<N>>> = {}): Record<string, N> {
  const base: Record<string, N> = {
    'p1@home': { c: 'home', subnet: 1, seed: 1, nat: false, reach: [prefix('home', 2)] },
    'h1@home': { c: 'home', subnet: 2, seed: 2, nat: true, reach: [prefix('home', 1)] },
    'b1@away': { c: 'away', subnet: 3, seed: 3, nat: true, reach: [] },
  }
  for (const [k, v] of Object.entries(over)) base[k] = { ...base[k]!, ...v } as N
  return base
}

test("two NAT'd ends of different clusters route through a public node of one of them, and all three agree", () => {
  const nodes = lab()
  const onH1 = planOn('h1@home', nodes, PODS)
  const onB1 = planOn('b1@away', nodes, PODS)
  const onP1 = planOn('p1@home', nodes, PODS)
  // h1: b1's pod on its cluster peer p1 (WireGuard: one peer per address); b1's own peer keeps none.
  const b1 = peer(onH1, 'b1@away')!
  assert.equal(b1.path, 'relayed')
  assert.equal(b1.via?.name, 'p1')
  assert.deepEqual(b1.routes, [`${B1_POD}/128`], 'still listed as its routes (orc get routes)')
  assert.deepEqual(b1.wg.allowedIps, [])
  assert.equal(b1.wg.persistentKeepalive, 25, 'the direct tunnel keeps trying')
  assert.deepEqual(onH1.clusterRelays, [{ name: 'p1', publicKey: keyOf(1), for: 'b1@away', routes: [`${B1_POD}/128`] }])
  // b1: h1's pod on a peer for p1@home (a node of h1's cluster carries h1's addresses only).
  const h1 = peer(onB1, 'h1@home')!
  assert.equal(h1.path, 'relayed')
  assert.equal(h1.via?.name, 'p1@home')
  assert.deepEqual(h1.wg.allowedIps, [])
  const p1 = peer(onB1, 'p1@home')!
  assert.deepEqual(p1.wg.allowedIps, [`${H1_POD}/128`])
  assert.equal(p1.wg.endpoint, '198.18.0.1:51820', 'b1 dials the public relay')
  assert.deepEqual(onB1.clusterRelays, [])
  // p1 (no shared pod of its own): a tunnel to b1 that accepts b1's pod only, for h1; b1 dials it.
  assert.deepEqual(
    onP1.peers.map((p) => [p.name, p.wg.allowedIps, p.relayFor, p.path, p.wg.endpoint]),
    [['b1@away', [`${B1_POD}/128`], ['h1'], 'peer-dials', undefined]],
  )
  for (const plan of [onH1, onB1, onP1]) assertOnlyOwnAddresses(plan)
})

test('the relay may be in the other end’s cluster: then it is a federated peer carrying that cluster’s pods', () => {
  // The public node is in away (b2, reaching b1); home has only the NAT'd h1.
  const nodes = lab({ 'p1@home': { nat: true, reach: [] }, 'b2@away': { c: 'away', subnet: 4, seed: 4, nat: false, reach: [prefix('away', 3)] } })
  const onH1 = planOn('h1@home', nodes, PODS)
  assert.equal(peer(onH1, 'b1@away')!.via?.name, 'b2@away')
  assert.deepEqual(peer(onH1, 'b2@away')!.wg.allowedIps, [`${B1_POD}/128`])
  assert.deepEqual(onH1.clusterRelays, [])
  const onB1 = planOn('b1@away', nodes, PODS)
  assert.equal(peer(onB1, 'h1@home')!.via?.name, 'b2')
  assert.deepEqual(onB1.clusterRelays, [{ name: 'b2', publicKey: keyOf(4), for: 'h1@home', routes: [`${H1_POD}/128`] }])
  const onB2 = planOn('b2@away', nodes, PODS)
  assert.deepEqual(
    onB2.peers.map((p) => [p.name, p.wg.allowedIps, p.relayFor]),
    [['h1@home', [`${H1_POD}/128`], ['b1']]],
  )
  for (const plan of [onH1, onB1, onB2]) assertOnlyOwnAddresses(plan)
})

test('no relay once either end reports a handshake with the other, or when one end is not behind NAT', () => {
  for (const nodes of [
    lab({ 'b1@away': { reach: [prefix('home', 2)] } }),
    lab({ 'h1@home': { reach: [prefix('home', 1), prefix('away', 3)] } }),
    lab({ 'b1@away': { nat: false } }),
  ]) {
    const onH1 = planOn('h1@home', nodes, PODS)
    assert.equal(peer(onH1, 'b1@away')!.path, 'direct')
    assert.deepEqual(peer(onH1, 'b1@away')!.wg.allowedIps, [`${B1_POD}/128`])
    assert.deepEqual(onH1.clusterRelays, [])
    assert.deepEqual(planOn('p1@home', nodes, PODS).peers, [], 'the public node carries nothing')
  }
})

test('who may relay: never a node of a third cluster, a NAT’d node, or one that does not reach its own end', () => {
  const everything = [prefix('home', 1), prefix('home', 2), prefix('away', 3)]
  const nodes = lab({
    // A public node of a third cluster that claims to reach both ends.
    'e1@edge': { c: 'edge', subnet: 5, seed: 5, nat: false, reach: everything },
    // A public home node that does not reach h1, and a NAT'd one that does.
    'p2@home': { c: 'home', subnet: 6, seed: 6, nat: false, reach: [prefix('away', 3)] },
    'p3@home': { c: 'home', subnet: 7, seed: 7, nat: true, reach: everything },
  })
  // Give e1, p2 and p3 federated pods too, so they are peers anyway: none of them may carry the pair.
  const pods = [...PODS, pod('e', 'e1@edge', podIp('edge', 5, 1))]
  const onH1 = planOn('h1@home', nodes, pods)
  assert.equal(peer(onH1, 'b1@away')!.via?.name, 'p1')
  assert.deepEqual(peer(onH1, 'e1@edge')!.wg.allowedIps, [`${podIp('edge', 5, 1)}/128`], 'e1 carries its own pod only')
  const onB1 = planOn('b1@away', nodes, pods)
  assert.equal(peer(onB1, 'h1@home')!.via?.name, 'p1@home')
  assert.deepEqual(peer(onB1, 'e1@edge')!.wg.allowedIps, [`${podIp('edge', 5, 1)}/128`])
  for (const me of ['e1@edge', 'p2@home', 'p3@home'])
    for (const p of planOn(me, nodes, pods).peers) assert.ok(!p.wg.allowedIps.includes(`${B1_POD}/128`) || p.name === 'b1@away', `${me} never relays`)
  assert.equal(peer(planOn('p2@home', nodes, pods), 'b1@away'), undefined)
  // With no candidate at all the pair stays on its direct peers.
  const none = lab({ 'p1@home': { reach: [] } })
  assert.equal(peer(planOn('h1@home', none, PODS), 'b1@away')!.path, 'direct')
  assert.deepEqual(planOn('p1@home', none, PODS).peers, [])
})

test('the candidate reporting handshakes with both ends is the relay; a spare keeps a tunnel without addresses', () => {
  // Two public home nodes reach h1; only q1 reports a handshake with b1 too (p1 may rank first by hash).
  const nodes = lab({ 'q1@home': { c: 'home', subnet: 8, seed: 8, nat: false, reach: [prefix('home', 2), prefix('away', 3)] } })
  const onH1 = planOn('h1@home', nodes, PODS)
  assert.equal(peer(onH1, 'b1@away')!.via?.name, 'q1')
  const onB1 = planOn('b1@away', nodes, PODS)
  assert.deepEqual(peer(onB1, 'q1@home')!.wg.allowedIps, [`${H1_POD}/128`])
  assert.deepEqual(peer(onB1, 'p1@home')!.wg.allowedIps, [], 'the spare: a tunnel (keepalives), no addresses')
  assert.deepEqual(peer(planOn('p1@home', nodes, PODS), 'b1@away')!.wg.allowedIps, [])
  assert.deepEqual(peer(planOn('q1@home', nodes, PODS), 'b1@away')!.wg.allowedIps, [`${B1_POD}/128`])
})

test('a home summary naming a relay with another key than the cluster peer is refused: the pair stays direct', () => {
  const nodes = lab()
  const self = nodes['h1@home']!
  const plan = planFederatedPeers([scopeOf(nodes, PODS, 'home')], {
    node: 'h1',
    ownCluster: net('home'),
    ownKeys: new Set([keyOf(self.seed), keyOf(99)]),
    clusterPeers: new Map([['p1', keyOf(99)]]),
  })
  assert.equal(peer(plan, 'b1@away')!.path, 'direct')
  assert.deepEqual(plan.clusterRelays, [])
  assert.ok(plan.skipped.some((s) => s.includes('relay p1@home')))
})

test('whatever the summaries claim, a peer of another cluster only ever carries that cluster’s addresses (property)', () => {
  const names = ['p1@home', 'h1@home', 'b1@away', 'b2@away', 'e1@edge', 'e2@edge']
  const prefixes = names.map((_, i) => prefix(names[i]!.split('@')[1] as C, i + 1))
  let relayedRuns = 0
  fc.assert(
    fc.property(
      fc.array(fc.record({ nat: fc.boolean(), reach: fc.subarray(prefixes), pod: fc.boolean() }), { minLength: names.length, maxLength: names.length }),
      (facts) => {
        const nodes: Record<string, N> = {}
        const pods: unknown[] = []
        names.forEach((name, i) => {
          const c = name.split('@')[1] as C
          nodes[name] = { c, subnet: i + 1, seed: i + 1, nat: facts[i]!.nat, reach: facts[i]!.reach }
          if (facts[i]!.pod) pods.push(pod(`p${i}`, name, podIp(c, i + 1, 5)))
        })
        const plans = new Map(names.map((n) => [n, planOn(n, nodes, pods)]))
        if ([...plans.values()].some((p) => p.peers.some((x) => x.path === 'relayed'))) relayedRuns++
        for (const [name, plan] of plans) {
          assertOnlyOwnAddresses(plan)
          // Relayed /128s on a cluster peer are of another cluster's node that this node relays for.
          for (const r of plan.clusterRelays) assert.notEqual(r.for.split('@')[1], name.split('@')[1])
          // Every address is accepted on one peer only.
          const all = [...plan.peers.flatMap((p) => p.wg.allowedIps), ...plan.clusterRelays.flatMap((r) => r.routes)]
          assert.equal(new Set(all).size, all.length, `${name}: an address on two peers`)
        }
        // Both ends agree: when x relays y via R, y relays x via R, and R carries y's pods on its peer for y.
        for (const [x, plan] of plans)
          for (const p of plan.peers) {
            if (p.path !== 'relayed') continue
            const back = peer(plans.get(p.name)!, x)!
            assert.equal(back.path, 'relayed', `${p.name} relays ${x} too`)
            const relayOf = (on: string, via: string) => (via.includes('@') ? via : `${via}@${on.split('@')[1]}`)
            const r = relayOf(x, p.via!.name)
            assert.equal(relayOf(p.name, back.via!.name), r, 'the same relay on both ends')
            const onR = peer(plans.get(r)!, r.split('@')[1] === x.split('@')[1] ? p.name : x)
            assert.ok(onR !== undefined && onR.wg.allowedIps.length > 0, `${r} carries the far end's pods`)
          }
      },
    ),
    { numRuns: 300, seed: 25 },
  )
  assert.ok(relayedRuns > 10, `the property exercised relays (${relayedRuns} runs)`)
})

test('a cluster publishing thousands of NAT’d nodes and would-be relays gets a bounded amount of work and tunnels', () => {
  const nodes = lab()
  const pods = [...PODS]
  for (let i = 0; i < 1100; i++) {
    nodes[`n${i}@away`] = { c: 'away', subnet: 100 + i, seed: 1000 + i, nat: true, reach: [] }
    pods.push(pod(`y${i}`, `n${i}@away`, podIp('away', 100 + i, 1)))
  }
  for (let i = 0; i < 100; i++) nodes[`r${i}@away`] = { c: 'away', subnet: 3000 + i, seed: 5000 + i, nat: false, reach: [prefix('away', 3), prefix('home', 2)] }
  for (const n of Object.values(nodes)) keyOf(n.seed) // the fixture's keys, made before the clock starts
  const t0 = performance.now()
  const onP1 = planOn('p1@home', nodes, pods)
  const onH1 = planOn('h1@home', nodes, pods)
  const ms = performance.now() - t0
  // p1 relays for at most MAX_RELAY_PAIRS pairs; h1 peers with the 1101 NAT'd nodes it runs pods with, plus relays.
  assert.ok(onP1.peers.length <= MAX_RELAY_PAIRS, `${onP1.peers.length} peers on p1`)
  assert.ok(onH1.peers.length <= 1101 + 2 * MAX_RELAY_PAIRS, `${onH1.peers.length} peers on h1`)
  // The relay of h1 and b1 is among p1 and the first MAX_RELAYS_PER_CLUSTER of away's by name, whatever away publishes.
  const via = peer(onH1, 'b1@away')!.via!.name
  assert.ok(via === 'p1' || /^r([0-9]+)@away$/.test(via), via)
  if (via !== 'p1')
    assert.ok(
      [...Array(100).keys()]
        .map((i) => `r${i}@away`)
        .sort()
        .indexOf(via) < MAX_RELAYS_PER_CLUSTER,
      via,
    )
  assertOnlyOwnAddresses(onH1)
  assert.ok(ms < 5000, `planned in ${ms.toFixed(0)} ms`)
})

test('public endpoints: private, shared, loopback, link-local and ULA addresses are not', () => {
  for (const e of ['198.18.0.1:51820', '203.0.113.9:1', '[2001:db8::1]:51820', '172.32.0.1:1', '100.128.0.1:1']) assert.ok(isPublicEndpoint(e), e)
  for (const e of ['10.77.0.2:51820', '192.168.1.2:1', '172.16.0.1:1', '100.64.0.1:1', '127.0.0.1:1', '169.254.1.1:1', '[fd00::1]:1', '[fe80::1]:1', '[::1]:1'])
    assert.ok(!isPublicEndpoint(e), e)
})
