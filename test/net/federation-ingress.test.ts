/**
 * An Ingress reaching a shared service's pods in other clusters (docs/federation.md, "Ingress"):
 * the ingress node's federated ingress address (`::2` of its /64), published in its node summary,
 * is routed by the other clusters like a shared pod's /128, and the tcp-proxy connects from it to
 * their pods when its own cluster has no ready one. What a user would notice if it broke: the
 * Ingress stops answering once the service's pods are all elsewhere; or another cluster's document
 * makes this node accept an address that is not its publishing node's ingress address; or anyone
 * can open a connection to that address.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { nodeSummaryOf } from '../../src/agent/federation/scheduling.ts'
import { resolveBackend } from '../../src/agent/ingress/plan.ts'
import { type FederatedScopeInput, planFederatedPeers } from '../../src/agent/network/federation.ts'
import {
  clusterPrefix,
  federatedIngressAddress,
  formatPrefix,
  generateKeyPair,
  nodePrefix,
  parsePrefix,
  randomPodAddress,
  renderServiceRuleset,
} from '../../src/net/index.ts'
import { seededBytes } from '../helpers/store.ts'

const ids = { home: 'home0000home0000home0000home0000', cloud: 'cloud000cloud000cloud000cloud000' }
const net = (c: keyof typeof ids) => clusterPrefix(ids[c])
const keyOf = (seed: number) => generateKeyPair(seededBytes(seed)).publicKey
const KEYS = { h1: keyOf(1), h2: keyOf(2), c1: keyOf(3), c2: keyOf(4) }
const prefix = (c: keyof typeof ids, subnet: number) => formatPrefix(nodePrefix(net(c), subnet))
const podIp = (c: keyof typeof ids, subnet: number, host: number) => prefix(c, subnet).replace('::/64', `::${host.toString(16)}`)
const ingressOf = (c: keyof typeof ids, subnet: number) => federatedIngressAddress(nodePrefix(net(c), subnet))

function summary(key: string, c: keyof typeof ids, subnet: number, ingress?: unknown) {
  return {
    capacity: { cpu: '1000m', memory: '1' },
    allocatable: { cpu: '1000m', memory: '1' },
    ready: true,
    network: { publicKey: key, prefix: prefix(c, subnet), endpoints: [`198.18.0.${subnet}:51820`], ...(ingress !== undefined ? { ingress } : {}) },
  }
}
function pod(name: string, node: string, ipv6: string) {
  return { metadata: { name, namespace: 'shared' }, status: { node, phase: 'Running', network: { ipv6 } } }
}
/** home: h1 (subnet 1, its ingress address as given), h2 (2); cloud: c1 (3), c2 (4). */
function lab(h1Ingress: unknown, pods: unknown[]): { home: FederatedScopeInput; cloud: FederatedScopeInput } {
  const clusters = [
    { metadata: { name: 'home' }, spec: { id: ids.home }, status: { nodes: { h1: summary(KEYS.h1, 'home', 1, h1Ingress), h2: summary(KEYS.h2, 'home', 2) } } },
    { metadata: { name: 'cloud' }, spec: { id: ids.cloud }, status: { nodes: { c1: summary(KEYS.c1, 'cloud', 3), c2: summary(KEYS.c2, 'cloud', 4) } } },
  ]
  const scope = (cluster: string): FederatedScopeInput => ({ federation: 'lab', cluster, clusters, pods, observedIps: new Map() })
  return { home: scope('home'), cloud: scope('cloud') }
}
const selfOf = (node: string, c: keyof typeof ids) => ({ node, ownCluster: net(c), ownKeys: new Set<string>() })

test("the federated ingress address is ::2 of the node's /64, never a pod's", () => {
  const p = nodePrefix(net('home'), 1)
  assert.equal(`${federatedIngressAddress(p)}/128`, formatPrefix({ ...parsePrefix(prefix('home', 1).replace('::/64', '::2'), 6), len: 128 }))
  // A random source that draws ::0, ::1 and ::2 first: all three are passed over.
  const draws = [0n, 1n, 2n, 3n].map((v) => Uint8Array.from({ length: 8 }, (_, i) => Number((v >> BigInt(8 * (7 - i))) & 0xffn)))
  let i = 0
  const random = (n: number) => {
    const d = draws[Math.min(i++, draws.length - 1)]!
    return d.subarray(0, n)
  }
  assert.equal(randomPodAddress(p, random), prefix('home', 1).replace('::/64', '::3'))
})

