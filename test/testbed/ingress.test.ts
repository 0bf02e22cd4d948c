/**
 * Services and ingress on real agents (issue #21): three nodes in network namespaces with real
 * WireGuard, an ha busybox httpd pod behind a Service, reached
 *   (a) through the service's virtual address from a client pod (busybox nc) and from a node itself,
 *   (b) through the tcp-proxy Ingress from a namespace on the internet bridge, over IPv4 (the pod is IPv6-only),
 *   (c) after the pod's node is cut off: the ha pod moves, and the virtual address and the ingress follow it,
 * and `orc port-forward service/web` from the test host through a node the pod does not run on.
 * Each copy of the pod serves a random token, so an answer says which copy gave it.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { execa } from 'execa'
import { ORC_BIN } from '../../netsim/testbed/testbed.ts'
import { busyboxImages } from '../fixtures/busybox-image.ts'
import { applyPod, imageStoresEnv, podManifest, skipReason, Testbed, waitFor, waitMesh } from './helpers.ts'

const SERVER = 'mkdir -p /tmp/www; echo "hello-$RANDOM$RANDOM" > /tmp/www/index.html; exec httpd -f -p 8080 -h /tmp/www'
const GET = "printf 'GET / HTTP/1.0\\r\\n\\r\\n'"

/** The token in an HTTP answer, or undefined. */
function token(out: string): string | undefined {
  return /hello-(\d+)/.exec(out)?.[1]
}

