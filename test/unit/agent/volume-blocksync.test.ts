// Block-level replication of a VM's Volume disk, the parts without qemu: the delta's ranges from
// `qemu-img map`, the pieces they travel in, the checks of a received piece (peer input), and the
// replica's side on a real image file — staged whole, applied through its journal (replayed after a
// crash), an incremental sync refused on a copy that is not at its base, a mount forgetting the base.
import assert from 'node:assert/strict'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import pino from 'pino'
import { applyBlockRanges, type BlockRange, checkBlockRanges, deltaRanges, planPieces, readRanges } from '../../../src/agent/volumes/blocksync.ts'
import { LocalVolumes } from '../../../src/agent/volumes/index.ts'
import { VolumeReplication } from '../../../src/agent/volumes/replicas.ts'
import { createExecaRunner, ManualClock } from '../../../src/effects/index.ts'
import { tempStore } from '../../helpers/store.ts'

const MiB = 1024 * 1024

test('delta ranges: data with its place in the delta file, zeros merged, unwritten extents zero only in a full copy', () => {
  // What qemu-img map said of a real backup's delta (qemu 7.2).
  const map = [
    { start: 0, length: 1048576, depth: 0, present: false, zero: true, data: false },
    { start: 1048576, length: 65536, depth: 0, present: true, zero: false, data: true, offset: 327680 },
    { start: 1114112, length: 7274496, depth: 0, present: false, zero: true, data: false },
    { start: 8388608, length: 65536, depth: 0, present: true, zero: true, data: false },
    { start: 8454144, length: 65536, depth: 0, present: true, zero: true, data: false },
  ]
  assert.deepEqual(deltaRanges(map, false), [
    { start: 1048576, length: 65536, zero: false, src: 327680 },
    { start: 8388608, length: 131072, zero: true },
  ])
  const full = deltaRanges(map, true)
  assert.deepEqual(full[0], { start: 0, length: 1048576, zero: true })
  assert.equal(
    full.reduce((n, r) => n + r.length, 0),
    8519680,
    'a full copy covers every extent',
  )
  // A long data extent is cut in ranges of at most 4 MiB, each pointing into the file.
  const long = deltaRanges([{ start: 0, length: 10 * MiB, present: true, zero: false, data: true, offset: 5 * MiB }], false)
  assert.deepEqual(
    long.map((r) => [r.start, r.length, r.src]),
    [
      [0, 4 * MiB, 5 * MiB],
      [4 * MiB, 4 * MiB, 9 * MiB],
      [8 * MiB, 2 * MiB, 13 * MiB],
    ],
  )
  assert.throws(() => deltaRanges([{ start: 0, length: 512, present: true, zero: false, data: true }], false), /no offset in its file/)
})

test('pieces: at most the chunk of data each, zero ranges ride along, one empty piece for an empty delta', () => {
  const r = (start: number, length: number, zero = false) => ({ start, length, zero, ...(zero ? {} : { src: start }) })
  const pieces = planPieces([r(0, 4 * MiB), r(4 * MiB, 60 * MiB, true), r(64 * MiB, 4 * MiB), r(68 * MiB, 4 * MiB), r(72 * MiB, 512)], 8 * MiB)
  assert.deepEqual(
    pieces.map((p) => p.map((x) => x.start / MiB)),
    [
      [0, 4, 64],
      [68, 72],
    ],
  )
  for (const p of pieces) assert.ok(p.reduce((n, x) => n + (x.zero ? 0 : x.length), 0) <= 8 * MiB)
  assert.deepEqual(planPieces([], 8 * MiB), [[]])
})

test('a received piece is checked: shape, 512-byte boundaries, inside the image, data length', () => {
  assert.deepEqual(
    checkBlockRanges(
      [
        [0, 512, 'd'],
        [1024, 4096, 'z'],
      ],
      512,
      8192,
    ),
    [
      [0, 512, 'd'],
      [1024, 4096, 'z'],
    ],
  )
  assert.throws(() => checkBlockRanges('x', 0, 8192), /ranges: a list/)
  assert.throws(() => checkBlockRanges([[0, 100, 'd']], 100, 8192), /ranges\[0\].*512-byte boundaries/)
  assert.throws(() => checkBlockRanges([[0, 512, 'x']], 512, 8192), /ranges\[0\]/)
  assert.throws(() => checkBlockRanges([[-512, 512, 'z']], 0, 8192), /ranges\[0\]/)
  assert.throws(() => checkBlockRanges([[8192, 512, 'z']], 0, 8192), /past the end of the 8192-byte image/)
  assert.throws(() => checkBlockRanges([[0, 1024, 'd']], 512, 8192), /add up to 1024 bytes, the piece holds 512/)
})

