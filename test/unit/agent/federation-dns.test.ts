// The node's DNS resolver answers for the shared namespaces of a federation too: their Services and
// Pods are in the federation's document, not the cluster's store. Real resolver (ClusterDns), real
// UDP packets; the federation starts after the resolver (a node joining one), so the resolver's watch
// must follow it, and a change in the federation's document must reach the next answer.

import assert from 'node:assert/strict'
import { createSocket } from 'node:dgram'
import { test } from 'node:test'
import * as dnsPacket from 'dns-packet'
import pino from 'pino'
import { ClusterDns } from '../../../src/agent/dns/index.ts'
import { clusterOwnership, type FederatedScope, routedStore, type ScopeRouter } from '../../../src/agent/federation/index.ts'
import { systemClock, systemRandom } from '../../../src/effects/index.ts'
import { reverseName } from '../../../src/net/dns/zone.ts'
import {
  clusterPrefix,
  federationVirtualRange,
  formatIPv6,
  parseIPv6,
  prefixContains,
  serviceVirtualAddress,
  sharedServiceVirtualAddress,
} from '../../../src/net/index.ts'
import { tempStore } from '../../helpers/store.ts'

const CLUSTER_ID = '00112233445566778899aabbccddeeff'
const FED_ID = '0123456789abcdef0123456789abcdef'
const base = formatIPv6(clusterPrefix(CLUSTER_ID).addr).replace(/::$/, '')

type Answer = dnsPacket.DecodedPacket & { rcode?: string }

async function query(port: number, name: string, type: 'AAAA' | 'PTR' = 'AAAA'): Promise<Answer> {
  const sock = createSocket('udp4')
  try {
    const q = dnsPacket.encode({ type: 'query', id: 77, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type, name }] })
    const answer = new Promise<Buffer>((resolve, reject) => {
      sock.once('message', resolve)
      sock.once('error', reject)
      setTimeout(() => reject(new Error(`no DNS answer for ${name}`)), 5000).unref()
    })
    sock.send(q, port, '127.0.0.1')
    return dnsPacket.decode(await answer) as Answer
  } finally {
    sock.close()
  }
}

const addresses = (p: dnsPacket.DecodedPacket) => (p.answers ?? []).map((a) => (a as { data: unknown }).data)

