import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import {
  addressInPrefix,
  chooseEgressIPv4,
  chooseNodeSubnet,
  clusterPrefix,
  EGRESS_IPV4_PREFIX,
  federatedIngressAddress,
  formatPrefix,
  isOrcErrorLike,
  nodeGateway,
  nodePrefix,
  parseIPv6,
  prefixContains,
  prefixCovers,
  randomPodAddress,
  seededRandom,
  settleSubnetClaims,
  settleSubnetCollision,
  subnetOf,
} from './helpers.ts'

const clusterId = fc.stringMatching(/^[0-9a-f]{16,64}$/)
const peerId = fc.stringMatching(/^12D3KooW[1-9A-HJ-NP-Za-km-z]{8,20}$/)

test('cluster prefix is a deterministic RFC 4193 /48 (fd00::/8)', () => {
  fc.assert(
    fc.property(clusterId, (id) => {
      const p = clusterPrefix(id)
      assert.equal(p.len, 48)
      assert.equal(p.addr >> 120n, 0xfdn)
      assert.equal(p.addr & ((1n << 80n) - 1n), 0n)
      assert.deepEqual(clusterPrefix(id), p)
    }),
  )
  assert.notEqual(formatPrefix(clusterPrefix('a'.repeat(16))), formatPrefix(clusterPrefix('b'.repeat(16))))
  assert.match(formatPrefix(clusterPrefix('0123456789abcdef')), /^fd[0-9a-f]{2}:[0-9a-f]{1,4}:[0-9a-f]{1,4}::\/48$/)
})

test('node prefixes lie inside the cluster /48 and pod addresses inside their /64', () => {
  fc.assert(
    fc.property(clusterId, peerId, fc.integer(), (cid, pid, seed) => {
      const cluster = clusterPrefix(cid)
      const { subnet, prefix } = chooseNodeSubnet(cluster, pid, new Map())
      assert.ok(prefixCovers(cluster, prefix))
      assert.equal(prefix.len, 64)
      assert.equal(subnetOf(prefix), subnet)
      assert.notEqual(subnet, 0, 'subnet 0 is reserved')
      const random = seededRandom(seed)
      for (let i = 0; i < 5; i++) {
        const a = randomPodAddress(prefix, random)
        assert.ok(prefixContains(prefix, parseIPv6(a)), a)
        assert.notEqual(parseIPv6(a) & ((1n << 64n) - 1n), 0n)
        assert.notEqual(a, nodeGateway(prefix))
      }
    }),
  )
})

test('pod addresses never take ::0, the gateway ::1 or the federated ingress address ::2, even from a degenerate random source', () => {
  const cluster = clusterPrefix('0123456789abcdef')
  const node = nodePrefix(cluster, 7)
  let calls = 0
  // Yields 0, then 1, 2 and 3 as the interface id.
  const stuck = (n: number) => {
    const b = new Uint8Array(n)
    b[n - 1] = calls++
    return b
  }
  assert.equal(federatedIngressAddress(node), nodeGateway(node).replace(/1$/, '2'))
  assert.equal(randomPodAddress(node, stuck), nodeGateway(node).replace(/1$/, '3'))
  assert.throws(() => randomPodAddress(node, (n) => new Uint8Array(n)), isOrcErrorLike('internal'))
})

test('subnet choice skips claimed subnets, keeps an existing claim, and is deterministic', () => {
  fc.assert(
    fc.property(clusterId, peerId, fc.array(fc.tuple(fc.integer({ min: 1, max: 0xffff }), peerId), { maxLength: 50 }), (cid, pid, others) => {
      const cluster = clusterPrefix(cid)
      const claimed = new Map(others.filter(([, p]) => p !== pid))
      const got = chooseNodeSubnet(cluster, pid, claimed)
      assert.ok(!claimed.has(got.subnet))
      assert.deepEqual(chooseNodeSubnet(cluster, pid, new Map([...claimed].reverse())), got)
      // Once claimed, the choice is stable even if its natural candidate would now differ.
      const withMine = new Map([...claimed, [got.subnet, pid]])
      assert.equal(chooseNodeSubnet(cluster, pid, withMine).subnet, got.subnet)
    }),
  )
})

test('a nearly full /48 still yields the one free subnet', () => {
  const cluster = clusterPrefix('0123456789abcdef')
  const claimed = new Map<number, string>()
  for (let s = 1; s < 0x10000; s++) if (s !== 4242) claimed.set(s, 'other')
  assert.equal(chooseNodeSubnet(cluster, 'me', claimed).subnet, 4242)
  claimed.set(4242, 'other')
  assert.throws(() => chooseNodeSubnet(cluster, 'me', claimed), isOrcErrorLike('conflict'))
})

test('collisions settle the same way on every node: lowest peer id keeps the subnet', () => {
  assert.equal(settleSubnetCollision(['peer-c', 'peer-a', 'peer-b']), 'peer-a')
  fc.assert(
    fc.property(fc.array(fc.tuple(peerId, fc.integer({ min: 0, max: 20 })), { maxLength: 40 }), (raw) => {
      const claims = raw.map(([peerId, subnet]) => ({ peerId, subnet }))
      const a = settleSubnetClaims(claims)
      const b = settleSubnetClaims([...claims].reverse())
      assert.deepEqual([...a.owners].sort(), [...b.owners].sort())
      assert.deepEqual(a.losers, b.losers)
      // Every peer either owns exactly one subnet or must re-choose; nobody owns subnet 0.
      const owners = [...a.owners.values()]
      assert.equal(new Set(owners).size, owners.length)
      assert.ok(!a.owners.has(0))
      for (const c of claims) assert.ok(owners.includes(c.peerId) !== a.losers.includes(c.peerId))
      // Losers re-choose against the settled owners and land on a free subnet.
      const cluster = clusterPrefix('0123456789abcdef')
      const taken = new Map(a.owners)
      for (const loser of a.losers) {
        const { subnet } = chooseNodeSubnet(cluster, loser, taken)
        assert.ok(!taken.has(subnet))
        taken.set(subnet, loser)
      }
    }),
  )
})

test('egress IPv4 stays in 10.88.0.0/16, avoids network, gateway, broadcast and taken addresses', () => {
  fc.assert(
    fc.property(fc.integer(), fc.array(fc.tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 255 })), { maxLength: 30 }), (seed, used) => {
      const taken = new Set(used.map(([a, b]) => `10.88.${a}.${b}`))
      const ip = chooseEgressIPv4(taken, seededRandom(seed))
      assert.ok(addressInPrefix(ip, EGRESS_IPV4_PREFIX))
      assert.ok(!taken.has(ip) && !['10.88.0.0', '10.88.0.1', '10.88.255.255'].includes(ip))
    }),
  )
  const zero = (n: number) => new Uint8Array(n)
  assert.equal(chooseEgressIPv4(new Set(), zero), '10.88.0.2')
})
