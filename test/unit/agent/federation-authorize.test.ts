// How a federation document's replica judges what it receives (federationAuthorize): field
// ownership by the controller of whichever member cluster wrote, not only its own cluster's — each
// node of each cluster writes its node summary into its cluster's object — and still by owner.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { MemoryLevel } from 'memory-level'
import { clusterOwnership, federationAuthorize } from '../../../src/agent/federation/scheduling.ts'
import { defaultOwnership, OwnershipTable, USERS } from '../../../src/model/index.ts'
import { openStore } from '../../../src/store/store.ts'
import { outbox, type TestNode, testNode, verifierOf } from '../store/trust-helpers.ts'

const clusterRef = (name: string) => ({ kind: 'Cluster', namespace: '', name })

test("a federation replica takes another cluster's node summaries from its controller, and refuses a user writing them", async () => {
  const h1 = testNode('h1@home')
  const h2 = testNode('h2@home')
  const c1 = testNode('c1@cloud')
  const all = [h1, h2, c1]
  const open = (n: TestNode, cluster: string) =>
    openStore({
      dir: `mem-${n.name}`,
      db: new MemoryLevel({ keyEncoding: 'utf8', valueEncoding: 'view' }) as never,
      sync: false,
      signer: n.signer,
      verifier: verifierOf(all),
      ownership: clusterOwnership(cluster),
      authorize: federationAuthorize(),
    })
  const [H1, H2, C1] = await Promise.all([open(h1, 'home'), open(h2, 'home'), open(c1, 'cloud')])
  try {
    const fromH1 = outbox(H1)
    await H1.apply({ apiVersion: 'orc/v1', kind: 'Cluster', metadata: { name: 'home' }, spec: {} }, { author: 'controller:cluster@home', now: 1000 })
    await H1.patch(clusterRef('home'), [{ path: ['status', 'nodes', 'h1'], value: { cpu: 2 } }], { author: 'controller:cluster@home', now: 1001 })
    for (const m of fromH1) {
      await H2.applyRemote(m)
      await C1.applyRemote(m)
    }
    const fromH2 = outbox(H2)
    await H2.patch(clusterRef('home'), [{ path: ['status', 'nodes', 'h2'], value: { cpu: 4 } }], { author: 'controller:cluster@home', now: 1002 })
    for (const m of fromH2) await C1.applyRemote(m)
    assert.deepEqual(C1.get(clusterRef('home'))?.status, { nodes: { h1: { cpu: 2 }, h2: { cpu: 4 } } }, "cloud took both of home's summaries")
    // A modified home agent writes a summary as a user (its own store's check bypassed): refused.
    const forged = outbox(H2)
    ;(H2 as any).ownership = new (class extends OwnershipTable {
      override ownerOf(): typeof USERS {
        return USERS
      }
    })(defaultOwnership().claims())
    await H2.patch(clusterRef('home'), [{ path: ['status', 'nodes', 'h2'], value: { cpu: 64 } }], { author: 'user:mallory@home', now: 1003 })
    assert.equal(forged.length, 1, 'the modified store wrote it')
    await assert.rejects(C1.applyRemote(forged[0]!), (err: any) => {
      assert.equal(err.details?.refused, 'unauthorized', err.message)
      assert.match(err.message, /status\.nodes.* is owned by controller:cluster; user:mallory may not change it/)
      return true
    })
    assert.deepEqual(C1.get(clusterRef('home'))?.status, { nodes: { h1: { cpu: 2 }, h2: { cpu: 4 } } })
  } finally {
    await Promise.all([H1, H2, C1].map((s) => s.close()))
  }
})