test('shared namespaces resolve: a Service and a Pod of the federation document answer once the federation starts, and follow its changes', async (t) => {
  const own = await tempStore()
  const fed = await tempStore({ ownership: clusterOwnership('home') })
  t.after(() => own.cleanup())
  t.after(() => fed.cleanup())
  // A router whose federation starts later, as on a node that joins one.
  let started = false
  const listeners = new Set<() => void>()
  const scope: FederatedScope = { store: fed.store, cluster: 'home', federation: 'lab' }
  const router: ScopeRouter = {
    scopeOf: (ns) => (started && ns === 'shared' ? scope : undefined),
    scopes: () => (started ? [{ namespaces: ['shared'], scope }] : []),
    onScopesChange: (fn) => {
      listeners.add(fn)
      return () => listeners.delete(fn)
    },
  }
  const w = { author: 'user:alice@home', now: 1000 }
  const svc = (ns: string) => ({
    apiVersion: 'orc/v1',
    kind: 'Service',
    metadata: { name: 'web', namespace: ns },
    spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80 }] },
  })
  const pod = (ns: string) => ({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'web-1', namespace: ns, labels: { app: 'web' } },
    spec: { containers: [{ name: 'c', image: 'busybox' }] },
  })
  // A private Service in a namespace that is not shared, and the shared ones in the federation's document.
  await own.store.apply(svc('default'), { author: 'user:alice', now: 1000 })
  await fed.store.apply(svc('shared'), w)
  await fed.store.apply(pod('shared'), w)
  await fed.store.patch({ kind: 'Pod', namespace: 'shared', name: 'web-1' }, [{ path: ['status', 'node'], value: 'c1@cloud' }], {
    author: 'controller:scheduler@home',
    now: 1001,
  })
  // What its node's lifecycle controller writes: running, with an address.
  const runningAt = (ip: string, now: number) =>
    fed.store.patch(
      { kind: 'Pod', namespace: 'shared', name: 'web-1' },
      [
        { path: ['status', 'phase'], value: 'Running' },
        { path: ['status', 'containers'], value: [{ name: 'c', state: 'running', restarts: 0 }] },
        { path: ['status', 'network'], value: { ipv6: ip } },
      ],
      { author: 'controller:lifecycle@home', now },
    )
  await runningAt(`${base}:1234::7`, 1002)

  const balancedFeds = new Set<string>()
  const dns = new ClusterDns(
    {
      store: routedStore(own.store, router),
      clock: systemClock,
      random: systemRandom,
      logger: pino({ level: 'silent' }),
      clusterId: () => CLUSTER_ID,
      dnsAddress: () => undefined,
      // This node load-balances the cluster's own ClusterIP services, and the federation's once it says so.
      servicesBalanced: () => true,
      federationOf: (ns) => (router.scopeOf(ns) !== undefined ? FED_ID : undefined),
      balancedFederations: () => balancedFeds,
    },
    { enabled: true, listen: [{ host: '127.0.0.1', port: 0 }], upstreams: [] },
  )
  await dns.start()
  t.after(() => dns.stop())
  const port = dns.listening[0]!.port

  assert.equal((await query(port, 'web.default.svc.cluster.local')).rcode, 'NOERROR', 'the private Service resolves (name exists)')
  assert.equal((await query(port, 'web.shared.svc.cluster.local')).rcode, 'NXDOMAIN', 'not federated yet: no such name')

  started = true
  for (const l of listeners) l()
  const shared = await query(port, 'web.shared.svc.cluster.local')
  assert.equal(shared.rcode, 'NOERROR')
  assert.deepEqual(addresses(shared), [`${base}:1234::7`], 'the shared Service answers with its pod (no virtual address: not balanced here)')
  assert.deepEqual(addresses(await query(port, 'web-1.shared.pod.cluster.local')), [`${base}:1234::7`])
  const priv = await query(port, 'web.default.svc.cluster.local')
  assert.equal(priv.rcode, 'NOERROR', 'the private one still does')
  assert.deepEqual(
    addresses(priv),
    [serviceVirtualAddress({ metadata: { name: 'web', namespace: 'default' } } as never, clusterPrefix(CLUSTER_ID))],
    'with its virtual address',
  )

  // The pod moves: the next answer has its new address (the watch covers the federation's store).
  await runningAt(`${base}:1234::8`, 1003)
  assert.deepEqual(addresses(await query(port, 'web.shared.svc.cluster.local')), [`${base}:1234::8`])

  // The node balances the federation's shared services now (its table has their range): the name
  // answers the shared virtual address, the same on every node of every member cluster.
  balancedFeds.add(FED_ID)
  const vip = sharedServiceVirtualAddress({ metadata: { name: 'web', namespace: 'shared' } }, FED_ID)!
  assert.deepEqual(addresses(await query(port, 'web.shared.svc.cluster.local')), [vip], 'the shared virtual address')
  assert.ok(prefixContains(federationVirtualRange(FED_ID), parseIPv6(vip)) && !prefixContains(clusterPrefix(CLUSTER_ID), parseIPv6(vip)))
  assert.deepEqual(addresses(await query(port, 'web-1.shared.pod.cluster.local')), [`${base}:1234::8`], 'pod names still answer the pod')
  // Its reverse name (outside the cluster's /48) is answered here, not forwarded (no upstream: SERVFAIL).
  const ptr = await query(port, reverseName(vip), 'PTR')
  assert.equal(ptr.rcode, 'NOERROR')
  assert.deepEqual(addresses(ptr), ['web.shared.svc.cluster.local'])

  // The federation stops here (the cluster left): its names go.
  started = false
  for (const l of listeners) l()
  assert.equal((await query(port, 'web.shared.svc.cluster.local')).rcode, 'NXDOMAIN')
})
