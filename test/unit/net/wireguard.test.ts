import assert from 'node:assert/strict'
import { test } from 'node:test'
import {
  canonicalEndpoint,
  FakePodNetworkDriver,
  FakeWireGuardDriver,
  generateKeyPair,
  isOrcErrorLike,
  normalizeWireGuardConfig,
  parseWgDump,
  type RecordedCommand,
  recordingRunner,
  renderWgConfig,
  seededRandom,
  type WireGuardConfig,
  WireGuardLinkDriver,
} from './helpers.ts'

const kA = generateKeyPair(seededRandom(1))
const kB = generateKeyPair(seededRandom(2))
const config: WireGuardConfig = {
  iface: 'orc0',
  privateKey: kA.privateKey,
  listenPort: 51820,
  address: 'fd12:3456:789a:1::1/64',
  peers: [{ publicKey: kB.publicKey, endpoint: '198.18.0.2:51820', allowedIps: ['fd12:3456:789a:2::/64'], persistentKeepalive: 25 }],
}

test('wg dump parsing', () => {
  const dump = [
    `${kA.privateKey}\t${kA.publicKey}\t51820\toff`,
    `${kB.publicKey}\t(none)\t[fd00::2]:51820\tfd12:3456:789a:2::/64,10.0.0.0/8\t1700000000\t1234\t5678\t25`,
    `${kA.publicKey}\t(none)\t(none)\t(none)\t0\t0\t0\toff`,
  ].join('\n')
  const d = parseWgDump(dump)
  assert.equal(d.listenPort, 51820)
  assert.deepEqual(d.peers[0], {
    publicKey: kB.publicKey,
    endpoint: '[fd00::2]:51820',
    allowedIps: ['fd12:3456:789a:2::/64', '10.0.0.0/8'],
    latestHandshakeMs: 1_700_000_000_000,
    rxBytes: 1234,
    txBytes: 5678,
    persistentKeepalive: 25,
  })
  assert.deepEqual(d.peers[1], { publicKey: kA.publicKey, allowedIps: [], rxBytes: 0, txBytes: 0 })
})

test('config validation names the bad field', () => {
  assert.throws(() => normalizeWireGuardConfig({ ...config, iface: 'much-too-long-name' }), isOrcErrorLike('invalid'))
  assert.throws(() => normalizeWireGuardConfig({ ...config, privateKey: 'nope' }), isOrcErrorLike('invalid'))
  assert.throws(() => canonicalEndpoint('example.com:51820'), isOrcErrorLike('invalid'))
  assert.equal(canonicalEndpoint('[FD00:0::2]:51820'), '[fd00::2]:51820')
  const text = renderWgConfig(normalizeWireGuardConfig(config))
  assert.match(
    text,
    /^\[Interface\]\nPrivateKey = .+\nListenPort = 51820\n\n\[Peer\]\nPublicKey = .+\nAllowedIPs = fd12:3456:789a:2::\/64\nEndpoint = 198\.18\.0\.2:51820\nPersistentKeepalive = 25\n$/,
  )
})

