// Tombstone pruning on real agents (docs/architecture.md, "Tombstone pruning"): the replicated
// document stays proportional to live data — alone and in a cluster — a member that cannot vouch
// for what it holds holds everyone's pruning back, and nothing a user reads changes on the way.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { type NodeProcess, newNode, tokenFrom, Workspace, waitFor } from './helpers.ts'

async function metric(n: NodeProcess, name: string, labels = ''): Promise<number> {
  const r = await n.client.call<{ text: string }>('GET', '/v1/ops/metrics')
  const line = r.text.split('\n').find((l) => l.startsWith(`${name}${labels} `))
  return line === undefined ? 0 : Number(line.split(' ')[1])
}

// Through the API, not the CLI: ~80 writes and many polls, each a CLI process of ~1-2 s on a loaded
// machine, kept this test near its timeout; what it checks is pruning, not the CLI.
async function relabel(n: NodeProcess, v: number): Promise<void> {
  const pod = {
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'churn', namespace: 'default', labels: { v: String(v) } },
    spec: { nodeSelector: { 'orc-test': 'nowhere' }, containers: [{ name: 'main', image: 'busybox' }] },
  }
  await n.client.call('POST', '/v1/apply', { body: { objects: [pod] } })
}

async function labelOn(n: NodeProcess): Promise<string | undefined> {
  try {
    const r = await n.client.call<{ object: { metadata: { labels?: Record<string, string> } } }>('GET', '/v1/objects/Pod/default/churn')
    return r.object.metadata.labels?.v
  } catch {
    return undefined
  }
}

test('agents prune stable tombstones alone and as a cluster, and wait for a member that cannot answer', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const [a, b, c] = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]
  for (const n of [a, b, c]) n.env = { ORC_PRUNE_INTERVAL_MS: '300' }
  await a.up().ready()

  // Alone: 30 overwrites of a label leave ~60 tombstones, which the next passes remove.
  for (let v = 0; v < 30; v++) await relabel(a, v)
  await waitFor('a (alone) to prune', async () => (await metric(a, 'orc_store_pruned_tombstones_total')) >= 50)
  const aloneStructs = await metric(a, 'orc_store_document_structs')

  const token = await tokenFrom(a, ['--uses', '2'])
  await Promise.all([b.join(a.addr, token).ready(), c.join(a.addr, token).ready()])
  const before = [await metric(a, 'orc_store_pruned_tombstones_total'), await metric(c, 'orc_store_pruned_tombstones_total')]
  for (let v = 100; v < 130; v++) await relabel(b, v)
  for (const n of [a, b, c]) await waitFor(`${n.name} to have the last label`, async () => (await labelOn(n)) === '129')
  // Every member answers for what it holds on disk: each of them prunes b's 30 overwrites.
  for (const [i, n] of [a, c].entries()) {
    await waitFor(`${n.name} to prune as a cluster member`, async () => (await metric(n, 'orc_store_pruned_tombstones_total')) >= before[i]! + 50, 60_000)
  }

  // A frozen member cannot vouch for what it holds: nobody prunes meanwhile.
  c.signal('SIGSTOP')
  let prunedWhileFrozen: number
  try {
    for (let v = 200; v < 220; v++) await relabel(a, v)
    await waitFor('b to have a’s writes', async () => (await labelOn(b)) === '219')
    const pruned = await metric(a, 'orc_store_pruned_tombstones_total')
    const waiting = await metric(a, 'orc_store_prune_passes_total', '{outcome="waiting"}')
    await waitFor(
      'a to run passes that wait for c',
      async () => (await metric(a, 'orc_store_prune_passes_total', '{outcome="waiting"}')) >= waiting + 2,
      60_000,
    )
    assert.equal(await metric(a, 'orc_store_pruned_tombstones_total'), pruned, 'nothing pruned while c could not answer')
    prunedWhileFrozen = pruned
  } finally {
    c.signal('SIGCONT')
  }
  await waitFor('c to catch up', async () => (await labelOn(c)) === '219')
  // a's 20 overwrites made while c was frozen (label and system metadata: 40 tombstones)
  await waitFor('a to prune once c answers again', async () => (await metric(a, 'orc_store_pruned_tombstones_total')) >= prunedWhileFrozen + 30, 60_000)

  // Writes after pruning still replicate and merge everywhere.
  await relabel(c, 300)
  for (const n of [a, b, c]) await waitFor(`${n.name} to have c’s write after pruning`, async () => (await labelOn(n)) === '300')
  const structs = await metric(a, 'orc_store_document_structs')
  assert.ok(structs < aloneStructs + 200, `a's document stays near its live size (${structs} structs; ${aloneStructs} alone with one pod)`)
})