test('a replica applies block syncs to its unmounted image through a journal; incrementals only on their base; a mount forgets the base', async () => {
  const { store, cleanup } = await tempStore()
  const dataDir = mkdtempSync(join(tmpdir(), 'orc-blk-'))
  try {
    const w = { author: 'user:admin', now: 1 }
    const v = await store.apply(
      { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'disk', namespace: 'default' }, spec: { size: '8Mi', replicas: 2 } } as never,
      w,
    )
    const uid = v.object!.metadata.uid
    await store.patch({ kind: 'Volume', namespace: 'default', name: 'disk' }, [{ path: ['status'], value: { node: 'a', replicas: { b: {} } } }], {
      author: 'controller:volume',
      now: 2,
    })
    // The replica's copy: an image "file system" of 1 MiB (a loop volume, not mounted; mount calls recorded).
    const base = join(dataDir, 'volumes')
    mkdirSync(join(base, uid, 'mnt'), { recursive: true })
    writeFileSync(join(base, uid, 'volume.json'), JSON.stringify({ uid, namespace: 'default', name: 'disk', sizeBytes: MiB, backing: 'loop' }))
    const image = join(base, uid, 'disk.img')
    writeFileSync(image, Buffer.alloc(MiB, 0x11))
    const mounts: string[] = []
    const local = new LocalVolumes({
      base,
      isRoot: false,
      mountinfo: () => '',
      run: async (cmd, args) => {
        mounts.push([cmd, ...args].join(' '))
        return { exitCode: 0, stdout: '', stderr: '' }
      },
    })
    const repl = new VolumeReplication({
      store,
      nodeName: 'b',
      dataDir,
      clock: new ManualClock(0),
      log: pino({ level: 'silent' }),
      local,
      peer: { request: async () => ({}), aliveNodes: () => ['a', 'b'], nodeOfPeer: (p) => ({ 'peer-a': 'a' })[p] },
      writeStatus: async () => {},
      heldHere: () => false,
    })
    const send = (body: Record<string, unknown>) => repl.receiveBlocks('default', 'disk', { uid, ...body }, 'peer-a')
    const data = (byte: number, n: number) => Buffer.alloc(n, byte).toString('base64')
    // A full sync in two pieces: zeros, then two data ranges.
    assert.deepEqual(
      await send({
        id: 's1',
        piece: 0,
        offset: 0,
        full: true,
        ranges: [
          [0, 512 * 1024, 'z'],
          [512 * 1024, 4096, 'd'],
        ],
        data: data(0xaa, 4096),
      }),
      {
        node: 'b',
        applied: false,
      },
    )
    assert.equal(readFileSync(image)[0], 0x11, 'nothing is written before the whole sync is here')
    await send({ id: 's1', piece: 1, offset: 4096, ranges: [[MiB - 512, 512, 'd']], data: data(0xbb, 512), done: true })
    let img = readFileSync(image)
    assert.equal(img[0], 0, 'the zero range')
    assert.equal(img[512 * 1024], 0xaa)
    assert.equal(img[512 * 1024 + 4096], 0x11, 'untouched past the range')
    assert.equal(img[MiB - 1], 0xbb)
    assert.equal(local.blockBase(uid), 's1', 'the copy is at sync s1')
    assert.deepEqual(await repl.blockBase('default', 'disk', uid, 'peer-a'), { node: 'b', base: 's1' })

    // Untrusted input: another member, a piece out of order, ranges past the end, an incremental on another base.
    await send({ id: 's2', piece: 0, offset: 0, base: 's1', ranges: [], data: '', done: true })
    await assert.rejects(
      repl.receiveBlocks('default', 'disk', { uid, id: 's3', piece: 0, offset: 0, full: true, ranges: [], data: '' }, 'peer-c'),
      /only the primary of volume\/disk \(node a\) may send it copies/,
    )
    assert.equal(local.blockBase(uid), 's2', 'an empty incremental on s1 moves the copy to s2')
    await assert.rejects(send({ id: 's3', piece: 1, offset: 0, ranges: [], data: '' }), /piece 1 at offset 0: this node has 0 pieces/)
    await assert.rejects(send({ id: 's3', piece: 0, offset: 0, base: 's2', ranges: [[MiB, 512, 'z']], data: '' }), /past the end/)
    await assert.rejects(
      send({ id: 's3', piece: 0, offset: 0, base: 's1', ranges: [[0, 512, 'z']], data: '', done: true }),
      /is not at block sync s1 \(it is at s2\): a full sync is needed/,
    )
    await assert.rejects(send({ id: 's3', piece: 0, offset: 0, ranges: [[0, 512, 'z']], data: '', done: true }), /is not at block sync undefined/)
    img = readFileSync(image)
    assert.equal(img[512 * 1024], 0xaa, 'nothing refused changed the copy')

    // A crash after the journal was written, before it was applied: the next contact applies it.
    const dir = join(dataDir, 'volumes', '.replicas', uid)
    writeFileSync(join(dir, 'incoming-s4.blk'), Buffer.alloc(1024, 0xcc))
    writeFileSync(join(dir, 'incoming-s4.ranges'), `${JSON.stringify([[0, 1024, 'd']])}\n`)
    writeFileSync(
      join(dir, 'apply.json'),
      JSON.stringify({ kind: 'block', id: 's4', data: join(dir, 'incoming-s4.blk'), ranges: join(dir, 'incoming-s4.ranges') }),
    )
    assert.deepEqual(await repl.blockBase('default', 'disk', uid, 'peer-a'), { node: 'b', base: 's4' })
    assert.equal(readFileSync(image)[1023], 0xcc)
    assert.ok(!existsSync(join(dir, 'apply.json')) && !existsSync(join(dir, 'incoming-s4.blk')), 'the journal and staged files are gone')

    // The file-level sync resumes (the VM let go): the copy is mounted, and is no longer at a block sync.
    assert.equal(mounts.length, 0, 'block syncs never mounted the copy')
    await repl.manifest('default', 'disk', uid, 'peer-a')
    assert.match(mounts.join('\n'), /^mount -o loop,nodev,nosuid .*disk\.img/)
    assert.equal(local.blockBase(uid), undefined)
    await assert.rejects(send({ id: 's5', piece: 0, offset: 0, base: 's4', ranges: [], data: '', done: true }), /a full sync is needed/)
    // A delta file an agent killed mid-sync left behind goes at the next start.
    mkdirSync(join(dataDir, 'volumes', '.blocksync'), { recursive: true })
    writeFileSync(join(dataDir, 'volumes', '.blocksync', 'left.qcow2'), 'x')
    repl.dropLeftovers()
    assert.ok(!existsSync(join(dataDir, 'volumes', '.blocksync')))
  } finally {
    await cleanup()
    rmSync(dataDir, { recursive: true, force: true })
  }
})