test('a published ingress address is routed by the other cluster like a shared pod, and its node peers as if it ran one', () => {
  // h1 serves the shared service with an Ingress (no shared pod of its own); web runs on c1.
  const web = podIp('cloud', 3, 5)
  const { home, cloud } = lab(ingressOf('home', 1), [pod('web', 'c1@cloud', web)])
  const onC1 = planFederatedPeers([cloud], selfOf('c1', 'cloud'))
  assert.deepEqual(onC1.skipped, [])
  assert.deepEqual(
    onC1.peers.map((p) => [p.name, p.routes, p.wg.allowedIps]),
    [['h1@home', [`${ingressOf('home', 1)}/128`], [`${ingressOf('home', 1)}/128`]]],
    'c1 accepts (and routes) exactly the /128 of h1 ingress address',
  )
  const onH1 = planFederatedPeers([home], selfOf('h1', 'home'))
  assert.deepEqual(
    onH1.peers.map((p) => [p.name, p.routes]),
    [['c1@cloud', [`${web}/128`]]],
    'h1 routes the cloud pod (its proxy connects to it)',
  )
  // c2 runs nothing, h2 publishes no ingress address: neither takes part.
  assert.deepEqual(planFederatedPeers([cloud], selfOf('c2', 'cloud')).peers, [])
  assert.deepEqual(planFederatedPeers([home], selfOf('h2', 'home')).peers, [])
  // Withdrawn (the Ingress deleted): the routes go on both ends.
  const gone = lab(undefined, [pod('web', 'c1@cloud', web)])
  assert.deepEqual(planFederatedPeers([gone.cloud], selfOf('c1', 'cloud')).peers, [])
  assert.deepEqual(planFederatedPeers([gone.home], selfOf('h1', 'home')).peers, [])
})

test("only the publishing node's own ::2 is accepted: any other address in a summary routes nothing", () => {
  const web = podIp('cloud', 3, 5)
  for (const bad of [
    podIp('home', 1, 3), // another address of h1's /64
    ingressOf('home', 2), // h2's ingress address, published by h1
    ingressOf('cloud', 3), // an address of another cluster
    `${ingressOf('home', 1)}/64`,
    'fd00::2',
    'garbage',
    42,
    { toString: ingressOf('home', 1) },
    `${ingressOf('home', 1)}${' '.repeat(80)}`,
  ]) {
    const { cloud } = lab(bad, [pod('web', 'c1@cloud', web)])
    assert.deepEqual(planFederatedPeers([cloud], selfOf('c1', 'cloud')).peers, [], `refused: ${JSON.stringify(bad)}`)
  }
  // The same address written in another spelling is the same address.
  const { cloud } = lab(ingressOf('home', 1).toUpperCase(), [pod('web', 'c1@cloud', web)])
  assert.deepEqual(
    planFederatedPeers([cloud], selfOf('c1', 'cloud')).peers.map((p) => p.routes),
    [[`${ingressOf('home', 1)}/128`]],
  )
})

test('a pod claiming the ingress address of its node keeps it from being routed twice', () => {
  // A cloud pod on c1 reporting c1's ::2 as its address, and c1 publishing it as its ingress address: one route.
  const clusters = [
    { metadata: { name: 'home' }, spec: { id: ids.home }, status: { nodes: { h1: summary(KEYS.h1, 'home', 1) } } },
    { metadata: { name: 'cloud' }, spec: { id: ids.cloud }, status: { nodes: { c1: summary(KEYS.c1, 'cloud', 3, ingressOf('cloud', 3)) } } },
  ]
  const pods = [pod('client', 'h1@home', podIp('home', 1, 7)), pod('odd', 'c1@cloud', ingressOf('cloud', 3))]
  const r = planFederatedPeers([{ federation: 'lab', cluster: 'home', clusters, pods, observedIps: new Map() }], selfOf('h1', 'home'))
  assert.deepEqual(
    r.peers.map((p) => p.routes),
    [[`${ingressOf('cloud', 3)}/128`]],
  )
  assert.ok(
    r.skipped.some((s) => s.includes('already routed')),
    r.skipped.join('; '),
  )
})

test("the node summary carries the network's federated ingress address", () => {
  const node = (network: Record<string, unknown>) =>
    ({
      apiVersion: 'orc/v1',
      kind: 'Node',
      metadata: { name: 'h1' },
      spec: {},
      status: { capacity: { cpu: '1', memory: '1Gi' }, network: { publicKey: KEYS.h1, prefix: prefix('home', 1), endpoints: [], ...network } },
    }) as never
  assert.equal(nodeSummaryOf(node({ federatedIngress: ingressOf('home', 1) }), [], 'h1')?.network?.ingress, ingressOf('home', 1))
  assert.equal(nodeSummaryOf(node({}), [], 'h1')?.network?.ingress, undefined)
})

