import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Fixture, waitFor } from './helpers.ts'

test('A creates a cluster, B joins with a token, C joins through B: all see each other alive', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const { mesh: a } = await fx.create('a')
  const phases: string[] = []
  const b = await fx.join('b', a, { onProgress: (p: { phase: string }) => phases.push(p.phase) })
  assert.deepEqual(phases, ['connecting', 'joining', 'admitted', 'ready'])
  assert.equal(b.clusterId, a.clusterId)
  const c = await fx.join('c', b)
  const all = [a, b, c]
  await waitFor('every node sees every other alive', () =>
    all.every((m) => m.members().length === 3 && m.members().every((x) => x.state === 'alive' && x.lastSeen !== null)),
  )
  for (const m of all) {
    assert.deepEqual(
      m.members().map((x) => x.name),
      ['a', 'b', 'c'],
    )
  }
  // C learned A transitively and connected to it.
  await waitFor('C connected to A', () => c.libp2p.getConnections().some((x) => x.remotePeer.toString() === a.peerId))
})