test('readRanges reads each data range from its place in the delta file, skipping zero ranges', () => {
  const dir = mkdtempSync(join(tmpdir(), 'orc-blk-read-'))
  try {
    const file = join(dir, 'delta')
    writeFileSync(file, Buffer.concat([Buffer.alloc(512, 1), Buffer.alloc(512, 2), Buffer.alloc(512, 3)]))
    const out = readRanges(file, [
      { start: 0, length: 512, zero: false, src: 1024 },
      { start: 512, length: 4096, zero: true },
      { start: 8192, length: 512, zero: false, src: 0 },
    ])
    assert.deepEqual([...out.subarray(0, 1), ...out.subarray(512, 513)], [3, 1])
    assert.equal(out.length, 1024)
    assert.throws(() => readRanges(file, [{ start: 0, length: 1024, zero: false, src: 1024 }]), /ends before 1536/)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test('applying: long zero ranges through fallocate --zero-range (or written when it fails), data ranges from the staged data', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'orc-blk-apply-'))
  try {
    const image = join(dir, 'disk.img')
    const data = join(dir, 'staged')
    writeFileSync(data, Buffer.alloc(4096, 0x77))
    const ranges: BlockRange[] = [
      [0, 2 * MiB, 'z'],
      [2 * MiB, 4096, 'd'],
      [3 * MiB, 4096, 'z'],
    ]
    const run = createExecaRunner()
    for (const works of [true, false]) {
      writeFileSync(image, Buffer.alloc(4 * MiB, 0x11))
      const asked: number[][] = []
      const r = await applyBlockRanges(image, data, ranges, async (start, length) => {
        asked.push([start, length])
        if (!works) return false
        return (await run('fallocate', ['--zero-range', '--offset', String(start), '--length', String(length), image])).exitCode === 0
      })
      const img = readFileSync(image)
      assert.equal(r.bytes, 4096)
      assert.deepEqual(asked, [[0, 2 * MiB]], 'only the long zero range is handed over')
      assert.ok(
        img.subarray(0, 2 * MiB).every((b) => b === 0),
        `zeros (fallocate ${works ? 'worked' : 'failed: written'})`,
      )
      assert.ok(img.subarray(2 * MiB, 2 * MiB + 4096).every((b) => b === 0x77))
      assert.ok(img.subarray(3 * MiB, 3 * MiB + 4096).every((b) => b === 0))
      assert.equal(img[2 * MiB + 4096], 0x11, 'untouched between the ranges')
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
