/**
 * IPv6 underlay paths: the WireGuard endpoint follows the mesh's connections, and a node connected
 * to a peer over IPv4 only opens a second connection to the peer's published IPv6 address, so
 * both ends see it and move their tunnel to IPv6. What a user would notice: a dual-stack pair
 * (often an IPv4 NAT with native IPv6 behind it) tunnelling over IPv4 although IPv6 works.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { chooseEndpoint, endpointsFromMultiaddrs, ipv6Probes, meshViewOf } from '../../src/agent/network/index.ts'
import { Fixture, waitFor } from '../mesh/helpers.ts'

test('ipv6Probes: one attempt per interval at a connected peer that publishes IPv6 and is not connected over it', () => {
  const dual = ['198.18.0.2:51820', '[2001:db8::2]:51820']
  const last = new Map<string, number>()
  const self = ['198.18.0.1:51820', '[2001:db8::1]:51820']
  const peers = [
    { id: 'v4only', endpoints: dual, observed: '198.18.0.2' },
    { id: 'has-v6', endpoints: dual, observed: ['198.18.0.2', '2001:db8::2'] },
    { id: 'not-connected', endpoints: dual, observed: undefined },
    { id: 'no-v6', endpoints: ['198.18.0.3:51820'], observed: '198.18.0.3' },
    // Connected from an IPv6 address it does not publish (temporary): its published one is tried.
    { id: 'temp', endpoints: ['[2001:db8::4]:51820'], observed: ['2001:db8::99'] },
  ]
  assert.deepEqual(ipv6Probes(peers, self, last, 1000, 60_000), [
    { id: 'v4only', ip: '2001:db8::2' },
    { id: 'temp', ip: '2001:db8::4' },
  ])
  assert.deepEqual(ipv6Probes(peers, self, last, 60_999, 60_000), [], 'not again within the interval')
  assert.equal(ipv6Probes(peers, self, last, 61_000, 60_000).length, 2)
  assert.deepEqual(ipv6Probes(peers, ['198.18.0.1:51820'], new Map(), 0), [], 'a node without IPv6 tries nothing')
  ipv6Probes(peers.slice(0, 1), self, last, 62_000, 60_000)
  assert.deepEqual([...last.keys()], ['v4only'], 'peers gone are forgotten')
})

test('a second mesh connection over IPv6 (real libp2p): both ends see it and both choose the IPv6 endpoint', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const listen = ['/ip4/127.0.0.1/tcp/0', '/ip6/::1/tcp/0']
  const { mesh: a } = await fx.create('a', { listen })
  const b = await fx.join('b', a, { listen })
  await waitFor('a and b connected', () => a.libp2p.getConnections().some((c) => c.remotePeer.toString() === b.peerId && c.status === 'open'), 30_000)
  const va = meshViewOf(a)
  const vb = meshViewOf(b)
  const endpointsOf = (m: typeof a) => endpointsFromMultiaddrs(m.addresses(), 51820)
  assert.ok(endpointsOf(b).includes('[::1]:51820') && endpointsOf(b).includes('127.0.0.1:51820'), `b publishes both: ${endpointsOf(b)}`)
  const ips = (v: typeof va, peer: string) => [v.observedIps().get(peer) ?? []].flat()
  t.diagnostic(`libp2p connected a to b over ${ips(va, b.peerId).join(', ')} first`)
  // Whichever family libp2p chose first, a opens the other one (again after a connection closed
  // under it, as the join's first connections may), until both ends see both families.
  await waitFor(
    'both ends see connections over both families',
    async () => {
      for (const ip of ['127.0.0.1', '::1']) if (!ips(va, b.peerId).includes(ip)) await va.connectOver!(b.peerId, ip)
      return ['127.0.0.1', '::1'].every((ip) => ips(va, b.peerId).includes(ip) && ips(vb, a.peerId).includes(ip))
    },
    30_000,
  )
  // A connection over IPv6 can always be added (force: besides the ones there are).
  assert.equal(await va.connectOver!(b.peerId, '::1'), true)
  assert.deepEqual(chooseEndpoint(endpointsOf(b), va.observedIps().get(b.peerId)), { endpoint: '[::1]:51820', path: 'direct' })
  assert.deepEqual(chooseEndpoint(endpointsOf(a), vb.observedIps().get(a.peerId)), { endpoint: '[::1]:51820', path: 'direct' })
  // An address the member does not have: nothing dialled.
  assert.equal(await va.connectOver!(b.peerId, '2001:db8::5'), false)
})
