/**
 * Service virtual addresses on real nftables (issue #21): a node namespace with real pod namespaces
 * (the pod network driver, host guard included) and the service NAT driver. A client pod and the
 * node itself reach two server pods through the virtual address (port 80 → 8080), both backends
 * answer, the client keeps its own address, a pod reaching itself through its service works
 * (hairpin), an address with no ready endpoint refuses at once, and applying the same state twice
 * changes nothing.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { execa } from 'execa'
import { execaRunner } from '../../src/effects/index.ts'
import {
  chooseNodeSubnet,
  clusterPrefix,
  federationVirtualRange,
  formatPrefix,
  NetnsPodNetworkDriver,
  NftServiceNatDriver,
  nodeGateway,
  randomPodAddress,
  serviceVirtualAddress,
  serviceVirtualRange,
  sharedServiceVirtualAddress,
} from '../../src/net/index.ts'
import { addNetns, delNetns, netTest, sh, startListening, type TcpServer } from './netns.ts'

/** Answers each connection with `<its own address> <the client's address>`. */
const SERVER = `
const net = require('node:net')
const srv = net.createServer((s) => s.end(s.localAddress + ' ' + s.remoteAddress))
srv.listen(Number(process.argv[1]), '::', () => process.stdout.write('listening\\n'))
`
/** UDP: answers each datagram with `<its own address> <the client's address>`. */
const UDP_SERVER = `
const dgram = require('node:dgram')
const s = dgram.createSocket('udp6')
s.on('message', (m, r) => s.send(process.argv[1] + ' ' + r.address, r.port, r.address))
s.bind(Number(process.argv[2]), '::', () => process.stdout.write('listening\\n'))
`
/** UDP: one datagram, prints the answer or `error TIMEOUT` after 3 s. */
const UDP_CLIENT = `
const dgram = require('node:dgram')
const s = dgram.createSocket('udp6')
const t = setTimeout(() => { process.stdout.write('error TIMEOUT'); process.exit(0) }, 3000)
s.on('message', (m) => { clearTimeout(t); process.stdout.write(String(m)); process.exit(0) })
s.send('q', Number(process.argv[2]), process.argv[1])
`
/** Prints what the server said, or `error CODE`. */
const CLIENT = `
const net = require('node:net')
const s = net.connect({ host: process.argv[1], port: Number(process.argv[2]), timeout: 5000 })
let out = ''
s.on('data', (d) => { out += d })
s.on('end', () => { process.stdout.write(out); process.exit(0) })
s.on('timeout', () => { process.stdout.write('error TIMEOUT'); process.exit(0) })
s.on('error', (e) => { process.stdout.write('error ' + e.code); process.exit(0) })
`

async function connect(ns: string | undefined, host: string, port: number): Promise<string> {
  const argv = [process.execPath, '-e', CLIENT, host, String(port)]
  const r = ns === undefined ? await execa(argv[0]!, argv.slice(1), { reject: false }) : await execa('ip', ['netns', 'exec', ns, ...argv], { reject: false })
  return String(r.stdout).trim()
}

