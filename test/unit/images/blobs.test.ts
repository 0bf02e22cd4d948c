import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import { ManualClock } from '../../../src/effects/index.ts'
import { BlobStore } from '../../../src/images/index.ts'
import { isOrcError } from '../../../src/model/index.ts'
import { chunks, sha256 } from './fake-registry.ts'

const root = mkdtempSync(join(tmpdir(), 'orc-blobs-'))
after(() => rmSync(root, { recursive: true, force: true }))
let n = 0
const fresh = (opts?: ConstructorParameters<typeof BlobStore>[1]) => new BlobStore(join(root, `s${++n}`), opts)
/** Every file in the store's directory (blobs and temporaries alike). */
const filesOf = (s: BlobStore): string[] => {
  try {
    return readdirSync(join(s.dir, 'sha256'))
  } catch {
    return []
  }
}

const data = Buffer.from('the quick brown fox jumps over the lazy dog\n'.repeat(5000))
const digest = sha256(data)

test('a blob is stored under its digest, read back whole and as a stream, listed and removed', async () => {
  const s = fresh()
  let progress = 0
  await s.write(digest, chunks(data.subarray(0, 1000), data.subarray(1000)), { size: data.length, onBytes: (w) => (progress = w) })
  assert.equal(progress, data.length)
  assert.ok(s.has(digest))
  assert.equal(s.size(digest), data.length)
  assert.deepEqual(s.read(digest), data)
  const { size, body } = s.open(digest)
  const parts: Buffer[] = []
  for await (const c of body) parts.push(Buffer.from(c))
  assert.equal(size, data.length)
  assert.deepEqual(Buffer.concat(parts), data)
  assert.deepEqual(
    s.list().map((b) => [b.digest, b.size]),
    [[digest, data.length]],
  )
  assert.equal(s.totalBytes(), data.length)
  assert.deepEqual(filesOf(s), [digest.slice(7)])
  assert.equal(s.remove(digest), true)
  assert.equal(s.remove(digest), false)
  assert.equal(s.has(digest), false)
  assert.throws(
    () => s.read(digest),
    (e) => isOrcError(e, 'not_found'),
  )
})

test('a tampered blob is refused as corrupt, naming where it came from, and nothing of it is kept', async () => {
  const s = fresh()
  const bad = Buffer.from(data)
  bad[100] ^= 1
  await assert.rejects(s.write(digest, chunks(bad), { size: data.length, from: 'reg.test:5000/team/app' }), (e) => {
    assert.ok(isOrcError(e, 'corrupt'))
    assert.match(e.message, /^blob sha256:[a-f0-9]{64} from reg\.test:5000\/team\/app does not match its digest/)
    return true
  })
  assert.equal(s.has(digest), false)
  assert.deepEqual(filesOf(s), [])
})

test('a truncated blob and an oversized one are refused; the oversized one as soon as the extra byte arrives', async () => {
  const s = fresh()
  await assert.rejects(s.write(digest, chunks(data.subarray(0, data.length - 1)), { size: data.length }), (e) => {
    assert.ok(isOrcError(e, 'corrupt'))
    assert.match(e.message, /does not match its size: \d+ bytes, \d+ announced/)
    return true
  })
  // A body that sends one byte too many and then never ends: the write must stop at once.
  let pulledAfter = false
  const endless = async function* () {
    yield Buffer.concat([data, Buffer.from('x')])
    pulledAfter = true
    await new Promise(() => {})
  }
  await assert.rejects(
    s.write(digest, endless(), { size: data.length }),
    (e) => isOrcError(e, 'corrupt') && /more than the \d+ bytes announced/.test(e.message),
  )
  assert.equal(pulledAfter, false)
  // Size unknown (a manifest by digest): bounded by maxBytes.
  await assert.rejects(s.write(digest, chunks(data), { maxBytes: 100 }), (e) => isOrcError(e, 'corrupt') && /larger than 100 bytes/.test(e.message))
  assert.deepEqual(filesOf(s), [])
})

