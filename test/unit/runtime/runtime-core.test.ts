import assert from 'node:assert/strict'
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import fc from 'fast-check'
import {
  applyLayer,
  buildBwrapArgs,
  buildOciConfig,
  buildSeccompBpf,
  decodeExitCode,
  FakeRuntime,
  followLog,
  parseQuantity,
  readLogLines,
  readTar,
  rotateIfNeeded,
  type TarEntry,
  writeTar,
} from '../../../src/runtime/index.ts'
import { parseProcStat } from '../../../src/runtime/procfs.ts'

const tmp = () => mkdtempSync(join(tmpdir(), 'orc-rt-unit-'))
const file = (path: string, data: string): TarEntry => ({ path, type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, data: Buffer.from(data) })

test('tar round-trips entries, long names included (seeded property)', () => {
  const name = fc.stringMatching(/^[a-z0-9]{1,40}(\/[a-z0-9]{1,40}){0,4}$/)
  fc.assert(
    fc.property(fc.array(fc.tuple(name, fc.string({ maxLength: 600 })), { maxLength: 8 }), (items) => {
      const entries = items.map(([p, d]) => file(p, d))
      const back = readTar(writeTar(entries))
      assert.deepEqual(
        back.map((e) => [e.path, e.data!.toString()]),
        items,
      )
    }),
    { seed: 42, numRuns: 50 },
  )
})

