// `orc rollout` against a real agent with real sandboxed pods: a PinnedDeployment's replicas run, a
// canary split runs exactly the requested pods of each template, promote and abort converge, every
// step is in the history with its author, and `orc rollback` undoes a step.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { pidsRunning, skipReason, startTestAgent, type TestAgent, waitFor } from '../pods/helpers.ts'

const skip = skipReason()

function deployment(image: string, prevMarker: string, nextMarker?: string, extra: Record<string, unknown> = {}): string {
  const tpl = (m: string) => ({
    metadata: { labels: { app: 'web' } },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sleep', m] }] },
  })
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'PinnedDeployment',
    metadata: { name: 'web' },
    spec: { replicas: 3, previous: tpl(prevMarker), ...(nextMarker ? { next: tpl(nextMarker) } : {}), ...extra },
  })
}

async function status(a: TestAgent): Promise<any> {
  const r = await a.orc(['rollout', 'status', 'web', '-o', 'json'])
  assert.equal(r.exitCode, 0, r.stderr)
  return JSON.parse(r.stdout)
}

test('orc rollout on a real agent', { skip, timeout: 180_000 }, async (t) => {
  const a = await startTestAgent('n1')
  // Sleep lengths unique to this run: processes are counted machine-wide by their command line, so
  // another checkout running this test at the same time must not be counted.
  const base = 4_700_000 + (process.pid % 100_000) * 2
  const markers = [String(base), String(base + 1)]
  t.after(async () => {
    await a.orc(['delete', 'pinneddeployment/web'])
    await waitFor('pods of web to stop', async () => (markers.every((m) => pidsRunning(['sleep', m]).length === 0) ? true : undefined), 30_000).catch(() => {})
    await a.stop()
    for (const m of markers)
      for (const pid of pidsRunning(['sleep', m]))
        try {
          process.kill(pid, 'SIGKILL')
        } catch {}
    a.remove()
  })
  const running = (m: string) => pidsRunning(['sleep', m]).length

  let r = await a.orc(['apply', '-f', '-'], deployment(a.image, markers[0]!))
  assert.equal(r.exitCode, 0, r.stderr)
  r = await a.orc(['rollout', 'status', 'web', '--wait', '--timeout', '60'])
  assert.equal(r.exitCode, 0, r.stdout + r.stderr)
  assert.match(r.stdout, /3 replicas, no rollout in progress/)
  assert.match(r.stdout, /previous\s+[0-9a-f]{8}\s+3\s+3\s+3\s+3/)
  // Running is reported once the sandbox started; its `sleep` is there a moment later.
  await waitFor('three copies of previous running', async () => (running(markers[0]!) === 3 ? true : undefined), 15_000)
  // orc why -o json carries the placement explanation.
  const first = (await status(a)).pods[0].name as string
  r = await a.orc(['why', `pod/${first}`, '-o', 'json'])
  assert.equal(r.exitCode, 0, r.stderr)
  const why = JSON.parse(r.stdout)
  assert.equal(why.placement.status, 'bound')
  assert.equal(why.placement.node, 'n1')
  assert.equal(why.placement.explainedBy, 'n1')
  assert.match(why.placement.summary, /running on n1/)

  r = await a.orc(['rollout', 'set', 'web', '--next-percent', '20'])
  assert.equal(r.exitCode, 1)
  assert.match(r.stderr, /^error: pinneddeployment\/web has no spec\.next to set: add the new template as spec\.next with orc apply first$/m)

  r = await a.orc(['apply', '-f', '-'], deployment(a.image, markers[0]!, markers[1]!))
  assert.equal(r.exitCode, 0, r.stderr)
  r = await a.orc(['rollout', 'set', 'web', '--next-percent', '20', '--reason', 'canary'])
  assert.equal(r.exitCode, 0, r.stderr)
  assert.match(r.stdout, /^pinneddeployment\/web: next runs on 20% of replicas \(revision \d+\)$/m)
  r = await a.orc(['rollout', 'status', 'web', '--wait', '--timeout', '60', '--pods'])
  assert.equal(r.exitCode, 0, r.stdout + r.stderr)
  assert.match(r.stdout, /next on 20% \(1 pod\)/)
  let s = await status(a)
  assert.deepEqual([s.previous.ready, s.next.ready], [2, 1])
  await waitFor('2 previous and 1 next copies running', async () => (running(markers[0]!) === 2 && running(markers[1]!) === 1 ? true : undefined), 30_000)

  r = await a.orc(['rollout', 'set', 'web', '--next-replicas', '9'])
  assert.equal(r.exitCode, 1)
  assert.match(r.stderr, /nextReplicas: must be a whole number from 0 to 3, got 9/)

  r = await a.orc(['rollout', 'promote', 'web'])
  assert.equal(r.exitCode, 0, r.stderr)
  r = await a.orc(['rollout', 'status', 'web', '--wait', '--timeout', '60'])
  assert.equal(r.exitCode, 0, r.stdout + r.stderr)
  await waitFor(
    '3 copies of the promoted template, none of the old',
    async () => (running(markers[0]!) === 0 && running(markers[1]!) === 3 ? true : undefined),
    30_000,
  )

  // Every step is a revision with its author; rollback undoes the promote.
  r = await a.orc(['history', 'pinneddeployment/web', '--exclude-author', 'controller:', '-o', 'json'])
  const revs = JSON.parse(r.stdout) as { author: string; reason?: string }[]
  assert.deepEqual(
    revs.map((x) => x.author),
    ['user:admin', 'user:admin', 'user:admin', 'user:admin'],
  )
  assert.equal(revs[2]!.reason, 'canary')
  assert.match(revs[3]!.reason ?? '', /rollout promote/)
  r = await a.orc(['rollback', 'pinneddeployment/web'])
  assert.equal(r.exitCode, 0, r.stderr)
  await waitFor(
    'the 20 % split again after rollback',
    async () => {
      s = await status(a)
      return s.done && s.next?.ready === 1 && s.previous.ready === 2 ? true : undefined
    },
    60_000,
  )

  r = await a.orc(['rollout', 'abort', 'web'])
  assert.equal(r.exitCode, 0, r.stderr)
  await waitFor(
    'every replica on previous after abort',
    async () => {
      s = await status(a)
      return s.done && s.next === undefined && s.previous.ready === 3 ? true : undefined
    },
    60_000,
  )
  r = await a.orc(['get', 'pinneddeployments'])
  assert.match(r.stdout, /web\s+3\/3\s+-/)
})
