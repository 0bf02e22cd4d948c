/**
 * Ingress benchmark (root): a node namespace with one pod (the real pod network driver) and an
 * "internet" namespace joined to it by a veth (IPv4 and IPv6 underlay). The tcp-proxy's data path
 * (src/agent/ingress/proxy.ts) runs in the node namespace, listening on the node's IPv4 address;
 * the client runs in the internet namespace and reaches the pod either through the proxy (IPv4) or
 * directly (IPv6, routed through the node). Prints one figure per line:
 *   rps_direct / rps_ingress            short requests a second (connect, one reply, close; 32 at a time, 5 s)
 *   ingress_to_direct_rps               the two divided
 *   bulk_direct_MBps / bulk_ingress_MBps  one TCP upload of N MiB to a sink in the pod (best of 3)
 *   ingress_to_direct_bulk              the two divided
 * Usage: node --import tsx --import ./test/setup.ts test/bench/ingress.bench.ts [MiB per transfer, default 64]
 */
import '../../src/polyfill.ts'
import { execa } from 'execa'
import { chooseNodeSubnet, clusterPrefix, formatPrefix, NetnsPodNetworkDriver, randomPodAddress } from '../../src/net/index.ts'
import {
  addNetns,
  delNetns,
  linkNetns,
  missingPrerequisite,
  runSuffix,
  seededRandom,
  sh,
  startListening,
  startTcpServer,
  type TcpServer,
  tcpRequest,
} from '../net/netns.ts'

const mib = Number(process.argv[2] ?? 64)
const missing = missingPrerequisite(['ip', 'nft', 'sysctl'])
if (missing) {
  console.error(`skipped: ${missing}`)
  process.exit(0)
}

/** The proxy in the node namespace: listen on HOST:PORT, forward to [ADDR]:TPORT. */
const PROXY = `
const { TcpProxy } = require(process.argv[1])
const { pino } = require('pino')
const { randomBytes } = require('node:crypto')
const [, , host, port, addr, tport] = process.argv
const p = new TcpProxy(pino({ level: 'silent' }), (n) => randomBytes(n))
p.listen('bench', host, Number(port), [{ pod: 'srv', address: addr, port: Number(tport) }]).then(() => process.stdout.write('listening\\n'))
`

/** The pod's request server: reads the request to its end, then answers (no reset from unread data). */
const REPLY = `
const net = require('node:net')
net.createServer({ allowHalfOpen: true }, (s) => { s.resume(); s.on('end', () => s.end('ok')); s.on('error', () => {}) })
  .listen(Number(process.argv[1]), '::', () => process.stdout.write('listening\\n'))
`

/** Short requests from the client namespace: CONC at a time for SECS seconds; prints requests per second. */
const LOAD = `
const net = require('node:net')
const [host, port, conc, secs] = process.argv.slice(1)
const end = Date.now() + Number(secs) * 1000
let done = 0, failed = 0
function one() {
  if (Date.now() >= end) return Promise.resolve()
  return new Promise((resolve) => {
    const s = net.connect({ host, port: Number(port), allowHalfOpen: true })
    let got = 0
    s.on('data', (d) => { got += d.length })
    s.on('end', () => { if (got > 0) done++; else failed++; resolve() })
    s.on('error', (e) => { failed++; if (failed === 1) process.stderr.write(e.message + '\\n'); resolve() })
    s.end('x')
  }).then(one)
}
const t0 = Date.now()
Promise.all(Array.from({ length: Number(conc) }, one)).then(() => {
  process.stdout.write(JSON.stringify({ rps: done / ((Date.now() - t0) / 1000), failed }))
})
`

const s = runSuffix()
const nsN = `orci-${s}-n`
const nsI = `orci-${s}-i`
const random = seededRandom(7)
const pods = new NetnsPodNetworkDriver({}, { netns: nsN, podNetnsPrefix: `orci-${s}-p-`, random })
const servers: TcpServer[] = []

async function load(host: string, port: number): Promise<number> {
  const r = await execa('ip', ['netns', 'exec', nsI, process.execPath, '-e', LOAD, host, String(port), '32', '5'], { timeout: 60_000 })
  const out = JSON.parse(String(r.stdout)) as { rps: number; failed: number }
  if (out.failed > 0) throw new Error(`${out.failed} requests to ${host}:${port} failed: ${String(r.stderr).trim()}`)
  return out.rps
}

async function bulk(host: string, port: number): Promise<number> {
  let best = 0
  for (let i = 0; i < 3; i++) {
    const bytes = mib * 1024 * 1024
    const r = await tcpRequest(nsI, host, port, bytes)
    if (Number(r.reply) !== bytes) throw new Error(`sink got ${r.reply} of ${bytes} bytes`)
    best = Math.max(best, bytes / 1e6 / (Number(r.ns) / 1e9))
  }
  return best
}

try {
  for (const ns of [nsN, nsI]) await addNetns(ns)
  await linkNetns({ ns: nsN, dev: `i${s}n`, addr: '198.18.9.1/30' }, { ns: nsI, dev: `i${s}i`, addr: '198.18.9.2/30' })
  await sh('ip', ['-n', nsN, 'addr', 'add', 'fd00:99::1/64', 'dev', `i${s}n`, 'nodad'])
  await sh('ip', ['-n', nsI, 'addr', 'add', 'fd00:99::2/64', 'dev', `i${s}i`, 'nodad'])
  const node = chooseNodeSubnet(clusterPrefix(`bench-${s}`), 'peer-a', new Map())
  await sh('ip', ['-n', nsI, '-6', 'route', 'add', formatPrefix(node.prefix), 'via', 'fd00:99::1'])
  const podIp = randomPodAddress(node.prefix, random)
  const [pod] = (await pods.set({ pods: [{ id: 'srv', ipv6: podIp }] })).pods
  servers.push(await startListening(pod!.netns, ['-e', REPLY, '7000'], 'reply server'))
  servers.push(await startTcpServer(pod!.netns, '::', 7001, 'sink'))
  const modulePath = new URL('../../src/agent/ingress/proxy.ts', import.meta.url).pathname
  for (const [listen, target] of [
    [8000, 7000],
    [8001, 7001],
  ] as const) {
    servers.push(await startListening(nsN, ['--import', 'tsx', '-e', PROXY, modulePath, '198.18.9.1', String(listen), podIp, String(target)], 'proxy'))
  }
  const rpsDirect = await load(podIp, 7000)
  const rpsIngress = await load('198.18.9.1', 8000)
  console.log(`rps_direct ${rpsDirect.toFixed(0)}`)
  console.log(`rps_ingress ${rpsIngress.toFixed(0)}`)
  console.log(`ingress_to_direct_rps ${(rpsIngress / rpsDirect).toFixed(3)}`)
  const bDirect = await bulk(podIp, 7001)
  const bIngress = await bulk('198.18.9.1', 8001)
  console.log(`bulk_direct_MBps ${bDirect.toFixed(1)}`)
  console.log(`bulk_ingress_MBps ${bIngress.toFixed(1)}`)
  console.log(`ingress_to_direct_bulk ${(bIngress / bDirect).toFixed(3)}`)
} finally {
  for (const srv of servers) await srv.stop().catch(() => {})
  await pods.down().catch(() => {})
  for (const ns of [nsN, nsI]) await delNetns(ns)
}
