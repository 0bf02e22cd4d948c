/**
 * The node network with federated routes, on fake drivers: what WireGuard is told when another
 * cluster's node runs a shared pod and this node runs one too, what `orc get routes` reports, and
 * that the peer goes when the federation does. Also: this node's pod addresses are kept in the
 * data dir for the next agent (federation documents open after the node network).
 */

import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { pino } from 'pino'
import { type FederatedScopeInput, type FederationRouteSource, type MeshView, NodeNetwork } from '../../src/agent/network/index.ts'
import { systemClock } from '../../src/effects/index.ts'
import {
  clusterPrefix,
  FakePodNetworkDriver,
  FakeServiceNatDriver,
  FakeWireGuardDriver,
  formatPrefix,
  generateKeyPair,
  nodePrefix,
} from '../../src/net/index.ts'
import type { ObjectStore } from '../../src/store/index.ts'
import { seededBytes, tempStore } from '../helpers/store.ts'
import { waitFor } from '../helpers/wait.ts'

const HOME_ID = 'c0ffee00c0ffee00c0ffee00c0ffee00'
const CLOUD_ID = 'beef0000beef0000beef0000beef0000'

const author = () => ({ author: 'controller:node', reason: 't', now: Date.now() })

/** A node network for node `self` of cluster HOME_ID on fake drivers, started and Ready; `nodes`: other Node objects (name → status) first. */
async function startNetwork(
  t: { after(fn: () => unknown): void },
  o: { wg: FakeWireGuardDriver; addresses: string[]; nodes?: Record<string, Record<string, unknown>> },
): Promise<{ store: ObjectStore; net: NodeNetwork; dataDir: string }> {
  const { store, cleanup } = await tempStore()
  const dataDir = mkdtempSync(join(tmpdir(), 'orc-fednet-'))
  await store.apply({ apiVersion: 'orc/v1', kind: 'Cluster', metadata: { name: 'default' }, spec: { id: HOME_ID } }, author())
  for (const [name, status] of Object.entries({ self: { peerId: 'PSELF' }, ...o.nodes })) {
    await store.apply({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name }, spec: {} }, author())
    await store.patch(
      { kind: 'Node', namespace: '', name },
      Object.entries(status).map(([k, value]) => ({ path: ['status', k], value })),
      author(),
    )
  }
  const mesh: MeshView = {
    peerId: 'PSELF',
    clusterId: HOME_ID,
    addresses: () => o.addresses,
    observedIps: () => new Map(),
    alivePeers: () => new Set(Object.values(o.nodes ?? {}).map((n) => String(n.peerId))),
  }
  const net = new NodeNetwork(
    {
      store,
      nodeName: 'self',
      dataDir,
      logger: pino({ level: 'silent' }),
      clock: systemClock,
      random: seededBytes(9),
      mesh,
      wireguard: () => o.wg,
      podNetwork: () => new FakePodNetworkDriver(seededBytes(3)),
      serviceNat: () => new FakeServiceNatDriver(),
      probe: async () => undefined,
    },
    { mode: 'on', reconcileMs: 60_000, handshakeTimeoutMs: 2000 },
  )
  t.after(async () => {
    await net.stop()
    await cleanup()
    rmSync(dataDir, { recursive: true, force: true })
  })
  await net.start()
  await waitFor('network Ready', async () => ((await net.report()).state === 'Ready' ? true : undefined))
  return { store, net, dataDir }
}

/** Federation lab seen from home: cloud's node c1 (key, /64, endpoints) runs web, this node (self@home) runs client. */
function labScope(o: {
  clientIp: string
  cloudKey: string
  c1Prefix: string
  webIp: string
  endpoints: string[]
  observedIps?: FederatedScopeInput['observedIps']
}): FederatedScopeInput {
  return {
    federation: 'lab',
    cluster: 'home',
    clusters: [
      { metadata: { name: 'home' }, spec: { id: HOME_ID }, status: { nodes: {} } },
      {
        metadata: { name: 'cloud' },
        spec: { id: CLOUD_ID },
        status: { nodes: { c1: { ready: true, network: { publicKey: o.cloudKey, prefix: o.c1Prefix, endpoints: o.endpoints } } } },
      },
    ],
    pods: [
      { metadata: { namespace: 'shared', name: 'client' }, status: { node: 'self@home', phase: 'Running', network: { ipv6: o.clientIp } } },
      { metadata: { namespace: 'shared', name: 'web' }, status: { node: 'c1@cloud', phase: 'Running', network: { ipv6: o.webIp } } },
    ],
    observedIps: o.observedIps ?? new Map(),
  }
}

