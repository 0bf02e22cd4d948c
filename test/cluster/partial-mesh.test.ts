// Beyond `fullMeshMax` members a node keeps connections to only `partialMeshDegree` of them and hears
// the rest through gossip. Seven real agents (separate processes, real libp2p and LevelDB) with
// fullMeshMax 3 and degree 2: membership, liveness and replication must still reach everyone.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { applyPod, hasPod, type NodeProcess, newNode, TEST_TUNABLES, tokenFrom, Workspace, waitFor } from './helpers.ts'

interface Member {
  name: string
  state: string
  self: boolean
  connected?: boolean
}

const TUNABLES = JSON.stringify({ ...JSON.parse(TEST_TUNABLES), fullMeshMax: 3, partialMeshDegree: 2 })

async function members(n: NodeProcess): Promise<Member[]> {
  return (await n.client.call<{ members: Member[] }>('GET', '/v1/members')).members
}

/** Names `n` sees in `state` (other than itself). */
async function seen(n: NodeProcess, state: string): Promise<string[]> {
  return (await members(n))
    .filter((m) => !m.self && m.state === state)
    .map((m) => m.name)
    .sort()
}

test('a partial mesh of seven agents: everyone alive to everyone through gossip, writes reach all, a killed node is declared dead everywhere', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g']
  const nodes: NodeProcess[] = []
  for (const name of names) {
    const n = await newNode(ws, name)
    // Each node issues the next one's token: its socket is the cluster's admin (a joined node's root
    // is node-admin by default, docs/security.md).
    n.env = { ORC_MESH_TUNABLES: TUNABLES, ORC_SOCKET_USER: 'admin' }
    nodes.push(n)
  }
  const [a, , , d, , , g] = nodes as [NodeProcess, NodeProcess, NodeProcess, NodeProcess, NodeProcess, NodeProcess, NodeProcess]
  await a.up().ready()
  // Each joins through the previous one: the others are learned transitively.
  for (let i = 1; i < nodes.length; i++) {
    const via = nodes[i - 1]!
    await nodes[i]!.join(via.addr, await tokenFrom(via)).ready()
  }
  const others = (n: NodeProcess) => names.filter((x) => x !== n.name)

  await t.test('every node sees the six others alive', async () => {
    for (const n of nodes) await waitFor(`${n.name} to see all alive`, async () => (await seen(n, 'alive')).join() === others(n).join(), 30_000)
  })

  await t.test('the mesh is partial: some members are only heard through gossip, and the CLI says so', async () => {
    let missing = 0
    for (const n of nodes) missing += (await members(n)).filter((m) => !m.self && m.connected === false).length
    // All-to-all would be 7 × 6 = 42 connected entries; degree 2 leaves most members unconnected.
    assert.ok(missing > 0, 'every node is connected to every other: the mesh is not partial')
    const indirect = await Promise.all(nodes.map((n) => n.cli(['get', 'nodes', '-o', 'wide'])))
    assert.ok(
      indirect.some((r) => r.exitCode === 0 && /alive \(indirect\)/.test(r.stdout)),
      indirect.map((r) => r.stdout + r.stderr).join('\n'),
    )
  })

  await t.test('nobody loses sight of anybody over several suspect windows', async () => {
    // suspectAfterMs is 1.2 s in TEST_TUNABLES: 4 s is more than three windows.
    const until = Date.now() + 4000
    while (Date.now() < until) {
      for (const n of nodes) {
        const notAlive = (await members(n)).filter((m) => !m.self && m.state !== 'alive')
        assert.deepEqual(
          notAlive.map((m) => `${m.name}:${m.state}`),
          [],
          `${n.name} lost sight of members`,
        )
      }
      await new Promise((r) => setTimeout(r, 300))
    }
  })

  await t.test('a write on the last joiner reaches every node', async () => {
    await applyPod(g, 'from-g')
    for (const n of nodes) await waitFor(`${n.name} to have pod from-g`, () => hasPod(n, 'from-g'), 15_000)
  })

  await t.test('kill -9 one node: all the others declare it dead and still see each other alive', async () => {
    await d.kill('SIGKILL')
    const rest = nodes.filter((n) => n !== d)
    for (const n of rest) await waitFor(`${n.name} to declare d dead`, async () => (await seen(n, 'dead')).join() === 'd', 20_000)
    for (const n of rest)
      assert.deepEqual(
        await seen(n, 'alive'),
        others(n).filter((x) => x !== 'd'),
        `${n.name}'s alive members`,
      )
  })
})
