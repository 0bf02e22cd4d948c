// A PinnedDeployment rollout gated by readiness, on a real agent with real sandboxed pods: a next
// template whose readiness probe never passes gets one surge pod, the previous pods all stay, and
// once progressDeadlineSeconds pass without progress the rollout is aborted (status, history,
// `orc rollout status`) and every replica runs previous again.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { pidsRunning, skipReason, startTestAgent, waitFor } from '../pods/helpers.ts'

const skip = skipReason()

function deployment(image: string, prevMarker: string, next?: { marker: string; readinessPort: number }): string {
  const tpl = (m: string, probe?: Record<string, unknown>) => ({
    metadata: { labels: { app: 'gate' } },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sleep', m], ...(probe ? { readinessProbe: probe } : {}) }] },
  })
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'PinnedDeployment',
    metadata: { name: 'gate' },
    spec: {
      replicas: 2,
      maxSurge: 1,
      maxUnavailable: 0,
      progressDeadlineSeconds: 8,
      previous: tpl(prevMarker),
      ...(next ? { next: tpl(next.marker, { tcpSocket: { port: next.readinessPort }, periodSeconds: 1 }), nextReplicas: 2 } : {}),
    },
  })
}

test('a never-ready next template blocks the rollout, which aborts after progressDeadlineSeconds', { skip, timeout: 240_000 }, async (t) => {
  const a = await startTestAgent('n1')
  const base = 5_700_000 + (process.pid % 100_000) * 2
  const [prev, next] = [String(base), String(base + 1)]
  t.after(async () => {
    await a.orc(['delete', 'pinneddeployment/gate'])
    await waitFor('pods of gate to stop', async () => ([prev, next].every((m) => pidsRunning(['sleep', m]).length === 0) ? true : undefined), 30_000).catch(
      () => {},
    )
    await a.stop()
    for (const m of [prev, next])
      for (const pid of pidsRunning(['sleep', m]))
        try {
          process.kill(pid, 'SIGKILL')
        } catch {}
    a.remove()
  })
  const status = async () => {
    const r = await a.orc(['rollout', 'status', 'gate', '-o', 'json'])
    assert.equal(r.exitCode, 0, r.stderr)
    return JSON.parse(r.stdout)
  }

  let r = await a.orc(['apply', '-f', '-'], deployment(a.image, prev))
  assert.equal(r.exitCode, 0, r.stderr)
  r = await a.orc(['rollout', 'status', 'gate', '--wait', '--timeout', '60'])
  assert.equal(r.exitCode, 0, r.stdout + r.stderr)

  // Nothing listens on port 9 in the next pods: they never become Ready.
  r = await a.orc(['apply', '-f', '-'], deployment(a.image, prev, { marker: next, readinessPort: 9 }))
  assert.equal(r.exitCode, 0, r.stderr)
  const aborted = await waitFor(
    'the rollout to be aborted',
    async () => {
      const s = await status()
      // Until then the rollout holds: one surge pod of next, both previous pods kept and ready.
      assert.ok((s.next?.created ?? 0) <= 1, `at most maxSurge new pods: ${JSON.stringify(s.next)}`)
      assert.equal(s.next?.ready ?? 0, 0)
      if (s.rollout?.state !== 'Aborted') assert.equal(pidsRunning(['sleep', prev]).length, 2, 'no previous pod removed while next is not Ready')
      return s.rollout?.state === 'Aborted' ? s : undefined
    },
    90_000,
  )
  assert.match(
    aborted.rollout.reason,
    /^no progress for 8s \(progressDeadlineSeconds\): pod\/gate-[0-9a-f]{8}-0 not Ready \(container main: readiness probe failed: connect .*:9: ECONNREFUSED\)$/,
  )

  await waitFor(
    'every replica on previous, the next pod gone',
    async () => {
      const s = await status()
      return s.done && s.next === undefined && s.previous.ready === 2 && pidsRunning(['sleep', next]).length === 0 ? true : undefined
    },
    60_000,
  )
  r = await a.orc(['rollout', 'status', 'gate'])
  assert.match(r.stdout, /Aborted at .*: next template [0-9a-f]{8} no progress for 8s/)
  r = await a.orc(['history', 'pinneddeployment/gate', '--author', 'controller:rollout', '-o', 'json'])
  assert.equal(r.exitCode, 0, r.stderr)
  const revs = JSON.parse(r.stdout) as { reason?: string }[]
  assert.ok(
    revs.some((x) => /^rollout of template [0-9a-f]{8} aborted: no progress for 8s/.test(x.reason ?? '')),
    revs.map((x) => x.reason).join('\n'),
  )
})