/** A tiny simulated host answering the commands the driver issues (no kernel module). */
function simulatedHost() {
  const state = { link: false, up: false, dump: '', addrs: [] as string[], routes: [] as string[] }
  const run = recordingRunner((c: RecordedCommand) => {
    const line = [c.cmd, ...c.args].join(' ')
    if (line.includes('type wireguard')) return { exitCode: 2, stderr: 'Error: Unknown device type.' }
    if (c.cmd === 'wireguard-go') {
      state.link = true
      state.dump = `(none)\t${'A'.repeat(43)}=\t0\toff`
      return {}
    }
    if (line.startsWith('ip -j -d link show')) {
      return state.link
        ? { stdout: JSON.stringify([{ ifname: 'orc0', mtu: 1420, flags: state.up ? ['UP'] : [], linkinfo: { info_kind: 'tun' } }]) }
        : { exitCode: 1, stderr: 'Device "orc0" does not exist.' }
    }
    if (line === 'wg show orc0 dump') return state.link ? { stdout: state.dump } : { exitCode: 1 }
    if (c.cmd === 'sh' && line.includes('wg syncconf')) {
      const cfg = normalizeWireGuardConfig(config)
      const p = cfg.peers[0]!
      state.dump = `${cfg.privateKey}\t${kA.publicKey}\t51820\toff\n${p.publicKey}\t(none)\t${p.endpoint}\t${p.allowedIps.join(',')}\t0\t0\t0\t${p.persistentKeepalive}`
      return {}
    }
    if (line.startsWith('ip -j addr show')) {
      return { stdout: JSON.stringify([{ addr_info: state.addrs.map((a) => ({ family: 'inet6', local: a.split('/')[0], prefixlen: 64, scope: 'global' })) }]) }
    }
    if (line.startsWith('ip -6 addr replace')) state.addrs.push(c.args[3]!)
    if (line.endsWith('up')) state.up = true
    if (line.startsWith('ip -j -6 route show')) return { stdout: JSON.stringify(state.routes.map((dst) => ({ dst }))) }
    if (line.startsWith('ip -j -4 route show')) return { stdout: '[]' }
    if (line === 'ip -batch -')
      state.routes.push(
        ...c
          .opts!.input!.split('\n')
          .filter(Boolean)
          .map((l) => l.split(' ')[2]!),
      )
    return {}
  })
  return { run, state }
}

test('falls back to wireguard-go, keeps the private key out of argv, and a repeat set is a no-op', async () => {
  const { run } = simulatedHost()
  const processes = { find: async () => [] as number[], kill: () => {} }
  const drv = new WireGuardLinkDriver({ run, processes })
  const r = await drv.set(config)
  assert.equal(r.mode, 'wireguard-go')
  assert.deepEqual(r.actions, [
    'create interface (wireguard-go)',
    'sync keys and peers',
    'add address fd12:3456:789a:1::1/64',
    'link up',
    'route fd12:3456:789a:2::/64 via orc0',
  ])
  const kernelTry = run.calls.findIndex((c) => c.args.includes('wireguard'))
  const goStart = run.calls.findIndex((c) => c.cmd === 'wireguard-go')
  assert.ok(kernelTry >= 0 && goStart > kernelTry, 'kernel module tried first')
  assert.ok('WG_PROCESS_FOREGROUND' in run.calls[goStart]!.opts!.env! && run.calls[goStart]!.opts!.env!.WG_PROCESS_FOREGROUND === undefined)
  for (const c of run.calls) assert.ok(![c.cmd, ...c.args].join(' ').includes(kA.privateKey), 'private key never in argv')
  assert.ok(
    run.calls.some((c) => c.opts?.input?.includes(kA.privateKey)),
    'private key passed on stdin',
  )

  const before = run.calls.length
  assert.deepEqual(await drv.set(config), { changed: false, mode: 'wireguard-go', actions: [] })
  const writes = run.calls.slice(before).filter((c) => !c.args.includes('show'))
  assert.deepEqual(writes, [], 'no-op set only reads')
})

test('fake drivers follow the same changed semantics', async () => {
  const wg = new FakeWireGuardDriver()
  assert.equal((await wg.set(config)).changed, true)
  assert.equal((await wg.set({ ...config, peers: [{ ...config.peers[0]!, allowedIps: ['FD12:3456:789a:2::/64'] }] })).changed, false)
  assert.equal((await wg.status())!.publicKey, kA.publicKey)
  assert.deepEqual(await wg.down(), { changed: true })
  assert.equal(await wg.status(), undefined)

  const pods = new FakePodNetworkDriver(seededRandom(3))
  const r1 = await pods.set({ pods: [{ id: 'web', ipv6: 'fd12:3456:789a:1::abcd' }] })
  assert.equal(r1.changed, true)
  assert.equal((await pods.set({ pods: [{ id: 'web', ipv6: 'fd12:3456:789a:1:0::abcd' }] })).changed, false)
  assert.equal(r1.pods[0]!.netns, 'orc-pod-web')
  assert.match(r1.pods[0]!.ipv4, /^10\.88\./)
  assert.deepEqual((await pods.set({ pods: [] })).actions, ['remove pod web'])
})
