import assert from 'node:assert/strict'
import { test } from 'node:test'
import {
  clockFindings,
  type DoctorHost,
  dataDirFindings,
  diskFindings,
  kernelFindings,
  podRuntimeFindings,
  wireguardFindings,
  wireguardMode,
} from '../../../src/agent/ops/doctor.ts'

function host(
  o: {
    files?: Record<string, string>
    paths?: string[]
    bins?: string[]
    free?: number
    stats?: Record<string, { mode: number; uid: number; isDirectory: boolean }>
  } = {},
): DoctorHost {
  const files = o.files ?? {}
  const paths = new Set([...(o.paths ?? []), ...Object.keys(files), ...Object.keys(o.stats ?? {})])
  return {
    read: (p) => files[p],
    exists: (p) => paths.has(p),
    which: (b) => ((o.bins ?? []).includes(b) ? `/usr/bin/${b}` : undefined),
    statfs: () => ({ freeBytes: o.free ?? 50 * 1024 ** 3, totalBytes: 100 * 1024 ** 3 }),
    stat: (p) => o.stats?.[p],
    kernelRelease: () => '6.1.0-18-amd64',
    uid: () => 0,
    nodeVersion: () => '20.20.0',
  }
}

test('WireGuard mode: kernel module, else wireguard-go with a tun device, else none (an error with its fix)', () => {
  assert.equal(wireguardMode(host({ paths: ['/sys/module/wireguard'] })), 'kernel')
  assert.equal(wireguardMode(host({ paths: ['/lib/modules/6.1.0-18-amd64/kernel/drivers/net/wireguard/wireguard.ko'] })), 'kernel')
  assert.equal(wireguardMode(host({ paths: ['/dev/net/tun'], bins: ['wireguard-go'] })), 'wireguard-go')
  assert.equal(wireguardMode(host({ bins: ['wireguard-go'] })), 'none', 'wireguard-go without /dev/net/tun cannot run')
  const none = wireguardFindings(host({ bins: ['ip', 'nft'] }))
  const wg = none.find((f) => f.check === 'wireguard')!
  assert.equal(wg.status, 'error')
  assert.match(wg.fix!, /apt-get install wireguard-go/)
  assert.equal(none.find((f) => f.check === 'wireguard-tools')!.status, 'error')
})

test('kernel findings: disabled user namespaces and IPv6 are errors with the sysctl that fixes them', () => {
  const f = kernelFindings(host({ files: { '/proc/sys/user/max_user_namespaces': '0\n', '/proc/sys/net/ipv6/conf/all/disable_ipv6': '1\n' } }))
  assert.deepEqual(
    f.filter((x) => x.status === 'error').map((x) => [x.check, x.fix]),
    [
      ['user-namespaces', 'sysctl -w user.max_user_namespaces=15000'],
      ['ipv6', 'sysctl -w net.ipv6.conf.all.disable_ipv6=0'],
    ],
  )
})

test('disk: warns under 1 GiB free, errors under 200 MiB', () => {
  assert.equal(diskFindings(host({ paths: ['/var/lib/orc'], free: 10 * 1024 ** 3 }), '/var/lib/orc')[0]!.status, 'ok')
  assert.equal(diskFindings(host({ paths: ['/var/lib/orc'], free: 0.5 * 1024 ** 3 }), '/var/lib/orc')[0]!.status, 'warn')
  assert.equal(diskFindings(host({ paths: ['/var/lib/orc'], free: 0.1 * 1024 ** 3 }), '/var/lib/orc')[0]!.status, 'error')
})

test('data dir: a world-readable key or a group-writable dir is an error naming the chmod', () => {
  const ok = {
    '/d': { mode: 0o711, uid: 0, isDirectory: true },
    '/d/db': { mode: 0o700, uid: 0, isDirectory: true },
    '/d/peer.key': { mode: 0o600, uid: 0, isDirectory: false },
  }
  assert.deepEqual(
    dataDirFindings(host({ stats: ok }), '/d').map((f) => f.status),
    ['ok'],
  )
  const bad = dataDirFindings(
    host({ stats: { ...ok, '/d': { mode: 0o775, uid: 0, isDirectory: true }, '/d/peer.key': { mode: 0o644, uid: 0, isDirectory: false } } }),
    '/d',
  )
  assert.deepEqual(
    bad.map((f) => f.fix),
    ['chmod 0711 /d', 'chmod 600 /d/peer.key'],
  )
  assert.equal(dataDirFindings(host(), '/nope')[0]!.status, 'info')
})

test('clock skew: ok under 1 s, warn from 1 s, error from 30 s; unreachable peers say why', () => {
  const f = clockFindings([
    { peer: 'a', skewMs: 12 },
    { peer: 'b', skewMs: -4200 },
    { peer: 'c', skewMs: 45_000 },
    { peer: 'd', skewMs: null, error: 'timed out' },
  ])
  assert.deepEqual(
    f.map((x) => x.status),
    ['ok', 'warn', 'error', 'warn'],
  )
  assert.equal(f[0]!.message, 'clock behind a by 12ms')
  assert.equal(f[1]!.message, 'clock ahead of b by 4.2s')
  assert.match(f[2]!.fix!, /timedatectl set-ntp true/)
  assert.match(f[3]!.message, /timed out/)
  assert.equal(clockFindings([])[0]!.status, 'info')
})

test('pod runtimes: gVisor says which platform runs here and why the others do not, or why none does', () => {
  const sandbox = { ok: true, detail: 'bubblewrap 0.8.0' }
  const oci = { ok: true, detail: 'runc 1.1.5' }
  const tried = [
    { platform: 'kvm' as const, ok: false, detail: 'no container within 8 s (hangs)' },
    { platform: 'systrap' as const, ok: false, detail: 'unknown platform: systrap' },
    { platform: 'ptrace' as const, ok: true, detail: 'a container ran in 180 ms' },
  ]
  const ok = podRuntimeFindings({
    sandbox,
    oci,
    gvisor: { ok: true, version: 'runsc version 0.0~20221219.0', platform: 'ptrace', tried, detail: 'ptrace: a container ran in 180 ms' },
  })
  const g = ok.find((f) => f.check === 'gvisor')!
  assert.equal(g.status, 'ok')
  assert.equal(
    g.message,
    'gVisor available: runsc version 0.0~20221219.0, platform ptrace: a container ran in 180 ms (not usable here: kvm: no container within 8 s (hangs); systrap: unknown platform: systrap)',
  )
  const missing = podRuntimeFindings({ sandbox, oci, gvisor: { ok: false, detail: 'runsc not found' } }).find((f) => f.check === 'gvisor')!
  assert.equal(missing.status, 'warn')
  assert.match(missing.message, /runsc not found \(pods with runtime: gvisor cannot start\)/)
  assert.equal(missing.fix, 'apt-get install runsc')
  const none = podRuntimeFindings({
    sandbox,
    oci,
    gvisor: {
      ok: false,
      version: 'runsc version 0.0~20221219.0',
      tried: [{ platform: 'ptrace', ok: false, detail: 'operation not permitted' }],
      detail: 'ptrace: operation not permitted',
    },
  }).find((f) => f.check === 'gvisor')!
  assert.equal(none.status, 'warn')
  assert.match(none.message, /cannot start a container on any platform here: ptrace: operation not permitted/)
  assert.match(none.fix!, /ptrace/)
})
