/**
 * Routes between federated clusters (pure plan): which WireGuard peers a node adds for other
 * clusters and with which allowed-ips. What a user would notice if it broke: a federated pod in
 * another cluster unreachable (no /128, or only one direction), a cluster's /64s or /48 routed
 * across the federation although nothing there is federated, or another cluster hijacking
 * addresses (ours, a third cluster's, another node's) by publishing them.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { type FederatedScopeInput, planFederatedPeers } from '../../src/agent/network/federation.ts'
import { clusterPrefix, formatPrefix, generateKeyPair, nodePrefix } from '../../src/net/index.ts'
import { seededBytes } from '../helpers/store.ts'

const ids = { home: 'home0000home0000home0000home0000', cloud: 'cloud000cloud000cloud000cloud000', edge: 'edge0000edge0000edge0000edge0000' }
const net = (c: keyof typeof ids) => clusterPrefix(ids[c])
const keyOf = (seed: number) => generateKeyPair(seededBytes(seed)).publicKey
const KEYS = { h1: keyOf(1), h2: keyOf(2), c1: keyOf(3), c2: keyOf(4), e1: keyOf(5) }
const prefix = (c: keyof typeof ids, subnet: number) => formatPrefix(nodePrefix(net(c), subnet))
const podIp = (c: keyof typeof ids, subnet: number, host: number) => prefix(c, subnet).replace('::/64', `::${host.toString(16)}`)

function clusterObj(name: string, id: string, nodes: Record<string, unknown>) {
  return { metadata: { name }, spec: { id }, status: { nodes } }
}
function summary(key: string, c: keyof typeof ids, subnet: number, endpoints = [`198.18.0.${subnet}:51820`]) {
  return {
    capacity: { cpu: '1000m', memory: '1' },
    allocatable: { cpu: '1000m', memory: '1' },
    ready: true,
    network: { publicKey: key, prefix: prefix(c, subnet), endpoints },
  }
}
function pod(name: string, node: string, ipv6: unknown, phase = 'Running') {
  return { metadata: { name, namespace: 'shared' }, status: { node, phase, network: { ipv6 } } }
}

/** home: h1 (subnet 1), h2 (2); cloud: c1 (3), c2 (4). */
function lab(pods: unknown[], extra: unknown[] = []): { home: FederatedScopeInput; cloud: FederatedScopeInput } {
  const clusters = [
    clusterObj('home', ids.home, { h1: summary(KEYS.h1, 'home', 1), h2: summary(KEYS.h2, 'home', 2) }),
    clusterObj('cloud', ids.cloud, { c1: summary(KEYS.c1, 'cloud', 3), c2: summary(KEYS.c2, 'cloud', 4) }),
    ...extra,
  ]
  const scope = (cluster: string): FederatedScopeInput => ({ federation: 'lab', cluster, clusters, pods, observedIps: new Map() })
  return { home: scope('home'), cloud: scope('cloud') }
}
const selfOf = (node: string, c: keyof typeof ids, ownKeys: string[] = []) => ({ node, ownCluster: net(c), ownKeys: new Set(ownKeys) })

test("both ends of a cross-cluster pair route exactly the other's federated pods (/128), nothing else", () => {
  const pods = [pod('web', 'c1@cloud', podIp('cloud', 3, 5)), pod('client', 'h1@home', podIp('home', 1, 7)), pod('idle', 'c2@cloud', podIp('cloud', 4, 9))]
  const { home, cloud } = lab(pods)
  const onH1 = planFederatedPeers([home], selfOf('h1', 'home'))
  assert.deepEqual(onH1.skipped, [])
  assert.deepEqual(
    onH1.peers.map((p) => [p.name, p.routes, p.wg.endpoint, p.path]),
    [
      ['c1@cloud', [`${podIp('cloud', 3, 5)}/128`], '198.18.0.3:51820', 'direct'],
      ['c2@cloud', [`${podIp('cloud', 4, 9)}/128`], '198.18.0.4:51820', 'direct'],
    ],
  )
  for (const p of onH1.peers) {
    assert.deepEqual(p.wg.allowedIps, p.routes, 'allowed-ips are the /128s only')
    assert.ok(p.wg.allowedIps.every((a) => a.endsWith('/128')))
    assert.equal(p.wg.persistentKeepalive, 25)
  }
  // The reverse path: c1 accepts (and routes to) the home pod's address on h1's peer.
  const onC1 = planFederatedPeers([cloud], selfOf('c1', 'cloud'))
  assert.deepEqual(
    onC1.peers.map((p) => [p.name, p.routes]),
    [['h1@home', [`${podIp('home', 1, 7)}/128`]]],
  )
  // h2 runs no federated pod: nothing of the other cluster is routed there (and nobody peers with it).
  assert.deepEqual(planFederatedPeers([home], selfOf('h2', 'home')).peers, [])
  assert.ok(!onC1.peers.some((p) => p.name === 'h2@home'))
})

