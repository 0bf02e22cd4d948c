/**
 * Two nodes, each behind its own home router, and one public node. The routers masquerade with a
 * random port per connection (like symmetric NATs), so neither home node can reach the other
 * directly, and hole punching cannot work: each routes the other's /64 through the public member
 * both reach (a relay over WireGuard, no relay server), and pods on the two home nodes talk over
 * TCP by IPv6. `orc get routes` says which path each peer uses. Then `orc down` stops one agent
 * and leaves its host clean, and cleans up after another that was killed.
 */

import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { type TestContext, test } from 'node:test'
import { diagnoseOnFailure, imageStoresEnv, podsTalkBothWays, skipReason, Testbed, waitMesh } from './helpers.ts'

/** pub1 plus home1 and home2, each behind its own router; agents up and joined through pub1. */
async function twoNatSites(t: TestContext, nat?: 'random'): Promise<{ tb: Testbed; passed: () => void }> {
  const tb = await Testbed.create({
    routers: [
      { name: 'rtra', ...(nat ? { nat } : {}) },
      { name: 'rtrb', ...(nat ? { nat } : {}) },
    ],
    hosts: [{ name: 'pub1' }, { name: 'home1', site: 'home', router: 'rtra' }, { name: 'home2', site: 'home', router: 'rtrb' }],
    env: imageStoresEnv(),
  })
  let failed = true
  // Before destroy (hooks run in order), which removes the logs.
  t.after(() => {
    if (failed) for (const h of tb.hosts.values()) t.diagnostic(`--- ${h.name} log tail ---\n${tb.tail(h, 30)}`)
  })
  t.after(() => tb.destroy())
  await tb.up('pub1')
  await tb.join('home1', 'pub1')
  await tb.join('home2', 'pub1')
  return { tb, passed: () => (failed = false) }
}

