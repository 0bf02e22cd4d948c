import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import { ManualClock } from '../../../src/effects/index.ts'
import {
  type BlobSource,
  BlobStore,
  type Descriptor,
  ImagePuller,
  type ImagePullerOptions,
  type PullProgress,
  parseReference,
} from '../../../src/images/index.ts'
import { isOrcError } from '../../../src/model/index.ts'
import { chunks, dir, FakeRegistry, file, type LayerSpec } from './fake-registry.ts'

const root = mkdtempSync(join(tmpdir(), 'orc-pull-'))
after(() => rmSync(root, { recursive: true, force: true }))
let n = 0

function setup(reg: FakeRegistry, opts: ImagePullerOptions = {}, storeOpts?: ConstructorParameters<typeof BlobStore>[1]) {
  const base = join(root, `p${++n}`)
  const blobs = new BlobStore(join(base, 'blobs'), storeOpts)
  const puller = new ImagePuller(blobs, join(base, 'cache'), { client: () => reg, ...opts })
  return { blobs, puller, base }
}

const ref = (digest: string, tag = '1.0') => ({ ...parseReference(`fake.test:5000/team/app:${tag}`), digest })

/** Three layers, one per compression, the top one hiding a file of the bottom one. */
function layered(): LayerSpec[] {
  return [
    { compression: 'gzip', entries: [dir('bin/'), file('bin/hello', '#!/bin/sh\necho hello\n', 0o755), file('etc/motd', 'base\n'), file('etc/gone', 'x')] },
    { compression: 'zstd', entries: [dir('etc/'), file('etc/motd', 'from the zstd layer\n'), file('etc/.wh.gone', '')] },
    { compression: 'none', entries: [dir('srv/'), file('srv/data.txt', 'plain tar\n')] },
  ]
}

function random(seed: number, size: number): Buffer {
  const b = Buffer.alloc(size)
  let x = seed >>> 0 || 1
  for (let i = 0; i < size; i++) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    b[i] = x & 0xff
  }
  return b
}

test('gzip, zstd and plain-tar layers of an index are pulled for this platform and unpack to the right files', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', layered(), { index: true, cmd: ['/bin/hello'] })
  const { puller, blobs } = setup(reg)
  const digest = await puller.resolveDigest(parseReference('fake.test:5000/team/app:1.0'))
  assert.equal(digest, img.digest)
  const progress: PullProgress[] = []
  const res = await puller.pull(ref(digest), { onProgress: (p) => progress.push(p) })
  assert.equal(res.digest, img.digest)
  assert.equal(res.manifestDigest, img.manifestDigest)
  assert.equal(res.configDigest, img.configDigest)
  assert.equal(res.layers.length, 3)
  const total = [...img.blobs.values()].reduce((s, b) => s + b.length, 0)
  assert.equal(res.totalBytes, total)
  assert.deepEqual(res.bytes, { registry: total, peers: 0, cached: 0 })
  for (const d of img.blobs.keys()) assert.ok(blobs.has(d), d)
  const last = progress.at(-1)!
  assert.deepEqual(last, { phase: 'done', doneBytes: total, totalBytes: total })
  // The other platform's manifest was never fetched.
  assert.equal(reg.totalServed(), img.blobs.size)

  const out = puller.unpack(res.digest)
  assert.equal(out.digest, img.manifestDigest)
  assert.equal(out.rootfs, join(puller.cacheDir, img.manifestDigest.replace(':', '-'), 'rootfs'))
  assert.equal(readFileSync(join(out.rootfs, 'bin/hello'), 'utf8'), '#!/bin/sh\necho hello\n')
  assert.equal(readFileSync(join(out.rootfs, 'etc/motd'), 'utf8'), 'from the zstd layer\n')
  assert.equal(existsSync(join(out.rootfs, 'etc/gone')), false)
  assert.equal(readFileSync(join(out.rootfs, 'srv/data.txt'), 'utf8'), 'plain tar\n')
  assert.deepEqual(out.config.cmd, ['/bin/hello'])
  assert.deepEqual(readdirSync(puller.cacheDir), [img.manifestDigest.replace(':', '-')])

  // A second pull fetches nothing.
  const again = await puller.pull(ref(digest))
  assert.deepEqual(again.bytes, { registry: 0, peers: 0, cached: total })
  assert.equal(reg.totalServed(), img.blobs.size)
})