test('a ClusterIP address load-balances to ready pods from pods and from the node, hairpin included; no endpoint refuses', async (t) => {
  const start = netTest(t, ['ip', 'nft', 'sysctl'])
  if (start === undefined) return
  const { random, s } = start
  const nsA = `orcv-${s}-a`
  const wg = `o${s}w`
  const host = { run: execaRunner, netns: nsA }
  const pods = new NetnsPodNetworkDriver({}, { netns: nsA, podNetnsPrefix: `orcv-${s}-p-`, random })
  const nat = new NftServiceNatDriver(host, { table: 'orc_svc', vethPrefix: 'orcv' })
  const servers: TcpServer[] = []
  t.after(async () => {
    for (const srv of servers) await srv.stop().catch(() => {})
    await pods.down().catch(() => {})
    await nat.down().catch(() => {})
    await delNetns(nsA)
  })
  await addNetns(nsA)
  const cluster = clusterPrefix(`vip-${s}`)
  const node = chooseNodeSubnet(cluster, 'peer-a', new Map())
  const gateway = nodeGateway(node.prefix)
  // A veth (no dummy module here) stands in for the WireGuard interface holding the node's address.
  await sh('ip', ['-n', nsA, 'link', 'add', wg, 'type', 'veth', 'peer', 'name', `${wg}p`])
  await sh('ip', ['-n', nsA, 'link', 'set', `${wg}p`, 'up'])
  await sh('ip', ['-n', nsA, 'addr', 'add', `${gateway}/64`, 'dev', wg, 'nodad'])
  await sh('ip', ['-n', nsA, 'link', 'set', wg, 'up'])

  const taken = new Set<string>()
  const addr = () => {
    const a = randomPodAddress(node.prefix, random, taken)
    taken.add(a)
    return a
  }
  const ips = { web1: addr(), web2: addr(), client: addr() }
  const set = await pods.set({ pods: Object.entries(ips).map(([id, ipv6]) => ({ id, ipv6 })) })
  const netns = Object.fromEntries(set.pods.map((p) => [p.id, p.netns])) as Record<keyof typeof ips, string>
  for (const id of ['web1', 'web2'] as const) servers.push(await startListening(netns[id], ['-e', SERVER, '8080'], `server in ${id}`))
  servers.push(await startListening(netns.web1, ['-e', UDP_SERVER, ips.web1, '5353'], 'udp server'))

  const vip = serviceVirtualAddress({ metadata: { namespace: 'default', name: 'web' } }, cluster)!
  const empty = serviceVirtualAddress({ metadata: { namespace: 'default', name: 'empty' } }, cluster)!
  const range = serviceVirtualRange(cluster)
  const config = (backends: string[]) => ({
    iface: wg,
    range,
    gateway,
    services: [
      {
        key: 'default/web',
        address: vip,
        ports: [
          { protocol: 'TCP' as const, port: 80, backends: backends.map((address) => ({ address, port: 8080 })) },
          { protocol: 'UDP' as const, port: 53, backends: [{ address: ips.web1, port: 5353 }] },
        ],
      },
      { key: 'default/empty', address: empty, ports: [{ protocol: 'TCP' as const, port: 80, backends: [] }] },
    ],
  })
  const first = await nat.set(config([ips.web1, ips.web2]))
  assert.equal(first.changed, true)
  assert.ok(
    first.actions.some((a) => a.startsWith(`route ${formatPrefix(range)}`)),
    first.actions.join('; '),
  )
  assert.deepEqual(await nat.set(config([ips.web1, ips.web2])), { changed: false, actions: [] }, 'the same state applied twice changes nothing')

  // From a pod: both backends answer on port 80, and they see the client's own address.
  const seen = new Set<string>()
  for (let i = 0; i < 60 && seen.size < 2; i++) {
    const reply = await connect(netns.client, vip, 80)
    const [local, remote] = reply.split(' ')
    assert.ok(local === ips.web1 || local === ips.web2, `reply from the VIP: ${reply}`)
    assert.equal(remote, ips.client, 'the backend sees the client pod, not the node')
    seen.add(local!)
  }
  assert.equal(seen.size, 2, 'connections are spread over both ready endpoints')

  // From the node itself (the output hook); the source is the node's address.
  const fromNode = await connect(nsA, vip, 80)
  assert.match(fromNode, new RegExp(`^(${ips.web1}|${ips.web2}) ${gateway}$`))

  // Hairpin: web1 through its own service, until the choice lands on itself.
  let self = ''
  for (let i = 0; i < 60 && !self.startsWith(`${ips.web1} `); i++) self = await connect(netns.web1, vip, 80)
  assert.equal(self, `${ips.web1} ${gateway}`, 'a pod reaching itself through the VIP is answered (SNAT to the node)')

  // UDP: port 53 of the address reaches the pod's 5353, and the answer comes back translated.
  const udp = await execa('ip', ['netns', 'exec', netns.client, process.execPath, '-e', UDP_CLIENT, vip, '53'], { reject: false })
  assert.equal(String(udp.stdout), `${ips.web1} ${ips.client}`)

  // No ready endpoint, or a port the service does not have: refused at once, not a timeout.
  assert.equal(await connect(netns.client, empty, 80), 'error ECONNREFUSED')
  assert.equal(await connect(netns.client, vip, 81), 'error ECONNREFUSED')
  assert.equal(await connect(nsA, empty, 80), 'error ECONNREFUSED')

  // An endpoint that is no longer ready is no longer chosen.
  assert.equal((await nat.set(config([ips.web2]))).changed, true)
  for (let i = 0; i < 10; i++) assert.match(await connect(netns.client, vip, 80), new RegExp(`^${ips.web2} `))

  // A federation's range beside the cluster's (docs/federation.md, "Shared services on a virtual
  // address"): a shared service whose endpoint is taken as another cluster's, balanced only for the
  // node's shared pods (here: the client) and refused for every other source.
  const fedRange = federationVirtualRange(`fed-${s}`)
  const shared = sharedServiceVirtualAddress({ metadata: { namespace: 'shared', name: 'web' } }, `fed-${s}`)!
  const withShared = {
    ...config([ips.web2]),
    federatedRanges: [fedRange],
    services: [
      ...config([ips.web2]).services,
      {
        key: 'shared/web',
        address: shared,
        ports: [{ protocol: 'TCP' as const, port: 80, backends: [{ address: ips.web1, port: 8080 }], sources: [ips.client] }],
      },
    ],
  }
  const fedSet = await nat.set(withShared)
  assert.ok(fedSet.actions.includes(`route ${formatPrefix(fedRange)} via ${wg} from ${gateway}`), fedSet.actions.join('; '))
  assert.equal(await connect(netns.client, shared, 80), `${ips.web1} ${ips.client}`, 'a shared pod reaches the shared address')
  assert.equal(await connect(netns.web2, shared, 80), 'error ECONNREFUSED', 'another pod is refused at once')
  assert.equal(await connect(nsA, shared, 80), 'error ECONNREFUSED', 'so is the node itself')
  assert.equal(await connect(netns.client, vip, 80), `${ips.web2} ${ips.client}`, "the cluster's own service is unchanged")
  // The federation gone (left): its route goes with it.
  const left = await nat.set(config([ips.web2]))
  assert.ok(left.actions.includes(`remove route ${formatPrefix(fedRange)}`), left.actions.join('; '))
  const routes = await execa('ip', ['-n', nsA, '-6', 'route', 'show', 'proto', '80'], { reject: false })
  assert.ok(!String(routes.stdout).includes(formatPrefix(fedRange).split('/')[0]!.replace(/::$/, '')), String(routes.stdout))

  // The pods' guard still refuses the node's own listeners (DNAT happens before the input hook).
  assert.equal(await connect(netns.client, gateway, 8080), 'error TIMEOUT')

  assert.equal((await nat.down()).changed, true)
  const gone = await execa('ip', ['netns', 'exec', nsA, 'nft', 'list', 'table', 'ip6', 'orc_svc'], { reject: false })
  assert.notEqual(gone.exitCode, 0, 'table removed by down')
})
