/**
 * Testbed scenarios: real `orc` agents in network namespaces, real wireguard-go tunnels, real pods.
 * One testbed (3 public hosts and an external host) carries the scenarios in order.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { startTcpServer } from '../net/netns.ts'
import { applyPod, imageStoresEnv, nodeStatuses, podManifest, routeTo, skipReason, Testbed, waitFor, waitMesh, waitPodRunning } from './helpers.ts'

test('testbed: 3-node mesh, pod to pod over WireGuard, egress, drift, node removal', { timeout: 900_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({ hosts: [{ name: 'a' }, { name: 'b' }, { name: 'c' }], env: imageStoresEnv() })
  t.after(() => tb.destroy())
  let failed = true
  t.after(() => {
    if (failed) for (const h of tb.hosts.values()) t.diagnostic(`--- ${h.name} log tail ---\n${tb.tail(h, 30)}`)
  })

  await tb.up('a')
  await tb.join('b', 'a')
  await tb.join('c', 'a')

  let nodes!: Map<string, any>
  await t.test('three nodes form a full tunnel mesh and say so', async () => {
    nodes = await waitMesh(tb, 'a', ['a', 'b', 'c'])
    const prefixes = ['a', 'b', 'c'].map((n) => nodes.get(n).network.prefix as string)
    assert.equal(new Set(prefixes).size, 3, 'each node has its own /64')
    const routes = await tb.orc('a', ['get', 'routes'])
    for (const n of ['b', 'c'])
      assert.match(routes, new RegExp(`${nodes.get(n).network.prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s+${n}\\s+up\\s+198\\.18\\.0\\.`))
    const whyC = await tb.orc('a', ['why', 'node/c'])
    assert.match(whyC, /node\/c: Ready/)
    assert.match(whyC, /tunnels\s+done/)
    // The kernel routes each peer's /64 into the tunnel.
    assert.match(await routeTo(tb, 'a', nodes.get('b').network.prefix), new RegExp(`dev ${nodes.get('a').network.iface}`))
    const wide = await tb.orc('a', ['get', 'nodes', '-o', 'wide'])
    assert.match(wide, /tunnels 2\/2/)
  })

  await t.test('a pod on a reaches a pod on b over TCP by IPv6', async () => {
    await applyPod(tb, 'a', podManifest('web', 'b', 'exec nc -ll -p 8080 -e echo hello-from-b'))
    const web = await waitPodRunning(tb, 'a', 'web')
    assert.ok(web.ipv6.startsWith(nodes.get('b').network.prefix.replace(/::\/64$/, ':')), `pod address ${web.ipv6} in b's /64`)
    await applyPod(
      tb,
      'a',
      podManifest(
        'client',
        'a',
        `for i in $(seq 1 90); do if nc -w 2 ${web.ipv6} 8080 </dev/null; then echo connected; exec sleep 3600; fi; sleep 1; done; exit 1`,
      ),
    )
    await waitPodRunning(tb, 'a', 'client')
    const logs = await waitFor(
      'client pod fetched the page',
      async () => {
        const l = await tb.orc('a', ['logs', 'pod/client'])
        return l.includes('connected') ? l : undefined
      },
      120_000,
    )
    assert.match(logs, /hello-from-b/)
    const pods = await tb.orc('c', ['get', 'pods', '-o', 'wide'])
    assert.ok(pods.includes(web.ipv6), 'orc get pods -o wide shows the pod address on any node')
  })

  await t.test('an oci (runc) pod joins its pod network too', async () => {
    await applyPod(tb, 'a', podManifest('web-oci', 'c', 'exec nc -ll -p 8080 -e echo hello-from-runc', { runtime: 'oci' }))
    const web = await waitPodRunning(tb, 'a', 'web-oci')
    const reply = await waitFor(
      'answer from the runc pod over the tunnel',
      async () => {
        const r = await tb.exec('b', 'busybox', ['nc', '-w', '2', web.ipv6, '8080'])
        return r.exitCode === 0 && r.stdout.includes('hello-from-runc') ? r.stdout : undefined
      },
      60_000,
    )
    assert.match(reply, /hello-from-runc/)
  })

  await t.test('pod egress to an IPv4 host outside the cluster is masqueraded', async () => {
    const srv = await startTcpServer(tb.external.ns, tb.external.ip, 9000)
    t.after(() => srv.stop())
    await applyPod(
      tb,
      'a',
      podManifest(
        'egress',
        'a',
        `for i in $(seq 1 30); do if nc -w 2 ${tb.external.ip} 9000 </dev/null; then echo; echo done; exec sleep 3600; fi; sleep 1; done; exit 1`,
      ),
    )
    const logs = await waitFor(
      'egress pod got an answer',
      async () => {
        const l = await tb.orc('a', ['logs', 'pod/egress']).catch(() => '')
        return l.includes('done') ? l : undefined
      },
      120_000,
    )
    // The external host sees node a's address, not the pod's node-local 10.88.x.y.
    assert.match(logs, new RegExp(`^${tb.host('a').ip.replace(/\./g, '\\.')}$`, 'm'))
  })

  await t.test('an interface deleted by hand comes back with its routes', async () => {
    const iface = nodes.get('a').network.iface as string
    const r = await tb.exec('a', 'ip', ['link', 'del', 'dev', iface])
    assert.equal(r.exitCode, 0, r.stderr)
    await waitFor('route to b back', async () => (await routeTo(tb, 'a', nodes.get('b').network.prefix)).includes(iface) || undefined, 60_000)
    await waitMesh(tb, 'a', ['a', 'b', 'c'])
  })

  await t.test('a removed node: its routes are withdrawn everywhere', async () => {
    const cPrefix = nodes.get('c').network.prefix as string
    await tb.orc('a', ['node', 'remove', 'c', '--reason', 'testbed'])
    for (const h of ['a', 'b']) {
      await waitFor(`route to c withdrawn on ${h}`, async () => ((await routeTo(tb, h, cPrefix)) === '' ? true : undefined), 60_000)
      const wg = await tb.exec(h, 'wg', ['show', (await nodeStatuses(tb, 'a')).get(h).network.iface, 'allowed-ips'])
      assert.ok(!wg.stdout.includes(cPrefix), `${h} no longer has c as a WireGuard peer`)
    }
    const routes = await tb.orc('b', ['get', 'routes'])
    assert.ok(!routes.includes(cPrefix))
    await tb.stopAgent('c')
  })
  failed = false
})
