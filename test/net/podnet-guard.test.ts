/**
 * Pods cannot reach the node's own listeners (issue #17, safe defaults): a TCP listener on every
 * address of the node (as the HTTP install listener, /metrics and libp2p are) is unreachable from a
 * pod — through its IPv4 gateway, its IPv6 gateway, or the node's underlay address — while the pod
 * still reaches another pod and the outside. Probed with busybox `nc` inside the pod's namespace.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { execa } from 'execa'
import { chooseNodeSubnet, clusterPrefix, EGRESS_IPV4_GATEWAY, NetnsPodNetworkDriver, randomPodAddress } from '../../src/net/index.ts'
import { addNetns, delNetns, linkNetns, netTest, startTcpServer, type TcpServer } from './netns.ts'

/** `busybox nc` from a pod namespace: what the server answered, or undefined when no connection was made. */
async function ncFrom(ns: string, host: string, port: number): Promise<string | undefined> {
  const r = await execa('ip', ['netns', 'exec', ns, 'busybox', 'nc', '-w', '2', host, String(port)], { reject: false, timeout: 8_000, input: '' })
  return r.exitCode === 0 && String(r.stdout) !== '' ? String(r.stdout).trim() : undefined
}

test("pods cannot connect to the node's own listeners, on any of its addresses; pod to pod and egress still work", async (t) => {
  const start = netTest(t, ['ip', 'nft', 'sysctl', 'busybox'])
  if (start === undefined) return
  const { random, s } = start
  const nsA = `orcg-${s}-a`
  const nsO = `orcg-${s}-o`
  const podPrefix = `orcg-${s}-p-`
  const pods = new NetnsPodNetworkDriver({}, { netns: nsA, podNetnsPrefix: podPrefix, random })
  const servers: TcpServer[] = []
  t.after(async () => {
    for (const srv of servers) await srv.stop().catch(() => {})
    await pods.down().catch(() => {})
    for (const ns of [nsA, nsO]) await delNetns(ns)
  })
  for (const ns of [nsA, nsO]) await addNetns(ns)
  await linkNetns({ ns: nsA, dev: `o${s}a`, addr: '198.18.1.1/30' }, { ns: nsO, dev: `o${s}o`, addr: '198.18.1.2/30' })
  await execa('ip', ['-n', nsA, 'route', 'add', 'default', 'via', '198.18.1.2'])

  const node = chooseNodeSubnet(clusterPrefix(`guard-${s}`), 'peer-a', new Map())
  const webIp = randomPodAddress(node.prefix, random)
  const apiIp = randomPodAddress(node.prefix, random, new Set([webIp]))
  const set = await pods.set({
    pods: [
      { id: 'web', ipv6: webIp },
      { id: 'api', ipv6: apiIp },
    ],
  })
  const [web, api] = set.pods as [(typeof set.pods)[0], (typeof set.pods)[0]]

  // The node's listener, on all its addresses (like the HTTP listener bound to 0.0.0.0 / ::).
  servers.push(await startTcpServer(nsA, '::', 7418))
  assert.equal(await ncFrom(nsO, '198.18.1.1', 7418), '198.18.1.2', 'the listener answers from outside the node')
  for (const addr of [EGRESS_IPV4_GATEWAY, '198.18.1.1', `fe80::1%eth0`]) {
    assert.equal(await ncFrom(web.netns, addr, 7418), undefined, `a pod reached the node's listener at ${addr}`)
  }

  // Another pod on the node, and the outside (IPv4 egress, masqueraded), are still reachable.
  servers.push(await startTcpServer(api.netns, apiIp, 7000))
  assert.equal(await ncFrom(web.netns, apiIp, 7000), webIp)
  servers.push(await startTcpServer(nsO, '198.18.1.2', 7001))
  assert.equal(await ncFrom(web.netns, '198.18.1.2', 7001), '198.18.1.1')
  assert.ok(api.netns)

  assert.equal((await pods.down()).changed, true)
  const guard = await execa('ip', ['netns', 'exec', nsA, 'nft', 'list', 'table', 'inet', 'orc_guard'], { reject: false })
  assert.notEqual(guard.exitCode, 0, 'guard table removed by down')
})