test('testbed: two nodes behind separate NATs reach each other relayed through a public member', { timeout: 600_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const { tb, passed } = await twoNatSites(t, 'random')
  // Every node Ready with all tunnels up: for home1 and home2 that includes the relayed path.
  const nodes = await waitMesh(tb, 'pub1', ['pub1', 'home1', 'home2'])
  const prefix = (n: string) => nodes.get(n).network.prefix as string

  // Which path each peer uses: both home nodes relay the other through pub1, the same relay.
  for (const [self, other] of [
    ['home1', 'home2'],
    ['home2', 'home1'],
  ] as const) {
    const r = JSON.parse(await tb.orc(self, ['get', 'routes', '-o', 'json']))
    const peer = r.tunnels.find((x: any) => x.node === other)
    assert.equal(peer.path, 'relayed', `${self} relays ${other}: ${JSON.stringify(peer)}`)
    assert.equal(peer.via, 'pub1')
    assert.equal(peer.state, 'up')
    const pub = r.tunnels.find((x: any) => x.node === 'pub1')
    assert.equal(pub.path, 'direct')
    // WireGuard: the /64 is on the relay's peer (a prefix can be on one peer only), not the other's.
    const dump = (await tb.exec(self, 'wg', ['show', r.iface, 'allowed-ips'])).stdout
    const line = (key: string) => dump.split('\n').find((l) => l.startsWith(key)) ?? ''
    assert.ok(line(pub.publicKey).includes(prefix(other)), `${self}: pub1 carries ${prefix(other)}:\n${dump}`)
    assert.ok(!line(peer.publicKey).includes(prefix(other)), `${self}: ${other}'s direct peer does not:\n${dump}`)
  }
  const table = await tb.orc('home1', ['get', 'routes'])
  assert.match(table, /home2 +up .*relay via pub1$/m)
  t.diagnostic(table)
  const fromPub = JSON.parse(await tb.orc('pub1', ['get', 'routes', '-o', 'json']))
  assert.ok(
    fromPub.tunnels.every((x: any) => x.path === 'peer-dials' && x.state === 'up'),
    'pub1 reaches both home nodes directly',
  )

  // Pods on the two home nodes reach each other over TCP, both ways.
  await podsTalkBothWays(tb, 'pub1', 'home1', 'home2')

  // Round trips between the nodes' own addresses: relayed (home1 → home2) against direct (home1 → pub1).
  const gw = (n: string) => prefix(n).replace(/\/64$/, '1')
  for (const [to, path] of [
    ['pub1', 'direct'],
    ['home2', 'relayed'],
  ] as const) {
    const ping = await tb.exec('home1', 'ping', ['-6', '-c', '5', '-i', '0.2', '-q', gw(to)])
    assert.equal(ping.exitCode, 0, `home1 pings ${to} (${path}): ${ping.stdout} ${ping.stderr}`)
    t.diagnostic(`home1 → ${to} (${path}): ${ping.stdout.trim().split('\n').pop()}`)
  }

  // `orc down` on home1 (pods running): the agent exits and its host is as before it started.
  const namesOf = (h: string) =>
    JSON.parse(readFileSync(join(tb.host(h).dataDir, 'network.json'), 'utf8')) as { iface: string; podNetnsPrefix: string; nftTable: string }
  const assertClean = async (h: string) => {
    const n = namesOf(h)
    assert.doesNotMatch((await tb.exec(h, 'ip', ['link'])).stdout, new RegExp(n.iface), `${h}: no WireGuard interface left`)
    assert.equal((await tb.exec(h, 'ip', ['-6', 'route', 'show', 'proto', '79'])).stdout.trim(), '', `${h}: no orc routes left`)
    assert.ok(!(await tb.exec(h, 'ip', ['netns', 'list'])).stdout.includes(n.podNetnsPrefix), `${h}: no pod namespaces left`)
    assert.notEqual((await tb.exec(h, 'nft', ['list', 'table', 'ip', n.nftTable])).exitCode, 0, `${h}: no nftables table left`)
    assert.ok(!existsSync(`/var/run/wireguard/${n.iface}.sock`), `${h}: wireguard-go gone`)
  }
  const down1 = await tb.orcOnHost('home1', ['down'])
  assert.equal(down1.exitCode, 0, down1.stderr)
  t.diagnostic(down1.stdout)
  assert.match(down1.stdout, /node home1 stopped/)
  assert.match(down1.stdout, new RegExp(`wireguard interface ${namesOf('home1').iface}`))
  assert.match(down1.stdout, new RegExp(`pod namespace ${namesOf('home1').podNetnsPrefix}`))
  assert.match(down1.stdout, /kept: /)
  assert.equal(await tb.agentExited('home1'), 0)
  await assertClean('home1')
  assert.equal((await tb.exec('home1', 'sysctl', ['-n', 'net.ipv6.conf.all.forwarding'])).stdout.trim(), '0', 'forwarding restored')
  assert.ok(existsSync(join(tb.host('home1').dataDir, 'wireguard.key')), 'data is kept')
  const again = await tb.orcOnHost('home1', ['down', '--data-dir', tb.host('home1').dataDir])
  assert.equal(again.exitCode, 0, again.stderr)
  assert.match(again.stdout, /nothing to do/)

  // A crashed agent (SIGKILL) leaves its interface and pods behind: `orc down` finds them by the data dir.
  await tb.killAgent('home2')
  assert.match((await tb.exec('home2', 'ip', ['link'])).stdout, new RegExp(namesOf('home2').iface))
  const down2 = await tb.orcOnHost('home2', ['down', '--data-dir', tb.host('home2').dataDir])
  assert.equal(down2.exitCode, 0, down2.stderr)
  t.diagnostic(down2.stdout)
  assert.match(down2.stdout, /removed what it left behind/)
  assert.match(down2.stdout, new RegExp(`pod namespace ${namesOf('home2').podNetnsPrefix}`))
  await assertClean('home2')
  passed()
})

/**
 * The same pair behind routers that keep the source port (Linux masquerade's default). Each home
 * node is configured with the other's NAT mapping as the public node sees it (a hole-punching
 * attempt: keepalives from both sides). Whether that opens a path depends on the NATs; with two
 * Linux masquerading routers it does not (the first attempt to arrive creates an inbound conntrack
 * entry on the far router that takes the very port the far side's mapping needs, so that mapping
 * moves to another port), and the pair stays relayed. Either way pods' traffic flows, and
 * `orc get routes` says which path is in use.
 */