test('a blob larger than the free space is refused before a byte is written (injected statfs)', async () => {
  const s = fresh({ freeBytes: () => 1000 })
  let started = false
  const body = async function* () {
    started = true
    yield data
  }
  await assert.rejects(s.write(digest, body(), { size: data.length }), (e) => {
    assert.ok(isOrcError(e, 'too_large'))
    assert.equal(e.message, `disk full: blob ${digest} needs ${data.length} bytes, 1000 free in ${s.dir}`)
    return true
  })
  assert.equal(started, false)
  assert.deepEqual(filesOf(s), [])
})

test('on a real full file system (1 MiB tmpfs): refused by statfs when the size is known, by ENOSPC when not; no partial file', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('needs root to mount a tmpfs')
  const mnt = join(root, 'tmpfs')
  mkdirSync(mnt)
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'orc-test', mnt])
  } catch (err) {
    return t.skip(`cannot mount a tmpfs: ${(err as Error).message.split('\n')[0]}`)
  }
  try {
    const s = new BlobStore(join(mnt, 'blobs'))
    const big = Buffer.alloc(2 << 20, 7)
    const bigDigest = sha256(big)
    await assert.rejects(
      s.write(bigDigest, chunks(big), { size: big.length }),
      (e) => isOrcError(e, 'too_large') && /^disk full: blob .* needs 2097152 bytes, \d+ free in /.test(e.message),
    )
    await assert.rejects(
      s.write(bigDigest, chunks(...Array.from({ length: 32 }, (_, i) => big.subarray(i * 65536, (i + 1) * 65536)))),
      (e) => isOrcError(e, 'too_large') && /disk full/.test(e.message),
    )
    assert.deepEqual(filesOf(s), [])
  } finally {
    execFileSync('umount', [mnt])
  }
})

test('an aborted write leaves no temporary file', async () => {
  const s = fresh()
  const ac = new AbortController()
  const body = async function* () {
    yield data.subarray(0, 10)
    ac.abort(new Error('pod deleted'))
    await new Promise(() => {})
  }
  await assert.rejects(s.write(digest, body(), { size: data.length, signal: ac.signal }), /pod deleted/)
  assert.deepEqual(filesOf(s), [])
})

test('concurrent writers of one digest both succeed and leave the one right blob', async () => {
  const s = fresh()
  let release!: () => void
  const gate = new Promise<void>((r) => (release = r))
  const slow = async function* () {
    yield data.subarray(0, 10)
    await gate
    yield data.subarray(10)
  }
  const a = s.write(digest, slow(), { size: data.length })
  const b = s.write(digest, slow(), { size: data.length })
  release()
  await Promise.all([a, b])
  assert.deepEqual(readFileSync(s.path(digest)), data)
  assert.deepEqual(filesOf(s), [digest.slice(7)])
})

test('digests other than sha256:<64 hex> are refused, never taken as paths', async () => {
  const s = fresh()
  for (const d of ['../../etc/passwd', 'sha256:../../x', `sha512:${'a'.repeat(64)}`, `sha256:${'A'.repeat(64)}`, `sha256:${'a'.repeat(63)}`]) {
    assert.throws(
      () => s.has(d),
      (e) => isOrcError(e, 'invalid'),
      d,
    )
    await assert.rejects(s.write(d, chunks(data)), (e) => isOrcError(e, 'invalid'), d)
  }
})

test('usedAt is the last write or touch', async () => {
  const clock = new ManualClock(1_700_000_000_000)
  const s = fresh({ clock })
  await s.write(digest, chunks(data))
  s.touch(digest)
  assert.equal(Math.round(s.list()[0]!.usedAt / 1000), 1_700_000_000)
})

test('temporaries of a crashed write are swept; a write in progress is not', async () => {
  const s = fresh()
  await s.write(digest, chunks(data))
  const stale = join(s.dir, 'sha256', `${'b'.repeat(64)}.tmp-99999-1`)
  execFileSync('touch', [stale])
  let release!: () => void
  const gate = new Promise<void>((r) => (release = r))
  const other = Buffer.from('other')
  const w = s.write(
    sha256(other),
    (async function* () {
      yield other.subarray(0, 2)
      await gate
      yield other.subarray(2)
    })(),
  )
  await new Promise((r) => setImmediate(r))
  assert.equal(s.sweepTemporary(), 1)
  release()
  await w
  assert.deepEqual(filesOf(s).sort(), [digest.slice(7), sha256(other).slice(7)].sort())
})
