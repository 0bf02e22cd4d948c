// The node side of volumes: local volume planning through a fake command runner, the exec driver
// contract against a real shell script, subPath resolution against real symlinks, and the API's
// delete and change checks.
import assert from 'node:assert/strict'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import pino from 'pino'
import { subPathOf } from '../../../src/agent/pods/worker.ts'
import { podVolumeUses, withVolumeConstraints } from '../../../src/agent/sched/index.ts'
import { admitVolumeChange, admitVolumeDelete, ExecDrivers, LocalVolumes, VolumeService } from '../../../src/agent/volumes/index.ts'
import { readManifests } from '../../../src/cli/manifests.ts'
import { type CommandRunner, createExecaRunner, ManualClock } from '../../../src/effects/index.ts'
import { normalizeManifest, type Pod, type Volume } from '../../../src/model/index.ts'
import { tempStore } from '../../helpers/store.ts'

function fakeRunner(fail: Record<string, string> = {}): { run: CommandRunner; calls: string[] } {
  const calls: string[] = []
  const run: CommandRunner = async (cmd, args) => {
    calls.push([cmd, ...args].join(' '))
    if (fail[cmd] !== undefined) return { stdout: '', stderr: fail[cmd]!, exitCode: 1 }
    // fallocate makes the file the volume is made of.
    if (cmd === 'fallocate') writeFileSync(args[args.length - 1]!, '')
    // tar -cf FILE: a snapshot file of some bytes.
    if (cmd === 'tar' && args.includes('-cf')) writeFileSync(args[args.indexOf('-cf') + 1]!, 'x'.repeat(10240))
    return { stdout: '', stderr: '', exitCode: 0 }
  }
  return { run, calls }
}

const tmp = () => mkdtempSync(join(tmpdir(), 'orc-vol-'))
const me = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 }
const spec = { uid: 'u1', namespace: 'default', name: 'data', sizeBytes: 64 * 1024 * 1024 }

test('a loop volume: space reserved, ext4 made, mounted once; a restart mounts it again', {
  skip: process.getuid?.() !== 0 || !existsSync('/dev/loop-control') ? 'needs root and loop devices' : undefined,
}, async () => {
  const dir = tmp()
  const { run, calls } = fakeRunner()
  let mounted = ''
  const lv = new LocalVolumes({ base: join(dir, 'volumes'), run, isRoot: true, mountinfo: () => mounted })
  const info = await lv.ensure(spec, me)
  assert.equal(info.backing, 'loop')
  assert.deepEqual(
    calls.map((c) => c.split(' ')[0]),
    ['fallocate', 'mkfs.ext4', 'mount'],
  )
  assert.match(calls[0]!, /^fallocate -l 67108864 /)
  assert.match(calls[2]!, /^mount -o loop,nodev,nosuid .*\/u1\/disk\.img .*\/u1\/mnt$/)
  // Mounted: nothing more to do. After a reboot (not mounted): only mount.
  mounted = `1 2 0:1 / ${lv.dataOf('u1')} rw - ext4 /dev/loop0 rw\n`
  await lv.ensure(spec, me)
  assert.equal(calls.length, 3)
  mounted = ''
  await lv.ensure(spec, me)
  assert.deepEqual(
    calls.slice(3).map((c) => c.split(' ')[0]),
    ['mount'],
  )
  rmSync(dir, { recursive: true, force: true })
})

test('a volume larger than the free space is refused before anything is made', {
  skip: process.getuid?.() !== 0 || !existsSync('/dev/loop-control') ? 'needs root and loop devices' : undefined,
}, async () => {
  const dir = tmp()
  const { run, calls } = fakeRunner()
  const lv = new LocalVolumes({ base: join(dir, 'volumes'), run, isRoot: true, mountinfo: () => '' })
  await assert.rejects(lv.ensure({ ...spec, sizeBytes: 2 ** 60 }, me), /volume data needs [0-9.]+ TiB but the node has .* free under/)
  assert.deepEqual(calls, [])
  assert.equal(lv.info('u1'), undefined)
  rmSync(dir, { recursive: true, force: true })
})

