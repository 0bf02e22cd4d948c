/**
 * Services and DNS on a two-node testbed (real agents in network namespaces, real WireGuard, real
 * pods): a busybox httpd behind a Service, a client pod on the other node that finds it by name
 * through its node's resolver (/etc/resolv.conf → the cluster DNS address), `dig` from the node
 * against that address, and an `ha` server pod failing over: the name answers its new address.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { applyPod, imageStoresEnv, podManifest, skipReason, Testbed, waitFor, waitMesh, waitPodRunning } from './helpers.ts'

/** The cluster DNS address: `::53` in subnet 0 of the cluster /48 (from any node's /64). */
function dnsAddressOf(prefix64: string): string {
  return `${prefix64.split(':').slice(0, 3).join(':')}::53`
}

test('testbed: a service name resolves in pods and from the node, and follows an ha pod that fails over', { timeout: 900_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({ hosts: [{ name: 'a' }, { name: 'b' }], env: imageStoresEnv() })
  t.after(() => tb.destroy())
  let failed = true
  t.after(() => {
    if (failed) for (const h of tb.hosts.values()) t.diagnostic(`--- ${h.name} log tail ---\n${tb.tail(h, 40)}`)
  })
  await tb.up('a')
  await tb.join('b', 'a')
  const nodes = await waitMesh(tb, 'a', ['a', 'b'])
  const dns = dnsAddressOf(nodes.get('a').network.prefix as string)
  assert.equal(dnsAddressOf(nodes.get('b').network.prefix as string), dns, 'one cluster DNS address on every node')

  // Two nodes: an ha pod may move when the other is lost (no third node to make a majority).
  const cluster = await tb.orcJson('a', ['get', 'cluster', 'default'])
  cluster.spec = { ...cluster.spec, scheduling: { ...(cluster.spec?.scheduling ?? {}), fenceQuorum: 1 } }
  delete cluster.status
  await tb.orc('a', ['apply', '-f', '-'], { input: JSON.stringify(cluster) })

  await tb.orc('a', ['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Service',
      metadata: { name: 'web' },
      // Headless: the name answers the ready pods' own addresses, which is what this test follows
      // through a failover (a ClusterIP service answers its virtual address: test/testbed/ingress.test.ts).
      spec: { type: 'Headless', selector: { app: 'web' }, ports: [{ name: 'http', port: 8080, targetPort: 'http' }] },
    }),
  })
  const web = JSON.parse(podManifest('web', 'a', 'echo hello-from-web > /tmp/index.html; exec httpd -f -p 8080 -h /tmp'))
  delete web.spec.placement
  web.metadata.labels = { app: 'web' }
  web.spec.policy = 'ha'
  web.spec.haAfterSeconds = 3
  web.spec.containers[0].ports = [{ name: 'http', containerPort: 8080 }]
  web.spec.containers[0].readinessProbe = { tcpSocket: { port: 8080 }, periodSeconds: 1 }
  await tb.orc('a', ['apply', '-f', '-'], { input: JSON.stringify(web) })
  const first = await waitPodRunning(tb, 'a', 'web')
  const other = first.node === 'a' ? 'b' : 'a'
  t.diagnostic(`web runs on ${first.node} at ${first.ipv6}; client on ${other}`)

  const digShort = async (on: string, name: string, type = 'AAAA') =>
    (await tb.exec(on, 'dig', [`@${dns}`, '+short', '+tries=1', '+time=2', name, type])).stdout.trim()

  await t.test('dig on each node: the service AAAA is the ready pod, SRV names its port and pod, PTR its name', async () => {
    for (const on of ['a', 'b']) {
      const aaaa = await waitFor(
        `${on} answers web's address`,
        async () => ((await digShort(on, 'web.default.svc.cluster.local')) === first.ipv6 ? true : undefined),
        60_000,
      )
      assert.ok(aaaa)
    }
    assert.equal(await digShort(other, '_http._tcp.web.default.svc.cluster.local', 'SRV'), '0 100 8080 web.default.pod.cluster.local.')
    assert.equal(await digShort(other, 'web.default.pod.cluster.local'), first.ipv6)
    assert.equal((await tb.exec(other, 'dig', [`@${dns}`, '+short', '-x', first.ipv6])).stdout.trim(), 'web.default.pod.cluster.local.')
    const nx = await tb.exec(other, 'dig', [`@${dns}`, '+tries=1', 'nope.default.svc.cluster.local', 'AAAA'])
    assert.match(nx.stdout, /status: NXDOMAIN/)
  })

  await t.test('a client pod on the other node resolves the service name through its resolv.conf nameserver and fetches the page', async () => {
    const script = [
      'cat /etc/resolv.conf',
      'for i in $(seq 1 60); do',
      // busybox nslookup asks the nameserver of /etc/resolv.conf (the cluster DNS address).
      '  addr=$(nslookup -type=AAAA web.default.svc.cluster.local 2>/dev/null | sed -n "s/^Address: *\\([0-9a-f:]*\\)$/\\1/p" | grep : | head -1)',
      '  if [ -n "$addr" ]; then echo "resolved $addr"; printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 3 "$addr" 8080 && echo fetched && exec sleep 3600; fi',
      '  sleep 1',
      'done; exit 1',
    ].join('\n')
    await applyPod(tb, 'a', podManifest('client', other, script))
    await waitPodRunning(tb, 'a', 'client')
    const logs = await waitFor(
      'the client fetched the page by name',
      async () => {
        const l = await tb.orc('a', ['logs', 'pod/client']).catch(() => '')
        return l.includes('fetched') ? l : undefined
      },
      120_000,
    )
    assert.match(logs, new RegExp(`^nameserver ${dns}$`, 'm'))
    assert.match(logs, /^search default\.svc\.cluster\.local svc\.cluster\.local cluster\.local$/m)
    assert.match(logs, new RegExp(`^resolved ${first.ipv6}$`, 'm'))
    assert.match(logs, /hello-from-web/)
    const ep = await tb.orc(other, ['get', 'endpoints'])
    assert.match(ep, new RegExp(`^web\\s+1/1\\s+\\[${first.ipv6}\\]:8080$`, 'm'))
  })

  await t.test('the ha server pod fails over: the name answers its new address within the TTL of its new status', async () => {
    await tb.killAgent(first.node)
    const moved = await waitFor(
      'web running on the survivor',
      async () => {
        const p = await tb.orcJson(other, ['get', 'pod', 'web'])
        const st = p.status ?? {}
        return st.node === other && st.phase === 'Running' && typeof st.network?.ipv6 === 'string' && st.network.ipv6 !== first.ipv6
          ? (st.network.ipv6 as string)
          : undefined
      },
      180_000,
    )
    const seen = Date.now()
    await waitFor(
      'the name answers the new address',
      async () => ((await digShort(other, 'web.default.svc.cluster.local')) === moved ? true : undefined),
      30_000,
    )
    const lag = Date.now() - seen
    t.diagnostic(`after failover web is ${moved}; DNS answered it ${lag} ms after the survivor's store showed it Running (TTL 3 s)`)
    assert.ok(lag < 5_000, `DNS followed within 5 s (took ${lag} ms)`)
  })
  failed = false
})
