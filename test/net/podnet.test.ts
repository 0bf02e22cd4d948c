import assert from 'node:assert/strict'
import { test } from 'node:test'
import { execa } from 'execa'
import {
  addressInPrefix,
  chooseNodeSubnet,
  clusterPrefix,
  formatPrefix,
  generateKeyPair,
  NetnsPodNetworkDriver,
  nodeGateway,
  randomPodAddress,
  WireGuardLinkDriver,
} from '../../src/net/index.ts'
import { addNetns, delNetns, linkNetns, netTest, sh, startTcpServer, type TcpServer, tcpRequest } from './netns.ts'

test('pods on two nodes talk IPv6 over the tunnel; IPv4 egress is masqueraded', async (t) => {
  const start = netTest(t, ['ip', 'wg', 'wireguard-go', 'nft', 'sysctl'])
  if (start === undefined) return
  const { random, s } = start
  const nsA = `orct-${s}-a`
  const nsB = `orct-${s}-b`
  const nsO = `orct-${s}-o`
  const wgA = new WireGuardLinkDriver({}, { netns: nsA })
  const wgB = new WireGuardLinkDriver({}, { netns: nsB })
  const podPrefix = `orct-${s}-p-`
  // Both nodes share this machine's netns list, so each gets its own pod namespace prefix.
  const podsA = new NetnsPodNetworkDriver({}, { netns: nsA, podNetnsPrefix: `${podPrefix}a-`, random })
  const podsB = new NetnsPodNetworkDriver({}, { netns: nsB, podNetnsPrefix: `${podPrefix}b-`, random })
  const servers: TcpServer[] = []
  t.after(async () => {
    for (const srv of servers) await srv.stop().catch(() => {})
    for (const d of [podsA, podsB, wgA, wgB]) await d.down().catch(() => {})
    const left = await execa('ip', ['netns', 'list'], { reject: false })
    for (const line of String(left.stdout).split('\n')) {
      const name = line.split(' ')[0]!
      if (name.startsWith(podPrefix)) await delNetns(name)
    }
    for (const ns of [nsA, nsB, nsO]) await delNetns(ns)
  })
  for (const ns of [nsA, nsB, nsO]) await addNetns(ns)
  await linkNetns({ ns: nsA, dev: `u${s}a`, addr: '198.18.0.1/30' }, { ns: nsB, dev: `u${s}b`, addr: '198.18.0.2/30' })
  await linkNetns({ ns: nsA, dev: `o${s}a`, addr: '198.18.1.1/30' }, { ns: nsO, dev: `o${s}o`, addr: '198.18.1.2/30' })

  const cluster = clusterPrefix(`test-cluster-${s}`)
  const a = chooseNodeSubnet(cluster, 'peer-a', new Map())
  const b = chooseNodeSubnet(cluster, 'peer-b', new Map([[a.subnet, 'peer-a']]))
  const kA = generateKeyPair()
  const kB = generateKeyPair()
  await wgA.set({
    iface: `wgp${s}a`,
    privateKey: kA.privateKey,
    listenPort: 51820,
    address: `${nodeGateway(a.prefix)}/64`,
    peers: [{ publicKey: kB.publicKey, endpoint: '198.18.0.2:51820', allowedIps: [formatPrefix(b.prefix)] }],
  })
  await wgB.set({
    iface: `wgp${s}b`,
    privateKey: kB.privateKey,
    listenPort: 51820,
    address: `${nodeGateway(b.prefix)}/64`,
    peers: [{ publicKey: kA.publicKey, endpoint: '198.18.0.1:51820', allowedIps: [formatPrefix(a.prefix)] }],
  })

  const webIp = randomPodAddress(a.prefix, random)
  const dbIp = randomPodAddress(b.prefix, random)
  const cfgA = { pods: [{ id: 'web', ipv6: webIp }] }
  const cfgB = { pods: [{ id: 'db', ipv6: dbIp }] }
  const setA = await podsA.set(cfgA)
  const setB = await podsB.set(cfgB)
  assert.equal(setA.changed, true)
  const web = setA.pods[0]!
  const db = setB.pods[0]!
  assert.equal(web.netns, `${podPrefix}a-web`)
  assert.ok(addressInPrefix(web.ipv4, { family: 4, addr: 0x0a580000n, len: 16 }), web.ipv4)
  assert.equal((await podsA.set(cfgA)).changed, false, 'repeat set changes nothing')
  assert.equal((await podsB.set(cfgB)).changed, false)

  // Pod to pod over the tunnel: the server sees the client's own pod address (no NAT in IPv6).
  servers.push(await startTcpServer(db.netns, dbIp, 7000))
  assert.equal((await tcpRequest(web.netns, dbIp, 7000)).reply, webIp)

  // IPv4 egress: the outside sees node A's underlay address, never 10.88.x.
  servers.push(await startTcpServer(nsO, '198.18.1.2', 7001))
  assert.equal((await tcpRequest(web.netns, '198.18.1.2', 7001)).reply, '198.18.1.1')

  // Drift: the node side of the pod's veth removed by hand comes back on the next set.
  await sh('ip', ['-n', nsA, 'link', 'del', web.hostVeth])
  const again = await podsA.set(cfgA)
  assert.equal(again.changed, true)
  assert.equal(again.pods[0]!.ipv4, web.ipv4, 'egress address kept')
  assert.equal((await tcpRequest(web.netns, dbIp, 7000)).reply, webIp)

  // A second pod, then the first removed: its namespace goes, the other keeps working.
  const apiIp = randomPodAddress(a.prefix, random, new Set([webIp]))
  const two = await podsA.set({ pods: [...cfgA.pods, { id: 'api', ipv6: apiIp }] })
  assert.notEqual(two.pods[1]!.ipv4, two.pods[0]!.ipv4)
  await podsA.set({ pods: [{ id: 'api', ipv6: apiIp }] })
  const names = String((await execa('ip', ['netns', 'list'])).stdout)
  assert.ok(!names.includes(web.netns), 'removed pod netns deleted')
  assert.equal((await tcpRequest(`${podPrefix}a-api`, dbIp, 7000)).reply, apiIp)

  assert.equal((await podsA.down()).changed, true)
  const after = String((await execa('ip', ['netns', 'list'])).stdout)
  assert.ok(!after.includes(`${podPrefix}a-`), 'no pod namespaces left after down')
  const nft = await execa('ip', ['netns', 'exec', nsA, 'nft', 'list', 'table', 'ip', 'orc'], { reject: false })
  assert.notEqual(nft.exitCode, 0, 'nat table removed')
})