/** A UDP listener in `ns` on `port` (IPv6 and IPv4): `seen()` gives each datagram as `source text`. */
async function udpListener(ns: string, port: number): Promise<{ seen(): string[]; stop(): Promise<void> }> {
  const script = `const d = require('node:dgram'); const s = d.createSocket({ type: 'udp6' });
s.on('message', (m, r) => process.stdout.write(r.address.replace(/^::ffff:/, '') + ' ' + m + '\\n'));
s.bind(${port}, '::', () => process.stdout.write('listening\\n'))`
  const child = execa('ip', ['netns', 'exec', ns, process.execPath, '-e', script], { reject: false })
  let out = ''
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString()
      if (out.includes('listening')) resolve()
    })
    child.once('exit', () => reject(new Error(`udp listener in ${ns} exited`)))
  })
  return {
    seen: () => out.split('\n').filter((l) => l !== '' && l !== 'listening'),
    async stop() {
      child.kill('SIGTERM')
      await child
    },
  }
}

/** Send one datagram `text` from `ns`, from source address `from`, to `to`:`port`. */
async function udpSend(ns: string, from: string, to: string, port: number, text: string): Promise<void> {
  const family = to.includes(':') ? 'udp6' : 'udp4'
  const script = `const s = require('node:dgram').createSocket('${family}');
s.bind(0, '${from}', () => s.send('${text}', ${port}, '${to}', (e) => { if (e) { console.error(e.message); process.exit(1) } s.close() }))`
  const r = await execa('ip', ['netns', 'exec', ns, process.execPath, '-e', script], { reject: false, timeout: 10_000 })
  assert.equal(r.exitCode, 0, `send from ${from} in ${ns}: ${r.stderr}`)
}

test("a pod cannot send with another pod's address: packets from a veth with a source not routed to it are dropped", async (t) => {
  const start = netTest(t, ['ip', 'nft', 'sysctl'])
  if (start === undefined) return
  const { random, s } = start
  const nsA = `orcs-${s}-a`
  const pods = new NetnsPodNetworkDriver({}, { netns: nsA, podNetnsPrefix: `orcs-${s}-p-`, random })
  let listener: Awaited<ReturnType<typeof udpListener>> | undefined
  t.after(async () => {
    await listener?.stop().catch(() => {})
    await pods.down().catch(() => {})
    await delNetns(nsA)
  })
  await addNetns(nsA)
  const node = chooseNodeSubnet(clusterPrefix(`spoof-${s}`), 'peer-a', new Map())
  const ips = new Set<string>()
  const next = () => {
    const ip = randomPodAddress(node.prefix, random, ips)
    ips.add(ip)
    return ip
  }
  const set = await pods.set({
    pods: [
      { id: 'evil', ipv6: next() },
      { id: 'victim', ipv6: next() },
      { id: 'db', ipv6: next() },
    ],
  })
  const [evil, victim, db] = set.pods as [(typeof set.pods)[0], (typeof set.pods)[0], (typeof set.pods)[0]]
  listener = await udpListener(db.netns, 5353)
  // Root in its pod (a VM guest is), evil puts victim's addresses on its own interface too.
  await execa('ip', ['-n', evil.netns, 'addr', 'add', `${victim.ipv6}/128`, 'dev', 'eth0', 'nodad'])
  await execa('ip', ['-n', evil.netns, 'addr', 'add', `${victim.ipv4}/32`, 'dev', 'eth0'])
  for (const [from, to, text] of [
    [evil.ipv6, db.ipv6, 'own6'],
    [evil.ipv4, db.ipv4, 'own4'],
    [victim.ipv6, db.ipv6, 'spoofed6'],
    [victim.ipv4, db.ipv4, 'spoofed4'],
  ] as const)
    await udpSend(evil.netns, from!, to!, 5353, text)
  // The honest datagrams arrive (so the spoofed ones had every chance to).
  const deadline = Date.now() + 10_000
  while (listener.seen().length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  await new Promise((r) => setTimeout(r, 500))
  assert.deepEqual(listener.seen().sort(), [`${evil.ipv4} own4`, `${evil.ipv6} own6`].sort())
  // The victim itself still sends with its own address.
  await udpSend(victim.netns, victim.ipv6, db.ipv6, 5353, 'victim6')
  const until = Date.now() + 10_000
  while (!listener.seen().includes(`${victim.ipv6} victim6`) && Date.now() < until) await new Promise((r) => setTimeout(r, 100))
  assert.ok(listener.seen().includes(`${victim.ipv6} victim6`), listener.seen().join('; '))
})