test('Docker v2 manifest lists and manifests are pulled and unpacked too', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', 'docker', [{ compression: 'gzip', entries: [file('hello.txt', 'docker\n')] }], { index: true, docker: true })
  const { puller } = setup(reg)
  const res = await puller.pull(ref(img.digest, 'docker'))
  assert.equal(res.manifestDigest, img.manifestDigest)
  assert.equal(readFileSync(join(puller.unpack(img.digest).rootfs, 'hello.txt'), 'utf8'), 'docker\n')
})

test('two pulls of one image at once fetch each blob once', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', layered())
  const { puller } = setup(reg)
  let release!: () => void
  reg.gate = new Promise<void>((r) => (release = r))
  let inBlobs = 0
  let bothInBlobs!: () => void
  const both = new Promise<void>((r) => (bothInBlobs = r))
  const onProgress = (p: PullProgress) => {
    if (p.phase === 'blobs' && ++inBlobs === 2) bothInBlobs()
  }
  const a = puller.pull(ref(img.digest), { onProgress })
  const b = puller.pull(ref(img.digest, 'other-tag'), { onProgress })
  // Both pulls have started their blob downloads (held by the registry) before any body flows.
  await both
  await new Promise((r) => setImmediate(r))
  assert.equal(reg.count(img.configDigest), 1)
  release()
  const [ra, rb] = await Promise.all([a, b])
  for (const d of img.blobs.keys()) assert.equal(reg.count(d), 1, d)
  assert.equal(ra.bytes.registry + rb.bytes.registry, ra.totalBytes)
  assert.equal(rb.bytes.registry + rb.bytes.cached, rb.totalBytes)
})

/** A peer holding the given blobs (optionally serving some tampered), counting what it served. */
function peerWith(blobs: Map<string, Buffer>, tampered = new Map<string, Buffer>()): BlobSource & { served: string[] } {
  const served: string[] = []
  return {
    served,
    async fetch(d: Descriptor) {
      const b = blobs.get(d.digest)
      if (!b) return undefined
      served.push(d.digest)
      return { body: chunks(tampered.get(d.digest) ?? b), from: '12D3KooWpeer' }
    },
  }
}

test('blobs come from a peer before the registry, even with the registry down', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', layered(), { index: true })
  reg.down = true
  const peer = peerWith(img.blobs)
  const { puller } = setup(reg, { peers: peer })
  const res = await puller.pull(ref(img.digest))
  assert.deepEqual(res.bytes, { registry: 0, peers: res.totalBytes, cached: 0 })
  assert.equal(reg.totalServed(), 0)
  assert.deepEqual(new Set(peer.served), new Set(img.blobs.keys()))
  assert.equal(readFileSync(join(puller.unpack(img.digest).rootfs, 'srv/data.txt'), 'utf8'), 'plain tar\n')
})

test('a corrupt blob from a peer is not kept: that blob comes from the registry, the rest from the peer', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', layered())
  const bad = img.layers[1]!
  const tampered = Buffer.from(img.blobs.get(bad.digest)!)
  tampered[tampered.length - 5] ^= 0xff
  const peer = peerWith(img.blobs, new Map([[bad.digest, tampered]]))
  const { puller, blobs } = setup(reg, { peers: peer })
  const res = await puller.pull(ref(img.digest))
  assert.equal(reg.totalServed(), 1)
  assert.equal(reg.count(bad.digest), 1)
  assert.equal(res.bytes.registry, bad.size)
  assert.equal(res.bytes.peers, res.totalBytes - bad.size)
  assert.deepEqual(blobs.read(bad.digest), img.blobs.get(bad.digest))
})

