/**
 * A node behind a home router's NAT (10.77.0.0/24, masqueraded, nothing in that it did not start)
 * and two public nodes: the NAT'd node dials them; they configure no endpoint for it and learn it
 * from its keepalives. Pods on either side reach each other both ways. Two NAT'd nodes would
 * need a relay, which is not built (docs/networking.md).
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { imageStoresEnv, netemUnavailable, podsTalkBothWays, skipReason, Testbed, waitMesh } from './helpers.ts'

test("testbed: a NAT'd node reaches pods on public nodes and vice versa", { timeout: 900_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  // Latency and loss on the links when the kernel has netem; the scenario runs either way.
  const noNetem = await netemUnavailable()
  if (noNetem) t.diagnostic(`without latency/loss: ${noNetem}`)
  const tb = await Testbed.create({
    hosts: [
      { name: 'pub1' },
      { name: 'pub2', ...(noNetem ? {} : { netem: { delayMs: 10 } }) },
      { name: 'home', site: 'home', ...(noNetem ? {} : { netem: { delayMs: 20, lossPct: 1 } }) },
    ],
    env: imageStoresEnv(),
  })
  t.after(() => tb.destroy())
  let failed = true
  t.after(() => {
    if (failed) for (const h of tb.hosts.values()) t.diagnostic(`--- ${h.name} log tail ---\n${tb.tail(h, 30)}`)
  })
  await tb.up('pub1')
  await tb.join('pub2', 'pub1')
  await tb.join('home', 'pub1')
  const nodes = await waitMesh(tb, 'pub1', ['pub1', 'pub2', 'home'])

  // Which path each peer uses, as `orc get routes -o wide` says.
  const fromPub = JSON.parse(await tb.orc('pub1', ['get', 'routes', '-o', 'json']))
  const toHome = fromPub.tunnels.find((x: any) => x.node === 'home')
  assert.equal(toHome.path, 'peer-dials', "pub1 waits for the NAT'd node to dial")
  assert.match(toHome.endpoint, new RegExp(`^${tb.router.wanIp.replace(/\./g, '\\.')}:`), 'and learns its address behind the router')
  const fromHome = JSON.parse(await tb.orc('home', ['get', 'routes', '-o', 'json']))
  assert.ok(
    fromHome.tunnels.every((x: any) => x.path === 'direct' && x.state === 'up'),
    'home dials the public nodes directly',
  )
  t.diagnostic(await tb.orc('pub1', ['get', 'routes', '-o', 'wide']))

  const srv = await podsTalkBothWays(tb, 'pub1', 'pub2', 'home')
  assert.ok(srv.get('home')!.ipv6.startsWith(nodes.get('home').network.prefix.replace(/::\/64$/, ':')))
  failed = false
})
