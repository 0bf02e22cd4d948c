import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import {
  chooseNodeSubnet,
  clusterPrefix,
  formatPrefix,
  nodePrefix,
  parseIPv6,
  prefixContains,
  renderServiceRuleset,
  servicesWithSharedAddress,
  serviceVirtualAddress,
  serviceVirtualRange,
} from '../../../src/net/index.ts'

const cluster = clusterPrefix('c1')

test('the virtual range is PREFIX:0:1::/80, inside subnet 0 (which no node gets) and apart from PREFIX::/80', () => {
  const range = serviceVirtualRange(cluster)
  assert.equal(formatPrefix(range), `${formatPrefix(cluster).replace('::/48', '')}:0:1::/80`)
  assert.ok(prefixContains(nodePrefix(cluster, 0), range.addr))
  assert.ok(!prefixContains(range, parseIPv6(`${formatPrefix(cluster).replace('::/48', '')}::53`)), 'PREFIX::53 (a resolver address) is outside')
})

test('a ClusterIP service address is the same on every node, in the range, and differs by namespace and name; Headless has none', () => {
  const a = serviceVirtualAddress({ metadata: { name: 'web', namespace: 'default' } }, cluster)
  assert.equal(a, serviceVirtualAddress({ metadata: { name: 'web' }, spec: { type: 'ClusterIP' } }, clusterPrefix('c1')))
  assert.notEqual(a, serviceVirtualAddress({ metadata: { name: 'web', namespace: 'prod' } }, cluster))
  assert.notEqual(a, serviceVirtualAddress({ metadata: { name: 'web' } }, clusterPrefix('c2')))
  assert.equal(serviceVirtualAddress({ metadata: { name: 'web' }, spec: { type: 'Headless' } }, cluster), undefined)
  fc.assert(
    fc.property(fc.string({ minLength: 1 }), fc.string({ minLength: 1 }), fc.string({ minLength: 1 }), (id, ns, name) => {
      const c = clusterPrefix(id)
      const v = parseIPv6(serviceVirtualAddress({ metadata: { name, namespace: ns } }, c)!)
      const range = serviceVirtualRange(c)
      assert.ok(prefixContains(range, v) && v !== range.addr)
      // Never inside a node's /64.
      assert.ok(!prefixContains(chooseNodeSubnet(c, 'p', new Map()).prefix, v))
    }),
  )
})

test('services sharing an address: the first by namespace/name keeps it, the other is named', () => {
  const r = servicesWithSharedAddress([
    { key: 'b/x', address: 'fd00::1:0:0:5', ports: [] },
    { key: 'a/y', address: 'fd00:0:0:0:1::5', ports: [] },
    { key: 'c/z', address: 'fd00::1:0:0:6', ports: [] },
  ])
  assert.deepEqual(
    r.kept.map((s) => s.key),
    ['a/y', 'c/z'],
  )
  assert.deepEqual(r.shared, ['b/x'])
})

test('the ruleset DNATs each port with ready endpoints at random to port targetPort, and refuses the rest of the range', () => {
  const text = renderServiceRuleset({
    table: 't',
    vethPrefix: 'ov12',
    range: serviceVirtualRange(cluster),
    gateway: 'fd00:0:0:7::1',
    services: [
      {
        key: 'default/web',
        address: 'FD00::1:0:0:5',
        ports: [
          {
            protocol: 'TCP',
            port: 80,
            backends: [
              { address: 'fd00::7:0:0:0:a', port: 8080 },
              { address: 'fd00:0:0:7::b', port: 8081 },
            ],
          },
          { protocol: 'UDP', port: 53, backends: [] },
        ],
      },
    ],
  })
  assert.match(text, /ip6 daddr fd00::1:0:0:5 tcp dport 80 jump svc_0_0/)
  assert.match(text, /numgen random mod 2 vmap \{ 0 : jump svc_0_0_0, 1 : jump svc_0_0_1 \}/)
  assert.match(text, /meta l4proto tcp dnat ip6 to \[fd00:0:0:7::a\]:8080/)
  assert.match(text, /meta l4proto tcp dnat ip6 to \[fd00:0:0:7::b\]:8081/)
  assert.doesNotMatch(text, /udp dport 53/, 'a port with no endpoint is not translated (it is refused)')
  assert.match(text, /iifname "ov12\*" ip6 daddr [0-9a-f:]+:0:1::\/80 jump services/)
  assert.match(text, /reject with tcp reset/)
})
