import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import fc from 'fast-check'
import { pino } from 'pino'
import {
  chooseEndpoint,
  decideSubnet,
  endpointsFromMultiaddrs,
  type MeshView,
  meshViewOf,
  NodeNetwork,
  networkNamesFor,
  type PublishedNetwork,
  planPeers,
  readPublishedNetwork,
} from '../../../src/agent/network/index.ts'
import { systemClock } from '../../../src/effects/index.ts'
import {
  addressInPrefix,
  candidateSubnet,
  clusterPrefix,
  FakePodNetworkDriver,
  FakeServiceNatDriver,
  FakeWireGuardDriver,
  formatPrefix,
  generateKeyPair,
  nodePrefix,
  serviceVirtualAddress,
} from '../../../src/net/index.ts'
import { seededBytes, tempStore } from '../../helpers/store.ts'
import { waitFor } from '../../helpers/wait.ts'

const cluster = clusterPrefix('c0ffee00c0ffee00c0ffee00c0ffee00')
const key = (seed: number) => generateKeyPair(seededBytes(seed)).publicKey

function node(peerId: string, subnet: number | undefined, extra: Partial<PublishedNetwork> = {}): PublishedNetwork {
  return {
    name: `n-${peerId}`,
    peerId,
    publicKey: key(peerId.charCodeAt(0)),
    endpoints: [],
    removed: false,
    ...(subnet !== undefined ? { subnet } : {}),
    ...extra,
  }
}

test('subnet collisions: the lowest peer id keeps the subnet, the other moves; removed nodes release theirs', () => {
  const nodes = [node('A', 7), node('B', 7)]
  const a = decideSubnet(cluster, 'A', nodes)
  const b = decideSubnet(cluster, 'B', nodes)
  assert.equal(a.subnet, 7)
  assert.equal(a.claimChanged, false)
  assert.notEqual(b.subnet, 7)
  assert.equal(b.claimChanged, true)
  // Once B re-claims, both agree and nothing changes any more.
  const settled = [node('A', 7), node('B', b.subnet)]
  assert.equal(decideSubnet(cluster, 'B', settled).claimChanged, false)
  // A removed A frees 7: a newcomer whose natural candidate is 7 may take it.
  const removed = [node('A', 7, { removed: true }), node('B', b.subnet)]
  assert.equal(decideSubnet(cluster, 'B', removed).owners.has(7), false)
  // A node with no claim gets its natural candidate.
  assert.equal(decideSubnet(cluster, 'Z', []).subnet, candidateSubnet('Z', 0) || candidateSubnet('Z', 1))
})

test('peers: every other live node owning its subnet, allowed-ips its /64, endpoint by what libp2p observes', () => {
  const nodes = [
    node('A', 10, { endpoints: ['198.18.0.1:51820'] }),
    node('B', 11, { endpoints: ['198.18.0.2:51820', '[fd00::2]:51820'] }),
    node('C', 11, { endpoints: ['10.0.0.3:51820'] }), // lost the collision on 11 to B
    node('D', 12, { endpoints: ['10.77.0.2:51820'] }), // behind NAT: seen from the router's address
    node('E', 13, { removed: true, endpoints: ['198.18.0.5:51820'] }),
    node('F', 14, { endpoints: [] }),
  ]
  const { owners } = decideSubnet(cluster, 'A', nodes)
  const observed = new Map([
    ['B', 'fd00::2'],
    ['D', '198.18.0.200'],
  ])
  const peers = planPeers(cluster, 'A', nodes, owners, observed)
  assert.deepEqual(
    peers.map((p) => [p.name, p.prefix, p.wg.endpoint, p.path]),
    [
      ['n-B', formatPrefix(nodePrefix(cluster, 11)), '[fd00::2]:51820', 'direct'],
      ['n-D', formatPrefix(nodePrefix(cluster, 12)), undefined, 'peer-dials'],
      ['n-F', formatPrefix(nodePrefix(cluster, 14)), undefined, 'unknown'],
    ],
  )
  assert.ok(peers.every((p) => p.wg.allowedIps.length === 1 && p.wg.persistentKeepalive === 25))
  assert.deepEqual(chooseEndpoint(['198.18.0.2:51820'], undefined), { endpoint: '198.18.0.2:51820', path: 'direct' })
  // Connections to a published IPv4 and a published IPv6 address: the IPv6 one.
  assert.deepEqual(chooseEndpoint(['198.18.0.2:51820', '[2001:db8::2]:51820'], ['198.18.0.2', '2001:db8::2']), {
    endpoint: '[2001:db8::2]:51820',
    path: 'direct',
  })
  assert.deepEqual(chooseEndpoint(['198.18.0.2:51820', '[2001:db8::2]:51820'], ['198.18.0.2']), { endpoint: '198.18.0.2:51820', path: 'direct' })
  assert.deepEqual(chooseEndpoint(['10.0.0.2:51820', '[2001:db8::2]:51820'], ['198.18.0.99', '2001:db8::77']), { path: 'peer-dials' })
})

