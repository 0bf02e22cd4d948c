import assert from 'node:assert/strict'
import { test } from 'node:test'
import * as dnsPacket from 'dns-packet'
import fc from 'fast-check'
import pino from 'pino'
import { systemClock } from '../../../src/effects/clock.ts'
import { systemRandom } from '../../../src/effects/random.ts'
import { serviceEndpoints } from '../../../src/model/index.ts'
import {
  answerQuery,
  buildZone,
  clusterDnsAddress,
  clusterPrefix,
  DnsServer,
  formatIPv6,
  MAX_QUERY_BYTES,
  podDnsFiles,
  RateLimiter,
  reverseName,
  serviceVirtualAddress,
  upstreamsFromResolvConf,
} from './helpers.ts'

const cluster = clusterPrefix('00112233445566778899aabbccddeeff')
const base = formatIPv6(cluster.addr).replace(/::$/, '')
const ip = (n: number) => `${base}:1234::${n.toString(16)}`

type PodOpts = {
  ns?: string
  labels?: Record<string, string>
  phase?: string
  ready?: boolean
  ip?: string
  ports?: { name?: string; containerPort: number }[]
}
function pod(name: string, o: PodOpts = {}) {
  const conditions =
    o.ready === undefined
      ? undefined
      : [{ type: 'Ready', status: o.ready ? 'True' : 'False', reason: o.ready ? 'ContainersReady' : 'ReadinessProbeFailed', lastTransitionTime: 'x' }]
  return {
    metadata: { name, namespace: o.ns ?? 'shop', labels: o.labels ?? { app: 'web' } },
    spec: { containers: [{ name: 'c', ports: o.ports ?? [{ name: 'http', containerPort: 8080 }] }] },
    status: {
      phase: o.phase ?? 'Running',
      node: 'n1',
      containers: [{ name: 'c', state: o.phase === undefined || o.phase === 'Running' ? 'running' : 'waiting', restarts: 0 }],
      ...(conditions ? { conditions } : {}),
      ...(o.ip === undefined ? {} : { network: { ipv6: o.ip } }),
    },
  }
}
const web = {
  metadata: { name: 'web', namespace: 'shop' },
  spec: {
    selector: { app: 'web' },
    ports: [
      { name: 'http', port: 80, targetPort: 'http' },
      { name: 'admin', port: 9000 },
    ],
  },
}

test('endpoints: the ready pods the selector matches, with named target ports resolved per pod; the rest marked with why', () => {
  const pods = [
    pod('web-1', { ip: ip(1) }),
    pod('web-2', { ip: ip(2), ready: false }),
    pod('web-3', { phase: 'Pending' }),
    pod('web-4', { ip: ip(4), ports: [{ containerPort: 80 }] }),
    pod('other', { ip: ip(5), labels: { app: 'db' } }),
    pod('web-x', { ns: 'elsewhere', ip: ip(6) }),
  ]
  const eps = serviceEndpoints(web as never, pods as never)
  assert.deepEqual(
    eps.endpoints.map((e) => [e.pod, e.ready, e.reason ?? '', e.ports.map((p) => `${p.name}:${p.targetPort}`).join(','), e.unresolved.join(',')]),
    [
      ['web-1', true, '', 'http:8080,admin:9000', ''],
      ['web-4', true, '', 'admin:9000', 'http'],
      ['web-2', false, 'Ready False: ReadinessProbeFailed', 'http:8080,admin:9000', ''],
      ['web-3', false, 'phase Pending', 'http:8080,admin:9000', ''],
    ],
  )
  // A selector matching nothing: no endpoints, no error.
  assert.deepEqual(serviceEndpoints({ ...web, spec: { ...web.spec, selector: { app: 'nope' } } } as never, pods as never).endpoints, [])
})

function ask(
  name: string,
  type: dnsPacket.RecordType | 'ANY',
  o: { zone?: ReturnType<typeof buildZone>; edns?: boolean; transport?: 'udp' | 'tcp'; recursion?: boolean } = {},
) {
  const zone =
    o.zone ??
    buildZone({ domain: 'cluster.local', services: [web as never], pods: [pod('web-1', { ip: ip(1) }), pod('web-2', { ip: ip(2), ready: false })] as never })
  const q = dnsPacket.encode({
    type: 'query',
    id: 4242,
    flags: dnsPacket.RECURSION_DESIRED,
    questions: [{ type: type as dnsPacket.RecordType, name }],
    ...(o.edns
      ? { additionals: [{ type: 'OPT', name: '.', udpPayloadSize: 4096, extendedRcode: 0, ednsVersion: 0, flags: 0, flag_do: false, options: [] }] }
      : {}),
  })
  const out = answerQuery(q, { zone, cluster, ttl: 3, transport: o.transport ?? 'udp', recursion: o.recursion ?? true })
  if (out.action !== 'answer') return out
  return { ...out, packet: dnsPacket.decode(out.response) }
}