test("testbed: behind port-preserving NATs a NAT'd pair tries each other's mapping and falls back to the relay", { timeout: 600_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const { tb, passed } = await twoNatSites(t)
  const nodes = await waitMesh(tb, 'pub1', ['pub1', 'home1', 'home2'])
  const r = JSON.parse(await tb.orc('home1', ['get', 'routes', '-o', 'json']))
  const peer = r.tunnels.find((x: any) => x.node === 'home2')
  // The mapping pub1 sees home2 at, on router B's public address with home2's own port (kept).
  assert.equal(peer.endpoint, `${tb.routers.get('rtrb')!.wanIp}:${nodes.get('home2').network.listenPort}`, JSON.stringify(peer))
  assert.ok(peer.path === 'relayed' ? peer.via === 'pub1' : peer.punched === true, JSON.stringify(peer))
  const gw = nodes.get('home2').network.prefix.replace(/\/64$/, '1')
  const ping = await tb.exec('home1', 'ping', ['-6', '-c', '5', '-i', '0.2', '-q', gw])
  assert.equal(ping.exitCode, 0, ping.stdout + ping.stderr)
  t.diagnostic(`home1 → home2 path ${peer.path === 'relayed' ? `relay via ${peer.via}` : 'direct through both NATs'}: ${ping.stdout.trim().split('\n').pop()}`)
  passed()
})

/**
 * fw1 has a public address, but a host firewall drops inbound UDP it did not start (a cloud
 * security group admitting TCP only); home1 is behind a random-port NAT. fw1 reaches pub1 (it
 * sends first, the answers are established traffic), home1 reaches pub1 (it dials), but home1's
 * handshakes to fw1 are dropped and fw1 cannot dial home1. Nobody sees a NAT mapping of fw1: it
 * notices that no peer that must dial it gets through and publishes `firewalled`, after which the
 * pair is relayed through pub1 like two NAT'd nodes, and pods on fw1 and home1 talk.
 */
test("testbed: a public node behind a firewall that drops unsolicited UDP and a NAT'd node are relayed through a member", { timeout: 600_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({
    routers: [{ name: 'rtra', nat: 'random' }],
    hosts: [{ name: 'pub1' }, { name: 'fw1', firewall: 'udp' }, { name: 'home1', site: 'home', router: 'rtra' }],
    env: imageStoresEnv(),
  })
  const passed = diagnoseOnFailure(t, tb)
  t.after(() => tb.destroy())
  const t0 = Date.now()
  await tb.up('pub1')
  await tb.join('fw1', 'pub1')
  await tb.join('home1', 'pub1')
  // Every node Ready with all tunnels up: fw1–home1 only once relayed.
  const nodes = await waitMesh(tb, 'pub1', ['pub1', 'fw1', 'home1'])
  t.diagnostic(`mesh up, fw1–home1 relayed, ${Date.now() - t0} ms after the first agent started`)
  assert.equal(nodes.get('fw1').network.firewalled, true, JSON.stringify(nodes.get('fw1').network))
  assert.equal(nodes.get('pub1').network.firewalled, undefined, 'pub1 takes home1 dialling it')
  for (const [self, other] of [
    ['fw1', 'home1'],
    ['home1', 'fw1'],
  ] as const) {
    const r = await tb.orcJson(self, ['get', 'routes'])
    const peer = r.tunnels.find((x: any) => x.node === other)
    assert.equal(peer.path, 'relayed', `${self} relays ${other}: ${JSON.stringify(peer)}`)
    assert.equal(peer.via, 'pub1')
    assert.equal(peer.state, 'up')
    assert.notEqual(peer.direct, 'up', 'the firewall keeps the direct path shut')
    assert.equal(r.tunnels.find((x: any) => x.node === 'pub1').path, 'direct')
  }
  t.diagnostic(await tb.orc('home1', ['get', 'routes']))

  // Pods on fw1 and home1 reach each other over TCP, both ways, through pub1.
  await podsTalkBothWays(tb, 'pub1', 'fw1', 'home1')
  const gw = (nodes.get('fw1').network.prefix as string).replace(/\/64$/, '1')
  const ping = await tb.exec('home1', 'ping', ['-6', '-c', '5', '-i', '0.2', '-q', gw])
  assert.equal(ping.exitCode, 0, ping.stdout + ping.stderr)
  t.diagnostic(`home1 → fw1 (relayed via pub1): ${ping.stdout.trim().split('\n').pop()}; scenario ${Date.now() - t0} ms`)
  passed()
})