test('the mesh view lists every open connection of a peer (both families), closed ones not', () => {
  const conn = (peer: string, addr: string, status = 'open') => ({ status, remotePeer: { toString: () => peer }, remoteAddr: { toString: () => addr } })
  const view = meshViewOf({
    peerId: 'P0',
    clusterId: 'c',
    libp2p: {
      getConnections: () => [
        conn('P1', '/ip4/198.18.0.2/tcp/7419'),
        conn('P1', '/ip6/2001:db8::2/tcp/7419'),
        conn('P1', '/ip6/2001:db8::2/tcp/7420'),
        conn('P2', '/ip4/198.18.0.3/tcp/7419', 'closing'),
        conn('P3', '/dns4/example.org/tcp/7419'),
      ],
    },
  } as any)
  assert.deepEqual([...view.observedIps()], [['P1', ['198.18.0.2', '2001:db8::2']]])
})

test('endpoints come from concrete listen addresses, never wildcards or link-local', () => {
  assert.deepEqual(
    endpointsFromMultiaddrs(
      ['/ip4/198.18.0.1/tcp/7419', '/ip4/0.0.0.0/tcp/7419', '/ip6/fe80::1/tcp/7419', '/ip6/fd00::1/tcp/7419', '/ip4/198.18.0.1/tcp/7420'],
      51820,
    ),
    ['198.18.0.1:51820', '[fd00::1]:51820'],
  )
})

test('names are unique per node and fit Linux limits', () => {
  const a = networkNamesFor('12D3KooWA')
  const b = networkNamesFor('12D3KooWB')
  assert.notEqual(a.iface, b.iface)
  assert.ok(a.iface.length <= 15 && a.vethPrefix.length + 8 <= 15)
})

test('a peer publishing garbage in its Node status is skipped, never throws', () => {
  fc.assert(
    fc.property(fc.anything(), fc.anything(), (network, peerId) => {
      const obj = { apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'x' }, status: { peerId, network } } as any
      const p = readPublishedNetwork(obj, new Set())
      if (p === undefined) return
      assert.ok(p.endpoints.length <= 16)
      if (p.subnet !== undefined) assert.ok(p.subnet > 0 && p.subnet < 0x10000)
    }),
    { seed: 42, numRuns: 500 },
  )
  const good = readPublishedNetwork(
    {
      apiVersion: 'orc/v1',
      kind: 'Node',
      metadata: { name: 'x' },
      status: { peerId: 'P', network: { publicKey: 'nope', subnet: 70000, endpoints: ['evil.example:1', '1.2.3.4:5', 3] } },
    } as any,
    new Set(),
  )!
  assert.deepEqual([good.publicKey, good.subnet, good.endpoints], [undefined, undefined, ['1.2.3.4:5']])
})

// ---- the controller, with fake drivers ----

async function setup(
  t: { after(fn: () => Promise<void> | void): void },
  opts: {
    mode?: 'auto' | 'on' | 'off'
    probe?: string
    observed?: Record<string, string | string[]>
    addresses?: string[]
    connectOver?: MeshView['connectOver']
  } = {},
) {
  const { store, cleanup } = await tempStore()
  const dataDir = mkdtempSync(join(tmpdir(), 'orc-net-'))
  const now = () => Date.now()
  const author = { author: 'controller:node', reason: 't', now: now() }
  await store.apply({ apiVersion: 'orc/v1', kind: 'Cluster', metadata: { name: 'default' }, spec: { id: 'c0ffee00c0ffee00c0ffee00c0ffee00' } }, author)
  await store.apply({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'self' }, spec: {} }, author)
  await store.patch({ kind: 'Node', namespace: '', name: 'self' }, [{ path: ['status', 'peerId'], value: 'PSELF' }], author)
  const peerKey = generateKeyPair(seededBytes(7)).publicKey
  await store.apply({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'peer' }, spec: {} }, author)
  await store.patch(
    { kind: 'Node', namespace: '', name: 'peer' },
    [
      { path: ['status', 'peerId'], value: 'PPEER' },
      { path: ['status', 'network'], value: { publicKey: peerKey, subnet: 0x4242, endpoints: ['127.0.0.1:51999'] } },
    ],
    author,
  )
  const wg = new FakeWireGuardDriver('wireguard-go')
  const pods = new FakePodNetworkDriver(seededBytes(3))
  const svcnat = new FakeServiceNatDriver()
  const alive = new Set<string>()
  const mesh: MeshView = {
    peerId: 'PSELF',
    clusterId: 'c0ffee00c0ffee00c0ffee00c0ffee00',
    addresses: () => opts.addresses ?? ['/ip4/127.0.0.1/tcp/7419'],
    observedIps: () => new Map(Object.entries(opts.observed ?? {})),
    ...(opts.connectOver ? { connectOver: opts.connectOver } : {}),
    alivePeers: () => alive,
  }
  const net = new NodeNetwork(
    {
      store,
      nodeName: 'self',
      dataDir,
      logger: pino({ level: process.env.DBG ? 'debug' : 'silent' }),
      clock: { ...systemClock, now },
      random: seededBytes(9),
      mesh,
      wireguard: () => wg,
      podNetwork: () => pods,
      serviceNat: () => svcnat,
      probe: async () => opts.probe,
    },
    { mode: opts.mode ?? 'auto', reconcileMs: 100, handshakeTimeoutMs: 2000 },
  )
  t.after(async () => {
    await net.stop()
    await cleanup()
    rmSync(dataDir, { recursive: true, force: true })
  })
  const status = () => store.get({ kind: 'Node', namespace: '', name: 'self' })!.status as any
  return { store, net, wg, pods, svcnat, alive, status, dataDir, peerKey, author }
}

