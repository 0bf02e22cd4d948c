/**
 * Two federated clusters whose nodes that run the shared pods are both behind NAT: cluster "home"
 * has a public node (pub1) and home1 behind router A; cluster "away" is home2 alone behind router
 * B. Both routers masquerade with a random port per connection (symmetric NATs): home1 and home2
 * can never reach each other directly. pub1 is a node of home1's cluster that reaches both, so the
 * pods on home1 and home2 talk through it (docs/federation.md, "Relays between clusters"): home1
 * puts home2's pod /128 on its tunnel to pub1, home2 puts home1's pod /128 on a tunnel to
 * pub1@home, and pub1 accepts home2's pod /128 — that address only — on its tunnel to home2.
 *
 * The public node is in home1's cluster (a VPS next to a home lab, the usual shape), so the relay
 * is a cluster peer on one end and a federated peer on the other: both ways of carrying the pair.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { diagnoseOnFailure, imageStoresEnv, nodeStatuses, sharedPod, skipReason, Testbed, TWO_RANDOM_NATS, waitFor, waitMesh } from './helpers.ts'

const NS = 'shared'

async function waitRunning(tb: Testbed, on: string, name: string, node: string): Promise<string> {
  return waitFor(
    `pod ${name} Running on ${node} with an address`,
    async () => {
      const st = (await tb.orcJson(on, ['get', 'pod', name, '-n', NS]).catch(() => undefined))?.status ?? {}
      return st.phase === 'Running' && typeof st.network?.ipv6 === 'string' && st.node === node ? (st.network.ipv6 as string) : undefined
    },
    90_000,
  )
}

/**
 * Cluster home = pub1 (labelled `role=relay`, so shared pods can be kept off it) and `homeNode`
 * joined to it; cluster away = `awayNode` alone; federated as `lab` sharing `NS`, every node in.
 */
async function homeAndAway(tb: Testbed, homeNode: string, awayNode: string): Promise<void> {
  await Promise.all([tb.up('pub1', ['--cluster', 'home', '--labels', 'role=relay']), tb.up(awayNode, ['--cluster', 'away'])])
  await tb.join(homeNode, 'pub1')
  await Promise.all([waitMesh(tb, 'pub1', ['pub1', homeNode]), waitMesh(tb, awayNode, [awayNode])])
  await tb.orc('pub1', ['federation', 'create', 'lab', '--namespace', NS])
  const token = (await tb.orc('pub1', ['federation', 'token', 'lab'])).split('\n')[0]!.trim()
  await tb.orc(awayNode, ['federation', 'join', '--token', token])
  await waitFor(
    'both clusters in the federation (every node)',
    async () => {
      const v = await tb.orcJson('pub1', ['federation', 'status', 'lab'])
      const n = (c: string) => v.clusters?.find((x: any) => x.name === c)?.connected
      return n('home') === 2 && n('away') === 1 ? v : undefined
    },
    90_000,
  )
}

/**
 * A server pod in cluster away (on `awayNode`), and a client in cluster home (not on pub1, so on
 * `homeNode`) that, once it got the server's answer, serves `client-reached-away` itself.
 */
async function serverAndClient(tb: Testbed, homeNode: string, awayNode: string): Promise<{ srv: string; cl: string }> {
  await tb.orc('pub1', ['apply', '-f', '-'], { input: sharedPod('srv', 'exec nc -ll -p 8080 -e echo hello-from-away', { placement: { clusters: ['away'] } }) })
  const srv = await waitRunning(tb, 'pub1', 'srv', `${awayNode}@away`)
  const notOnRelay = { affinity: { nodeAffinity: { required: [{ matchExpressions: [{ key: 'role', operator: 'DoesNotExist' }] }] } } }
  const client = `until nc -w 2 ${srv} 8080 </dev/null | grep -q hello-from-away; do sleep 0.5; done; exec nc -ll -p 8080 -e echo client-reached-away`
  await tb.orc('pub1', ['apply', '-f', '-'], { input: sharedPod('client', client, { placement: { clusters: ['home'] }, ...notOnRelay }) })
  const cl = await waitRunning(tb, 'pub1', 'client', `${homeNode}@home`)
  return { srv, cl }
}

/** Until `on` routes `other`'s pods relayed via `via` with the relay's tunnel up; its `orc get routes` and the peer's row. */
async function relayed(tb: Testbed, on: string, other: string, via: string, timeoutMs = 90_000): Promise<{ r: any; p: any }> {
  return waitFor(
    `${on} routes ${other} relayed via ${via}`,
    async () => {
      const r = await tb.orcJson(on, ['get', 'routes'])
      const p = (r.federated ?? []).find((x: any) => x.node === other)
      return p?.path === 'relayed' && p.via === via && p.state === 'up' ? { r, p } : undefined
    },
    timeoutMs,
  )
}

const podNs = (r: any, ipv6: string) => (r.pods as any[]).find((p) => p.ipv6 === ipv6)?.netns as string
const nc = (tb: Testbed, host: string, ns: string, addr: string, port = 8080) =>
  tb.exec(host, 'ip', ['netns', 'exec', ns, 'busybox', 'nc', '-w', '3', addr, String(port)])

