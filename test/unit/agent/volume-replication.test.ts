// Replicated volumes, the pure parts and the file-level sync on real directories: which nodes keep
// the copies, what a sync sends, a primary's tree carried to a replica's by walk → plan → tar → apply
// (real tar), the promotion rule checked on receipt, and where the scheduler sends an ha pod.
import assert from 'node:assert/strict'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import pino from 'pino'
import { LocalVolumes } from '../../../src/agent/volumes/index.ts'
import { VolumeReplication } from '../../../src/agent/volumes/replicas.ts'
import { chooseReplicas, type ManifestEntry, planSync, safeManifestPath, walkManifest } from '../../../src/agent/volumes/replication.ts'
import { createExecaRunner, ManualClock } from '../../../src/effects/index.ts'
import { replicaLag } from '../../../src/model/index.ts'
import { failoverNode, volumeConstraints } from '../../../src/sched/volumes.ts'
import { volumePromotionRefused } from '../../../src/store/trust.ts'
import { tempStore } from '../../helpers/store.ts'

const f = (p: string, s: number, m = '1'): ManifestEntry => ({ p, t: 'f', s, m, mode: 0o644, u: 0, g: 0 })
const d = (p: string, m = '1'): ManifestEntry => ({ p, t: 'd', s: 0, m, mode: 0o755, u: 0, g: 0 })

test('replica choice: deterministic, never the primary, keeps the current ones, moves little when a node joins', () => {
  const nodes = ['a', 'b', 'c', 'd', 'e']
  const one = chooseReplicas('uid-1', 'a', nodes, 2)
  assert.equal(one.length, 2)
  assert.ok(!one.includes('a'))
  assert.deepEqual(chooseReplicas('uid-1', 'a', [...nodes].reverse(), 2), one, 'the order of the member list does not matter')
  // Current replicas stay even when the hash would prefer others.
  const other = nodes.find((n) => n !== 'a' && !one.includes(n))!
  assert.deepEqual(chooseReplicas('uid-1', 'a', nodes, 2, [other]), [
    other,
    chooseReplicas(
      'uid-1',
      'a',
      nodes.filter((n) => n !== other),
      1,
    )[0],
  ])
  // A node joining takes a copy only if it wins the hash; the others keep theirs.
  const more = chooseReplicas('uid-1', 'a', [...nodes, 'f'], 2, one)
  assert.deepEqual(more, one)
  // Fewer eligible nodes than wanted: as many as there are.
  assert.deepEqual(chooseReplicas('uid-1', 'a', ['a', 'b'], 2), ['b'])
  // Different volumes spread over different nodes.
  const picks = new Set(Array.from({ length: 20 }, (_, i) => chooseReplicas(`uid-${i}`, 'a', nodes, 1)[0]))
  assert.ok(picks.size >= 3, `20 volumes picked ${[...picks].join(',')}`)
})

test('sync plan: changed and new files sent, removed paths deepest first, a type change removed then sent, nothing for equal trees', () => {
  const src = [d('.'), d('./a'), f('./a/x', 10, '5'), f('./a/new', 3), f('./same', 7), d('./t')]
  const dst = [d('.'), d('./a'), f('./a/x', 10, '4'), f('./same', 7), d('./gone'), f('./gone/1', 1), d('./gone/sub'), f('./gone/sub/2', 2), f('./t', 1)]
  const plan = planSync(src, dst)
  // ./a holds changes: its metadata goes too (the replica's apply changes its mtime).
  assert.deepEqual(plan.send, ['./a', './a/new', './a/x', './t'])
  assert.deepEqual(
    plan.remove,
    ['./gone', './t'].sort((a, b) => b.split('/').length - a.split('/').length || (a < b ? -1 : 1)),
  )
  assert.equal(plan.bytes, 13)
  assert.deepEqual(planSync(src, src), { send: [], remove: [], bytes: 0 })
  // Everything to a new replica, the root first.
  assert.equal(planSync(src, []).send[0], '.')
  // Owner and mode changes are changes.
  assert.deepEqual(planSync([{ ...f('./k', 1), mode: 0o600 }], [f('./k', 1)]).send, ['./k'])
})

test('manifest paths from a peer: only ./-relative paths without . or .. components', () => {
  for (const p of ['.', './a', './a/b.c', './..x']) assert.ok(safeManifestPath(p), p)
  for (const p of ['', '/etc', 'a', './', './a/../..', './a//b', './.', '../x', './a\0b', 5]) assert.ok(!safeManifestPath(p), String(p))
})