test('node network: key in the data dir, /64 claimed, peer tunnel, Ready; a removed node is withdrawn', async (t) => {
  const s = await setup(t)
  await s.net.start()
  await waitFor('node Ready', () => s.status().state === 'Ready' && s.status().network?.state === 'Ready')
  const st = s.status()
  assert.equal(statSync(join(s.dataDir, 'wireguard.key')).mode & 0o777, 0o600)
  assert.equal(st.network.publicKey, (await s.wg.status())!.publicKey)
  assert.equal(st.network.prefix, formatPrefix(nodePrefix(clusterPrefix('c0ffee00c0ffee00c0ffee00c0ffee00'), st.network.subnet)))
  assert.deepEqual(st.network.endpoints, ['127.0.0.1:51820'])
  assert.deepEqual(
    s.wg.config!.peers.map((p) => [p.publicKey, p.allowedIps, p.endpoint]),
    [[s.peerKey, [formatPrefix(nodePrefix(clusterPrefix('c0ffee00c0ffee00c0ffee00c0ffee00'), 0x4242))], '127.0.0.1:51999']],
  )
  assert.deepEqual(JSON.parse(readFileSync(join(s.dataDir, 'network.json'), 'utf8')).iface, networkNamesFor('PSELF').iface)
  assert.ok(st.workflow.units.some((u: any) => u.name === 'tunnels' && u.state === 'done'))

  // A pod gets an address in the node's /64, kept when asked again with it as the hint.
  const a = await s.net.attachPod('uid1')
  assert.equal(a.mode, 'ipv6')
  assert.ok(a.mode === 'ipv6' && addressInPrefix(a.ipv6, nodePrefix(clusterPrefix('c0ffee00c0ffee00c0ffee00c0ffee00'), st.network.subnet)))
  const again = await s.net.attachPod('uid1', a.mode === 'ipv6' ? a.ipv6 : undefined)
  assert.deepEqual(again, a)
  assert.equal(s.pods.pods.size, 1)
  await s.net.detachPod('uid1')
  assert.equal(s.pods.pods.size, 0)

  // Drift: the interface vanishes (deleted by hand) and comes back on the next tick.
  await s.wg.down()
  await waitFor('interface restored', () => s.wg.config !== undefined)

  // orc node remove: the peer and its route go.
  await s.store.patch({ kind: 'Cluster', namespace: '', name: 'default' }, [{ path: ['status', 'removedPeers', 'PPEER'], value: { name: 'peer' } }], {
    ...s.author,
    author: 'controller:cluster',
  })
  await waitFor('peer withdrawn', () => s.wg.config?.peers.length === 0)
  const report = await s.net.report()
  assert.equal(report.tunnels.length, 0)
})

test('node network: an alive peer without a handshake holds the node NotReady, and why says so', async (t) => {
  const s = await setup(t)
  s.alive.add('PPEER')
  await s.net.start()
  await waitFor('tunnels unit failed', () => s.status().network?.state === 'Degraded', 15_000)
  assert.equal(s.status().state, 'NotReady')
  assert.match(s.status().network.reason, /tunnels/)
  const units = s.status().workflow.units as any[]
  assert.match(JSON.stringify(units.find((u) => u.name === 'tunnels')), /no handshake yet from peer/)
})

test('node network: a peer that must dial this node and never gets through marks it firewalled; one handshake clears it', async (t) => {
  // The peer's mesh connection comes from an address it does not publish: it is behind NAT and dials us.
  const s = await setup(t, { observed: { PPEER: '127.0.0.9' } })
  s.alive.add('PPEER')
  await s.net.start()
  await waitFor('peer waited for', () => s.wg.config?.peers.some((p) => p.publicKey === s.peerKey && p.endpoint === undefined) === true)
  assert.notEqual(s.status().network?.firewalled, true, 'not before the handshake timeout (2 s here)')
  await waitFor('firewalled published', () => s.status().network?.firewalled === true, 15_000)
  s.wg.handshakes.set(s.peerKey, Date.now())
  await waitFor('firewalled cleared by a handshake', () => s.status().network?.state !== undefined && s.status().network.firewalled === undefined, 15_000)
})