test("testbed: pods on two NAT'd nodes of different federated clusters talk through a relay of one of the clusters", { timeout: 300_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({
    routers: TWO_RANDOM_NATS,
    hosts: [{ name: 'pub1' }, { name: 'home1', site: 'home', router: 'rtra' }, { name: 'home2', site: 'home', router: 'rtrb' }],
    env: { ORC_MESH_TUNABLES: JSON.stringify({ syncIntervalMs: 5000 }), ...imageStoresEnv() },
  })
  let failed = true
  t.after(() => {
    if (failed) for (const h of tb.hosts.values()) t.diagnostic(`--- ${h.name} log tail ---\n${tb.tail(h, 40)}`)
  })
  t.after(() => tb.destroy())
  const t0 = Date.now()
  await homeAndAway(tb, 'home1', 'home2')
  t.diagnostic(`two clusters up and federated in ${Date.now() - t0} ms`)

  // A server on home2 (cluster away), a client on home1 (cluster home, not on pub1).
  const a0 = Date.now()
  const { srv, cl } = await serverAndClient(tb, 'home1', 'home2')

  // Both ends route the other's pod through pub1, and say so.
  const [onHome1, onHome2] = await Promise.all([relayed(tb, 'home1', 'home2@away', 'pub1'), relayed(tb, 'home2', 'home1@home', 'pub1@home')])
  t.diagnostic(`both ends relayed through pub1 ${Date.now() - a0} ms after the server was applied`)
  assert.deepEqual(onHome1.p.routes, [`${srv}/128`])
  assert.deepEqual(onHome2.p.routes, [`${cl}/128`])

  // The pods talk over TCP, both ways: the client got the server's answer, then answers itself.
  const srvNs = podNs(onHome2.r, srv)
  const clientNs = podNs(onHome1.r, cl)
  await waitFor(
    'the client pod on home1 reached the server on home2, and home2 reaches it back',
    async () => ((await nc(tb, 'home2', srvNs, cl)).stdout.includes('client-reached-away') ? true : undefined),
    90_000,
  ).catch(async (err) => {
    for (const h of ['home1', 'home2', 'pub1'])
      t.diagnostic(`${h}: ${(await tb.exec(h, 'wg', ['show'])).stdout}\n${(await tb.exec(h, 'ip', ['-6', 'route'])).stdout}`)
    throw err
  })
  t.diagnostic(`pods across the relay talk ${Date.now() - a0} ms after the server was applied`)

  // `orc get routes` on home1: the row of home2's pod says relayed.
  const table = await tb.orc('home1', ['get', 'routes'])
  t.diagnostic(table)
  assert.match(table, new RegExp(`^${srv}/128 +home2@away +up .*relay via pub1, federation lab$`, 'm'))
  assert.match(await tb.orc('home2', ['get', 'routes']), new RegExp(`^${cl}/128 +home1@home +up .*relay via pub1@home, federation lab$`, 'm'))

  // WireGuard on each node: the relayed /128 sits on the relay's tunnel; pub1 accepts from home2 its pod's /128 only.
  const allowed = async (host: string, iface: string) => {
    const out = (await tb.exec(host, 'wg', ['show', iface, 'allowed-ips'])).stdout
    return new Map(
      out
        .split('\n')
        .map((l) => l.split('\t') as [string, string])
        .map(([k, v]) => [k, (v ?? '').trim()]),
    )
  }
  const pubKey = (onHome1.r.tunnels as any[]).find((x) => x.node === 'pub1').publicKey as string
  const onH1 = await allowed('home1', onHome1.r.iface)
  assert.ok(onH1.get(pubKey)?.includes(`${srv}/128`), `home1: pub1 carries ${srv}: ${[...onH1]}`)
  assert.equal(onH1.get(onHome1.p.publicKey), '(none)', "home1: home2's own tunnel carries nothing")
  const fromPub = await tb.orcJson('pub1', ['get', 'routes'])
  const h2OnPub = (fromPub.federated as any[]).find((x) => x.node === 'home2@away')
  assert.deepEqual(h2OnPub.relayFor, ['home1'])
  assert.equal((await allowed('pub1', fromPub.iface)).get(h2OnPub.publicKey), `${srv}/128`, "pub1 accepts home2's pod address only")

  // Indicative figures through the relay (shared machine): round trips pod to pod, and a 20 MiB transfer.
  const ping = await tb.exec('home1', 'ip', ['netns', 'exec', clientNs, 'ping', '-6', '-c', '10', '-i', '0.2', '-q', srv])
  assert.equal(ping.exitCode, 0, ping.stdout + ping.stderr)
  t.diagnostic(`ping client pod (home1) → srv pod (home2) via pub1: ${ping.stdout.trim().split('\n').pop()}`)
  const direct = await tb.exec('home1', 'ping', ['-6', '-c', '10', '-i', '0.2', '-q', (fromPub.prefix as string).replace(/\/64$/, '1')])
  t.diagnostic(`ping home1 → pub1 (direct, for comparison): ${direct.stdout.trim().split('\n').pop()}`)
  await tb.exec('home2', 'ip', ['netns', 'exec', srvNs, 'sh', '-c', 'busybox nc -ll -p 9000 -e busybox dd if=/dev/zero bs=65536 count=320 >/dev/null 2>&1 &'])
  const bulk = await waitFor(
    '20 MiB from srv to the client pod through the relay',
    async () => {
      const s0 = process.hrtime.bigint()
      const r = await tb.exec('home1', 'ip', ['netns', 'exec', clientNs, 'sh', '-c', `busybox nc -w 5 ${srv} 9000 </dev/null | wc -c`])
      const ms = Number(process.hrtime.bigint() - s0) / 1e6
      return Number(r.stdout.trim()) >= 20 * 1024 * 1024 ? ms : undefined
    },
    30_000,
  )
  t.diagnostic(`20 MiB srv → client through pub1 in ${bulk.toFixed(0)} ms (${((20 * 8) / (bulk / 1000)).toFixed(0)} Mbit/s, process start included)`)
  t.diagnostic(`scenario ${Date.now() - t0} ms`)
  failed = false
})

