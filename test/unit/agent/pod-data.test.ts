/** Pods and their Configs and Secrets: the spec's rules, resolution on the node, volume files, mounts. */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { admitPodData, changedRefs, type DataLookup, resolvePodData } from '../../../src/agent/pods/refs.ts'
import { PodDataFiles } from '../../../src/agent/pods/volumes.ts'
import { ManualClock } from '../../../src/effects/index.ts'
import { dataRefsOf, normalizeManifest, OrcError, type PodSpec, type Secret } from '../../../src/model/index.ts'
import { buildBwrapArgs, buildOciConfig, bwrapEnvArgs, ensureMountPoint } from '../../../src/runtime/index.ts'
import { Keyring, resealSecret, sealSecret } from '../../../src/secrets/index.ts'

let n = 0
const seeded = (len: number) => {
  const b = Buffer.alloc(len)
  for (let i = 0; i < len; i++) b[i] = (n++ * 37 + 11) & 0xff
  return b
}
const ring = Keyring.generate(seeded, new ManualClock(0).now())

const podWith = (spec: Record<string, unknown>, container: Record<string, unknown> = {}) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name: 'p' },
  spec: { containers: [{ name: 'main', image: 'busybox', ...container }], ...spec },
})

function issuesOf(m: unknown): string {
  try {
    normalizeManifest(m)
    return ''
  } catch (err) {
    return (err as Error).message
  }
}

test('pod spec: valueFrom, envFrom, volumes and volumeMounts are checked at apply, each problem named', () => {
  assert.equal(
    issuesOf(
      podWith(
        { volumes: [{ name: 'db', secret: { name: 'db', items: [{ key: 'password', path: 'conf/pw' }] } }] },
        {
          env: [{ name: 'A', valueFrom: { config: { name: 'app', key: 'a', optional: true } } }],
          envFrom: [{ secret: 'db', prefix: 'DB_' }],
          volumeMounts: [{ name: 'db', mountPath: '/etc/db', readOnly: true }],
        },
      ),
    ),
    '',
  )
  const bad = issuesOf(
    podWith(
      {
        volumes: [
          { name: 'v', secret: { name: 'a' }, config: { name: 'b' } },
          { name: 'w' },
          { name: 'x', config: { name: 'c', items: [{ key: 'k', path: '../k' }] } },
        ],
      },
      {
        env: [{ name: 'A', value: 'x', valueFrom: { secret: { name: 's', key: 'k' } } }, { name: 'B', valueFrom: {} }, { name: 'C' }],
        envFrom: [{ secret: 's', config: 'c' }],
        volumeMounts: [
          { name: 'nope', mountPath: '/m' },
          { name: 'v', mountPath: 'rel' },
          { name: 'v', mountPath: '/proc/x' },
          { name: 'v', mountPath: '/a/../b', readOnly: false },
        ],
      },
    ),
  )
  for (const want of [
    'spec.volumes[0]: exactly one source (secret, config, emptyDir, volume, hostPath); got secret, config',
    'spec.volumes[1]: exactly one source (secret, config, emptyDir, volume, hostPath); got none',
    'spec.volumes[2].config.items[0].path: no empty, . or .. component',
    'spec.containers[0].env[0]: value and valueFrom: give one',
    'spec.containers[0].env[1].valueFrom: exactly one of secret or config',
    'spec.containers[0].env[2]: value or valueFrom is required',
    'spec.containers[0].envFrom[0]: exactly one of secret or config',
    'spec.containers[0].volumeMounts[0].name: no volume named nope in spec.volumes',
    'spec.containers[0].volumeMounts[1].mountPath: an absolute path',
    "spec.containers[0].volumeMounts[2].mountPath: not under /proc (the sandbox's own)",
    'spec.containers[0].volumeMounts[3].mountPath: no . or .. component',
    'spec.containers[0].volumeMounts[3].readOnly: Config and Secret volumes are read-only',
  ])
    assert.ok(bad.includes(want), `${want}\nin: ${bad}`)
  assert.deepEqual(
    dataRefsOf({
      containers: [{ env: [{ valueFrom: { secret: { name: 'db' } } }], envFrom: [{ config: 'app' }] }],
      volumes: [{ secret: { name: 'tls' } }, { config: { name: 'app' } }],
    }),
    ['config/app', 'secret/db', 'secret/tls'],
  )
})

const secret = (name: string, spec: { data?: Record<string, string>; binaryData?: Record<string, string> }, existing?: Secret): Secret =>
  sealSecret(ring, seeded, { apiVersion: 'orc/v1', kind: 'Secret', metadata: { name, namespace: 'ns' }, spec } as unknown as Secret, existing)

function lookupOf(objs: { configs?: Record<string, any>; secrets?: Record<string, Secret> }, keyring: Keyring | null = ring): DataLookup {
  return {
    config: (name) => (objs.configs?.[name] ? { metadata: { revision: 3 }, spec: objs.configs[name] } : undefined),
    secret: (name) => (objs.secrets?.[name] ? { metadata: { revision: 5 }, spec: objs.secrets[name]!.spec } : undefined),
    keyring: () => keyring ?? undefined,
  }
}