test('layers apply in order with whiteouts and opaque dirs; escapes are refused', () => {
  const root = tmp()
  try {
    applyLayer(root, [
      file('etc/a', 'a'),
      file('etc/b', 'b'),
      file('d/x', 'x'),
      { path: 'lnk', type: 'symlink', mode: 0o777, uid: 0, gid: 0, mtime: 0, linkname: '/etc' },
    ])
    applyLayer(root, [file('etc/.wh.a', ''), file('d/.wh..wh..opq', ''), file('d/y', 'y'), file('lnk/c', 'c')])
    assert.deepEqual(readdirSync(join(root, 'etc')).sort(), ['b', 'c'], 'whiteout removed a; write through absolute link stays inside root')
    assert.deepEqual(readdirSync(join(root, 'd')), ['y'])
    applyLayer(root, [file('../../evil', 'x')])
    assert.equal(existsSync(join(root, '..', 'evil')), false, 'a .. path cannot leave the root')
    assert.equal(readFileSync(join(root, 'evil'), 'utf8'), 'x')
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
})

test('seccomp program is well-formed BPF that checks the arch first', () => {
  const bpf = buildSeccompBpf()
  assert.equal(bpf.length % 8, 0)
  assert.equal(bpf.readUInt16LE(0), 0x20) // ld [arch]
  assert.equal(bpf.readUInt32LE(4), 4)
  assert.equal(bpf.readUInt32LE(12), 0xc000003e)
  assert.equal(bpf.readUInt16LE(bpf.length - 8), 0x06) // ends in a return
})

const image = { rootfs: '/img', config: { entrypoint: ['/bin/sh', '-c'], cmd: ['echo hi'], env: { A: '1' } } }

test('bwrap arguments confine by default and use the image defaults', () => {
  const args = buildBwrapArgs({ spec: { id: 'p.c', image: '/img', logDir: '/l', env: { B: '2' } }, image, uid: 65534, gid: 65534 })
  for (const flag of ['--unshare-user', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--die-with-parent', '--clearenv'])
    assert.ok(args.includes(flag), flag)
  assert.deepEqual(args.slice(args.indexOf('--ro-bind'), args.indexOf('--ro-bind') + 3), ['--ro-bind', '/img', '/'])
  assert.deepEqual(args.slice(args.indexOf('--cap-drop'), args.indexOf('--cap-drop') + 2), ['--cap-drop', 'ALL'])
  assert.deepEqual(args.slice(args.indexOf('--') + 1), ['/bin/sh', '-c', 'echo hi'])
  const withNetns = buildBwrapArgs({ spec: { id: 'p', image: '/img', logDir: '/l', netnsPath: '/run/netns/x', args: ['echo x'] }, image, uid: 1, gid: 1 })
  assert.ok(!withNetns.includes('--unshare-net'), 'joins the pod netns instead of a fresh one')
  assert.deepEqual(withNetns.slice(withNetns.indexOf('--') + 1), ['/bin/sh', '-c', 'echo x'])
})

test('oci config is non-root, read-only, capability-free', () => {
  const { config } = buildOciConfig({
    spec: { id: 'c', image: '/img', logDir: '/l', command: ['/bin/true'], resources: { pids: 5 } },
    image,
    uid: 65534,
    gid: 65534,
    hostIdBase: 1_000_000,
    seccomp: true,
    cgroupName: 'orc-x',
    layout: { places: { pids: { version: 1, parent: '/x' } }, reasons: {} },
  }) as { config: any }
  assert.equal(config.process.user.uid, 65534)
  assert.equal(config.process.noNewPrivileges, true)
  assert.deepEqual(config.process.capabilities.bounding, [])
  assert.equal(config.root.readonly, true)
  assert.ok(config.linux.maskedPaths.includes('/proc/kcore'))
  assert.deepEqual(config.linux.resources.pids, { limit: 5 })
  assert.throws(
    () =>
      buildOciConfig({
        spec: { id: 'c', image: '/i', logDir: '/l', command: ['x'] },
        image,
        uid: 0,
        gid: 0,
        hostIdBase: 1,
        seccomp: false,
        cgroupName: 'o',
        layout: { places: {}, reasons: {} },
      }),
    /non-root/,
  )
})

test('quantities, exit codes and /proc stat parsing', () => {
  assert.equal(parseQuantity('500m'), 0.5)
  assert.equal(parseQuantity('128Mi'), 128 * 1024 * 1024)
  assert.deepEqual(decodeExitCode(137), { code: null, signal: 'SIGKILL' })
  assert.deepEqual(decodeExitCode(3), { code: 3, signal: null })
  const st = parseProcStat('42 (a (weird) name) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 0 0')
  assert.deepEqual(st, { pid: 42, ppid: 1, startTicks: 98765, state: 'S' })
})

test('logs rotate within bounds, tail across files, follow across a rotation', async () => {
  const dir = tmp()
  try {
    mkdirSync(dir, { recursive: true })
    const live = join(dir, '3.log')
    for (let i = 0; i < 100; i++) {
      appendFileSync(live, `l${i}\n`)
      if (i % 10 === 9) rotateIfNeeded(dir, 3, { maxBytes: 20, maxFiles: 3 })
    }
    assert.deepEqual(readdirSync(dir).sort(), ['3.log', '3.log.1', '3.log.2'])
    assert.deepEqual(readLogLines(dir, { tail: 3 }), ['l97', 'l98', 'l99'])
    const ac = new AbortController()
    const it = followLog(dir, { revision: 3, tail: 1, signal: ac.signal, pollMs: 20 })
    const got: string[] = [(await it.next()).value as string]
    appendFileSync(live, 'a1\n')
    got.push((await it.next()).value as string)
    appendFileSync(live, 'a2\n'.repeat(1) + 'x'.repeat(30) + '\n')
    rotateIfNeeded(dir, 3, { maxBytes: 20, maxFiles: 3 })
    appendFileSync(live, 'after\n')
    got.push((await it.next()).value as string, (await it.next()).value as string, (await it.next()).value as string)
    ac.abort()
    assert.equal((await it.next()).done, true, 'abort ends the follow')
    assert.deepEqual(got, ['l99', 'a1', 'a2', 'x'.repeat(30), 'after'])
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test('fake runtime: start, exit events, stop with and without SIGTERM honoured', async () => {
  const rt = new FakeRuntime({ now: () => 5 })
  const exits: [string, number | null][] = []
  rt.onExit((id, e) => exits.push([id, e.code]))
  const h = await rt.start({ id: 'a', image: '/i', logDir: '/l' })
  await assert.rejects(rt.start({ id: 'a', image: '/i', logDir: '/l' }), /already exists/)
  rt.exit('a', 3)
  assert.equal((await h.exited).code, 3)
  await rt.start({ id: 'b', image: '/i', logDir: '/l' })
  rt.ignoreTerm('b')
  assert.equal((await rt.stop('b', { graceMs: 1 })).signal, 'SIGKILL')
  assert.deepEqual(exits, [
    ['a', 3],
    ['b', null],
  ])
  assert.deepEqual(
    rt.list().map((s) => s.state),
    ['exited', 'exited'],
  )
})
