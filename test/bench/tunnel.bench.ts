/**
 * Tunnel benchmark (root; wireguard-go or kernel WireGuard): two "nodes" as network namespaces
 * joined by a veth underlay, one pod on each. Prints one figure per line:
 *   set_to_first_ping_ms        WireGuardDriver.set on both nodes until the first ping reply
 *   tcp_underlay_veth_MBps      TCP node→node over the bare veth (IPv4 underlay)
 *   tcp_pod_to_pod_tunnel_MBps  TCP pod→pod over WireGuard (IPv6, through both nodes' routing)
 *   tunnel_to_veth_ratio        the two throughputs divided
 * Usage: node --import tsx test/bench/tunnel.bench.ts [MiB per transfer, default 64]
 */
import '../../src/polyfill.ts'
import { execa } from 'execa'
import {
  chooseNodeSubnet,
  clusterPrefix,
  formatPrefix,
  generateKeyPair,
  NetnsPodNetworkDriver,
  nodeGateway,
  randomPodAddress,
  WireGuardLinkDriver,
} from '../../src/net/index.ts'
import {
  addNetns,
  delNetns,
  linkNetns,
  missingPrerequisite,
  pingOnce,
  runSuffix,
  seededRandom,
  startTcpServer,
  type TcpServer,
  tcpRequest,
} from '../net/netns.ts'

const mib = Number(process.argv[2] ?? 64)
const missing = missingPrerequisite(['ip', 'wg', 'wireguard-go', 'nft', 'sysctl'])
if (missing) {
  console.error(`skipped: ${missing}`)
  process.exit(0)
}

const s = runSuffix()
const nsA = `orcb-${s}-a`
const nsB = `orcb-${s}-b`
const random = seededRandom(42)
const wgA = new WireGuardLinkDriver({}, { netns: nsA })
const wgB = new WireGuardLinkDriver({}, { netns: nsB })
const podsA = new NetnsPodNetworkDriver({}, { netns: nsA, podNetnsPrefix: `orcb-${s}-pa-`, random })
const podsB = new NetnsPodNetworkDriver({}, { netns: nsB, podNetnsPrefix: `orcb-${s}-pb-`, random })
const servers: TcpServer[] = []

async function throughput(fromNs: string, host: string, port: number): Promise<number> {
  let best = 0
  for (let i = 0; i < 3; i++) {
    const bytes = mib * 1024 * 1024
    const r = await tcpRequest(fromNs, host, port, bytes)
    if (Number(r.reply) !== bytes) throw new Error(`sink got ${r.reply} of ${bytes} bytes`)
    best = Math.max(best, bytes / 1e6 / (Number(r.ns) / 1e9))
  }
  return best
}

try {
  await addNetns(nsA)
  await addNetns(nsB)
  await linkNetns({ ns: nsA, dev: `u${s}a`, addr: '198.18.0.1/30' }, { ns: nsB, dev: `u${s}b`, addr: '198.18.0.2/30' })
  const cluster = clusterPrefix(`bench-${s}`)
  const a = chooseNodeSubnet(cluster, 'peer-a', new Map())
  const b = chooseNodeSubnet(cluster, 'peer-b', new Map([[a.subnet, 'peer-a']]))
  const kA = generateKeyPair()
  const kB = generateKeyPair()

  const t0 = process.hrtime.bigint()
  await Promise.all([
    wgA.set({
      iface: `wgb${s}a`,
      privateKey: kA.privateKey,
      listenPort: 51820,
      address: `${nodeGateway(a.prefix)}/64`,
      peers: [{ publicKey: kB.publicKey, endpoint: '198.18.0.2:51820', allowedIps: [formatPrefix(b.prefix)] }],
    }),
    wgB.set({
      iface: `wgb${s}b`,
      privateKey: kB.privateKey,
      listenPort: 51820,
      address: `${nodeGateway(b.prefix)}/64`,
      peers: [{ publicKey: kA.publicKey, endpoint: '198.18.0.1:51820', allowedIps: [formatPrefix(a.prefix)] }],
    }),
  ])
  const deadline = Date.now() + 10_000
  while (!(await pingOnce(nsA, nodeGateway(b.prefix)))) if (Date.now() > deadline) throw new Error('no ping through the tunnel')
  console.log(`set_to_first_ping_ms ${(Number(process.hrtime.bigint() - t0) / 1e6).toFixed(1)}`)

  const webIp = randomPodAddress(a.prefix, random)
  const dbIp = randomPodAddress(b.prefix, random)
  const web = (await podsA.set({ pods: [{ id: 'web', ipv6: webIp }] })).pods[0]!
  const db = (await podsB.set({ pods: [{ id: 'db', ipv6: dbIp }] })).pods[0]!

  servers.push(await startTcpServer(nsB, '198.18.0.2', 7100, 'sink'))
  servers.push(await startTcpServer(db.netns, dbIp, 7101, 'sink'))
  const veth = await throughput(nsA, '198.18.0.2', 7100)
  const tunnel = await throughput(web.netns, dbIp, 7101)
  console.log(`tcp_underlay_veth_MBps ${veth.toFixed(1)}`)
  console.log(`tcp_pod_to_pod_tunnel_MBps ${tunnel.toFixed(1)}`)
  console.log(`tunnel_to_veth_ratio ${(tunnel / veth).toFixed(3)}`)
  console.log(`wireguard_mode ${wgA.currentMode}`)
} finally {
  for (const srv of servers) await srv.stop().catch(() => {})
  for (const d of [podsA, podsB, wgA, wgB]) await d.down().catch((e) => console.error(String(e)))
  const left = await execa('ip', ['netns', 'list'], { reject: false })
  for (const line of String(left.stdout).split('\n')) {
    const name = line.split(' ')[0]!
    if (name.startsWith(`orcb-${s}-`)) await delNetns(name)
  }
}