test('answers: service AAAA (ready pods only), SRV per named port, pod names, PTR of pod addresses; TTL 3 s', () => {
  const a = ask('web.shop.svc.cluster.local', 'AAAA') as { packet: dnsPacket.DecodedPacket; rcode: string }
  assert.equal(a.rcode, 'NOERROR')
  assert.equal(a.packet.id, 4242)
  assert.ok(a.packet.flag_aa)
  assert.deepEqual(
    a.packet.answers!.map((x) => [x.type, (x as { data: unknown }).data, (x as { ttl?: number }).ttl]),
    [['AAAA', ip(1), 3]],
  )
  const srv = ask('_http._tcp.web.shop.svc.cluster.local', 'SRV') as { packet: dnsPacket.DecodedPacket }
  assert.deepEqual(
    srv.packet.answers!.map((x) => (x as dnsPacket.SrvAnswer).data),
    [{ priority: 0, weight: 100, port: 8080, target: 'web-1.shop.pod.cluster.local' }],
  )
  assert.deepEqual(
    srv.packet.additionals!.map((x) => (x as { data: unknown }).data),
    [ip(1)],
  )
  const p = ask('web-2.shop.pod.cluster.local', 'AAAA') as { packet: dnsPacket.DecodedPacket }
  assert.deepEqual(
    p.packet.answers!.map((x) => (x as { data: unknown }).data),
    [ip(2)],
  )
  const ptr = ask(reverseName(ip(1)), 'PTR') as { packet: dnsPacket.DecodedPacket }
  assert.deepEqual(
    ptr.packet.answers!.map((x) => (x as { data: unknown }).data),
    ['web-1.shop.pod.cluster.local'],
  )
  // Case does not matter; the question is echoed as asked.
  assert.equal((ask('WEB.Shop.svc.cluster.local', 'AAAA') as { packet: dnsPacket.DecodedPacket }).packet.answers!.length, 1)
})

test('ClusterIP: where the node load-balances, the service answers its virtual address, SRV names the service on its own port, the address reverses to it; Headless and unbalanced answer the pods', () => {
  const pods = [pod('web-1', { ip: ip(1) }), pod('web-2', { ip: ip(2) })]
  const headless = { ...web, metadata: { name: 'db', namespace: 'shop' }, spec: { ...web.spec, type: 'Headless' } }
  const zone = buildZone({
    domain: 'cluster.local',
    services: [web, headless] as never,
    pods: pods as never,
    virtualAddress: (svc) => serviceVirtualAddress(svc, cluster),
  })
  const vip = serviceVirtualAddress(web as never, cluster)!
  assert.ok(vip.startsWith(`${base}:0:1:`), vip)
  const data = (name: string, type: dnsPacket.RecordType) =>
    ((ask(name, type, { zone }) as { packet: dnsPacket.DecodedPacket }).packet.answers ?? []).map((x) => (x as { data: unknown }).data)
  assert.deepEqual(data('web.shop.svc.cluster.local', 'AAAA'), [vip])
  assert.deepEqual(data('_http._tcp.web.shop.svc.cluster.local', 'SRV'), [{ priority: 0, weight: 100, port: 80, target: 'web.shop.svc.cluster.local' }])
  assert.deepEqual(data(reverseName(vip), 'PTR'), ['web.shop.svc.cluster.local'])
  assert.deepEqual(data('db.shop.svc.cluster.local', 'AAAA').sort(), [ip(1), ip(2)], 'Headless: the pods')
  const unbalanced = buildZone({ domain: 'cluster.local', services: [web] as never, pods: pods as never })
  assert.deepEqual(((ask('web.shop.svc.cluster.local', 'AAAA', { zone: unbalanced }) as { packet: dnsPacket.DecodedPacket }).packet.answers ?? []).length, 2)
})

