/**
 * A dual-stack underlay: pub1 and pub2 have public IPv4 and IPv6 addresses; home1 is behind an
 * IPv4 NAT (random port per connection) but has a global IPv6 address its router routes without
 * NAT. Agents join over IPv4, so libp2p's first connections are IPv4; each node then opens a
 * second mesh connection to its peers' published IPv6 addresses, and both ends move the tunnel to
 * IPv6: home1 is reached directly (no waiting for it to dial through its NAT), and `orc get
 * routes` shows IPv6 endpoints. What a user would notice if it broke: dual-stack nodes tunnelling
 * over IPv4 (and through NAT) although IPv6 works.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { diagnoseOnFailure, imageStoresEnv, skipReason, Testbed, waitFor, waitMesh } from './helpers.ts'

test('testbed: dual-stack nodes tunnel over IPv6, also to a node behind an IPv4 NAT', { timeout: 600_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({
    routers: [{ name: 'rtra', nat: 'random' }],
    hosts: [
      { name: 'pub1', ipv6: true },
      { name: 'pub2', ipv6: true },
      { name: 'home1', site: 'home', router: 'rtra', ipv6: true },
    ],
    env: imageStoresEnv(),
  })
  const passed = diagnoseOnFailure(t, tb)
  t.after(() => tb.destroy())
  const t0 = Date.now()
  await tb.up('pub1')
  await tb.join('pub2', 'pub1')
  await tb.join('home1', 'pub1')
  const nodes = await waitMesh(tb, 'pub1', ['pub1', 'pub2', 'home1'])
  const ip6 = (h: string) => tb.host(h).ip6!
  const want = (h: string) => `[${ip6(h)}]:${nodes.get(h).network.listenPort}`
  for (const h of ['pub1', 'pub2', 'home1']) assert.ok(nodes.get(h).network.endpoints.includes(want(h)), `${h} publishes ${want(h)}`)
  const onIpv6 = await waitFor(
    'every tunnel on an IPv6 endpoint, direct and up',
    async () => {
      const out = new Map<string, any[]>()
      for (const h of ['pub1', 'pub2', 'home1']) {
        const r = await tb.orcJson(h, ['get', 'routes'])
        const ok = (r.tunnels as any[]).every((x) => x.path === 'direct' && x.state === 'up' && x.endpoint === want(x.node))
        if (!ok) return undefined
        out.set(h, r.tunnels)
      }
      return out
    },
    120_000,
  )
  t.diagnostic(`all tunnels on IPv6 ${Date.now() - t0} ms after the first agent started`)
  t.diagnostic(await tb.orc('pub1', ['get', 'routes']))
  // WireGuard itself: pub1 sends to home1's own IPv6 address, not to its NAT.
  const wgPub1 = (await tb.exec('pub1', 'wg', ['show', nodes.get('pub1').network.iface, 'endpoints'])).stdout
  const homeKey = onIpv6.get('pub1')!.find((x) => x.node === 'home1').publicKey as string
  assert.ok(wgPub1.includes(`${homeKey}\t${want('home1')}`), wgPub1)
  // Traffic flows over it: home1 pings pub1's node address through the tunnel.
  const gw = (nodes.get('pub1').network.prefix as string).replace(/\/64$/, '1')
  const ping = await tb.exec('home1', 'ping', ['-6', '-c', '5', '-i', '0.2', '-q', gw])
  assert.equal(ping.exitCode, 0, ping.stdout + ping.stderr)
  t.diagnostic(`home1 → pub1 over the IPv6 tunnel: ${ping.stdout.trim().split('\n').pop()}`)
  passed()
})
