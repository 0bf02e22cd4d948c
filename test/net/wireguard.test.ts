import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { test } from 'node:test'
import { execa } from 'execa'
import {
  clusterPrefix,
  formatPrefix,
  generateKeyPair,
  nodeGateway,
  nodePrefix,
  procfsProcessTable,
  type WireGuardConfig,
  WireGuardLinkDriver,
} from '../../src/net/index.ts'
import { addNetns, delNetns, inNs, linkNetns, missingPrerequisite, pingOnce, pingUntil, runSuffix, sh } from './netns.ts'

test('generated keys match wg pubkey', async (t) => {
  if (!existsSync('/usr/bin/wg')) return t.skip('skipped: needs wg (wireguard-tools)')
  for (let i = 0; i < 3; i++) {
    const k = generateKeyPair()
    assert.equal(await sh('wg', ['pubkey'], { input: k.privateKey }), k.publicKey)
  }
  const fromWg = (await sh('wg', ['genkey'])).trim()
  const { publicKeyOf } = await import('../../src/net/index.ts')
  assert.equal(publicKeyOf(fromWg), (await sh('wg', ['pubkey'], { input: fromWg })).trim())
})

test('wireguard tunnel between two namespaces: ping, idempotent set, drift repair, down', async (t) => {
  const missing = missingPrerequisite(['ip', 'wg', 'wireguard-go'])
  if (missing) return t.skip(`skipped: ${missing}`)
  const s = runSuffix()
  const nsA = `orct-${s}-a`
  const nsB = `orct-${s}-b`
  const ifA = `wgt${s}a`
  const ifB = `wgt${s}b`
  const drvA = new WireGuardLinkDriver({}, { netns: nsA })
  const drvB = new WireGuardLinkDriver({}, { netns: nsB })
  t.after(async () => {
    await drvA.down().catch(() => {})
    await drvB.down().catch(() => {})
    await delNetns(nsA)
    await delNetns(nsB)
  })
  await addNetns(nsA)
  await addNetns(nsB)
  await linkNetns({ ns: nsA, dev: `u${s}a`, addr: '198.18.0.1/30' }, { ns: nsB, dev: `u${s}b`, addr: '198.18.0.2/30' })

  const cluster = clusterPrefix(`test-cluster-${s}`)
  const pA = nodePrefix(cluster, 0x0a01)
  const pB = nodePrefix(cluster, 0x0b02)
  const kA = generateKeyPair()
  const kB = generateKeyPair()
  const cfgA: WireGuardConfig = {
    iface: ifA,
    privateKey: kA.privateKey,
    listenPort: 51820,
    address: `${nodeGateway(pA)}/64`,
    peers: [{ publicKey: kB.publicKey, endpoint: '198.18.0.2:51820', allowedIps: [formatPrefix(pB)] }],
  }
  const cfgB: WireGuardConfig = {
    iface: ifB,
    privateKey: kB.privateKey,
    listenPort: 51820,
    address: `${nodeGateway(pB)}/64`,
    peers: [{ publicKey: kA.publicKey, endpoint: '198.18.0.1:51820', allowedIps: [formatPrefix(pA)], persistentKeepalive: 25 }],
  }
  const kernel = (await inNs(nsA, 'ip', ['link', 'add', 'dev', `k${s}`, 'type', 'wireguard'])).exitCode === 0
  if (kernel) await inNs(nsA, 'ip', ['link', 'del', `k${s}`])

  const rA = await drvA.set(cfgA)
  const rB = await drvB.set(cfgB)
  assert.equal(rA.changed, true)
  assert.equal(rB.changed, true)
  assert.equal(rA.mode, kernel ? 'kernel' : 'wireguard-go')
  const bAddr = nodeGateway(pB)
  assert.ok(await pingUntil(nsA, bAddr), `ping ${bAddr} from ${nsA} through the tunnel`)

  assert.deepEqual(await drvA.set(cfgA), { changed: false, mode: rA.mode, actions: [] })
  assert.equal((await drvB.set(cfgB)).changed, false)

  const st = await drvA.status()
  assert.ok(st)
  assert.equal(st.publicKey, kA.publicKey)
  assert.equal(st.peers.length, 1)
  assert.equal(st.peers[0]!.endpoint, '198.18.0.2:51820')
  assert.ok(st.peers[0]!.latestHandshakeMs !== undefined && st.peers[0]!.rxBytes > 0, 'handshake and bytes received')

  // Route deleted by hand: the next set puts it back.
  await sh('ip', ['-n', nsA, '-6', 'route', 'del', formatPrefix(pB), 'dev', ifA])
  assert.equal(await pingOnce(nsA, bAddr), false, 'no route, no ping')
  const r2 = await drvA.set(cfgA)
  assert.equal(r2.changed, true)
  assert.ok(
    r2.actions.some((a) => a.startsWith('route')),
    r2.actions.join(','),
  )
  assert.ok(await pingUntil(nsA, bAddr), 'ping after route restored')

  // Interface deleted by hand: recreated with keys, peers, address and route.
  await sh('ip', ['-n', nsA, 'link', 'del', ifA])
  const r3 = await drvA.set(cfgA)
  assert.equal(r3.changed, true)
  assert.ok(r3.actions[0]!.startsWith('create interface'), r3.actions.join(','))
  assert.ok(await pingUntil(nsA, bAddr), 'ping after interface recreated')
  assert.equal((await drvA.set(cfgA)).changed, false)

  // A peer change is applied in place.
  const cfgA2 = { ...cfgA, peers: [{ ...cfgA.peers[0]!, persistentKeepalive: 10 }] }
  const r4 = await drvA.set(cfgA2)
  assert.deepEqual(r4.actions, ['sync keys and peers'])

  assert.deepEqual(await drvA.down(), { changed: true })
  assert.deepEqual(await drvB.down(), { changed: true })
  assert.deepEqual(await drvA.down(), { changed: false })
  for (const [ns, iface] of [
    [nsA, ifA],
    [nsB, ifB],
  ] as const) {
    const link = await execa('ip', ['-n', ns, 'link', 'show', 'dev', iface], { reject: false })
    assert.notEqual(link.exitCode, 0, `${iface} removed`)
    assert.deepEqual(await procfsProcessTable.find(['wireguard-go', iface]), [], `no wireguard-go for ${iface}`)
  }
})