test("the tcp-proxy's backends: this cluster's first, else the routed ones of other clusters from the ingress address", () => {
  const home = net('home')
  const reach = (address: string, node: string | undefined) => node?.endsWith('@home') === true && address.startsWith(formatPrefix(home).split('::')[0]!)
  const svc = { metadata: { name: 'web', namespace: 'shared' }, spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] } }
  const running = (name: string, node: string, ipv6: string) => ({
    metadata: { name, namespace: 'shared', labels: { app: 'web' } },
    spec: { containers: [{ name: 'c', image: 'busybox' }] },
    status: { node, phase: 'Running', containers: [{ name: 'c', state: 'running', restarts: 0 }], network: { ipv6 } },
  })
  const b = { service: 'web', namespace: 'shared', port: 'http' }
  const inHome = running('web-h', 'h2@home', podIp('home', 2, 5))
  const inCloud = running('web-c', 'c1@cloud', podIp('cloud', 3, 6))
  const unrouted = running('web-u', 'c2@cloud', podIp('cloud', 4, 7))
  const source = ingressOf('home', 1)
  const across = { source, routed: (a: string) => a === podIp('cloud', 3, 6) }
  const resolve = (pods: unknown[], a: typeof across | { source: undefined; routed: () => boolean } | undefined) =>
    resolveBackend(b, [svc as never], pods as never, reach, a)
  // A ready pod here: only it, connected to from the node's own address.
  assert.deepEqual(resolve([inHome, inCloud], across), { backends: [{ pod: 'web-h', address: podIp('home', 2, 5), port: 8080 }] })
  // None here: the routed pod of cloud, from the ingress address; the unrouted one is left out.
  assert.deepEqual(resolve([inCloud, unrouted], across), { backends: [{ pod: 'web-c', address: podIp('cloud', 3, 6), port: 8080, source }] })
  // Nothing routed yet, or the address not up yet: the reason says which.
  assert.match(
    resolve([unrouted], across).problem ?? '',
    /no ready endpoint in this cluster \(1 in other member clusters of its federation: none routed to this node yet\)/,
  )
  assert.match(
    resolve([inCloud], { source: undefined, routed: () => true }).problem ?? '',
    /\(1 in other member clusters of its federation: this node's federated ingress address is not up yet\)/,
  )
  assert.match(resolve([inCloud], undefined).problem ?? '', /1 in other member clusters of its federation/)
})

test('the services table refuses new connections to the send-only address (its replies still come in)', () => {
  const base = { table: 't', vethPrefix: 'v', range: parsePrefix('fd00:0:0:1::/80', 6), gateway: 'fd00::1', services: [] }
  const ingress = ingressOf('home', 1)
  const with_ = renderServiceRuleset({ ...base, sendOnly: [ingress] })
  assert.match(with_, /chain send_only \{\n\t\ttype filter hook input priority filter; policy accept;\n\t\tip6 daddr (\S+) ct state new drop\n\t\}/)
  assert.equal(/ip6 daddr (\S+) ct state new drop/.exec(with_)?.[1], ingress)
  assert.ok(!renderServiceRuleset(base).includes('send_only'))
})

test("the proxy connects to a backend from its `source` (the federated ingress address), to the others from the node's own", async (t) => {
  const { createServer, connect } = await import('node:net')
  const { pino } = await import('pino')
  const { TcpProxy } = await import('../../src/agent/ingress/proxy.ts')
  // The "pod": answers each connection with the address it came from.
  const pod = createServer({ allowHalfOpen: true }, (s) => {
    s.resume()
    s.on('end', () => s.end(`from ${s.remoteAddress}`))
  })
  await new Promise<void>((r) => pod.listen(0, '127.0.0.1', r))
  const podPort = (pod.address() as { port: number }).port
  const proxy = new TcpProxy(pino({ level: 'silent' }), seededBytes(1))
  t.after(async () => {
    await proxy.closeAll()
    pod.close()
  })
  const ask = (port: number) =>
    new Promise<string>((resolve) => {
      const s = connect({ host: '127.0.0.1', port, allowHalfOpen: true })
      s.end('x')
      let out = ''
      s.on('data', (d) => (out += d))
      s.on('end', () => resolve(out))
      s.on('error', (e) => resolve(`error ${String(e)}`))
    })
  const l = await proxy.listen('k', '127.0.0.1', 0, [{ pod: 'web-c', address: '127.0.0.1', port: podPort, source: '127.0.0.2' }])
  const port = (l.server.address() as { port: number }).port
  assert.equal(await ask(port), 'from 127.0.0.2')
  l.backends = [{ pod: 'web-h', address: '127.0.0.1', port: podPort }]
  assert.equal(await ask(port), 'from 127.0.0.1')
})