test('resolution: envFrom first (prefix; keys that are not names, and binary values, left out), then env; volume files per key or item', () => {
  const db = secret('db', { data: { password: 'pw1', user: 'u', 'not-a-name': 'x' }, binaryData: { blob: 'AAEC' } })
  const spec = {
    containers: [
      {
        name: 'main',
        image: 'i',
        envFrom: [{ secret: 'db', prefix: 'DB_' }, { config: 'app' }],
        env: [
          { name: 'mode', value: 'override' },
          { name: 'PW', valueFrom: { secret: { name: 'db', key: 'password' } } },
          { name: 'GONE', valueFrom: { config: { name: 'app', key: 'nope', optional: true } } },
        ],
      },
    ],
    volumes: [
      { name: 'all', secret: { name: 'db' } },
      { name: 'some', config: { name: 'app', items: [{ key: 'mode', path: 'etc/mode.conf' }] } },
    ],
  } as PodSpec
  const r = resolvePodData(spec, 'ns', lookupOf({ configs: { app: { data: { mode: 'prod' } } }, secrets: { db } }))
  assert.deepEqual(r.env.get('main'), { DB_password: 'pw1', DB_user: 'u', mode: 'override', PW: 'pw1' })
  assert.deepEqual(
    r.volumes.map((v) => ({ name: v.name, secret: v.secret, files: v.files.map((f) => `${f.path}=${f.data.toString('hex')}`) })),
    [
      { name: 'all', secret: true, files: ['blob=000102', `not-a-name=${Buffer.from('x').toString('hex')}`, 'password=707731', 'user=75'] },
      { name: 'some', secret: false, files: [`etc/mode.conf=${Buffer.from('prod').toString('hex')}`] },
    ],
  )
  assert.deepEqual(r.revisions, { 'secret/db': 5, 'config/app': 3 })
})

test('resolution: a missing object or key, binary data in env, or no keyring yet, each stops the start with one line naming it', () => {
  const db = secret('db', { data: { password: 'pw' }, binaryData: { cert: 'AAEC' } })
  const one = (env: unknown[], keyring: Keyring | null = ring, volumes: unknown[] = []) => {
    try {
      resolvePodData({ containers: [{ name: 'main', image: 'i', env }], volumes } as PodSpec, 'ns', lookupOf({ secrets: { db } }, keyring))
      return ''
    } catch (err) {
      assert.ok(err instanceof OrcError)
      return err.message
    }
  }
  assert.equal(one([{ name: 'A', valueFrom: { secret: { name: 'other', key: 'k' } } }]), 'secret/other not found in namespace ns')
  assert.equal(one([{ name: 'A', valueFrom: { secret: { name: 'other', key: 'k', optional: true } } }]), '')
  assert.equal(one([{ name: 'A', valueFrom: { secret: { name: 'db', key: 'k' } } }]), 'secret/db has no key k (env A of container main)')
  assert.match(one([{ name: 'A', valueFrom: { secret: { name: 'db', key: 'cert' } } }]), /^container main env A: secret\/db key cert holds binary data/)
  assert.match(one([{ name: 'A', valueFrom: { secret: { name: 'db', key: 'password' } } }], null), /does not hold the cluster data key yet/)
  assert.equal(one([], ring, [{ name: 'v', config: { name: 'cfg' } }]), 'config/cfg not found in namespace ns')
})

test('a change is a change of values: a re-seal under a rotated key restarts nothing; a new value names the Secret and its revision', () => {
  const v1 = secret('db', { data: { password: 'pw1' } })
  const spec = { containers: [{ name: 'main', image: 'i', envFrom: [{ secret: 'db' }] }] } as PodSpec
  const before = resolvePodData(spec, 'ns', lookupOf({ secrets: { db: v1 } })).fingerprints
  ring.rotate(seeded, 1)
  const resealed = resealSecret(ring, seeded, v1)
  assert.notEqual(resealed.spec!.sealed!.password!.value, v1.spec!.sealed!.password!.value)
  const same = resolvePodData(spec, 'ns', lookupOf({ secrets: { db: resealed } }))
  assert.deepEqual(changedRefs(before, same.fingerprints, same.revisions), [])
  const v2 = resolvePodData(spec, 'ns', lookupOf({ secrets: { db: secret('db', { data: { password: 'pw2' } }) } }))
  assert.deepEqual(changedRefs(before, v2.fingerprints, v2.revisions), ['secret/db changed (revision 5)'])
})

