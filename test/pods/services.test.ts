/**
 * Services and the node DNS resolver with a real agent process, real sandboxed pods and real DNS
 * clients: `dig` from the host against the resolver's extra listen address (ORC_DNS_LISTEN),
 * a real `dnsmasq` as its upstream, the CLI's derived endpoints and `orc why service/NAME`, raw
 * garbage and a query flood. This agent has no pod network (test agents run with it off), so pods
 * have no address: the AAAA answers with addresses are the testbed's (test/testbed/services.test.ts).
 */
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { createSocket } from 'node:dgram'
import { createServer } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { execa } from 'execa'
import { podManifest, skipReason, startTestAgent, type TestAgent, waitFor } from './helpers.ts'

function missing(): string | undefined {
  for (const bin of ['dig', 'dnsmasq']) {
    try {
      execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'ignore' })
    } catch {
      return `${bin} not installed (Debian dnsutils, dnsmasq-base; scripts/setup.sh)`
    }
  }
  return skipReason()
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })
}

async function dig(port: number, args: string[]): Promise<{ status: string; answers: string[]; out: string }> {
  const r = await execa('dig', ['@127.0.0.1', '-p', String(port), '+tries=1', '+time=3', ...args], { reject: false })
  const out = String(r.stdout)
  const status = /status: ([A-Z]+)/.exec(out)?.[1] ?? `no answer (${r.exitCode})`
  const sec = /;; ANSWER SECTION:\n([\s\S]*?)\n\n/.exec(out)?.[1] ?? ''
  return { status, answers: sec.split('\n').filter(Boolean), out }
}

/** Send raw bytes; the first datagram back within `ms`, or undefined. */
async function rawQuery(port: number, bytes: Buffer, ms = 1500): Promise<Buffer | undefined> {
  const s = createSocket('udp4')
  try {
    return await new Promise((resolve) => {
      const timer = setTimeout(() => resolve(undefined), ms)
      s.on('message', (m) => {
        clearTimeout(timer)
        resolve(m)
      })
      s.send(bytes, port, '127.0.0.1')
    })
  } finally {
    s.close()
  }
}

const why = missing()