test("node network: a peer for the other cluster's node with its federated pods' /128s only, gone with the federation", async (t) => {
  const wg = new FakeWireGuardDriver('wireguard-go')
  const { net, dataDir } = await startNetwork(t, { wg, addresses: ['/ip4/198.18.0.1/tcp/7419'] })
  const mine = await net.attachPod('uid-client')
  assert.equal(mine.mode, 'ipv6')
  const clientIp = (mine as { ipv6: string }).ipv6
  assert.deepEqual(JSON.parse(readFileSync(join(dataDir, 'network-pods.json'), 'utf8')), { 'uid-client': clientIp })

  const cloudKey = generateKeyPair(seededBytes(44)).publicKey
  const c1Prefix = formatPrefix(nodePrefix(clusterPrefix(CLOUD_ID), 0x77))
  const webIp = c1Prefix.replace('::/64', '::5')
  let scopes: FederatedScopeInput[] = [labScope({ clientIp, cloudKey, c1Prefix, webIp, endpoints: ['198.18.0.3:51820'] })]
  const listeners = new Set<() => void>()
  const source: FederationRouteSource = {
    scopes: () => scopes,
    onChange: (l) => {
      listeners.add(l)
      return () => listeners.delete(l)
    },
  }
  net.useFederation(source)
  const peer = await waitFor('the cloud node as a peer', async () => wg.config?.peers.find((p) => p.publicKey === cloudKey))
  assert.deepEqual(peer.allowedIps, [`${webIp}/128`])
  assert.equal(peer.endpoint, '198.18.0.3:51820')
  const report = await net.report()
  assert.deepEqual(
    report.federated?.map((f) => [f.node, f.cluster, f.federations, f.routes, f.nodePrefix, f.path, f.state]),
    [['c1@cloud', 'cloud', ['lab'], [`${webIp}/128`], c1Prefix, 'direct', 'waiting']],
  )
  assert.deepEqual(report.tunnels, [], "the cluster's own tunnel list (and its Ready count) is unchanged")

  // The federation goes (left, or this cluster removed): its peer and routes go with it.
  scopes = []
  for (const l of listeners) l()
  await waitFor('the cloud peer removed', async () => (wg.config?.peers.some((p) => p.publicKey === cloudKey) === false ? true : undefined))
  assert.equal((await net.report()).federated, undefined)
})

