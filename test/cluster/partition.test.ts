// A partition as the others see it: one real agent is frozen (SIGSTOP) past the suspect and dead
// timeouts while the rest keep writing, then thawed (SIGCONT). It must catch up on what it missed,
// be seen alive again by everyone, and its own writes must replicate again.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { applyPod, hasPod, type NodeProcess, newNode, tokenFrom, Workspace, waitFor } from './helpers.ts'

type Members = { members: Array<{ name: string; state: string; self: boolean }> }

async function stateOf(observer: NodeProcess, name: string): Promise<string | undefined> {
  const r = await observer.client.call<Members>('GET', '/v1/members')
  return r.members.find((m) => m.name === name)?.state
}

test('an agent frozen past the dead timeout catches up and is alive again after it resumes', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const [a, b, c] = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]
  await a.up().ready()
  const token = await tokenFrom(a, ['--uses', '2'])
  await Promise.all([b.join(a.addr, token).ready(), c.join(a.addr, token).ready()])
  for (const [obs, who] of [
    [a, 'c'],
    [b, 'c'],
    [c, 'a'],
    [c, 'b'],
  ] as const) {
    await waitFor(`${obs.name} to see ${who} alive`, async () => (await stateOf(obs, who)) === 'alive')
  }

  c.signal('SIGSTOP')
  try {
    // The test tunables declare a member suspect after 1.2 s and dead after 3 s of silence.
    await waitFor('a and b to see the frozen c suspect', async () => (await stateOf(a, 'c')) !== 'alive' && (await stateOf(b, 'c')) !== 'alive')
    await waitFor('a and b to see the frozen c dead', async () => (await stateOf(a, 'c')) === 'dead' && (await stateOf(b, 'c')) === 'dead')
    await applyPod(a, 'while-frozen')
    await applyPod(b, 'also-while-frozen', 'busybox:1.37')
    await waitFor('b to have a’s write', () => hasPod(b, 'while-frozen'))
    assert.equal(await stateOf(a, 'b'), 'alive', 'the rest of the cluster is unaffected')
  } finally {
    c.signal('SIGCONT')
  }

  await waitFor(
    'c to get both writes made while it was frozen',
    async () => (await hasPod(c, 'while-frozen')) && (await hasPod(c, 'also-while-frozen', 'busybox:1.37')),
  )
  for (const [obs, who] of [
    [a, 'c'],
    [b, 'c'],
    [c, 'a'],
    [c, 'b'],
  ] as const) {
    await waitFor(`${obs.name} to see ${who} alive again`, async () => (await stateOf(obs, who)) === 'alive')
  }
  await applyPod(c, 'after-thaw')
  for (const n of [a, b]) await waitFor(`${n.name} to have c’s write after the thaw`, () => hasPod(n, 'after-thaw'))
})
