/**
 * Two clusters of two nodes each (home: h1, h2; cloud: c1, c2), real agents in network namespaces
 * with real WireGuard, federated with the namespace `shared`. What a user would notice:
 *
 * - a pod applied on home with `placement.clusters: [cloud]` runs on a cloud node, and a pod of
 *   the shared namespace on a home node reaches it by IPv6 over TCP; `orc get routes` on both ends
 *   shows the other's pod /128 (PATH `federation lab`), and nothing else of the other cluster is
 *   routed (no /64, no /48);
 * - the two clusters partitioned and healed: a pod created on cloud meanwhile replicates to home
 *   after the heal, its route appears and it answers;
 * - an Ingress on h1 for the shared service answers from the home pod, and from the cloud pod once
 *   the home one is gone (from h1's federated ingress address, which accepts no connection);
 * - an `ha` pod allowed in both clusters moves to home when every cloud agent is killed;
 * - `orc federation leave` removes the cross-cluster routes.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { federatedIngressAddress, parsePrefix, sharedServiceVirtualAddress } from '../../src/net/index.ts'
import { imageStoresEnv, sharedPod, skipReason, Testbed, waitFor, waitMesh } from './helpers.ts'

const NS = 'shared'

async function podOf(tb: Testbed, on: string, name: string): Promise<any | undefined> {
  return tb.orcJson(on, ['get', 'pod', name, '-n', NS]).catch(() => undefined)
}

async function waitRunning(tb: Testbed, on: string, name: string, ok: (node: string) => boolean, timeoutMs = 90_000): Promise<{ ipv6: string; node: string }> {
  return waitFor(
    `pod ${name} Running with an address`,
    async () => {
      const st = (await podOf(tb, on, name))?.status ?? {}
      return st.phase === 'Running' && typeof st.network?.ipv6 === 'string' && ok(String(st.node))
        ? { ipv6: st.network.ipv6 as string, node: String(st.node) }
        : undefined
    },
    timeoutMs,
  )
}

const plain = (member: string) => member.split('@')[0]!
const server = (text: string) => `exec nc -ll -p 8080 -e echo ${text}`

test('testbed: two federated clusters route their shared pods to each other (/128s only), across a partition, failover and leave', {
  timeout: 600_000,
}, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({
    hosts: [{ name: 'h1' }, { name: 'h2' }, { name: 'c1' }, { name: 'c2' }],
    // Anti-entropy every 5 s (default 30 s), so replication resumes promptly after the heal.
    env: {
      ORC_MESH_TUNABLES: JSON.stringify({ syncIntervalMs: 5000 }),
      ORC_POD_TUNABLES: JSON.stringify({ restartBackoffMs: 200, maxRestartBackoffMs: 1000 }),
      ...imageStoresEnv(),
    },
  })
  let failed = true
  t.after(() => {
    if (failed) for (const h of tb.hosts.values()) t.diagnostic(`--- ${h.name} log tail ---\n${tb.tail(h, 40)}`)
  })
  t.after(() => tb.destroy())
  const t0 = Date.now()
  await Promise.all([tb.up('h1', ['--cluster', 'home']), tb.up('c1', ['--cluster', 'cloud'])])
  await Promise.all([tb.join('h2', 'h1'), tb.join('c2', 'c1')])
  const [homeNodes, cloudNodes] = await Promise.all([waitMesh(tb, 'h1', ['h1', 'h2']), waitMesh(tb, 'c1', ['c1', 'c2'])])
  const homeNet = (homeNodes.get('h1').network.prefix as string).split(':').slice(0, 3).join(':')
  const cloudNet = (cloudNodes.get('c1').network.prefix as string).split(':').slice(0, 3).join(':')
  assert.notEqual(homeNet, cloudNet, 'each cluster keeps its own /48')
  t.diagnostic(`two clusters up in ${Date.now() - t0} ms (home ${homeNet}::/48, cloud ${cloudNet}::/48)`)

  // Federate: home creates, cloud joins; both nodes of each cluster follow.
  await tb.orc('h1', ['federation', 'create', 'lab', '--namespace', NS])
  const token = (await tb.orc('h1', ['federation', 'token', 'lab'])).split('\n')[0]!.trim()
  await tb.orc('c1', ['federation', 'join', '--token', token])
  await waitFor(
    'every node of both clusters in the federation',
    async () => {
      const v = await tb.orcJson('h1', ['federation', 'status', 'lab'])
      return ['home', 'cloud'].every((c) => v.clusters?.find((x: any) => x.name === c)?.connected === 2) ? v : undefined
    },
    60_000,
  )

  // 1. A server that may run only in cloud, applied on home; a client in home.
  const a0 = Date.now()
  await tb.orc('h1', ['apply', '-f', '-'], { input: sharedPod('web', server('hello-from-cloud'), { placement: { clusters: ['cloud'] } }) })
  const web = await waitRunning(tb, 'h1', 'web', (n) => n.endsWith('@cloud'))
  t.diagnostic(`web applied on home runs on ${web.node} (${web.ipv6}) after ${Date.now() - a0} ms`)
  assert.ok(web.ipv6.startsWith(`${cloudNet}:`), 'a cloud pod is addressed in the cloud /48')
  const c0 = Date.now()
  // The client connects to web; once it got web's answer it serves one itself (so the cloud side
  // can check that the client pod really reached web, and the way back works too).
  const client = `until nc -w 2 ${web.ipv6} 8080 </dev/null | grep -q hello-from-cloud; do sleep 0.5; done; exec nc -ll -p 8080 -e echo client-reached-cloud`
  await tb.orc('h1', ['apply', '-f', '-'], { input: sharedPod('client', client, { placement: { clusters: ['home'] } }) })
  const cl = await waitRunning(tb, 'h1', 'client', (n) => n.endsWith('@home'))
  const clientHost = plain(cl.node)
  const webHost = plain(web.node)
  const routed = await waitFor(
    `route to ${web.ipv6} on ${clientHost}`,
    async () => ((await tb.exec(clientHost, 'ip', ['-6', 'route', 'show', 'proto', '79'])).stdout.includes(web.ipv6) ? Date.now() : undefined),
    60_000,
  )
  t.diagnostic(`client Running on ${cl.node} after ${Date.now() - c0} ms; route to web on ${clientHost} ${routed - c0} ms after apply`)
  const podNs = async (host: string, ipv6: string) => ((await tb.orcJson(host, ['get', 'routes'])).pods as any[]).find((p) => p.ipv6 === ipv6)?.netns as string
  const webNs = await podNs(webHost, web.ipv6)
  const clientNs = await podNs(clientHost, cl.ipv6)
  const ncFrom = (host: string, ns: string, addr: string) => tb.exec(host, 'ip', ['netns', 'exec', ns, 'busybox', 'nc', '-w', '2', addr, '8080'])
  await waitFor(
    'the client pod reached web across clusters (and answers from home)',
    async () => ((await ncFrom(webHost, webNs, cl.ipv6)).stdout.includes('client-reached-cloud') ? true : undefined),
    60_000,
  ).catch(async (err) => {
    for (const h of [clientHost, webHost])
      t.diagnostic(`${h}: ${(await tb.exec(h, 'wg', ['show'])).stdout}\n${(await tb.exec(h, 'ip', ['-6', 'route'])).stdout}`)
    throw err
  })
  t.diagnostic(`the client pod on home reached web on cloud over TCP (and was reached back) ${Date.now() - c0} ms after it was applied`)

  // A Service of the shared namespace, applied on home: its name resolves through a home node's
  // resolver (which reads the federation's document) to the service's shared virtual address —
  // derived from the federation id, the same in both clusters — and a home pod connecting to that
  // address is answered by the pod in cloud (the home node DNATs it over its federated route).
  await tb.orc('h1', ['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: NS },
      spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 8080 }] },
    }),
  })
  const fedId = (await tb.orcJson('h1', ['get', 'federation', 'lab'])).spec.id as string
  const vip = sharedServiceVirtualAddress({ metadata: { name: 'web', namespace: NS } }, fedId)!
  assert.equal((await tb.orcJson('c1', ['get', 'federation', 'lab'])).spec.id, fedId)
  for (const on of ['h1', 'c1']) assert.match(await tb.orc(on, ['get', 'svc', '-n', NS]), new RegExp(`^web +ClusterIP +${vip} `, 'm'), `orc get svc on ${on}`)
  const homeDns = `${homeNet}::53`
  const lookup = `busybox nslookup -type=AAAA web.${NS}.svc.cluster.local ${homeDns} | sed -n 's/^Address: *\\([0-9a-f:]*\\)$/\\1/p' | grep -v '^${homeDns}$' | head -1`
  const n0 = Date.now()
  const resolved = await waitFor(
    `web.${NS}.svc resolves on ${clientHost} to the shared virtual address`,
    async () => {
      const r = await tb.exec(clientHost, 'ip', ['netns', 'exec', clientNs, 'sh', '-c', lookup])
      return r.stdout.trim() === vip ? r.stdout.trim() : undefined
    },
    60_000,
  )
  const byName = await waitFor(
    `the client pod reaches web (cloud) on ${vip}`,
    async () => {
      const r = await tb.exec(clientHost, 'ip', ['netns', 'exec', clientNs, 'sh', '-c', `addr=$(${lookup}) && busybox nc -w 2 "$addr" 8080`])
      return r.stdout.includes('hello-from-cloud') ? r : undefined
    },
    30_000,
  )
  assert.match(byName.stdout, /hello-from-cloud/)
  t.diagnostic(
    `web.${NS}.svc.cluster.local resolved on home to ${resolved} (the shared virtual address) ${Date.now() - n0} ms after the Service was applied; the cloud pod answered on it`,
  )

  // `orc get routes` on both ends: the other's pod /128, on the other node's peer, nothing wider.
  const routesOn = async (host: string) => tb.orcJson(host, ['get', 'routes'])
  const r1 = await routesOn(clientHost)
  assert.deepEqual(
    (r1.federated ?? []).map((f: any) => [f.node, f.routes, f.federations]),
    [[web.node, [`${web.ipv6}/128`], ['lab']]],
  )
  const table = await tb.orc(clientHost, ['get', 'routes'])
  t.diagnostic(table)
  assert.match(table, new RegExp(`^${web.ipv6.replace(/\./g, '\\.')}/128 +${web.node} +up .*federation lab$`, 'm'))
  const r2 = await waitFor(
    `${webHost} routes the client back`,
    async () => {
      const r = await routesOn(webHost)
      return (r.federated ?? []).some((f: any) => f.node === cl.node && f.routes.includes(`${cl.ipv6}/128`)) ? r : undefined
    },
    30_000,
  )
  assert.equal(r2.federated.length, 1)
  for (const [host, other] of [
    [clientHost, cloudNet],
    [webHost, homeNet],
  ] as const) {
    const rt = (await tb.exec(host, 'ip', ['-6', 'route', 'show', 'proto', '79'])).stdout
    const foreign = rt.split('\n').filter((l) => l.startsWith(`${other}:`))
    assert.equal(foreign.length, 1, `${host}: exactly one route into the other cluster:\n${rt}`)
    assert.match(foreign[0]!, /^\S+ dev orc/)
    assert.ok(!foreign[0]!.includes('/64') && !foreign[0]!.includes('/48'), foreign[0])
    const peers = (await tb.exec(host, 'wg', ['show', (host === clientHost ? r1 : r2).iface, 'allowed-ips'])).stdout
    assert.ok(!peers.includes(`${other}:`.replace(/:$/, '::/48')), peers)
  }
  // The other nodes run no federated pod: nothing of the other cluster is routed there.
  for (const host of ['h1', 'h2', 'c1', 'c2'].filter((h) => h !== clientHost && h !== webHost)) {
    assert.equal((await routesOn(host)).federated, undefined, `${host} has no federated peers`)
  }
  // Connect time between the two pods, from the client pod's namespace (TCP handshake + answer).
  const times: number[] = []
  for (let i = 0; i < 5; i++) {
    const st = process.hrtime.bigint()
    const r = await ncFrom(clientHost, clientNs, web.ipv6)
    times.push(Number(process.hrtime.bigint() - st) / 1e6)
    assert.match(r.stdout, /hello-from-cloud/)
  }
  // Baseline: the same command to the client pod itself (process start and nc, no network between).
  const local: number[] = []
  for (let i = 0; i < 5; i++) {
    const st = process.hrtime.bigint()
    await ncFrom(clientHost, clientNs, cl.ipv6)
    local.push(Number(process.hrtime.bigint() - st) / 1e6)
  }
  t.diagnostic(
    `pod → pod across clusters, nc connect + reply (incl. process start): ${times.map((x) => x.toFixed(1)).join(', ')} ms; same command to the pod itself: ${local.map((x) => x.toFixed(1)).join(', ')} ms`,
  )

  // Local first: with a ready endpoint of the service in home too, the home client's connections to
  // the virtual address stay in home; when it goes, they fail over to the cloud pod.
  const homeWeb = JSON.parse(sharedPod('web-home', server('hello-from-home'), { placement: { clusters: ['home'] } }))
  homeWeb.metadata.labels.app = 'web'
  await tb.orc('h1', ['apply', '-f', '-'], { input: JSON.stringify(homeWeb) })
  const wh = await waitRunning(tb, 'h1', 'web-home', (n) => n.endsWith('@home'))
  await waitFor(
    `the client's connections to ${vip} land on web-home (${wh.node}), five in a row`,
    async () => {
      for (let i = 0; i < 5; i++) if (!(await ncFrom(clientHost, clientNs, vip)).stdout.includes('hello-from-home')) return undefined
      return true
    },
    60_000,
  )
  // An Ingress on home's h1 for the shared service: served by web-home (this cluster's endpoint),
  // from the internet over IPv4; cloud's web is no backend of it (cloud accepts no node's connection).
  await tb.orc('h1', ['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Ingress',
      metadata: { name: 'web' },
      spec: {
        controller: 'tcp-proxy',
        nodes: ['h1'],
        listen: { ports: [18080], families: ['IPv4'] },
        backend: { service: 'web', namespace: NS, port: 'http' },
      },
    }),
  })
  const ingressOn = async () => (await tb.orcJson('h1', ['get', 'ingress', 'web'])).status?.nodes?.h1
  await waitFor(
    'the ingress on h1 ready with one backend (web-home)',
    async () => ((await ingressOn())?.ready === true && (await ingressOn())?.backends === 1 ? true : undefined),
    60_000,
  )
  /** What the Ingress on h1 answers to a client on the internet (over IPv4), once it says `text`. */
  const ingressAnswers = (text: string, timeoutMs: number) =>
    waitFor(
      `the ingress on h1 answers ${text}`,
      async () => {
        const r = await tb.exec(tb.external.ns, 'busybox', ['nc', '-w', '3', tb.host('h1').ip, '18080'])
        return r.stdout.includes(text) ? r.stdout : undefined
      },
      timeoutMs,
    )
  const viaIngress = await ingressAnswers('hello-from-home', 30_000)
  assert.match(viaIngress, /hello-from-home/)
  assert.match(await tb.orc('h1', ['why', 'ingress/web']), /port 18080: 1 ready endpoint\(s\) \(web-home\)/)
  // Serving a shared service, h1 has its federated ingress address (`::2` of its /64) and publishes
  // it; the cloud node running web routes it like a shared pod's /128.
  const h1Ingress = federatedIngressAddress(parsePrefix(homeNodes.get('h1').network.prefix as string))
  await waitFor(
    `h1 publishes its federated ingress address ${h1Ingress} and ${webHost} routes it`,
    async () => {
      const node = await tb.orcJson('h1', ['get', 'node', 'h1'])
      if (node.status?.network?.federatedIngress !== h1Ingress) return undefined
      const r = await routesOn(webHost)
      return (r.federated ?? []).some((f: any) => f.node === 'h1@home' && f.routes.includes(`${h1Ingress}/128`)) ? true : undefined
    },
    60_000,
  )

  const f0 = Date.now()
  await tb.orc('h1', ['delete', 'pod', 'web-home', '-n', NS])
  await waitFor(
    `the client's connections to ${vip} fail over to web in cloud`,
    async () => ((await ncFrom(clientHost, clientNs, vip)).stdout.includes('hello-from-cloud') ? true : undefined),
    60_000,
  )
  t.diagnostic(`web-home (${wh.node}) answered on ${vip} while ready; deleted, the client reached web in cloud on the same address ${Date.now() - f0} ms later`)
  // With no endpoint left in home, the Ingress on h1 forwards to web in cloud, from its federated
  // ingress address, and still answers from the internet.
  const crossed = await ingressAnswers('hello-from-cloud', 90_000).catch(async (err) => {
    t.diagnostic(`ingress status: ${JSON.stringify(await ingressOn())}`)
    for (const h of ['h1', webHost]) t.diagnostic(`${h}: ${(await tb.exec(h, 'wg', ['show'])).stdout}\n${(await tb.exec(h, 'ip', ['-6', 'addr'])).stdout}`)
    throw err
  })
  assert.match(crossed, /hello-from-cloud/)
  const served = await ingressOn()
  assert.equal(served?.ready, true, JSON.stringify(served))
  assert.equal(served?.backends, 1)
  t.diagnostic(`web-home deleted: the ingress on h1 answered from web in cloud ${Date.now() - f0} ms later`)
  // Nothing may open a connection to that address: a listener on h1's every address is not
  // reached from the cloud pod through it (the route is there: the ingress's connections use it).
  await tb.exec('h1', 'sh', ['-c', 'timeout 30 busybox nc -ll -p 18099 -e echo h1-open >/dev/null 2>&1 &'])
  await waitFor(
    'a listener on h1 port 18099',
    async () => ((await tb.exec('h1', 'busybox', ['nc', '-w', '2', '::1', '18099'])).stdout.includes('h1-open') ? true : undefined),
    30_000,
  )
  const probe = await tb.exec(webHost, 'ip', ['netns', 'exec', webNs, 'busybox', 'nc', '-w', '2', h1Ingress, '18099'])
  assert.equal(probe.stdout.includes('h1-open'), false, 'the federated ingress address accepts no connection')
  await tb.orc('h1', ['delete', 'ingress', 'web'])
  await waitFor(
    'h1 withdraws its federated ingress address with the Ingress',
    async () => ((await tb.orcJson('h1', ['get', 'node', 'h1'])).status?.network?.federatedIngress === undefined ? true : undefined),
    60_000,
  )
  const nft = (await tb.exec(clientHost, 'nft', ['list', 'ruleset'])).stdout
  const dispatch = nft.split('\n').filter((l) => l.includes(`ip6 daddr ${vip} tcp dport 8080`))
  assert.equal(dispatch.length, 1, nft)
  assert.ok(dispatch[0]!.includes('ip6 saddr') && dispatch[0]!.includes(cl.ipv6), `the fallback to cloud serves the node's shared pods only: ${dispatch[0]}`)

  // The web node's agent restarts (SIGTERM, `orc up` again): the pod keeps running in its namespace
  // and the routes come back on both ends.
  const r0 = Date.now()
  await tb.stopAgent(webHost)
  await tb.up(webHost, ['--cluster', 'cloud'])
  await waitFor(
    'web answers the client again after its agent restarted',
    async () => ((await ncFrom(clientHost, clientNs, web.ipv6)).stdout.includes('hello-from-cloud') ? true : undefined),
    60_000,
  )
  assert.equal(await podNs(webHost, web.ipv6), webNs, 'the pod kept its namespace')
  assert.equal((await podOf(tb, 'h1', 'web'))?.status?.network?.ipv6, web.ipv6, 'and its address')
  t.diagnostic(`${webHost} agent restarted: web reachable from the client pod again ${Date.now() - r0} ms after the stop`)

  // 2. Partition the clusters; create a pod on cloud meanwhile; heal.
  await tb.partition(['h1', 'h2'], ['c1', 'c2'])
  await tb.orc('c1', ['apply', '-f', '-'], { input: sharedPod('web2', server('hello-web2'), { placement: { clusters: ['cloud'] } }) })
  const web2 = await waitRunning(tb, 'c1', 'web2', (n) => n.endsWith('@cloud'))
  assert.equal(await podOf(tb, 'h1', 'web2'), undefined, 'home does not see web2 while partitioned')
  assert.equal((await ncFrom(clientHost, clientNs, web.ipv6)).stdout.includes('hello'), false, 'the partition cuts the path')
  const h0 = Date.now()
  await tb.heal()
  await waitFor(
    'web2 replicated to home after the heal',
    async () => ((await podOf(tb, 'h1', 'web2'))?.status?.network?.ipv6 === web2.ipv6 ? true : undefined),
    90_000,
  )
  const replicated = Date.now() - h0
  const web2Host = plain(web2.node)
  // web2's node needs a federated pod of home to route to (the client): both ends route each other.
  await waitFor(
    `route to web2 on ${clientHost}`,
    async () => ((await tb.exec(clientHost, 'ip', ['-6', 'route', 'show', 'proto', '79'])).stdout.includes(web2.ipv6) ? true : undefined),
    60_000,
  )
  const routedAfter = Date.now() - h0
  await waitFor(
    'client pod reaches web2 and web again',
    async () => {
      const a = await ncFrom(clientHost, clientNs, web2.ipv6)
      const b = await ncFrom(clientHost, clientNs, web.ipv6)
      return a.stdout.includes('hello-web2') && b.stdout.includes('hello-from-cloud') ? true : undefined
    },
    60_000,
  )
  t.diagnostic(
    `after the heal: web2 replicated to home in ${replicated} ms, its route on ${clientHost} in ${routedAfter} ms, reachable in ${Date.now() - h0} ms (web2 on ${web2Host})`,
  )

  // 3. An ha pod allowed in both clusters, preferring cloud, moves to home when cloud is lost.
  await tb.orc('h1', ['apply', '-f', '-'], {
    input: sharedPod('mover', server('hello-mover'), {
      policy: 'ha',
      haAfterSeconds: 2,
      placement: { clusters: ['home', 'cloud'], preferClusters: ['cloud'] },
    }),
  })
  const before = await waitRunning(tb, 'h1', 'mover', (n) => n.endsWith('@cloud'))
  const k0 = Date.now()
  await Promise.all([tb.killAgent('c1'), tb.killAgent('c2')])
  const after = await waitRunning(tb, 'h1', 'mover', (n) => n.endsWith('@home'), 90_000)
  t.diagnostic(`ha pod moved from ${before.node} to ${after.node} ${Date.now() - k0} ms after every cloud agent was killed (haAfter 2 s)`)

  // 4. Home leaves the federation: its cross-cluster routes go.
  const hasFederated = async () => (await routesOn(clientHost)).federated !== undefined
  assert.ok(await hasFederated(), 'routes to the (lost) cloud pods stay while home is in the federation')
  const l0 = Date.now()
  await tb.orc('h1', ['federation', 'leave', 'lab'])
  await waitFor(
    'federated routes removed on every home node',
    async () => {
      for (const h of ['h1', 'h2']) {
        if ((await routesOn(h)).federated !== undefined) return undefined
        if ((await tb.exec(h, 'ip', ['-6', 'route', 'show', 'proto', '79'])).stdout.includes(`${cloudNet}:`)) return undefined
      }
      return true
    },
    60_000,
  )
  t.diagnostic(`federation left: cross-cluster routes gone from home in ${Date.now() - l0} ms; whole scenario ${Date.now() - t0} ms`)
  failed = false
})