test('answer cache: a repeated query gets the cached answer under its own id; a new zone is answered afresh', () => {
  let zone = buildZone({ domain: 'cluster.local', services: [web] as never, pods: [pod('web-1', { ip: ip(1) })] as never })
  const server = new DnsServer(
    { clock: systemClock, random: systemRandom, logger: pino({ level: 'silent' }) },
    { zone: () => zone, upstreams: [], ttl: 3, rateLimit: { perSecond: 1e9, burst: 1e9 }, upstreamTimeoutMs: 1000 },
  )
  const ask1 = (id: number, name = 'web.shop.svc.cluster.local') => {
    const q = dnsPacket.encode({ type: 'query', id, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'AAAA', name }] })
    let out: Buffer | undefined
    server.handle(q, '::1', 'udp', (b) => (out = b))
    const p = dnsPacket.decode(out!)
    return { id: p.id, data: (p.answers ?? []).map((a) => (a as { data: unknown }).data) }
  }
  assert.deepEqual(ask1(1), { id: 1, data: [ip(1)] })
  assert.deepEqual(ask1(2), { id: 2, data: [ip(1)] }, 'cached, with the new id')
  assert.deepEqual(ask1(3, 'WEB.shop.svc.cluster.local'), { id: 3, data: [ip(1)] }, 'another spelling is its own entry')
  zone = buildZone({ domain: 'cluster.local', services: [web] as never, pods: [pod('web-2', { ip: ip(2) })] as never })
  assert.deepEqual(ask1(4), { id: 4, data: [ip(2)] }, 'a new zone is not answered from the old one')
  assert.equal(server.stats.answered, 4)
})

test('negative answers: NXDOMAIN for unknown names under the domain and in the cluster reverse zone, NODATA for names that exist; SOA for caching', () => {
  const nx = ask('nope.shop.svc.cluster.local', 'AAAA') as { packet: dnsPacket.DecodedPacket; rcode: string }
  assert.equal(nx.rcode, 'NXDOMAIN')
  assert.equal(nx.packet.authorities![0]!.type, 'SOA')
  assert.equal((nx.packet.authorities![0] as dnsPacket.SoaAnswer).data.minimum, 3)
  assert.equal((ask(reverseName(ip(99)), 'PTR') as { rcode: string }).rcode, 'NXDOMAIN')
  // An A query for a service (IPv6 only): the name exists, no records.
  const nodata = ask('web.shop.svc.cluster.local', 'A') as { packet: dnsPacket.DecodedPacket; rcode: string }
  assert.equal(nodata.rcode, 'NOERROR')
  assert.equal(nodata.packet.answers!.length, 0)
  assert.equal((ask('shop.svc.cluster.local', 'AAAA') as { rcode: string }).rcode, 'NOERROR')
  // A service whose selector matches nothing still exists: NODATA, not NXDOMAIN.
  const lonely = buildZone({ domain: 'cluster.local', services: [{ ...web, spec: { selector: { app: 'none' } } }] as never, pods: [] })
  const l = ask('web.shop.svc.cluster.local', 'AAAA', { zone: lonely }) as { packet: dnsPacket.DecodedPacket; rcode: string }
  assert.equal(l.rcode, 'NOERROR')
  assert.equal(l.packet.answers!.length, 0)
})

test('names outside the domain are forwarded; without upstreams SERVFAIL; reverse names outside the cluster /48 forwarded', () => {
  assert.deepEqual(ask('example.com', 'A'), { action: 'forward', id: 4242, name: 'example.com' })
  assert.equal((ask('example.com', 'A', { recursion: false }) as { rcode: string }).rcode, 'SERVFAIL')
  assert.equal((ask(reverseName('2001:db8::1'), 'PTR') as { action: string }).action, 'forward')
})

test('bad queries: short packets and responses dropped, garbage after a header FORMERR, oversized FORMERR, two questions FORMERR, other opcodes NOTIMP', () => {
  const zone = buildZone({ domain: 'cluster.local', services: [], pods: [] })
  const o = { zone, cluster, ttl: 3, transport: 'udp' as const, recursion: true }
  assert.equal(answerQuery(Buffer.alloc(5), o).action, 'drop')
  const resp = Buffer.alloc(12)
  resp.writeUInt16BE(0x8000, 2)
  assert.equal(answerQuery(resp, o).action, 'drop')
  const garbage = Buffer.concat([Buffer.from([0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0]), Buffer.from([0xff, 0xff, 0xff])])
  const g = answerQuery(garbage, o)
  assert.equal(g.action === 'answer' && g.rcode, 'FORMERR')
  assert.equal(g.action === 'answer' && g.response.readUInt16BE(0), 0x1234)
  const big = Buffer.concat([garbage.subarray(0, 12), Buffer.alloc(MAX_QUERY_BYTES)])
  assert.equal((answerQuery(big, o) as { rcode?: string }).rcode, 'FORMERR')
  const two = dnsPacket.encode({
    type: 'query',
    id: 1,
    questions: [
      { type: 'A', name: 'a.cluster.local' },
      { type: 'A', name: 'b.cluster.local' },
    ],
  })
  assert.equal((answerQuery(two, o) as { rcode?: string }).rcode, 'FORMERR')
  const notify = Buffer.from(dnsPacket.encode({ type: 'query', id: 1, questions: [{ type: 'A', name: 'a.cluster.local' }] }))
  notify.writeUInt16BE(4 << 11, 2)
  assert.equal((answerQuery(notify, o) as { rcode?: string }).rcode, 'NOTIMP')
})