/**
 * The same shape with a firewall instead of the first NAT: fw1 (cluster home) has a public address
 * but drops inbound UDP it did not start; home2 (cluster away, alone) is behind a random-port NAT.
 * home2's handshakes to fw1 are dropped and fw1 cannot dial home2, and nobody sees a NAT mapping of
 * fw1: it notices that the peer that must dial it never gets through, publishes `nat` in its node
 * summary, and the pair is relayed through pub1 like two NAT'd nodes. Then home removes away
 * (`orc federation remove`): the routes to away's pod go from fw1 and from the relay.
 */
test("testbed: a firewalled public node and a NAT'd node of another federated cluster talk through a relay", { timeout: 300_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({
    routers: [{ name: 'rtrb', nat: 'random' }],
    hosts: [{ name: 'pub1' }, { name: 'fw1', firewall: 'udp' }, { name: 'home2', site: 'home', router: 'rtrb' }],
    env: { ORC_MESH_TUNABLES: JSON.stringify({ syncIntervalMs: 5000 }), ...imageStoresEnv() },
  })
  const passed = diagnoseOnFailure(t, tb)
  t.after(() => tb.destroy())
  const t0 = Date.now()
  await homeAndAway(tb, 'fw1', 'home2')
  const a0 = Date.now()
  const { srv, cl } = await serverAndClient(tb, 'fw1', 'home2')
  const [onFw, onHome2] = await Promise.all([relayed(tb, 'fw1', 'home2@away', 'pub1', 120_000), relayed(tb, 'home2', 'fw1@home', 'pub1@home', 120_000)])
  t.diagnostic(`both ends relayed through pub1 ${Date.now() - a0} ms after the server was applied`)
  assert.deepEqual(onFw.p.routes, [`${srv}/128`])
  assert.deepEqual(onHome2.p.routes, [`${cl}/128`])
  assert.notEqual(onHome2.p.direct, 'up', 'the firewall keeps the direct path shut')
  assert.equal((await nodeStatuses(tb, 'pub1')).get('fw1').network.firewalled, true)

  // The pods talk over TCP, both ways.
  const srvNs = podNs(onHome2.r, srv)
  await waitFor(
    'the client pod on fw1 reached the server on home2, and home2 reaches it back',
    async () => ((await nc(tb, 'home2', srvNs, cl)).stdout.includes('client-reached-away') ? true : undefined),
    90_000,
  )
  t.diagnostic(`pods across the relay talk ${Date.now() - a0} ms after the server was applied`)

  // `orc federation remove` (two clusters: home's admin alone): away leaves the document, and on
  // home's nodes every route to its pods goes — fw1's on its tunnel to the relay, pub1's peer for
  // home2 — so the client pod no longer reaches the server.
  const r0 = Date.now()
  await tb.orc('pub1', ['federation', 'remove', 'lab', 'away'])
  const routedOn = async (h: string) => {
    const r = await tb.orcJson(h, ['get', 'routes'])
    const wg = (await tb.exec(h, 'wg', ['show', r.iface, 'allowed-ips'])).stdout
    const rt = (await tb.exec(h, 'ip', ['-6', 'route', 'show', 'proto', '79'])).stdout
    return (r.federated ?? []).some((f: any) => f.cluster === 'away') || wg.includes(srv) || rt.includes(srv)
  }
  await waitFor("away's pod routes gone from fw1 and pub1", async () => ((await routedOn('fw1')) || (await routedOn('pub1')) ? undefined : true), 60_000)
  const status = await tb.orcJson('pub1', ['federation', 'status', 'lab'])
  assert.deepEqual(
    (status.clusters as any[]).map((c) => c.name),
    ['home'],
  )
  const after = await nc(tb, 'fw1', podNs(onFw.r, cl), srv)
  assert.ok(!after.stdout.includes('hello-from-away'), `the client pod no longer reaches the removed cluster's pod: ${after.stdout}`)
  t.diagnostic(`federation remove: away's routes gone from home's nodes ${Date.now() - r0} ms after; scenario ${Date.now() - t0} ms`)
  passed()
})
