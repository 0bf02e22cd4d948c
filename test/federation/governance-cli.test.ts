// Governance of federation membership with three real clusters (one agent process each, `orc up`)
// and the real CLI: one admin alone cannot remove a cluster, `orc federation propose` and
// `orc federation approve` on another cluster do, and `orc federation status` and `orc describe`
// show who approved.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { type NodeProcess, newNode, Workspace, waitFor } from '../cluster/helpers.ts'

async function ok(n: NodeProcess, args: string[]): Promise<string> {
  const r = await n.cli(args)
  if (r.exitCode !== 0) throw new Error(`orc ${args.join(' ')} on ${n.name} failed (${r.exitCode}): ${r.stderr}${r.stdout}`)
  return r.stdout
}

const clustersOf = async (n: NodeProcess): Promise<string[]> =>
  (JSON.parse(await ok(n, ['federation', 'status', 'lab', '-o', 'json'])).clusters ?? []).map((c: { name: string }) => c.name).sort()

test('three clusters: remove is refused, propose + approve on another cluster removes; status shows the approvals', { timeout: 120_000 }, async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const h1 = await newNode(ws, 'h1')
  const c1 = await newNode(ws, 'c1')
  const e1 = await newNode(ws, 'e1')
  h1.up(['--cluster', 'home'])
  c1.up(['--cluster', 'cloud'])
  e1.up(['--cluster', 'edge'])
  await Promise.all([h1.ready(), c1.ready(), e1.ready()])
  await ok(h1, ['federation', 'create', 'lab', '--namespace', 'shared'])
  for (const n of [c1, e1]) {
    const token = (await ok(h1, ['federation', 'token', 'lab'])).split('\n')[0]!.trim()
    await ok(n, ['federation', 'join', '--token', token])
  }
  await waitFor(
    'every cluster sees three',
    async () => {
      for (const n of [h1, c1, e1]) if ((await clustersOf(n)).length !== 3) return false
      return true
    },
    40_000,
  ).catch(async (err) => {
    for (const n of [h1, c1, e1]) {
      console.error(n.name, await n.cli(['federation', 'status', 'lab']).then((r) => r.stdout + r.stderr))
      console.error(
        n.stdout
          .split('\n')
          .filter((l) => /federation|refus|admi/i.test(l))
          .slice(-30)
          .join('\n'),
      )
      console.error(n.stderr.slice(-3000))
    }
    throw err
  })

  // One admin alone: refused, with what to do instead.
  const refused = await h1.cli(['federation', 'remove', 'lab', 'edge'])
  assert.notEqual(refused.exitCode, 0)
  assert.match(refused.stderr, /needs 2 approvals of its 3 member clusters: orc federation propose lab remove edge/)
  assert.deepEqual(await clustersOf(c1), ['cloud', 'edge', 'home'])

  // A proposal its cluster withdraws takes no more approvals, and the change may be proposed anew.
  const first = /proposal (remove-edge-[0-9a-f]{6})/.exec(await ok(h1, ['federation', 'propose', 'lab', 'remove', 'edge']))?.[1]
  assert.ok(first)
  await waitFor('cloud lists the first proposal', async () => (await ok(c1, ['federation', 'status', 'lab'])).includes(first), 20_000)
  const notMine = await c1.cli(['federation', 'withdraw', 'lab', first])
  assert.match(notMine.stderr, new RegExp(`^error: proposal ${first} was made by cluster home: only an admin of it may withdraw it`))
  assert.match(await ok(h1, ['federation', 'withdraw', 'lab', first]), new RegExp(`^proposal ${first} \\(remove edge\\) withdrawn`))
  await waitFor(
    'cloud sees it withdrawn',
    async () => new RegExp(`${first} +remove edge +1/2 +user:admin@home +withdrawn `).test(await ok(c1, ['federation', 'status', 'lab'])),
    20_000,
  )
  const late = await c1.cli(['federation', 'approve', 'lab', first])
  assert.match(late.stderr, new RegExp(`^error: proposal ${first} was withdrawn already`))
  assert.deepEqual(await clustersOf(c1), ['cloud', 'edge', 'home'], 'nothing removed')

  const proposed = await ok(h1, ['federation', 'propose', 'lab', 'remove', 'edge'])
  const id = /proposal (remove-edge-[0-9a-f]{6}) \(remove edge\): 1 of 2 approvals; on another member cluster: orc federation approve lab \1/.exec(
    proposed,
  )?.[1]
  assert.ok(id, proposed)
  await waitFor('cloud lists the proposal', async () => (await ok(c1, ['federation', 'status', 'lab'])).includes(id), 20_000)
  // The proposer's cluster cannot approve twice.
  const twice = await h1.cli(['federation', 'approve', 'lab', id])
  assert.match(twice.stderr, /cluster home approved proposal .* already \(1 of 2\)/)

  const approved = await ok(c1, ['federation', 'approve', 'lab', id])
  assert.match(approved, new RegExp(`proposal ${id} passed \\(2/2\\): cluster edge removed`))
  await waitFor(
    'home and cloud list two clusters',
    async () => (await clustersOf(h1)).join() === 'cloud,home' && (await clustersOf(c1)).join() === 'cloud,home',
    30_000,
  )
  const status = await ok(h1, ['federation', 'status', 'lab'])
  // The approvals carry each cluster's admin (the local socket's user, admin, tagged with its cluster).
  assert.match(status, new RegExp(`${id} +remove edge +2/2 +user:admin@home, user:admin@cloud +passed`))
  assert.match(status, /quorum: +default .*admitting needs 1, removing 1 approval/)
  // describe shows them too, next to the cluster's own record of the federation.
  const described = await ok(c1, ['describe', 'federation/lab'])
  assert.match(described, /Quorum: +default .*removing 1 approval/)
  assert.match(described, new RegExp(`Proposals:\n(.*\n)*  ${id} +remove edge +2/2 +user:admin@home, user:admin@cloud +passed`))
})