test('mkfs failing leaves no half-made volume, and the error names the step', async (t) => {
  if (process.getuid?.() !== 0 || !existsSync('/dev/loop-control')) return t.skip('needs root and loop devices')
  const dir = tmp()
  const { run } = fakeRunner({ 'mkfs.ext4': 'mkfs.ext4: Device size reported to be zero' })
  const lv = new LocalVolumes({ base: join(dir, 'volumes'), run, isRoot: true, mountinfo: () => '' })
  await assert.rejects(lv.ensure(spec, me), /make the filesystem of volume data: mkfs\.ext4 exited 1: mkfs\.ext4: Device size reported to be zero/)
  assert.equal(lv.info('u1'), undefined)
  assert.deepEqual(
    readdirNames(join(dir, 'volumes')).filter((n) => !n.startsWith('.deleted')),
    [],
  )
  rmSync(dir, { recursive: true, force: true })
})

function readdirNames(d: string): string[] {
  return existsSync(d) ? readdirSync(d) : []
}

test('without loop devices a volume is a directory, and says why; deleted data is kept for the grace period, then purged', async () => {
  const dir = tmp()
  const { run, calls } = fakeRunner()
  const lv = new LocalVolumes({ base: join(dir, 'volumes'), run, isRoot: process.getuid?.() === 0, noLoop: true, mountinfo: () => '' })
  const info = await lv.ensure(spec, me)
  assert.equal(info.backing, 'directory')
  assert.match(info.backingReason ?? '', /loop backing turned off/)
  assert.deepEqual(calls, [])
  writeFileSync(join(lv.dataOf('u1'), 'keep.txt'), 'precious')
  assert.equal(await lv.trash('u1', 1_000), true)
  assert.equal(lv.info('u1'), undefined)
  assert.deepEqual(
    lv.deleted().map((d) => [d.uid, d.at, d.info?.name]),
    [['u1', 1_000, 'data']],
  )
  // Within the grace period: nothing purged; restored under the new uid with its file.
  assert.deepEqual(lv.purge(5_000, 10_000), [])
  lv.restore('u1', 'u2')
  assert.equal(readFileSync(join(lv.dataOf('u2'), 'keep.txt'), 'utf8'), 'precious')
  assert.equal(lv.info('u2')?.uid, 'u2')
  assert.throws(() => lv.restore('u1', 'u3'), /no deleted volume u1 on this node/)
  // Deleted again and past the grace period: gone.
  await lv.trash('u2', 20_000)
  assert.deepEqual(lv.purge(25_000, 10_000), [])
  assert.deepEqual(lv.purge(30_001, 10_000), ['u2'])
  assert.deepEqual(lv.deleted(), [])
  rmSync(dir, { recursive: true, force: true })
})

test('the exec driver contract: JSON in, JSON out; a failure and a hang are named, with the driver and the step', async () => {
  const dir = tmp()
  const log = join(dir, 'calls.log')
  const driver = (name: string, body: string) => {
    writeFileSync(join(dir, name), `#!/bin/sh\n${body}\n`)
    chmodSync(join(dir, name), 0o755)
  }
  driver('fake', `read -r req; echo "$1 $req" >> ${log}; echo '{}'`)
  driver('broken', `cat >/dev/null; echo '{"message":"export /srv/nfs is not reachable"}'; exit 3`)
  driver('stuck', 'sleep 30')
  const d = new ExecDrivers({ dir, run: createExecaRunner(), timeoutMs: 500 })
  const req = { volume: { namespace: 'default', name: 'data', uid: 'u1', sizeBytes: 1024, options: { server: 'nfs.lab' } }, node: 'a' }
  assert.deepEqual(await d.call('fake', { ...req, op: 'attach' }), {})
  await d.call('fake', { ...req, op: 'mount', target: '/mnt/x' })
  const lines = readFileSync(log, 'utf8').trim().split('\n')
  assert.equal(lines.length, 2)
  assert.ok(lines[0]!.startsWith('attach '))
  assert.deepEqual(JSON.parse(lines[1]!.slice('mount '.length)), { ...req, op: 'mount', target: '/mnt/x' })
  await assert.rejects(d.call('broken', { ...req, op: 'attach' }), /volume driver broken attach of volume data: export \/srv\/nfs is not reachable/)
  const t0 = Date.now()
  await assert.rejects(d.call('stuck', { ...req, op: 'mount', target: '/x' }), /volume driver stuck mount of volume data: no answer in 1 s \(killed\)/)
  assert.ok(Date.now() - t0 < 10_000)
  await assert.rejects(d.call('absent', { ...req, op: 'attach' }), /volume driver absent is not installed on node a/)
  assert.throws(() => d.pathOf('../../bin/sh'), /is not a driver name/)
  rmSync(dir, { recursive: true, force: true })
})