describe('services and the node DNS resolver (agent process)', { skip: why ? `skipped: ${why}` : false, timeout: 300_000 }, () => {
  let agent: TestAgent
  let dnsPort: number
  let upstream: ReturnType<typeof spawn>
  before(async () => {
    dnsPort = await freePort()
    const upPort = await freePort()
    // A real resolver upstream with one static record: names outside the cluster go there.
    upstream = spawn(
      'dnsmasq',
      [
        '--keep-in-foreground',
        '--no-resolv',
        '--no-hosts',
        '--listen-address=127.0.0.1',
        '--bind-interfaces',
        `--port=${upPort}`,
        '--address=/upstream.test/192.0.2.7',
      ],
      {
        stdio: 'ignore',
      },
    )
    agent = await startTestAgent('n1', {
      env: { ORC_DNS_LISTEN: `127.0.0.1:${dnsPort}`, ORC_DNS_UPSTREAM: `127.0.0.1:${upPort}`, ORC_DNS_RATE_LIMIT: '50:100' },
    })
  })
  after(async () => {
    await agent?.stop()
    agent?.remove()
    upstream?.kill()
  })

  it('a Service lists with its ports; a pod matching it is an endpoint, marked not ready while it has no address', async () => {
    const svc = {
      apiVersion: 'orc/v1',
      kind: 'Service',
      metadata: { name: 'web' },
      spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http' }] },
    }
    assert.equal((await agent.orc(['apply', '-f', '-'], JSON.stringify(svc))).exitCode, 0)
    const pod = JSON.parse(podManifest('web-1', agent.image, 'exec httpd -f -p 8080', {}, { app: 'web' }))
    pod.spec.containers[0].ports = [{ name: 'http', containerPort: 8080 }]
    assert.equal((await agent.orc(['apply', '-f', '-'], JSON.stringify(pod))).exitCode, 0)
    const svcs = await agent.orc(['get', 'svc'])
    assert.match(svcs.stdout, /^NAME\s+TYPE\s+CLUSTER-IP\s+PORTS\s+SELECTOR\s+AGE$/m)
    assert.match(svcs.stdout, /^web\s+ClusterIP\s+[0-9a-f:]+:0:1:[0-9a-f:]+\s+http:80\/TCP→http\s+app=web\s/m)
    await waitFor('web-1 running', async () => (await agent.pod('web-1'))?.status?.phase === 'Running')
    const ep = await agent.orc(['get', 'endpoints'])
    assert.match(ep.stdout, /^web\s+0\/1\s+\[<no address>\]:8080 \(not ready\)$/m)
    const w = await agent.orc(['why', 'service/web'])
    assert.equal(w.exitCode, 0, w.stderr)
    assert.match(w.stdout, /service\/web: 0 ready endpoint\(s\) of 1 matched/)
    assert.match(w.stdout, /pod\/web-1 on n1: not ready \(no pod address \(the node has no pod network\)\)/)
    assert.match(w.stdout, /_http\._tcp\.web\.default\.svc\.cluster\.local \(SRV\)/)
    const d = await agent.orc(['describe', 'service/web'])
    assert.match(d.stdout, /Endpoints:\n\s+POD\s+READY\s+ADDRESS\s+PORTS/)
    assert.match(d.stdout, /web-1\s+false\s+<none>\s+http:8080\/TCP\s+n1/)
  })

  it('a selector matching nothing: no endpoints, and orc why names the pod that misses one label', async () => {
    const lonely = { apiVersion: 'orc/v1', kind: 'Service', metadata: { name: 'lonely' }, spec: { selector: { app: 'web', tier: 'db' } } }
    assert.equal((await agent.orc(['apply', '-f', '-'], JSON.stringify(lonely))).exitCode, 0)
    const w = await agent.orc(['why', 'svc/lonely'])
    assert.match(w.stdout, /service\/lonely: 0 ready endpoint\(s\) of 0 matched/)
    assert.match(w.stdout, /No pod of namespace default carries every label of the selector/)
    assert.match(w.stdout, /pod\/web-1 misses only tier=db \(it has no tier\)/)
    assert.match((await agent.orc(['get', 'ep', 'lonely'])).stdout, /^lonely\s+0\/0\s+<none>$/m)
    const bad = await agent.orc(['get', 'ep', 'nothere'])
    assert.notEqual(bad.exitCode, 0)
    assert.match(bad.stderr, /service\/nothere not found/)
  })

  it('dig: service names answer authoritatively (NODATA without ready pods), unknown names NXDOMAIN, other names go upstream, TCP too', async () => {
    const svc = await dig(dnsPort, ['web.default.svc.cluster.local', 'AAAA'])
    assert.equal(svc.status, 'NOERROR', svc.out)
    assert.match(svc.out, /flags: qr aa rd ra/)
    assert.deepEqual(svc.answers, [])
    assert.match(svc.out, /;; AUTHORITY SECTION:\ncluster\.local\.\s+3\s+IN\s+SOA/)
    assert.equal((await dig(dnsPort, ['nope.default.svc.cluster.local', 'AAAA'])).status, 'NXDOMAIN')
    assert.equal((await dig(dnsPort, ['web.other.svc.cluster.local', 'AAAA'])).status, 'NXDOMAIN')
    const up = await dig(dnsPort, ['upstream.test', 'A'])
    assert.equal(up.status, 'NOERROR', up.out)
    assert.match(up.answers.join('\n'), /upstream\.test\.\s+\d+\s+IN\s+A\s+192\.0\.2\.7/)
    const tcp = await dig(dnsPort, ['+tcp', 'upstream.test', 'A'])
    assert.match(tcp.answers.join('\n'), /192\.0\.2\.7/)
    assert.equal((await dig(dnsPort, ['+tcp', 'nope.default.svc.cluster.local', 'AAAA'])).status, 'NXDOMAIN')
  })

  it('garbage gets FORMERR (or nothing, without a header); a flood from one source gets REFUSED; the resolver keeps answering', async () => {
    const garbage = Buffer.from([0xbe, 0xef, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0x3f, 0xff, 0xff])
    const r = await rawQuery(dnsPort, garbage)
    assert.ok(r, 'an answer to a bad query with a header')
    assert.equal(r.readUInt16BE(0), 0xbeef)
    assert.equal(r.readUInt16BE(2) & 0x800f, 0x8001, 'a response with rcode FORMERR')
    assert.equal(await rawQuery(dnsPort, Buffer.from([1, 2, 3]), 500), undefined, 'no answer without a header')
    // 300 queries at once from one socket, against 50/s with a burst of 100.
    const s = createSocket('udp4')
    const rcodes: number[] = []
    s.on('message', (m) => rcodes.push(m.readUInt16BE(2) & 0xf))
    await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', () => resolve()))
    const q = Buffer.from('abcd01000001000000000000036e6f7007636c7573746572056c6f63616c00001c0001', 'hex')
    for (let i = 0; i < 300; i++) s.send(q, dnsPort, '127.0.0.1')
    await waitFor('answers to the flood', async () => (rcodes.length >= 250 ? true : undefined), 10_000).catch(() => undefined)
    s.close()
    const refused = rcodes.filter((c) => c === 5).length
    const nx = rcodes.filter((c) => c === 3).length
    assert.ok(refused >= 150, `most of the flood REFUSED (got ${refused} REFUSED, ${nx} NXDOMAIN of ${rcodes.length})`)
    assert.ok(nx >= 90 && nx <= 140, `about the burst answered (got ${nx})`)
    // Another source is not limited by the first one's flood.
    const other = await execa('dig', ['@127.0.0.1', '-p', String(dnsPort), '-b', '127.0.0.2', '+tries=1', '+time=3', 'nope.default.svc.cluster.local'], {
      reject: false,
    })
    assert.match(String(other.stdout), /status: NXDOMAIN/)
  })

  it('every pod gets /etc/resolv.conf with its namespace search path and /etc/hosts with its own name', async () => {
    const resolv = await agent.orc(['exec', 'web-1', '--', 'cat', '/etc/resolv.conf'])
    assert.equal(resolv.exitCode, 0, resolv.stderr)
    assert.match(resolv.stdout, /^search default\.svc\.cluster\.local svc\.cluster\.local cluster\.local$/m)
    assert.match(resolv.stdout, /^options ndots:5/m)
    // No pod network on this node: no resolver a pod could reach, and it says so.
    assert.match(resolv.stdout, /^# no resolver: this node has no pod network$/m)
    const hosts = await agent.orc(['exec', 'web-1', '--', 'cat', '/etc/hosts'])
    assert.match(hosts.stdout, /^127\.0\.1\.1\tweb-1\.default\.pod\.cluster\.local web-1$/m)
    // Read-only: the pod cannot point its own resolution elsewhere.
    const w = await agent.orc(['exec', 'web-1', '--', 'sh', '-c', 'echo nameserver 1.1.1.1 > /etc/resolv.conf'])
    assert.notEqual(w.exitCode, 0)
  })

  it('a runc pod gets the same files', { skip: skipReason({ runc: true }) }, async () => {
    const oci = podManifest('oci-1', agent.image, 'cat /etc/resolv.conf /etc/hosts; exec sleep 3600', { runtime: 'oci' })
    assert.equal((await agent.orc(['apply', '-f', '-'], oci)).exitCode, 0)
    const logs = await waitFor(
      'the oci pod printed its files',
      async () => {
        const l = await agent.orc(['logs', 'pod/oci-1'])
        return l.stdout.includes('oci-1.default.pod.cluster.local') ? l.stdout : undefined
      },
      60_000,
    )
    assert.match(logs, /^search default\.svc\.cluster\.local svc\.cluster\.local cluster\.local$/m)
    assert.match(logs, /^127\.0\.1\.1\toci-1\.default\.pod\.cluster\.local oci-1$/m)
  })
})
