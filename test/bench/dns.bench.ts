/**
 * The node DNS resolver against dnsmasq, same records, same load, same run:
 * `node --import tsx --import ./test/setup.ts test/bench/dns.bench.ts [seconds] [in-flight]`.
 *
 * orc's resolver (the DnsServer class the agent runs, with a zone of 100 services × 3 ready pods
 * built by buildZone) runs in a child process; dnsmasq (Debian dnsmasq-base) answers the same AAAA
 * records from a hosts file. One load generator (this process, UDP, `in-flight` queries
 * outstanding, random service names) drives each in turn and prints queries/s and latency p50/p99.
 */
import { spawn } from 'node:child_process'
import { createSocket } from 'node:dgram'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as dnsPacket from 'dns-packet'
import pino from 'pino'
import { systemClock, systemRandom } from '../../src/effects/index.ts'
import { buildZone, DnsServer } from '../../src/net/index.ts'

const SERVICES = 100
const PODS = 3
const addr = (s: number, p: number) => `fd00:1:2:3::${(s * 16 + p + 2).toString(16)}`

function records() {
  const services = []
  const pods = []
  for (let s = 0; s < SERVICES; s++) {
    services.push({ metadata: { name: `svc-${s}`, namespace: 'default' }, spec: { selector: { app: `a${s}` } } })
    for (let p = 0; p < PODS; p++)
      pods.push({
        metadata: { name: `svc-${s}-${p}`, namespace: 'default', labels: { app: `a${s}` } },
        status: { phase: 'Running', containers: [{ name: 'c', state: 'running', restarts: 0 }], network: { ipv6: addr(s, p) } },
      })
  }
  return { services, pods }
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })
}

async function serve(port: number): Promise<void> {
  const { services, pods } = records()
  const zone = buildZone({ domain: 'cluster.local', services: services as never, pods: pods as never })
  const server = new DnsServer(
    { clock: systemClock, random: systemRandom, logger: pino({ level: 'warn' }) },
    { zone: () => zone, upstreams: [], ttl: 3, rateLimit: { perSecond: 1e9, burst: 1e9 }, upstreamTimeoutMs: 2000 },
  )
  await server.listen({ host: '127.0.0.1', port })
  process.stdout.write('ready\n')
}

async function waitReady(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const r = await query(port, 'svc-0.default.svc.cluster.local', 300).catch(() => undefined)
    if (r !== undefined) return
  }
  throw new Error(`no DNS answer on port ${port}`)
}

function query(port: number, name: string, timeoutMs: number): Promise<Buffer> {
  const s = createSocket('udp4')
  return new Promise<Buffer>((resolve, reject) => {
    const t = setTimeout(() => {
      s.close()
      reject(new Error('timeout'))
    }, timeoutMs)
    s.on('message', (m) => {
      clearTimeout(t)
      s.close()
      resolve(m)
    })
    s.send(dnsPacket.encode({ type: 'query', id: 1, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'AAAA', name }] }), port, '127.0.0.1')
  })
}

/** `inFlight` outstanding queries for `seconds`: queries/s, p50, p99 (ms), and answers that were not 3 AAAA. */
async function load(port: number, seconds: number, inFlight: number): Promise<{ qps: number; p50: number; p99: number; bad: number; lost: number }> {
  const s = createSocket('udp4')
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()))
  const sent = new Map<number, number>()
  const lat: number[] = []
  let bad = 0
  let lost = 0
  let nextId = 0
  const end = performance.now() + seconds * 1000
  let done!: () => void
  const finished = new Promise<void>((r) => (done = r))
  const fire = () => {
    if (performance.now() >= end) {
      if (sent.size === 0) done()
      return
    }
    const id = nextId++ & 0xffff
    sent.set(id, performance.now())
    const name = `svc-${Math.floor(Math.random() * SERVICES)}.default.svc.cluster.local`
    s.send(dnsPacket.encode({ type: 'query', id, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'AAAA', name }] }), port, '127.0.0.1')
  }
  s.on('message', (m) => {
    const id = m.readUInt16BE(0)
    const t0 = sent.get(id)
    if (t0 === undefined) return
    sent.delete(id)
    lat.push(performance.now() - t0)
    if (m.readUInt16BE(6) !== PODS) bad++
    fire()
  })
  // A datagram lost under load must not stall the generator: re-fire after 1 s.
  const sweep = setInterval(() => {
    const now = performance.now()
    for (const [id, t0] of sent)
      if (now - t0 > 1000) {
        sent.delete(id)
        lost++
        fire()
      }
    if (now >= end && sent.size === 0) done()
  }, 200)
  for (let i = 0; i < inFlight; i++) fire()
  await finished
  clearInterval(sweep)
  s.close()
  lat.sort((a, b) => a - b)
  const q = (f: number) => lat[Math.min(lat.length - 1, Math.floor(lat.length * f))] ?? Number.NaN
  return { qps: lat.length / seconds, p50: q(0.5), p99: q(0.99), bad, lost }
}

async function main(): Promise<void> {
  if (process.argv[2] === 'serve') return serve(Number(process.argv[3]))
  const seconds = Number(process.argv[2] ?? 10)
  const inFlight = Number(process.argv[3] ?? 32)
  const orcPort = await freePort()
  const child = spawn(process.execPath, [...process.execArgv, new URL(import.meta.url).pathname, 'serve', String(orcPort)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const dir = mkdtempSync(join(tmpdir(), 'orc-dns-bench-'))
  const hosts = join(dir, 'hosts')
  const { pods } = records()
  writeFileSync(hosts, pods.map((p) => `${p.status.network.ipv6} ${p.metadata.labels.app.replace(/^a/, 'svc-')}.default.svc.cluster.local\n`).join(''))
  const dmPort = await freePort()
  const dnsmasq = spawn(
    'dnsmasq',
    [
      '--keep-in-foreground',
      '--no-resolv',
      '--no-hosts',
      `--addn-hosts=${hosts}`,
      '--listen-address=127.0.0.1',
      '--bind-interfaces',
      `--port=${dmPort}`,
      '--local-ttl=3',
      '--user=root',
    ],
    { stdio: 'ignore' },
  )
  try {
    await waitReady(orcPort)
    await waitReady(dmPort)
    // Warm-up, then the measured runs, alternating.
    await load(orcPort, 1, inFlight)
    await load(dmPort, 1, inFlight)
    const o = await load(orcPort, seconds, inFlight)
    const d = await load(dmPort, seconds, inFlight)
    const f = (n: number) => n.toFixed(2)
    console.log(`dns orc: ${Math.round(o.qps)} queries/s, p50 ${f(o.p50)} ms, p99 ${f(o.p99)} ms (${o.bad} wrong answers, ${o.lost} lost)`)
    console.log(`dns dnsmasq: ${Math.round(d.qps)} queries/s, p50 ${f(d.p50)} ms, p99 ${f(d.p99)} ms (${d.bad} wrong answers, ${d.lost} lost)`)
    console.log(`dns orc/dnsmasq: queries/s ${f(o.qps / d.qps)}, p99 ${f(o.p99 / d.p99)}`)
  } finally {
    child.kill()
    dnsmasq.kill()
    rmSync(dir, { recursive: true, force: true })
  }
}

await main()