test('node network behind NAT: another cluster’s NAT’d node relayed through a public node of this cluster; reach and NAT published', async (t) => {
  // pub: a public member of this cluster (a cluster peer, with a handshake below).
  const pubKey = generateKeyPair(seededBytes(45)).publicKey
  const pubPrefix = formatPrefix(nodePrefix(clusterPrefix(HOME_ID), 0x22))
  // WireGuard as a fake that reports a fresh handshake with pub only.
  const wg = new (class extends FakeWireGuardDriver {
    override async status() {
      const s = await super.status()
      return s && { ...s, peers: s.peers.map((p) => (p.publicKey === pubKey ? { ...p, latestHandshakeMs: Date.now() } : p)) }
    }
  })('wireguard-go')
  // Behind NAT: only a private address.
  const { store, net } = await startNetwork(t, {
    wg,
    addresses: ['/ip4/10.77.0.2/tcp/7419'],
    nodes: { pub: { peerId: 'PPUB', network: { publicKey: pubKey, subnet: 0x22, endpoints: ['198.18.0.1:51820'] } } },
  })
  const clientIp = ((await net.attachPod('uid-client')) as { ipv6: string }).ipv6
  const self = await net.report()
  const awayKey = generateKeyPair(seededBytes(46)).publicKey
  const awayPrefix = formatPrefix(nodePrefix(clusterPrefix(CLOUD_ID), 0x33))
  const webIp = awayPrefix.replace('::/64', '::5')
  const scopes: FederatedScopeInput[] = [
    {
      federation: 'lab',
      cluster: 'home',
      clusters: [
        {
          metadata: { name: 'home' },
          spec: { id: HOME_ID },
          status: {
            nodes: {
              self: { network: { publicKey: self.publicKey, prefix: self.prefix, endpoints: ['10.77.0.2:51820'], reach: [pubPrefix], nat: true } },
              pub: { network: { publicKey: pubKey, prefix: pubPrefix, endpoints: ['198.18.0.1:51820'], reach: [self.prefix] } },
            },
          },
        },
        {
          metadata: { name: 'away' },
          spec: { id: CLOUD_ID },
          status: { nodes: { b1: { network: { publicKey: awayKey, prefix: awayPrefix, endpoints: ['10.78.0.2:51820'], nat: true } } } },
        },
      ],
      pods: [
        { metadata: { namespace: 'shared', name: 'client' }, status: { node: 'self@home', phase: 'Running', network: { ipv6: clientIp } } },
        { metadata: { namespace: 'shared', name: 'web' }, status: { node: 'b1@away', phase: 'Running', network: { ipv6: webIp } } },
      ],
      observedIps: new Map(),
    },
  ]
  net.useFederation({ scopes: () => scopes, onChange: () => () => {} })
  const pubPeer = await waitFor('web relayed on pub’s tunnel', async () =>
    wg.config?.peers.find((p) => p.publicKey === pubKey && p.allowedIps.includes(`${webIp}/128`)),
  )
  assert.deepEqual(pubPeer.allowedIps, [pubPrefix, `${webIp}/128`].sort())
  assert.deepEqual(wg.config?.peers.find((p) => p.publicKey === awayKey)?.allowedIps, [], 'b1’s own tunnel carries nothing')
  const report = await net.report()
  assert.deepEqual(
    report.federated?.map((f) => [f.node, f.path, f.via, f.state, f.direct, f.routes]),
    [['b1@away', 'relayed', 'pub', 'up', 'waiting', [`${webIp}/128`]]],
  )
  // What the node summary is made from: the /64s it has handshakes with, and that it is behind NAT.
  const published = await waitFor('reach and NAT in the Node status', async () => {
    const n = store.get({ kind: 'Node', namespace: '', name: 'self' })?.status?.network as Record<string, unknown> | undefined
    return n?.behindNat === true ? n : undefined
  })
  assert.deepEqual(published.reachPrefixes, [pubPrefix])
})

test("node network: another cluster's peer connected over IPv4 only is dialled over IPv6 on the federation mesh, and the tunnel moves there", async (t) => {
  const wg = new FakeWireGuardDriver('wireguard-go')
  const { net } = await startNetwork(t, { wg, addresses: ['/ip4/198.18.0.1/tcp/7419', '/ip6/2001:db8::1/tcp/7419'] })
  const clientIp = ((await net.attachPod('uid-client')) as { ipv6: string }).ipv6
  const cloudKey = generateKeyPair(seededBytes(45)).publicKey
  const c1Prefix = formatPrefix(nodePrefix(clusterPrefix(CLOUD_ID), 0x78))
  const observedIps = new Map<string, string | string[]>([['c1@cloud', '198.18.0.3']])
  const scope = labScope({
    clientIp,
    cloudKey,
    c1Prefix,
    webIp: c1Prefix.replace('::/64', '::5'),
    endpoints: ['198.18.0.3:51820', '[2001:db8::3]:51820'],
    observedIps,
  })
  const dialled: string[] = []
  net.useFederation({
    scopes: () => [scope],
    onChange: () => () => {},
    connectOver: async (federation, member, ip) => {
      dialled.push(`${federation} ${member} ${ip}`)
      observedIps.set(member, ['198.18.0.3', ip])
      return true
    },
  })
  await waitFor('the cloud peer on its IPv6 endpoint', async () =>
    wg.config?.peers.find((p) => p.publicKey === cloudKey)?.endpoint === '[2001:db8::3]:51820' ? true : undefined,
  )
  assert.deepEqual(dialled, ['lab c1@cloud 2001:db8::3'])
})