test('finished pods, pods without an address and pods of this cluster are not routed; a federation gone takes its routes', () => {
  const pods = [
    pod('done', 'c1@cloud', podIp('cloud', 3, 5), 'Succeeded'),
    pod('pending', 'c2@cloud', undefined, 'Pending'),
    pod('mine', 'h2@home', podIp('home', 2, 3)),
    pod('client', 'h1@home', podIp('home', 1, 7)),
  ]
  const { home } = lab(pods)
  assert.deepEqual(planFederatedPeers([home], selfOf('h1', 'home')).peers, [])
  assert.deepEqual(planFederatedPeers([], selfOf('h1', 'home')).peers, [])
})

test('hostile or broken entries from other clusters are skipped, the rest routed', () => {
  const pods = [
    pod('client', 'h1@home', podIp('home', 1, 7)),
    pod('ok', 'c1@cloud', podIp('cloud', 3, 5)),
    // An address outside the node's /64 (here: in our own /48): never routed.
    pod('hijack-ours', 'c1@cloud', podIp('home', 1, 99)),
    // Another cloud node's /64.
    pod('hijack-node', 'c1@cloud', podIp('cloud', 4, 1)),
    pod('dup', 'c1@cloud', podIp('cloud', 3, 5)),
    pod('garbage', 'c2@cloud', 'not-an-address'),
    pod('object', 'c2@cloud', { toString: 'x' }),
  ]
  const { home } = lab(pods, [
    // A cluster claiming our cluster id (our /48) and one whose node publishes garbage.
    clusterObj('evil', ids.home, { x1: summary(KEYS.e1, 'home', 9) }),
    clusterObj('edge', ids.edge, {
      e1: { network: { publicKey: 'nope', prefix: prefix('edge', 1) } },
      e2: { network: { publicKey: KEYS.e1, prefix: prefix('cloud', 3) } },
    }),
  ])
  const r = planFederatedPeers([home], selfOf('h1', 'home'))
  assert.deepEqual(
    r.peers.map((p) => [p.name, p.routes]),
    [['c1@cloud', [`${podIp('cloud', 3, 5)}/128`]]],
  )
  assert.ok(
    r.skipped.some((s) => s.includes('evil') && s.includes("this cluster's prefix")),
    r.skipped.join('\n'),
  )
  const has = (...words: string[]) =>
    assert.ok(
      r.skipped.some((s) => words.every((w) => s.includes(w))),
      `${words.join(' ')} in:\n${r.skipped.join('\n')}`,
    )
  has('e1@edge', 'publicKey')
  has('e2@edge', 'not a /64')
  has('hijack-ours')
  has('hijack-node')
  has('pod shared/ok', 'already routed') // the same /128 twice: the first pod (by name) keeps it
})

test('a key already on the interface (ours, a cluster peer) is never a federated peer too', () => {
  const pods = [pod('client', 'h1@home', podIp('home', 1, 7)), pod('web', 'c1@cloud', podIp('cloud', 3, 5))]
  const { home } = lab(pods)
  const r = planFederatedPeers([home], selfOf('h1', 'home', [KEYS.c1]))
  assert.deepEqual(r.peers, [])
  assert.ok(r.skipped.some((s) => s.includes('c1@cloud') && s.includes('already a peer')))
})

