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
import { addNetns, delNetns, linkNetns, missingPrerequisite, runSuffix, seededRandom, startTcpServer, type TcpServer } from './netns.ts'

/** `busybox nc` from a pod namespace: what the server answered, or undefined when no connection was made. */
async function ncFrom(ns: string, host: string, port: number): Promise<string | undefined> {
  const r = await execa('ip', ['netns', 'exec', ns, 'busybox', 'nc', '-w', '2', host, String(port)], { reject: false, timeout: 8_000, input: '' })
  return r.exitCode === 0 && String(r.stdout) !== '' ? String(r.stdout).trim() : undefined
}

test("pods cannot connect to the node's own listeners, on any of its addresses; pod to pod and egress still work", async (t) => {
  const missing = missingPrerequisite(['ip', 'nft', 'sysctl', 'busybox'])
  if (missing) return t.skip(`skipped: ${missing}`)
  const seed = Date.now() % 1_000_000
  t.diagnostic(`seed ${seed}`)
  const random = seededRandom(seed)
  const s = runSuffix()
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