test('testbed: a service address and a tcp-proxy ingress reach an ha pod, and follow it when its node is lost', { timeout: 900_000 }, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({
    hosts: [{ name: 'n1' }, { name: 'n2' }, { name: 'n3' }],
    env: { ...imageStoresEnv(), ORC_POD_TUNABLES: JSON.stringify({ restartBackoffMs: 200, maxRestartBackoffMs: 1000 }) },
  })
  t.after(() => tb.destroy())
  let failed = true
  t.after(() => {
    if (failed) for (const h of tb.hosts.values()) t.diagnostic(`--- ${h.name} log tail ---\n${tb.tail(h, 30)}`)
  })
  const t0 = Date.now()
  await tb.up('n1')
  await tb.join('n2', 'n1')
  await tb.join('n3', 'n1')
  await waitMesh(tb, 'n1', ['n1', 'n2', 'n3'])

  await tb.orc('n1', ['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Service',
      metadata: { name: 'web' },
      spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http' }] },
    }),
  })
  await tb.orc('n1', ['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name: 'web', labels: { app: 'web' } },
      spec: {
        policy: 'ha',
        haAfterSeconds: 2,
        containers: [{ name: 'main', image: busyboxImages().rootfs, command: ['sh', '-c', SERVER], ports: [{ name: 'http', containerPort: 8080 }] }],
      },
    }),
  })
  const running = async (on: string, not?: string) =>
    waitFor(
      `pod web Running${not ? ` off ${not}` : ''}`,
      async () => {
        const p = await tb.orcJson(on, ['get', 'pod', 'web'])
        const st = p.status ?? {}
        return st.phase === 'Running' && typeof st.network?.ipv6 === 'string' && st.node !== not
          ? { node: String(st.node), ipv6: String(st.network.ipv6) }
          : undefined
      },
      180_000,
    )
  const first = await running('n1')
  const others = ['n1', 'n2', 'n3'].filter((n) => n !== first.node)
  const [near, far] = others as [string, string]
  t.diagnostic(`web runs on ${first.node} at ${first.ipv6}; client and ingress on ${others.join(', ')}`)

  // The address `orc get services` shows.
  const table = await tb.orc(near, ['get', 'services'])
  const vip = /^web\s+ClusterIP\s+([0-9a-f:]+)\s/m.exec(table)?.[1]
  assert.ok(vip, table)

  // (a) From a client pod on another node, and from that node itself (busybox nc; wget segfaults there).
  await applyPod(tb, near, podManifest('client', near, 'exec sleep 3600'))
  await waitFor('client running', async () => (await tb.orcJson(near, ['get', 'pod', 'client'])).status?.phase === 'Running', 120_000)
  const fromPod = async () => {
    const r = await execa(process.execPath, [ORC_BIN, '--socket', tb.host(near).socket, 'exec', 'client', '--', 'sh', '-c', `${GET} | nc -w 3 ${vip} 80`], {
      reject: false,
      timeout: 30_000,
    })
    return token(String(r.stdout))
  }
  const fromNode = async (n: string) => token((await tb.exec(n, 'sh', ['-c', `${GET} | busybox nc -w 3 ${vip} 80`])).stdout)
  const tok1 = await waitFor('the VIP answers the client pod', fromPod, 60_000)
  // The service's name answers its virtual address (busybox nslookup asks the resolver of the pod's
  // /etc/resolv.conf: the node's cluster DNS address).
  const byName = await execa(
    process.execPath,
    [ORC_BIN, '--socket', tb.host(near).socket, 'exec', 'client', '--', 'sh', '-c', 'nslookup -type=AAAA web.default.svc.cluster.local'],
    { reject: false, timeout: 30_000 },
  )
  assert.match(String(byName.stdout), new RegExp(`Address: *${vip}\\s*$`, 'm'), `${byName.stdout}${byName.stderr}`)
  assert.equal(await fromNode(near), tok1, 'the node itself reaches the VIP (output hook)')
  assert.equal(await fromNode(far), tok1)

  // (b) The ingress on the two other nodes, from the internet over IPv4.
  await tb.orc('n1', ['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Ingress',
      metadata: { name: 'web' },
      spec: { controller: 'tcp-proxy', nodes: others, listen: { ports: [8080] }, backend: { service: 'web', port: 'http' } },
    }),
  })
  await waitFor(
    'ingress ready on both nodes',
    async () => {
      const st = (await tb.orcJson('n1', ['get', 'ingress', 'web'])).status?.nodes ?? {}
      return others.every((n) => st[n]?.ready === true && st[n]?.backends === 1) ? st : undefined
    },
    60_000,
  )
  const ing = await tb.orcJson('n1', ['get', 'ingress', 'web'])
  assert.deepEqual(ing.status.nodes[near].addresses, [`${tb.host(near).ip}:8080`])
  const fromInternet = async (n: string) => token((await tb.exec(tb.external.ns, 'sh', ['-c', `${GET} | busybox nc -w 3 ${tb.host(n).ip} 8080`])).stdout)
  assert.equal(await fromInternet(near), tok1)
  assert.equal(await fromInternet(far), tok1)
  assert.match(await tb.orc('n1', ['get', 'ingresses']), /^web\s+tcp-proxy\s+8080→web:http\s+2\/2\s/m)
  assert.match(await tb.orc('n1', ['why', 'ingress/web']), /port 8080: 1 ready endpoint\(s\) \(web\)/)
  assert.match(await tb.orc('n1', ['describe', 'ingress/web']), /controller: tcp-proxy/)

  // `orc port-forward service/web` from this host through a node the pod does not run on.
  const pf = execa(process.execPath, [ORC_BIN, '--socket', tb.host(near).socket, 'port-forward', 'service/web', '0:80'], { reject: false, buffer: false })
  try {
    let out = ''
    pf.stdout?.on('data', (d: Buffer) => (out += d.toString()))
    const port = await waitFor('the local listener', async () => Number(/127\.0\.0\.1:(\d+)/.exec(out)?.[1]) || undefined, 20_000)
    const res = await fetch(`http://127.0.0.1:${port}/`, { headers: { connection: 'close' } })
    assert.equal(token(await res.text()), tok1)
  } finally {
    pf.kill('SIGINT')
    await pf
  }

  // (c) The pod's node is cut off: the ha pod moves, the VIP and the ingress follow.
  const c0 = Date.now()
  await tb.partition([first.node], others)
  const moved = await running(near, first.node)
  const movedMs = Date.now() - c0
  const tok2 = await waitFor('the VIP answers from the new copy', async () => {
    const v = await fromPod()
    return v !== undefined && v !== tok1 ? v : undefined
  })
  const vipMs = Date.now() - c0
  const tokIng = await waitFor('the ingress answers from the new copy', async () => {
    const v = await fromInternet(far)
    return v !== undefined && v !== tok1 ? v : undefined
  })
  assert.equal(tokIng, tok2)
  assert.equal(await fromInternet(near), tok2)
  t.diagnostic(
    `web moved ${first.node} → ${moved.node} ${movedMs} ms after the cut; VIP answered from the new copy at ${vipMs} ms, ingress at ${Date.now() - c0} ms; scenario ${Date.now() - t0} ms`,
  )
  failed = false
})
