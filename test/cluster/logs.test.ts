// `orc logs` from any node: two real agents, a pod pinned to b, its logs read through a (the
// request is forwarded over the mesh), with --tail, -f, and the error when b stops answering.

import assert from 'node:assert/strict'
import { chmodSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { execa } from 'execa'
import { TEST_TUNABLES as POD_TUNABLES, pidsRunning, podManifest, skipReason } from '../pods/helpers.ts'
import { newNode, orc, ROOT, tokenFrom, Workspace, waitFor } from './helpers.ts'

const skip = skipReason()
// The comment makes the pod's command line this run's own (cleanup finds it by its argv).
const SCRIPT = `echo hello from b; echo second line; i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.5; done # run ${process.pid}`

test('orc logs on node a shows a pod that runs on node b: plain, --tail, -f; a dead node is named', { skip }, async (t) => {
  const ws = new Workspace()
  // Pod sandboxes run as nobody and must pass through the workspace to b's images.
  chmodSync(ws.root, 0o711)
  t.after(async () => {
    await ws.close()
    // Containers outlive a killed agent: end the one this test started, by its pid.
    for (const pid of pidsRunning(['/bin/sh', '-c', SCRIPT])) {
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
    }
  })
  const [a, b] = [await newNode(ws, 'a'), await newNode(ws, 'b')]
  b.env = { ORC_POD_TUNABLES: JSON.stringify(POD_TUNABLES) }
  await a.up().ready()
  await b.join(a.addr, await tokenFrom(a)).ready()
  const img = await orc(undefined, ['image', 'import-busybox', '--data-dir', b.dataDir])
  assert.equal(img.exitCode, 0, img.stderr)
  // The image by name: b runs it from its own image store.
  const ap = await orc(a.socket, ['apply', '-f', '-'], {}, podManifest('x', 'busybox', SCRIPT, { placement: { node: 'b' } }))
  assert.equal(ap.exitCode, 0, ap.stderr)
  await waitFor('pod/x running on b, as a sees it', async () => {
    const r = await a.cli(['get', 'pod', 'x', '-o', 'json'])
    const p = r.exitCode === 0 ? JSON.parse(r.stdout) : undefined
    return p?.status?.phase === 'Running' && p.status.node === 'b'
  })

  const lines = await waitFor("a to show b's lines", async () => {
    const r = await a.cli(['logs', 'pod/x'])
    if (r.exitCode !== 0) throw new Error(r.stderr)
    const l = r.stdout.split('\n').filter(Boolean)
    return l.length >= 4 ? l : undefined
  })
  assert.deepEqual(lines.slice(0, 3), ['hello from b', 'second line', 'tick 1'])
  const onB = (await b.cli(['logs', 'pod/x'])).stdout.split('\n').filter(Boolean)
  assert.deepEqual(onB.slice(0, lines.length), lines, 'the same log as on b itself')

  const tail = await a.cli(['logs', 'pod/x', '--tail', '1'])
  assert.equal(tail.exitCode, 0, tail.stderr)
  const tailLines = tail.stdout.split('\n').filter(Boolean)
  assert.equal(tailLines.length, 1)
  assert.match(tailLines[0]!, /^tick \d+$/)

  // -f on a: the retained lines, then lines b's pod prints after the follow started.
  const before = Number(tailLines[0]!.slice(5))
  const f = execa(process.execPath, [join(ROOT, 'bin/orc.mjs'), 'logs', 'pod/x', '-f'], {
    cwd: ROOT,
    reject: false,
    env: { ORC_SOCKET: a.socket, USER: 'tester' },
    buffer: false,
  })
  let out = ''
  f.stdout?.on('data', (d: Buffer) => (out += d.toString()))
  try {
    await waitFor(
      '-f on a to print a line b prints later',
      async () => {
        const ticks = out
          .split('\n')
          .filter((l) => /^tick \d+$/.test(l))
          .map((l) => Number(l.slice(5)))
        return ticks.some((n) => n > before + 2)
      },
      15_000,
    )
    assert.ok(out.startsWith('hello from b\nsecond line\n'), out.slice(0, 200))
    const ticks = out
      .split('\n')
      .filter((l) => /^tick \d+$/.test(l))
      .map((l) => Number(l.slice(5)))
    assert.deepEqual(
      ticks,
      ticks.map((_, i) => i + 1),
      'no line lost or repeated across polls',
    )
  } finally {
    f.kill('SIGTERM')
    await f
  }

  // b stops answering (paused, so its pod keeps running): a names the node and its state.
  b.signal('SIGSTOP')
  try {
    const err = await waitFor(
      'a to report b dead',
      async () => {
        const r = await a.cli(['logs', 'pod/x'])
        return r.exitCode !== 0 && /dead/.test(r.stderr) ? r.stderr : undefined
      },
      15_000,
    )
    // (when the dial was already under way as b turned dead, the dial error follows)
    assert.match(err, /^error: pod\/x runs on node b, which is dead \(last seen \d+s ago\)( and did not answer: .*)?\n$/)
  } finally {
    b.signal('SIGCONT')
  }
  // Delete on b itself, so the pod stops without waiting for b to reconnect.
  assert.equal((await b.cli(['delete', 'pod/x'])).exitCode, 0)
  await waitFor('the pod to stop on b', async () => pidsRunning(['/bin/sh', '-c', SCRIPT]).length === 0, 15_000)
})