test('a primary tree reaches a replica through walk, plan, tar and apply (real tar), incrementally', async () => {
  const base = mkdtempSync(join(tmpdir(), 'orc-repl-'))
  try {
    const run = createExecaRunner()
    const mk = (n: string) => {
      const v = new LocalVolumes({ base: join(base, n), run, isRoot: false, noLoop: true })
      return v
    }
    const [pri, rep] = [mk('p'), mk('r')]
    const spec = { uid: 'v1', namespace: 'default', name: 'db', sizeBytes: 8 << 20 }
    await pri.ensure(spec)
    await rep.ensure(spec)
    const root = pri.dataOf('v1')
    mkdirSync(join(root, 'dir/sub'), { recursive: true })
    writeFileSync(join(root, 'dir/sub/a.txt'), 'one\n')
    writeFileSync(join(root, 'big'), Buffer.alloc(300_000, 7))
    symlinkSync('dir/sub/a.txt', join(root, 'link'))
    chmodSync(join(root, 'big'), 0o600)
    const sync = async () => {
      const file = join(base, `s-${Date.now()}.tar`)
      let plan = planSync([], [])
      const theirs = await walkManifest(rep.dataOf('v1'))
      const size = await pri.tarPaths('v1', file, false, async (r) => {
        plan = planSync(await walkManifest(r), theirs)
        return plan.send
      })
      await rep.applySync('v1', size > 0 ? file : undefined, plan.remove)
      rmSync(file, { force: true })
      return plan
    }
    const first = await sync()
    assert.ok(first.send.includes('./big') && first.send.includes('./link'))
    assert.equal(readFileSync(join(rep.dataOf('v1'), 'dir/sub/a.txt'), 'utf8'), 'one\n')
    assert.equal(readFileSync(join(rep.dataOf('v1'), 'link'), 'utf8'), 'one\n')
    assert.deepEqual(await walkManifest(rep.dataOf('v1')), await walkManifest(root), 'the replica is the same tree: sizes, mtimes, modes, links')
    // Nothing changed: nothing sent.
    assert.deepEqual((await sync()).send, [])
    // One file changed, one removed: only those.
    writeFileSync(join(root, 'dir/sub/a.txt'), 'two\n')
    utimesSync(join(root, 'dir/sub/a.txt'), new Date(), new Date(Date.now() + 5000))
    rmSync(join(root, 'big'))
    const third = await sync()
    assert.ok(!third.send.includes('./link'))
    assert.ok(third.send.includes('./dir/sub/a.txt'))
    assert.deepEqual(third.remove, ['./big'])
    assert.equal(readFileSync(join(rep.dataOf('v1'), 'dir/sub/a.txt'), 'utf8'), 'two\n')
    assert.ok(!existsSync(join(rep.dataOf('v1'), 'big')))
    assert.deepEqual(await walkManifest(rep.dataOf('v1')), await walkManifest(root))
  } finally {
    rmSync(base, { recursive: true, force: true })
  }
})

test('a removal through a symlink the replica holds does not leave the volume', async () => {
  const base = mkdtempSync(join(tmpdir(), 'orc-repl-'))
  try {
    const outside = join(base, 'outside')
    mkdirSync(outside)
    writeFileSync(join(outside, 'keep'), 'x')
    const rep = new LocalVolumes({ base: join(base, 'r'), run: createExecaRunner(), isRoot: false, noLoop: true })
    await rep.ensure({ uid: 'v1', namespace: 'default', name: 'db', sizeBytes: 8 << 20 })
    symlinkSync(outside, join(rep.dataOf('v1'), 'esc'))
    await rep.applySync('v1', undefined, ['./esc/keep'])
    assert.ok(existsSync(join(outside, 'keep')))
  } finally {
    rmSync(base, { recursive: true, force: true })
  }
})

