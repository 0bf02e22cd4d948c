/**
 * Virtual addresses of shared services (pure plan, federated-services.ts, and its ruleset). What a
 * user would notice if it broke: a shared service with another address in each cluster (a client
 * caching the name breaks across clusters), a connection sent to an endpoint the node has no route
 * to (it hangs), the other cluster's endpoints used while the local one is ready (a WAN hop for
 * nothing), no fallback when the local ones are gone, or a member cluster injecting rules through a
 * hostile Service.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { planSharedServices } from '../../src/agent/network/federated-services.ts'
import { type FederatedScopeInput, planFederatedPeers } from '../../src/agent/network/federation.ts'
import {
  clusterPrefix,
  federationVirtualRange,
  formatPrefix,
  generateKeyPair,
  nodePrefix,
  parseIPv6,
  prefixContains,
  renderServiceRuleset,
  serviceVirtualRange,
  sharedServiceVirtualAddress,
} from '../../src/net/index.ts'
import { seededBytes } from '../helpers/store.ts'

const ids = { home: 'home0000home0000home0000home0000', cloud: 'cloud000cloud000cloud000cloud000' }
const FED = 'feedfacefeedface0123456789abcdef'
const net = (c: keyof typeof ids) => clusterPrefix(ids[c])
const keyOf = (seed: number) => generateKeyPair(seededBytes(seed)).publicKey
const KEYS = { h1: keyOf(1), h2: keyOf(2), c1: keyOf(3) }
const prefix = (c: keyof typeof ids, subnet: number) => formatPrefix(nodePrefix(net(c), subnet))
const podIp = (c: keyof typeof ids, subnet: number, host: number) => prefix(c, subnet).replace('::/64', `::${host.toString(16)}`)

function summary(key: string, c: keyof typeof ids, subnet: number) {
  return { ready: true, network: { publicKey: key, prefix: prefix(c, subnet), endpoints: [`198.18.0.${subnet}:51820`] } }
}
function pod(name: string, node: string, ipv6: string, labels: Record<string, string> = {}, ready = true) {
  return {
    metadata: { name, namespace: 'shared', labels },
    spec: { containers: [{ name: 'c', image: 'busybox' }] },
    status: {
      node,
      phase: 'Running',
      network: { ipv6 },
      conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }],
      containers: [{ name: 'c', state: 'running', restarts: 0 }],
    },
  }
}
const web: {
  metadata: { name: string; namespace: string }
  spec: { type?: string; selector: Record<string, string>; ports: { name: string; port: number; targetPort: number }[] }
} = {
  metadata: { name: 'web', namespace: 'shared' },
  spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] },
}

/** home: h1 (subnet 1), h2 (2); cloud: c1 (3). */
function lab(pods: unknown[], services: unknown[] = [web]): { home: FederatedScopeInput; cloud: FederatedScopeInput } {
  const clusters = [
    { metadata: { name: 'home' }, spec: { id: ids.home }, status: { nodes: { h1: summary(KEYS.h1, 'home', 1), h2: summary(KEYS.h2, 'home', 2) } } },
    { metadata: { name: 'cloud' }, spec: { id: ids.cloud }, status: { nodes: { c1: summary(KEYS.c1, 'cloud', 3) } } },
  ]
  const scope = (cluster: string): FederatedScopeInput => ({
    federation: 'lab',
    cluster,
    clusters,
    pods,
    observedIps: new Map(),
    id: FED,
    namespaces: ['shared'],
    services,
  })
  return { home: scope('home'), cloud: scope('cloud') }
}

/** The node's plan as the network controller makes it: federated routes first, then the services over them. */
function planOn(scope: FederatedScopeInput, node: string, c: keyof typeof ids) {
  const fed = planFederatedPeers([scope], { node, ownCluster: net(c), ownKeys: new Set() })
  const routed = new Set([...fed.peers.flatMap((p) => p.routes), ...fed.clusterRelays.flatMap((r) => r.routes)])
  return planSharedServices([scope], { node, ownCluster: net(c), routed })
}

test('the shared virtual address is the same in every member cluster, in the federation range, outside every cluster /48', () => {
  const pods = [pod('web-1', 'h1@home', podIp('home', 1, 5), { app: 'web' }), pod('client', 'c1@cloud', podIp('cloud', 3, 7))]
  const { home, cloud } = lab(pods)
  const onH1 = planOn(home, 'h1', 'home')
  const onC1 = planOn(cloud, 'c1', 'cloud')
  const vip = sharedServiceVirtualAddress(web, FED)!
  assert.deepEqual(
    onH1.services.map((s) => [s.key, s.address]),
    [['shared/web', vip]],
  )
  assert.deepEqual(
    onC1.services.map((s) => s.address),
    [vip],
  )
  const range = federationVirtualRange(FED)
  assert.equal(range.len, 80)
  assert.deepEqual(onH1.federations, [{ federation: 'lab', id: FED, range }])
  assert.ok(prefixContains(range, parseIPv6(vip)))
  for (const c of ['home', 'cloud'] as const) assert.ok(!prefixContains(net(c), parseIPv6(vip)))
  assert.notEqual(vip, sharedServiceVirtualAddress(web, 'another0another0another0another0'), 'another federation, another address')
  assert.equal(sharedServiceVirtualAddress({ ...web, spec: { ...web.spec, type: 'Headless' } }, FED), undefined)
})

