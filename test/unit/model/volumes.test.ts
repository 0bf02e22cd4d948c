// Pod volume sources (emptyDir, volume, hostPath), mounts (readOnly, subPath) and the Volume kind:
// bad input is refused with the path and the rule.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { hostPathVolumesOf, normalizeManifest, volumeRefsOf } from '../../../src/model/index.ts'

const pod = (volumes: unknown[], mounts: unknown[] = []) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name: 'p' },
  spec: { volumes, containers: [{ name: 'main', image: 'busybox', volumeMounts: mounts }] },
})
const vol = (spec: Record<string, unknown>) => ({ apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'data' }, spec })

test('the new sources are accepted, and the persistent and host ones are found', () => {
  const p = normalizeManifest(
    pod(
      [
        { name: 'a', emptyDir: {} },
        { name: 'b', emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } },
        { name: 'c', volume: { name: 'data' } },
        { name: 'd', hostPath: { path: '/srv/shared', type: 'DirectoryOrCreate' } },
      ],
      [
        { name: 'c', mountPath: '/data' },
        { name: 'c', mountPath: '/logs', subPath: 'logs/app', readOnly: true },
      ],
    ),
  )
  assert.deepEqual(volumeRefsOf(p.spec), ['data'])
  assert.deepEqual(hostPathVolumesOf(p.spec), ['/srv/shared'])
})

test('bad volumes and mounts are refused naming the field', () => {
  const cases: [unknown, RegExp][] = [
    [pod([{ name: 'a', emptyDir: {}, volume: { name: 'x' } }]), /spec\.volumes\[0\].*exactly one source .*got emptyDir, volume/],
    [pod([{ name: 'a' }]), /exactly one source \(secret, config, emptyDir, volume, hostPath\); got none/],
    [pod([{ name: 'a', hostPath: { path: 'relative/dir' } }]), /spec\.volumes\[0\]\.hostPath\.path.*absolute path/],
    [pod([{ name: 'a', hostPath: { path: '/srv/../etc' } }]), /hostPath\.path.*no \. or \.\. component/],
    [pod([{ name: 'a', hostPath: { path: '/' } }]), /hostPath\.path.*not \//],
    [pod([{ name: 'a', emptyDir: { sizeLimit: '1Gi' } }]), /emptyDir\.sizeLimit.*only with medium: Memory/],
    [pod([{ name: 'a', emptyDir: {} }], [{ name: 'a', mountPath: '/x', subPath: '../escape' }]), /volumeMounts\[0\]\.subPath.*no empty, \. or \.\. component/],
    [pod([{ name: 'a', emptyDir: {} }], [{ name: 'a', mountPath: '/x', subPath: '/abs' }]), /subPath.*a relative path/],
    [pod([{ name: 'a', config: { name: 'c' } }], [{ name: 'a', mountPath: '/x', subPath: 'k' }]), /subPath.*not for Config and Secret volumes/],
  ]
  for (const [m, re] of cases) assert.throws(() => normalizeManifest(m), re)
})

test('the Volume kind: a size of at least 8Mi, replicas (not with a driver) and a sync interval in range, a schedule that parses', () => {
  const v = normalizeManifest(vol({ size: '1Gi', node: 'a', snapshotSchedule: '0 3 * * *' }))
  assert.equal(v.kind, 'Volume')
  assert.throws(() => normalizeManifest(vol({ size: '1Mi' })), /spec\.size.*at least 8Mi/)
  assert.throws(() => normalizeManifest(vol({})), /spec\.size/)
  assert.equal(normalizeManifest(vol({ size: '1Gi', replicas: 3, syncIntervalSeconds: 5 })).spec?.replicas, 3)
  assert.throws(() => normalizeManifest(vol({ size: '1Gi', replicas: 2, driver: 'bind' })), /spec\.replicas.*driver's business/)
  assert.throws(() => normalizeManifest(vol({ size: '1Gi', replicas: 17 })), /spec\.replicas/)
  assert.throws(() => normalizeManifest(vol({ size: '1Gi', replicas: 2, syncIntervalSeconds: 1 })), /spec\.syncIntervalSeconds/)
  assert.throws(() => normalizeManifest(vol({ size: '1Gi', snapshotSchedule: '0 25 * * *' })), /spec\.snapshotSchedule/)
  assert.throws(() => normalizeManifest(vol({ size: '1Gi', driver: '../evil' })), /spec\.driver/)
  assert.throws(() => normalizeManifest(vol({ size: '1Gi', restoreFrom: 'abc' })), /spec\.restoreFrom.*needs spec\.node/)
})