test('promotion on receipt: a replica node may make itself primary only with an ha pod (or ha VM) bound to it that uses the volume', () => {
  const before = { status: { node: 'a', replicas: { b: { syncedAt: 'x' }, c: {} } } }
  const after = (node: string) => ({ status: { ...before.status, node } })
  const pod = (node: string, policy = 'ha', vol = 'db', ns = 'default') => ({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'p', namespace: ns },
    spec: { policy, volumes: [{ name: 'd', volume: { name: vol } }], containers: [] },
    status: { node },
  })
  const ok = (pods: object[], who = 'b', to = 'b') => volumePromotionRefused(before, after(to), who, 'default', 'db', pods as never)
  assert.equal(ok([pod('b')]), undefined)
  assert.match(ok([pod('b')], 'b', 'c')!, /only a promotion of the writing node itself/)
  assert.match(ok([pod('d')], 'd', 'd')!, /keeps no replica/)
  assert.match(ok([pod('c')])!, /no ha pod or ha vm using it is bound to node b/)
  assert.match(ok([pod('b', 'best-effort')])!, /no ha pod/)
  assert.match(ok([pod('b', 'ha', 'other')])!, /no ha pod/)
  assert.match(ok([pod('b', 'ha', 'db', 'other-ns')])!, /no ha pod/)
  assert.match(volumePromotionRefused(before, undefined, 'b', 'default', 'db', [pod('b')] as never)!, /only a promotion/)
  // An ha VM bound to the node with the volume as a disk, exactly as an ha pod — no wider.
  const vm = (node: string, policy = 'ha', vol = 'db', extra: Record<string, unknown> = {}) => ({
    apiVersion: 'orc/v1',
    kind: 'VirtualMachine',
    metadata: { name: 'v', namespace: 'default' },
    spec: { policy, disks: [{ name: 'data', volume: { name: vol } }], ...extra },
    status: { node },
  })
  const okVm = (vms: object[], who = 'b', to = 'b') => volumePromotionRefused(before, after(to), who, 'default', 'db', [], vms as never)
  assert.equal(okVm([vm('b')]), undefined)
  assert.match(okVm([vm('c')])!, /no ha pod or ha vm using it is bound to node b/)
  assert.match(okVm([vm('b', 'best-effort')])!, /no ha pod or ha vm/)
  assert.match(okVm([vm('b', 'ha', 'other')])!, /no ha pod or ha vm/)
  assert.match(okVm([vm('b', 'ha', 'db', { node: 'b' })])!, /no ha pod or ha vm/, 'a pinned VM never fails over')
  assert.match(okVm([vm('b')], 'b', 'c')!, /only a promotion of the writing node itself/)
})

test('scheduler: an ha pod of a replicated volume goes to the newest alive replica once the primary is lost for its haAfter; others wait', () => {
  const vol = (
    down?: number,
    replicas: { node: string; alive: boolean; syncedAt?: number }[] = [
      { node: 'b', alive: true, syncedAt: 100 },
      { node: 'c', alive: true, syncedAt: 200 },
    ],
  ) => ({ namespace: 'ns', name: 'db', node: 'a', ...(down !== undefined ? { nodeDownMs: down } : {}), replicas })
  const ha = { namespace: 'ns', name: 'p', volumes: [{ name: 'db', writer: true }], haAfterMs: 30_000 }
  const be = { namespace: 'ns', name: 'q', volumes: [{ name: 'db', writer: false }] }
  assert.equal(volumeConstraints([ha], [vol()]).get('ns/p')?.node, 'a', 'primary alive: stays with it')
  assert.equal(volumeConstraints([ha], [vol(10_000)]).get('ns/p')?.node, 'a', 'suspect for less than haAfter: stays')
  assert.equal(volumeConstraints([ha], [vol(30_000)]).get('ns/p')?.node, 'c', 'lost: the newest copy')
  assert.equal(volumeConstraints([be], [vol(30_000)]).get('ns/q')?.node, 'a', 'a best-effort pod waits for the primary')
  const deadC = vol(30_000, [
    { node: 'b', alive: true, syncedAt: 100 },
    { node: 'c', alive: false, syncedAt: 200 },
  ])
  assert.equal(volumeConstraints([ha], [deadC]).get('ns/p')?.node, 'b', 'the dead replica is skipped')
  const never = vol(60_000, [{ node: 'b', alive: true }])
  assert.match(volumeConstraints([ha], [never]).get('ns/p')?.block ?? '', /none of its replicas \(b\) is alive and synced/)
  assert.equal(failoverNode({ ...vol(), nodeGone: true }, 30_000)?.node, 'c', 'a forgotten primary is lost too')
})

test('lag column: the oldest replica copy, never for one not synced yet, - without replicas', () => {
  const now = Date.parse('2026-12-04T12:00:00Z')
  assert.equal(replicaLag({}, now), '-')
  assert.equal(replicaLag({ replicas: { b: { syncedAt: '2026-12-04T11:59:50Z' }, c: { syncedAt: '2026-12-04T11:59:30Z' } } }, now), '30s')
  assert.equal(replicaLag({ replicas: { b: { syncedAt: '2026-12-04T11:59:50Z' }, c: {} } }, now), 'never')
})