test('subPath: made when missing, never outside the volume through a symlink the pod left', () => {
  const dir = tmp()
  const root = join(dir, 'vol')
  mkdirSync(root)
  mkdirSync(join(dir, 'outside'))
  assert.equal(subPathOf(root, 'logs/app', me), join(root, 'logs/app'))
  assert.ok(existsSync(join(root, 'logs/app')))
  symlinkSync(join(dir, 'outside'), join(root, 'evil'))
  assert.throws(() => subPathOf(root, 'evil', me), /subPath evil leaves its volume \(through a symlink\)/)
  assert.throws(() => subPathOf(root, 'evil/deeper', me), /leaves its volume/)
  assert.equal(existsSync(join(dir, 'outside', 'deeper')), false, 'nothing was made outside')
  symlinkSync('logs', join(root, 'inside'))
  assert.equal(subPathOf(root, 'inside/app', me), join(root, 'logs/app'))
  assert.throws(() => subPathOf(root, '../x', me), /a relative path with no empty, \. or \.\. component/)
  writeFileSync(join(root, 'file'), '')
  assert.throws(() => subPathOf(root, 'file', me), /is not a directory/)
  rmSync(dir, { recursive: true, force: true })
})

test('a Volume in use is not deleted (the users are named); a placed one keeps its size and node', () => {
  const p = (name: string, vol: string, phase?: string, restartPolicy?: string) =>
    ({
      kind: 'Pod',
      metadata: { name, namespace: 'default' },
      spec: { containers: [], volumes: [{ name: 'd', volume: { name: vol } }], ...(restartPolicy ? { restartPolicy } : {}) },
      ...(phase ? { status: { phase } } : {}),
    }) as unknown as Pod
  const pods = [p('db', 'data'), p('other', 'logs'), p('job', 'data', 'Succeeded', 'Never')]
  assert.throws(() => admitVolumeDelete(pods, 'default', 'data'), /volume\/data is used by pod\/db: delete or change it first \(nothing was deleted\)/)
  admitVolumeDelete(pods, 'default', 'unused')
  admitVolumeDelete(pods, 'prod', 'data')
  const placed = { kind: 'Volume', metadata: { name: 'data', namespace: 'default' }, spec: { size: '1Gi' }, status: { node: 'a' } } as unknown as Volume
  const next = (spec: Record<string, unknown>) => ({ kind: 'Volume', metadata: { name: 'data', namespace: 'default' }, spec }) as unknown as Volume
  admitVolumeChange(next({ size: '1Gi', snapshotSchedule: '0 3 * * *' }), placed)
  assert.throws(() => admitVolumeChange(next({ size: '2Gi' }), placed), /size 1Gi cannot change once placed \(resize is not built\)/)
  assert.throws(() => admitVolumeChange(next({ size: '1Gi', node: 'b' }), placed), /lives on node a; spec\.node b cannot move it/)
  admitVolumeChange(next({ size: '2Gi' }), { ...placed, status: {} } as Volume)
})