test("own cluster's ready endpoints first, for every source; the other cluster's only when it has none, for this node's shared pods only", () => {
  const webHome = pod('web-1', 'h1@home', podIp('home', 1, 5), { app: 'web' })
  const webCloud = pod('web-2', 'c1@cloud', podIp('cloud', 3, 5), { app: 'web' })
  const clientCloud = pod('client', 'c1@cloud', podIp('cloud', 3, 7))
  const clientHome = pod('client-h', 'h1@home', podIp('home', 1, 9))
  // Both clusters have a ready endpoint: each balances to its own.
  let { home, cloud } = lab([webHome, webCloud, clientCloud, clientHome])
  assert.deepEqual(planOn(cloud, 'c1', 'cloud').services[0]!.ports, [{ protocol: 'TCP', port: 80, backends: [{ address: podIp('cloud', 3, 5), port: 8080 }] }])
  assert.deepEqual(planOn(home, 'h1', 'home').services[0]!.ports, [{ protocol: 'TCP', port: 80, backends: [{ address: podIp('home', 1, 5), port: 8080 }] }])
  // cloud's endpoint is not ready: c1 sends its shared pods' connections (both: home routes both
  // back) to home, and refuses the rest (its private pods, its own processes).
  ;({ home, cloud } = lab([webHome, { ...webCloud, status: { ...webCloud.status, conditions: [{ type: 'Ready', status: 'False' }] } }, clientCloud]))
  assert.deepEqual(planOn(cloud, 'c1', 'cloud').services[0]!.ports, [
    { protocol: 'TCP', port: 80, backends: [{ address: podIp('home', 1, 5), port: 8080 }], sources: [podIp('cloud', 3, 5), podIp('cloud', 3, 7)] },
  ])
  // h2 (home, no shared pod) still balances to h1's pod: the cluster routes it.
  assert.deepEqual(planOn(home, 'h2', 'home').services[0]!.ports[0]!.backends, [{ address: podIp('home', 1, 5), port: 8080 }])
  // A cloud node with no federated route to home's pod (here: the pod is on h1 but c1 runs no
  // shared pod, so nothing is routed) has nothing to send it to: no backend, refused.
  ;({ cloud } = lab([webHome]))
  assert.deepEqual(planOn(cloud, 'c1', 'cloud').services[0]!.ports, [{ protocol: 'TCP', port: 80, backends: [] }])
})

test('the ruleset: federation ranges balanced and refused like the cluster range; a source-filtered port DNATs only those sources', () => {
  const cluster = serviceVirtualRange(net('cloud'))
  const range = federationVirtualRange(FED)
  const vip = sharedServiceVirtualAddress(web, FED)!
  const render = (sources: string[]) =>
    renderServiceRuleset({
      table: 't',
      vethPrefix: 'ov12',
      range: cluster,
      federatedRanges: [range],
      gateway: podIp('cloud', 3, 1),
      services: [
        { key: 'shared/web', address: vip, ports: [{ protocol: 'TCP', port: 80, backends: [{ address: podIp('home', 1, 5), port: 8080 }], sources }] },
      ],
    })
  const text = render([podIp('cloud', 3, 7)])
  for (const r of [cluster, range].map(formatPrefix)) {
    assert.ok(text.includes(`iifname "ov12*" ip6 daddr ${r} jump services`), `pods' connections to ${r} are balanced`)
    assert.ok(text.includes(`ip6 daddr ${r} meta l4proto tcp reject with tcp reset`), `the rest of ${r} is refused`)
  }
  assert.ok(text.includes(`ip6 saddr { ${podIp('cloud', 3, 7)} } ip6 daddr ${vip} tcp dport 80 jump svc_0_0`))
  assert.ok(text.includes(`dnat ip6 to [${podIp('home', 1, 5)}]:8080`))
  assert.ok(!text.includes(`ip6 saddr ${podIp('home', 1, 5)}`), 'no hairpin rule for a backend in another cluster')
  // No shared pod here: the port is refused (no dispatch at all).
  const none = render([])
  assert.ok(!none.includes('jump svc_0_0'))
})

test('hostile Services from another cluster are skipped with a reason, never rendered; unshared namespaces are not balanced', () => {
  const bad = [
    { metadata: { name: 'x" ; flush ruleset ; "', namespace: 'shared' }, spec: { ports: [{ port: 80 }] } },
    { metadata: { name: 'p', namespace: 'shared' }, spec: { ports: [{ port: '80 ; drop' }] } },
    { metadata: { name: 'q', namespace: 'shared' }, spec: { ports: [{ port: 80, protocol: 'SCTP' }] } },
    { metadata: { name: 'r', namespace: 'shared' }, spec: { ports: [{ port: 80, targetPort: 70000 }] } },
    { metadata: { name: 'web', namespace: 'private' }, spec: { ports: [{ port: 80 }] } },
    'garbage',
  ]
  const { cloud } = lab([pod('client', 'c1@cloud', podIp('cloud', 3, 7))], [...bad, web])
  const plan = planOn(cloud, 'c1', 'cloud')
  assert.deepEqual(
    plan.services.map((s) => s.key),
    ['shared/web'],
  )
  assert.deepEqual(plan.skipped, [
    'lab: service bad name',
    'lab: service shared/p: bad port',
    'lab: service shared/q: bad port',
    'lab: service shared/r: bad targetPort',
  ])
  // No id yet (a join in progress): nothing balanced, no range.
  assert.deepEqual(planSharedServices([{ ...cloud, id: undefined }], { node: 'c1', ownCluster: net('cloud'), routed: new Set() }), {
    federations: [],
    services: [],
    skipped: [],
  })
})

test("an endpoint claiming this cluster's /48 from another cluster's node is not used as local", () => {
  // A pod said to run on c1@cloud with an address in home's /48: on h2 it is neither local (its node is not of home) nor routed.
  const { home } = lab([pod('web-x', 'c1@cloud', podIp('home', 1, 5), { app: 'web' })])
  assert.deepEqual(planOn(home, 'h2', 'home').services[0]!.ports[0]!.backends, [])
})