test('a replica takes syncs only from the primary, never as the primary, and refuses paths outside the volume; the primary ships a real change set', async () => {
  const { store, cleanup } = await tempStore()
  const dataDir = mkdtempSync(join(tmpdir(), 'orc-repl-'))
  try {
    const w = { author: 'user:admin', now: 1 }
    const v = await store.apply(
      { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'db', namespace: 'default' }, spec: { size: '16Mi', replicas: 2 } } as never,
      w,
    )
    const uid = v.object!.metadata.uid
    const setStatus = (status: Record<string, unknown>) =>
      store.patch({ kind: 'Volume', namespace: 'default', name: 'db' }, [{ path: ['status'], value: status }], { author: 'controller:volume', now: 2 })
    await setStatus({ node: 'a', replicas: { b: {} } })
    type Side = { local: LocalVolumes; repl: VolumeReplication }
    const mk = (node: string): Side => {
      const local = new LocalVolumes({ base: join(dataDir, node, 'volumes'), run: createExecaRunner(), isRoot: false, noLoop: true })
      return {
        local,
        repl: new VolumeReplication({
          store,
          nodeName: node,
          dataDir: join(dataDir, node),
          clock: new ManualClock(Date.parse('2026-12-04T12:00:00Z')),
          log: pino({ level: 'silent' }),
          local,
          peer: {
            request: async (to, req): Promise<unknown> => {
              // The member API between the two, as the primary's peer id.
              const parts = req.path.split('/')
              if (to !== 'b') throw new Error(`no node ${to}`)
              return req.method === 'GET'
                ? b.repl.manifest(parts[3]!, parts[4]!, req.query?.uid, 'peer-a')
                : b.repl.receive(parts[3]!, parts[4]!, req.body as Record<string, unknown>, 'peer-a')
            },
            aliveNodes: () => ['a', 'b'],
            nodeOfPeer: (p) => ({ 'peer-a': 'a', 'peer-b': 'b' })[p],
          },
          writeStatus: async () => {},
          heldHere: () => false,
        }),
      }
    }
    const a = mk('a')
    const b: Side = mk('b')
    await a.local.ensure({ uid, namespace: 'default', name: 'db', sizeBytes: 16 << 20 })
    writeFileSync(join(a.local.dataOf(uid), 'data'), 'hello\n')
    const vol = store.get({ kind: 'Volume', namespace: 'default', name: 'db' })!
    const r = await a.repl.syncOne(vol as never, 'b')
    assert.ok(r.changed >= 1 && r.bytes > 0, JSON.stringify(r))
    assert.equal(readFileSync(join(b.local.dataOf(uid), 'data'), 'utf8'), 'hello\n')
    assert.equal((await a.repl.syncOne(vol as never, 'b')).changed, 0, 'nothing changed: nothing sent')

    // Untrusted input: another member than the primary, the wrong uid, a path outside, a bad offset.
    const body = { uid, id: 'x1', offset: 0, data: '', done: true, remove: [], hasTar: false }
    await assert.rejects(b.repl.receive('default', 'db', body, 'peer-c'), /only the primary of volume\/db \(node a\) may send it copies/)
    await assert.rejects(b.repl.receive('default', 'db', { ...body, uid: 'other' }, 'peer-a'), /is not known on this node/)
    await assert.rejects(
      b.repl.receive('default', 'db', { ...body, remove: ['./../../etc'] }, 'peer-a'),
      /remove: "\.\/\.\.\/\.\.\/etc" is not a path inside the volume/,
    )
    await assert.rejects(b.repl.receive('default', 'db', { ...body, remove: ['.'] }, 'peer-a'), /not a path inside/)
    await assert.rejects(b.repl.receive('default', 'db', { ...body, offset: 5 }, 'peer-a'), /offset 5: this node has 0 bytes/)
    await assert.rejects(b.repl.receive('default', 'db', { ...body, id: '../x' }, 'peer-a'), /id: a sync id/)
    assert.equal(readFileSync(join(b.local.dataOf(uid), 'data'), 'utf8'), 'hello\n', 'nothing refused changed the copy')
    // Once b is the primary (a promotion), a stale old primary's sync is refused.
    await setStatus({ node: 'b', replicas: { a: {} } })
    await assert.rejects(b.repl.receive('default', 'db', body, 'peer-a'), /this node \(b\) is the primary of volume\/db: it takes no copies/)
  } finally {
    await cleanup()
    rmSync(dataDir, { recursive: true, force: true })
  }
})