test('VolumeService on a real store: placed at first attach, one writer at the node, detach recorded, delete kept aside, restore', async () => {
  const { store, cleanup } = await tempStore()
  const dataDir = tmp()
  const clock = new ManualClock(1_000_000)
  const svc = new VolumeService({
    store,
    nodeName: 'a',
    dataDir,
    clock,
    log: pino({ level: 'silent' }),
    run: fakeRunner().run,
    isRoot: process.getuid?.() === 0,
    noLoop: true,
  })
  const w = { author: 'user:admin', now: 1 }
  await store.apply({ apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'data', namespace: 'default' }, spec: { size: '64Mi' } } as never, w)
  const podOf = async (name: string, readOnly = false) => {
    await store.apply(
      {
        apiVersion: 'orc/v1',
        kind: 'Pod',
        metadata: { name, namespace: 'default' },
        spec: {
          volumes: [{ name: 'd', volume: { name: 'data' } }],
          containers: [{ name: 'm', image: 'busybox', volumeMounts: [{ name: 'd', mountPath: '/d', readOnly }] }],
        },
      } as never,
      w,
    )
    await store.patch({ kind: 'Pod', namespace: 'default', name }, [{ path: ['status', 'node'], value: 'a' }], { author: 'controller:scheduler', now: 2 })
    return store.get({ kind: 'Pod', namespace: 'default', name })!
  }
  const one = await podOf('one')
  const dirs = await svc.prepare(one, 'uid-one', me, false)
  const path = dirs.get('d')!
  writeFileSync(join(path, 'f'), 'kept')
  const vol = () => store.get({ kind: 'Volume', namespace: 'default', name: 'data' })!
  assert.deepEqual([vol().status?.node, vol().status?.phase, vol().status?.attachedTo, vol().status?.backing], ['a', 'Attached', 'default/one', 'directory'])
  // A second writer bound here by a stale view is refused at the node; a reader is not.
  const two = await podOf('two')
  await assert.rejects(svc.prepare(two, 'uid-two', me, false), /volume data is in use by pod one \(one writer at a time\)/)
  const reader = await podOf('reader', true)
  assert.equal((await svc.prepare(reader, 'uid-r', me, false)).get('d'), path)
  // Detach is written; then the second writer gets it, with the data.
  await svc.release(one)
  assert.equal(vol().status?.phase, 'Available')
  assert.equal(vol().status?.attachedTo, undefined)
  assert.equal((await svc.prepare(two, 'uid-two', me, false)).get('d'), path)
  assert.equal(readFileSync(join(path, 'f'), 'utf8'), 'kept')
  const hist = await store.history({ kind: 'Volume', namespace: 'default', name: 'data' })
  assert.deepEqual(
    hist.filter((r) => r.author === 'controller:volume').map((r) => r.reason),
    ['attached to pod one on node a', 'detached from pod one on node a', 'attached to pod two on node a'],
  )
  // Finished for good (restartPolicy Never): the next tick records the detach.
  await store.patch({ kind: 'Pod', namespace: 'default', name: 'two' }, [{ path: ['spec', 'restartPolicy'], value: 'Never' }], w)
  await store.patch({ kind: 'Pod', namespace: 'default', name: 'two' }, [{ path: ['status', 'phase'], value: 'Succeeded' }], {
    author: 'controller:lifecycle',
    now: 3,
  })
  await svc.tick()
  assert.deepEqual([vol().status?.phase, vol().status?.attachedTo], ['Available', undefined])
  // hostPath without the grant is refused at the node too.
  const hp = { ...one, spec: { ...one.spec, volumes: [{ name: 'h', hostPath: { path: dataDir } }] } } as never
  await assert.rejects(svc.prepare(hp, 'uid-h', me, false), /needs a SecurityPolicy grant of hostPath/)
  // Deleted: kept aside, then restored under the new object with its file.
  const uid = vol().metadata.uid
  await svc.release(two)
  await store.delete({ kind: 'Volume', namespace: 'default', name: 'data' }, w)
  await svc.reconcile([`Volume/default/data`])
  assert.equal(svc.deletedOf('default', 'data')?.uid, uid)
  await store.apply(
    { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'data', namespace: 'default' }, spec: { size: '64Mi', node: 'a', restoreFrom: uid } } as never,
    w,
  )
  await svc.reconcile([`Volume/default/data`])
  assert.equal(vol().status?.phase, 'Available')
  assert.equal(readFileSync(join(svc.local.dataOf(vol().metadata.uid), 'f'), 'utf8'), 'kept')
  // A schedule: at the next tick after a minute boundary, an auto- snapshot (no pod: `stopped`).
  await store.apply(
    {
      apiVersion: 'orc/v1',
      kind: 'Volume',
      metadata: { name: 'data', namespace: 'default' },
      spec: { size: '64Mi', node: 'a', restoreFrom: uid, snapshotSchedule: '* * * * *' },
    } as never,
    w,
  )
  await clock.advance(120_000)
  await svc.tick()
  const snaps = vol().status?.snapshots ?? []
  assert.equal(snaps.length, 1)
  assert.match(snaps[0]!.name, /^auto-/)
  assert.equal(snaps[0]!.consistency, 'stopped')
  await svc.tick()
  assert.equal(vol().status?.snapshots?.length, 1, 'one per tick of the schedule, not per agent tick')
  // emptyDirs of pods not on this node are swept; those of pods here stay.
  const three = await podOf('three')
  const own = join(dataDir, 'volumes', '.pods', three.metadata.uid, 'x')
  const ghost = join(dataDir, 'volumes', '.pods', 'ghost', 'x')
  for (const d of [own, ghost]) mkdirSync(d, { recursive: true })
  await svc.tick()
  assert.equal(existsSync(own), true)
  assert.equal(existsSync(ghost), false)
  svc.stop()
  await cleanup()
  rmSync(dataDir, { recursive: true, force: true })
})