test('two clusters on one prefix get no routes; the same node in two federations is one peer', () => {
  const pods = [pod('client', 'h1@home', podIp('home', 1, 7)), pod('web', 'c1@cloud', podIp('cloud', 3, 5))]
  const { home } = lab(pods, [clusterObj('copycat', ids.cloud, {})])
  const r = planFederatedPeers([home], selfOf('h1', 'home'))
  assert.deepEqual(r.peers, [])
  assert.ok(r.skipped.some((s) => s.includes('share prefix')))
  const a = lab(pods).home
  const b = { ...lab([pod('client2', 'h1@home', podIp('home', 1, 8)), pod('db', 'c1@cloud', podIp('cloud', 3, 6))]).home, federation: 'lab2' }
  const two = planFederatedPeers([b, a], selfOf('h1', 'home'))
  assert.equal(two.peers.length, 1)
  assert.deepEqual(two.peers[0]!.federations, ['lab', 'lab2'])
  assert.deepEqual(two.peers[0]!.wg.allowedIps, [`${podIp('cloud', 3, 5)}/128`, `${podIp('cloud', 3, 6)}/128`])
})

test('the endpoint follows where the federation mesh sees the node (behind NAT: it dials us)', () => {
  const pods = [pod('client', 'h1@home', podIp('home', 1, 7)), pod('web', 'c1@cloud', podIp('cloud', 3, 5))]
  const { home } = lab(pods)
  const natted = planFederatedPeers([{ ...home, observedIps: new Map([['c1@cloud', '198.18.0.250']]) }], selfOf('h1', 'home'))
  assert.equal(natted.peers[0]!.path, 'peer-dials')
  assert.equal(natted.peers[0]!.wg.endpoint, undefined)
})

test('a peer publishing IPv4 and IPv6 endpoints is reached over IPv6 when the federation mesh has a connection over it', () => {
  const pods = [pod('client', 'h1@home', podIp('home', 1, 7)), pod('web', 'c1@cloud', podIp('cloud', 3, 5))]
  const dual = clusterObj('cloud', ids.cloud, { c1: summary(KEYS.c1, 'cloud', 3, ['198.18.0.3:51820', '[2001:db8::3]:51820']) })
  const { home } = lab(pods)
  const clusters = [home.clusters[0]!, dual]
  const endpointWith = (observed: string | string[]) =>
    planFederatedPeers([{ ...home, clusters, observedIps: new Map([['c1@cloud', observed]]) }], selfOf('h1', 'home')).peers[0]!.wg.endpoint
  // Connections over both families: IPv6, whatever order libp2p lists them in.
  assert.equal(endpointWith(['198.18.0.3', '2001:db8::3']), '[2001:db8::3]:51820')
  assert.equal(endpointWith(['2001:db8::3', '198.18.0.3']), '[2001:db8::3]:51820')
  assert.equal(endpointWith('2001:db8::3'), '[2001:db8::3]:51820')
  // Only over IPv4 (IPv6 not shown to work): IPv4. A connection from an IPv6 address it does not
  // publish (a temporary address) does not count for IPv6; the IPv4 one still matches.
  assert.equal(endpointWith('198.18.0.3'), '198.18.0.3:51820')
  assert.equal(endpointWith(['2001:db8::99', '198.18.0.3']), '198.18.0.3:51820')
})

test("garbage federation documents never throw and never route outside the publishing node's /64 (property)", () => {
  const anyJson = fc.jsonValue({ maxDepth: 4 })
  fc.assert(
    fc.property(fc.array(anyJson, { maxLength: 6 }), fc.array(anyJson, { maxLength: 12 }), (clusters, pods) => {
      const { home } = lab([pod('client', 'h1@home', podIp('home', 1, 7)), ...pods], clusters)
      const r = planFederatedPeers([home], selfOf('h1', 'home'))
      for (const p of r.peers) {
        for (const a of p.wg.allowedIps) assert.ok(a.endsWith('/128') && !a.startsWith(formatPrefix(net('home')).split('::')[0]!))
      }
    }),
    { numRuns: 300, seed: 9 },
  )
})
