import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import { loadOrCreateIdentity, MemoryMemberDirectory, peerKeyVerifier, recordSigner } from '../../src/mesh/index.ts'
import { openStore } from '../../src/store/index.ts'
import { seededBytes } from '../helpers/store.ts'
import { Fixture, seededRandom, waitFor } from './helpers.ts'

const nodeRef = (name: string) => ({ kind: 'Node', namespace: '', name })
const nodeObject = (name: string): any => ({ apiVersion: 'orc/v1', kind: 'Node', metadata: { name }, spec: {} })

// Issue #17, deliverable 2: a change a node makes beyond its rights is refused on receipt by the
// other nodes — over the real mesh: not merged and counted; the sender is not scored down (an
// honest member that knows more may relay what this replica refuses).
test("a node's gossip writing another node's Node status is refused on receipt, and nothing of it is merged", async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const open = async (seed: number) => {
    const dataDir = await fx.dir()
    const key = await loadOrCreateIdentity(dataDir, seededRandom(seed))
    // As the agent does: the verifier reads the member directory, filled at join before the first sync.
    const members = new MemoryMemberDirectory()
    const verifier = peerKeyVerifier((id) => {
      const m = members.get(id)
      return m === undefined ? undefined : { node: m.name }
    })
    const store = await openStore({ dir: join(dataDir, 'db'), randomBytes: seededBytes(seed), signer: recordSigner(key), verifier })
    t.after(() => store.close())
    return { dataDir, store, members }
  }
  const A = await open(21)
  const B = await open(22)
  await A.store.apply(nodeObject('a'), { author: 'controller:node', now: 1_000 })
  const { mesh: a } = await fx.create('a', { dataDir: A.dataDir, scopes: { cluster: A.store }, members: A.members })
  const b = await fx.join('b', a, { dataDir: B.dataDir, scopes: { cluster: B.store }, members: B.members })
  await B.store.apply(nodeObject('b'), { author: 'controller:node', now: 2_000 })
  await waitFor("A has B's node", () => A.store.get(nodeRef('b')) !== undefined)
  assert.ok(B.store.get(nodeRef('a')))

  const refused: string[] = []
  A.store.onRefused((reason) => refused.push(reason))
  const misbehaved: { peerId: string; score: number }[] = []
  a.on('peer:misbehaved', (e) => misbehaved.push(e))
  // B's (modified) agent marks A NotReady: its own store takes it, A's refuses it.
  await B.store.patch(nodeRef('a'), [{ path: ['status', 'state'], value: 'NotReady' }], { author: 'controller:node', now: 3_000 })
  await waitFor('A refused the update', () => refused.length > 0)
  assert.equal(refused[0], 'unauthorized')
  assert.equal(A.store.get(nodeRef('a'))?.status, undefined)
  // B's own Node is B's to write.
  assert.equal(B.store.get(nodeRef('a'))?.status?.state, 'NotReady')
  // A refusal judged on what the receiver knows costs the sender no score (sync.ts,
  // isDisputedRefusal): anti-entropy from B brings it again and is refused again, B stays connected
  // and nobody was scored down.
  await b.syncNow(a.peerId).catch(() => undefined)
  await waitFor('A refused the sync too', () => refused.length > 1)
  assert.ok(a.libp2p.getConnections().some((c) => c.remotePeer.toString() === b.peerId))
  assert.deepEqual(misbehaved, [])
})