test('the scheduler view: a pod writes a volume unless every mount of it is read-only; a forgotten node blocks', () => {
  assert.deepEqual(
    podVolumeUses({
      volumes: [
        { name: 'a', volume: { name: 'va' } },
        { name: 'b', volume: { name: 'vb' } },
        { name: 'c', volume: { name: 'vc' } },
        { name: 'e', emptyDir: {} },
      ],
      containers: [
        {
          volumeMounts: [
            { name: 'a', readOnly: true },
            { name: 'b', readOnly: true },
          ],
        },
        { volumeMounts: [{ name: 'b' }] },
      ],
    }),
    [
      { name: 'va', writer: false },
      { name: 'vb', writer: true },
      { name: 'vc', writer: true },
    ],
  )
  const stored = (o: Record<string, unknown>) =>
    ({ ...o, metadata: { namespace: 'default', createdAt: '2026-01-01T00:00:00Z', ...(o.metadata as object) } }) as never
  const pods = [stored({ kind: 'Pod', metadata: { name: 'p' }, spec: { volumes: [{ name: 'd', volume: { name: 'data' } }], containers: [] } })]
  const vols = [stored({ kind: 'Volume', metadata: { name: 'data' }, spec: { size: '1Gi' }, status: { node: 'old' } })]
  const nodes = [stored({ kind: 'Node', metadata: { name: 'old', namespace: '' }, status: { forgotten: { at: 'x', by: 'user:admin' } } })]
  const view = withVolumeConstraints({ nodes: [], pods: [{ namespace: 'default', name: 'p' }], now: 0 }, pods, vols, nodes)
  assert.equal(view.pods[0]?.volumeNode, 'old')
  assert.match(view.pods[0]?.volumeBlock ?? '', /volume data lives on node old, which is forgotten/)
})

test('examples/volume.yaml is valid, and its pod is a writer of its volume', async () => {
  const docs = await readManifests([new URL('../../../examples/volume.yaml', import.meta.url).pathname])
  const objs = docs.map((d) => normalizeManifest(d.value))
  assert.deepEqual(
    objs.map((o) => o.kind),
    ['Volume', 'Pod'],
  )
  assert.deepEqual(podVolumeUses(objs[1]!.spec), [{ name: 'data', writer: true }])
})