test('a tampered blob in the registry fails the pull with a clear reason; nothing of it is kept and nothing unpacks', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', layered())
  const bad = img.layers[0]!
  const tampered = Buffer.from(img.blobs.get(bad.digest)!)
  tampered[10] ^= 1
  reg.tampered.set(bad.digest, tampered)
  const { puller, blobs } = setup(reg)
  await assert.rejects(puller.pull(ref(img.digest)), (e) => {
    assert.ok(isOrcError(e, 'corrupt'))
    assert.match(e.message, new RegExp(`^blob ${bad.digest} from fake\\.test:5000/team/app does not match its digest`))
    return true
  })
  assert.equal(blobs.has(bad.digest), false)
  assert.ok(!readdirSync(join(blobs.dir, 'sha256')).some((f) => f.includes('.tmp-')))
  assert.throws(
    () => puller.unpack(img.digest),
    (e) => isOrcError(e, 'not_found') && /not fully pulled/.test(e.message),
  )
  assert.equal(existsSync(puller.cacheDir) ? readdirSync(puller.cacheDir).length : 0, 0)
})

test('a layer larger than the free disk fails the pull as disk full before it is downloaded', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', [{ compression: 'none', entries: [file('big', random(1, 300_000))] }])
  const { puller, blobs } = setup(reg, {}, { freeBytes: () => 100_000 })
  await assert.rejects(
    puller.pull(ref(img.digest)),
    (e) => isOrcError(e, 'too_large') && /^disk full: blob sha256:[a-f0-9]+ needs \d+ bytes, 100000 free in /.test(e.message),
  )
  assert.equal(blobs.has(img.layers[0]!.digest), false)
})

test('an unknown tag and a registry that is down give their reasons', async () => {
  const reg = new FakeRegistry()
  const { puller } = setup(reg)
  await assert.rejects(puller.resolveDigest(parseReference('fake.test:5000/team/app:nope')), (e) => isOrcError(e, 'not_found'))
  reg.down = true
  await assert.rejects(puller.pull(ref(`sha256:${'a'.repeat(64)}`)), (e) => isOrcError(e, 'unavailable'))
})

test('gc keeps what kept images reach and drops the rest least recently used first, down to the budget', async () => {
  const clock = new ManualClock(1_700_000_000_000)
  const reg = new FakeRegistry()
  const shared = { compression: 'gzip' as const, entries: [file('shared', random(7, 20_000))] }
  const a = reg.addImage('team/a', '1', [shared, { compression: 'none', entries: [file('a', random(2, 50_000))] }], { index: true })
  const b = reg.addImage('team/b', '1', [shared, { compression: 'none', entries: [file('b', random(3, 50_000))] }])
  const c = reg.addImage('team/c', '1', [{ compression: 'none', entries: [file('c', random(4, 50_000))] }])
  const { puller, blobs } = setup(reg, { clock }, { clock })
  const pull = async (repo: string, digest: string) => {
    await puller.pull({ ...parseReference(`fake.test:5000/${repo}:1`), digest })
  }
  await pull('team/c', c.digest) // oldest
  await clock.advance(60_000)
  await pull('team/b', b.digest)
  await clock.advance(60_000)
  await pull('team/a', a.digest)
  assert.deepEqual(
    puller.images().map((i) => [i.refs, i.complete]),
    [
      [['fake.test:5000/team/a:1'], true],
      [['fake.test:5000/team/b:1'], true],
      [['fake.test:5000/team/c:1'], true],
    ],
  )
  const sizeOf = (img: typeof a) => [...img.blobs.values()].reduce((s, x) => s + x.length, 0)
  const uniqueB = [...b.blobs.keys()].filter((d) => !a.blobs.has(d))
  const bytesB = uniqueB.reduce((s, d) => s + b.blobs.get(d)!.length, 0)
  // Budget allows a and b, not c: c (least recently used) goes, b stays.
  const budget = blobs.totalBytes() - sizeOf(c)
  const r1 = puller.gc([a.digest], budget)
  assert.deepEqual(new Set(r1.removed), new Set(c.blobs.keys()))
  assert.equal(r1.freedBytes, sizeOf(c))
  for (const d of b.blobs.keys()) assert.ok(blobs.has(d))
  assert.deepEqual(
    puller.images().map((i) => i.digest),
    [a.digest, b.digest],
  )
  // Budget 0: everything not reachable from a goes; the layer a shares with b stays.
  const r2 = puller.gc([a.digest], 0)
  assert.deepEqual(new Set(r2.removed), new Set(uniqueB))
  assert.equal(r2.freedBytes, bytesB)
  for (const d of a.blobs.keys()) assert.ok(blobs.has(d), d)
  assert.equal(readFileSync(join(puller.unpack(a.digest).rootfs, 'a')).length, 50_000)
  // Forgetting a's reference and keeping nothing empties the store.
  assert.equal(puller.forget('fake.test:5000/team/a:1'), true)
  puller.gc([], 0)
  assert.equal(blobs.list().length, 0)
  assert.deepEqual(puller.images(), [])
})