test('apply refuses a pod whose env takes binary data (stored Secret, or a Secret or Config in the same batch)', () => {
  const pod = (from: Record<string, unknown>) => ({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'web', namespace: 'default' },
    spec: { containers: [{ name: 'main', image: 'i', env: [{ name: 'CERT', valueFrom: from }] }] },
  })
  const stored = { ...secret('tls', { binaryData: { cert: 'AAEC' } }), metadata: { name: 'tls', namespace: 'default' } }
  assert.throws(
    () => admitPodData(pod({ secret: { name: 'tls', key: 'cert' } }) as any, [], () => stored as any),
    /^OrcError: pod\/web: container main env CERT: secret\/tls key cert holds binary data, which cannot be an environment variable/,
  )
  const cfg = { apiVersion: 'orc/v1', kind: 'Config', metadata: { name: 'c', namespace: 'default' }, spec: { binaryData: { b: 'AAEC' } } }
  assert.throws(() => admitPodData(pod({ config: { name: 'c', key: 'b' } }) as any, [cfg as any], () => undefined), /config\/c key b holds binary data/)
  admitPodData(pod({ config: { name: 'c', key: 'b' } }) as any, [], () => undefined)
})

test('volume files: on a tmpfs only; Secret files 0400 in 0500 directories, Config files 0444; removed with the pod', () => {
  const disk = mkdtempSync(join(tmpdir(), 'orc-vol-'))
  try {
    assert.throws(() => new PodDataFiles(join(disk, 'vols')).write('u1', [], { uid: 0, gid: 0 }), /is not a tmpfs: refusing to write Secret files there/)
  } finally {
    rmSync(disk, { recursive: true, force: true })
  }
  const files = new PodDataFiles(join('/dev/shm', `orc-unit-${process.pid}`))
  const me = { uid: process.getuid!(), gid: process.getgid!() }
  const dirs = files.write(
    'u1',
    [
      { name: 's', secret: true, files: [{ path: 'a/pw', data: Buffer.from('x') }] },
      { name: 'c', secret: false, files: [{ path: 'mode', data: Buffer.from('y') }] },
    ],
    me,
  )
  const mode = (p: string) => (statSync(p).mode & 0o777).toString(8)
  assert.equal(mode(dirs.get('s')!), '500')
  assert.equal(mode(join(dirs.get('s')!, 'a')), '500')
  assert.equal(mode(join(dirs.get('s')!, 'a/pw')), '400')
  assert.equal(statSync(join(dirs.get('s')!, 'a/pw')).uid, me.uid)
  assert.equal(mode(join(dirs.get('c')!, 'mode')), '444')
  assert.throws(() => files.write('u2', [{ name: 'v', secret: true, files: [{ path: '../x', data: Buffer.from('') }] }], me), /leaves the volume/)
  files.remove('u1')
  files.remove('u2')
  assert.throws(() => statSync(files.base), /ENOENT/)
})

test('mounts: bound read-only after the image, /tmp and /run (sandbox) and as ro binds (oci); a mount point never follows an image symlink', () => {
  const image = { rootfs: '/img', config: { entrypoint: [], cmd: ['sh'], env: {} } }
  const spec = { id: 'p.c', image: '/img', logDir: '/l', mounts: [{ source: '/dev/shm/orc/u/db', destination: '/etc/db', readOnly: true }] }
  const args = buildBwrapArgs({ spec, image, uid: 65534, gid: 65534 })
  const at = args.indexOf('--ro-bind', args.indexOf('/tmp'))
  assert.deepEqual(args.slice(at, at + 3), ['--ro-bind', '/dev/shm/orc/u/db', '/etc/db'])
  // The environment (Secrets) reaches bwrap through a pipe (--args FD), not its world-readable argv.
  const withEnv = { ...spec, env: { PW: 'hunter2' } }
  const piped = buildBwrapArgs({ spec: withEnv, image, uid: 1, gid: 1, envArgsFd: 5 })
  assert.ok(!piped.includes('hunter2') && !piped.includes('--setenv'))
  assert.deepEqual(piped.slice(piped.indexOf('--args'), piped.indexOf('--args') + 2), ['--args', '5'])
  assert.deepEqual(bwrapEnvArgs(withEnv, image).slice(-3), ['--setenv', 'PW', 'hunter2'])
  assert.throws(() => bwrapEnvArgs({ ...spec, env: { PW: 'a\0--bind' } }, image), /environment variable PW holds a NUL byte/)
  const { config } = buildOciConfig({
    spec,
    image,
    uid: 65534,
    gid: 65534,
    hostIdBase: 1_000_000,
    seccomp: false,
    layout: { version: 2, places: {} } as any,
    cgroupName: 'x',
  })
  assert.deepEqual((config.mounts as any[]).at(-1), {
    destination: '/etc/db',
    type: 'bind',
    source: '/dev/shm/orc/u/db',
    options: ['rbind', 'nosuid', 'nodev', 'noexec', 'ro'],
  })
  const root = mkdtempSync(join(tmpdir(), 'orc-rootfs-'))
  try {
    mkdirSync(join(root, 'etc'))
    ensureMountPoint(root, '/etc/db/conf')
    assert.ok(statSync(join(root, 'etc/db/conf')).isDirectory())
    symlinkSync('/', join(root, 'evil'))
    assert.throws(() => ensureMountPoint(root, '/evil/x'), /the image has a symlink on the way \(\/evil\)/)
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})