test('node network: a peer connected over IPv4 only is dialled over its IPv6 address, and the tunnel moves there', async (t) => {
  const observed: Record<string, string | string[]> = { PPEER: '198.18.0.2' }
  const dialled: string[] = []
  const s = await setup(t, {
    observed,
    addresses: ['/ip4/198.18.0.1/tcp/7419', '/ip6/2001:db8::1/tcp/7419'],
    connectOver: async (peer, ip) => {
      dialled.push(`${peer} ${ip}`)
      observed.PPEER = ['198.18.0.2', ip] // the mesh now has a connection over IPv6 too
      return true
    },
  })
  await s.store.patch(
    { kind: 'Node', namespace: '', name: 'peer' },
    [{ path: ['status', 'network', 'endpoints'], value: ['198.18.0.2:51999', '[2001:db8::2]:51999'] }],
    s.author,
  )
  await s.net.start()
  await waitFor('tunnel on the IPv6 endpoint', () => s.wg.config?.peers.find((p) => p.publicKey === s.peerKey)?.endpoint === '[2001:db8::2]:51999', 15_000)
  assert.deepEqual(dialled, ['PPEER 2001:db8::2'], 'one attempt')
})

test('node network unavailable (auto): loopback pods, Ready, reason in the status; `on` refuses to start', async (t) => {
  const s = await setup(t, { probe: 'pod networking needs a root agent' })
  await s.net.start()
  await waitFor('status written', () => s.status().network?.state === 'Unavailable')
  assert.match(s.status().network.reason, /needs a root agent/)
  assert.deepEqual(await s.net.attachPod('u'), { mode: 'loopback', reason: s.status().network.reason })
  const s2 = await setup(t, { mode: 'on', probe: 'pod networking needs a root agent' })
  await assert.rejects(s2.net.start(), /--network on: pod networking needs a root agent/)
  const s3 = await setup(t, { mode: 'off' })
  await s3.net.start()
  assert.equal((await s3.net.attachPod('u')).mode, 'loopback')
})

test('node network: a ClusterIP service is load-balanced to its ready pods only, re-planned as pods change; Headless gets no address', async (t) => {
  const s = await setup(t)
  await s.net.start()
  await waitFor('node Ready', () => s.status().state === 'Ready')
  const user = { author: 'user:admin', reason: 't', now: Date.now() }
  await s.store.apply(
    { apiVersion: 'orc/v1', kind: 'Service', metadata: { name: 'web' }, spec: { selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080 }] } },
    user,
  )
  await s.store.apply({ apiVersion: 'orc/v1', kind: 'Service', metadata: { name: 'raw' }, spec: { type: 'Headless', selector: { app: 'web' } } }, user)
  const pod = async (name: string, ipv6: string) => {
    await s.store.apply(
      { apiVersion: 'orc/v1', kind: 'Pod', metadata: { name, labels: { app: 'web' } }, spec: { containers: [{ name: 'c', image: 'busybox' }] } },
      user,
    )
    await s.store.patch(
      { kind: 'Pod', namespace: 'default', name },
      [{ path: ['status'], value: { phase: 'Running', containers: [{ name: 'c', state: 'running' }], network: { ipv6 } } }],
      { ...user, author: 'controller:lifecycle' },
    )
  }
  await pod('web-1', 'fd00::a')
  const vip = serviceVirtualAddress({ metadata: { name: 'web' } }, clusterPrefix('c0ffee00c0ffee00c0ffee00c0ffee00'))
  const backends = () => s.svcnat.config?.services.find((x) => x.address === vip)?.ports[0]?.backends.map((b) => `${b.address}:${b.port}`)
  await waitFor('service planned', () => backends()?.join() === 'fd00::a:8080')
  assert.deepEqual(
    s.svcnat.config!.services.map((x) => x.key),
    ['default/web'],
    'a Headless service has no virtual address',
  )
  await pod('web-2', 'fd00::b')
  await waitFor('second endpoint', () => backends()?.sort().join() === 'fd00::a:8080,fd00::b:8080')
  await s.store.patch({ kind: 'Pod', namespace: 'default', name: 'web-1' }, [{ path: ['status', 'phase'], value: 'Failed' }], {
    ...user,
    author: 'controller:lifecycle',
  })
  await waitFor('failed pod left out', () => backends()?.join() === 'fd00::b:8080')
  assert.equal(s.status().network.services, 'load-balanced')
})