test('a cancelled pull keeps only whole blobs, and gc meanwhile keeps what a pull in progress has fetched', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', [{ compression: 'none', entries: [file('big', random(9, 400_000))] }])
  const { puller, blobs } = setup(reg)
  let release!: () => void
  reg.gate = new Promise<void>((r) => (release = r))
  const ac = new AbortController()
  let inBlobs!: () => void
  const started = new Promise<void>((r) => (inBlobs = r))
  const p = puller.pull(ref(img.digest), { signal: ac.signal, onProgress: (x) => x.phase === 'blobs' && inBlobs() })
  await started
  // The manifest is in the store, the layer is being fetched: neither is collected.
  assert.deepEqual(puller.gc([], 0).removed, [])
  assert.ok(blobs.has(img.manifestDigest))
  ac.abort(new Error('pod deleted'))
  release()
  await assert.rejects(p, /pod deleted/)
  assert.equal(blobs.has(img.layers[0]!.digest), false)
  assert.ok(!readdirSync(join(blobs.dir, 'sha256')).some((f) => f.includes('.tmp-')))
})

test('an image with a bad layer fails to unpack and leaves no rootfs behind', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', [{ compression: 'gzip', entries: [file('ok', 'fine'), file('etc/.wh..', '')] }])
  const { puller } = setup(reg)
  await puller.pull(ref(img.digest))
  assert.throws(
    () => puller.unpack(img.digest),
    (e) => isOrcError(e, 'invalid') && /^unpack image sha256:[a-f0-9]+: bad whiteout etc\/\.wh\.\.$/.test(e.message),
  )
  assert.deepEqual(readdirSync(puller.cacheDir), [])
})

test('progress is throttled: byte updates at most once per interval, every phase change reported', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', [{ compression: 'none', entries: [file('big', random(5, 1_000_000))] }])
  const clock = new ManualClock(1000)
  const { puller } = setup(reg, { clock })
  const seen: PullProgress[] = []
  const res = await puller.pull(ref(img.digest), { onProgress: (p) => seen.push(p) })
  // ~16 chunks of 64 KiB arrived, but the clock did not move: only the phases were reported.
  assert.deepEqual(
    seen.map((p) => p.phase),
    ['manifest', 'blobs', 'done'],
  )
  assert.deepEqual(seen.at(-1), { phase: 'done', doneBytes: res.totalBytes, totalBytes: res.totalBytes })
})

test('fetchBlob (for a peer) takes the blob from the registry, never from the peers, once however many ask', async () => {
  const reg = new FakeRegistry()
  const img = reg.addImage('team/app', '1.0', layered())
  let asked = 0
  const { puller, blobs } = setup(reg, {
    peers: {
      async fetch() {
        asked++
        return undefined
      },
    },
  })
  const layer = img.layers[0]!
  await Promise.all([puller.fetchBlob(ref(img.digest), layer), puller.fetchBlob(ref(img.digest), layer)])
  await puller.fetchBlob(ref(img.digest), { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: img.manifestDigest, size: 0 })
  assert.equal(asked, 0)
  assert.equal(reg.count(layer.digest), 1)
  assert.ok(blobs.has(layer.digest) && blobs.has(img.manifestDigest))
})