test('an answer too big for UDP is truncated (TC) so the client retries over TCP, where it is whole', () => {
  const pods = Array.from({ length: 60 }, (_, i) => pod(`web-${i}`, { ip: ip(i + 1) }))
  const zone = buildZone({ domain: 'cluster.local', services: [web as never], pods: pods as never })
  const u = ask('web.shop.svc.cluster.local', 'AAAA', { zone }) as { packet: dnsPacket.DecodedPacket; response: Buffer }
  assert.ok(u.packet.flag_tc)
  assert.equal(u.packet.answers!.length, 0)
  const t = ask('web.shop.svc.cluster.local', 'AAAA', { zone, transport: 'tcp' }) as { packet: dnsPacket.DecodedPacket }
  assert.equal(t.packet.answers!.length, 60)
  const e = ask('web.shop.svc.cluster.local', 'AAAA', { zone, edns: true }) as { packet: dnsPacket.DecodedPacket; response: Buffer }
  assert.ok(e.response.length <= 1232)
})

test('fuzz: random bytes and mutated queries never make the decoder path throw; every answer keeps the query id', () => {
  const zone = buildZone({ domain: 'cluster.local', services: [web as never], pods: [pod('web-1', { ip: ip(1) })] as never })
  const good = dnsPacket.encode({ type: 'query', id: 7, questions: [{ type: 'SRV', name: '_http._tcp.web.shop.svc.cluster.local' }] })
  const bytes = fc.oneof(
    fc.uint8Array({ minLength: 0, maxLength: 1400 }),
    fc.tuple(fc.array(fc.tuple(fc.nat(good.length - 1), fc.integer({ min: 0, max: 255 })), { maxLength: 8 }), fc.nat(good.length)).map(([edits, cut]) => {
      const b = Buffer.from(good)
      for (const [i, v] of edits) b[i] = v
      return new Uint8Array(b.subarray(0, Math.max(cut, 12)))
    }),
  )
  fc.assert(
    fc.property(bytes, fc.constantFrom('udp', 'tcp'), (raw, transport) => {
      const b = Buffer.from(raw)
      const out = answerQuery(b, { zone, cluster, ttl: 3, transport: transport as 'udp' | 'tcp', recursion: true })
      if (out.action === 'answer') {
        assert.equal(out.response.readUInt16BE(0), b.readUInt16BE(0))
        assert.ok(out.response.readUInt16BE(2) & 0x8000, 'a response')
      }
    }),
    { numRuns: 3000, seed: 20261204 },
  )
})

test('rate limit: a burst, then the refill rate; each source on its own', () => {
  let now = 0
  const rl = new RateLimiter(10, 20, () => now)
  let ok = 0
  for (let i = 0; i < 100; i++) if (rl.allow('a')) ok++
  assert.equal(ok, 20)
  assert.ok(rl.allow('b'))
  now += 1000
  ok = 0
  for (let i = 0; i < 100; i++) if (rl.allow('a')) ok++
  assert.equal(ok, 10)
})

test('pod files: resolv.conf names the cluster resolver and the namespace search path; hosts its own name and address', () => {
  const ns = formatIPv6(clusterDnsAddress(cluster))
  assert.ok(ns.endsWith('::53') && ns.startsWith(base))
  const f = podDnsFiles({ nameserver: ns, domain: 'cluster.local', namespace: 'shop', pod: 'web-1', address: ip(1) })
  assert.match(f.resolvConf, new RegExp(`^nameserver ${ns}$`, 'm'))
  assert.match(f.resolvConf, /^search shop\.svc\.cluster\.local svc\.cluster\.local cluster\.local$/m)
  assert.match(f.hosts, new RegExp(`^${ip(1)}\tweb-1\\.shop\\.pod\\.cluster\\.local web-1$`, 'm'))
  assert.deepEqual(
    upstreamsFromResolvConf('# x\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\nnameserver bogus\nsearch a\nnameserver ::53\n', new Set(['::53'])),
    [
      { host: '10.0.0.2', port: 53 },
      { host: 'fe80::1%eth0', port: 53 },
    ],
  )
})
