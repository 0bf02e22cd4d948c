// The federation document's revisions are signed like the cluster's (docs/security.md, "Federation
// scopes"): every replica checks the signature, that the signer is a member of the federation, and
// that a revision's id names its signer's own replica. Three clusters in process, real stores and
// libp2p hosts; the forgeries are what a modified member agent could send.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { checkAuthorship } from '../../src/agent/federation/replica.ts'
import { recordSigner } from '../../src/mesh/index.ts'
import { decodeUpdateMessage, encodeUpdateMessage, type RevisionRecord } from '../../src/store/codec.ts'
import { signRecord } from '../../src/store/trust.ts'
import { pod } from '../helpers/store.ts'
import { waitFor } from '../mesh/helpers.ts'
import { inNs, ref, three } from './helpers.ts'

async function refused(p: Promise<unknown>, reason: string): Promise<void> {
  await assert.rejects(p, (err: any) => {
    assert.equal(err.details?.refused, reason, err.message)
    return true
  })
}

/** `msg`'s first record changed by `edit`, signed again by `signer` (or not, without one). */
function forge(msg: Uint8Array, edit: (r: RevisionRecord) => void, signer?: ReturnType<typeof recordSigner>): Uint8Array {
  const { yUpdate, records } = decodeUpdateMessage(msg)
  const r = structuredClone(records[0]!)
  // A revision the receivers have not seen (one they hold is skipped, whatever it says).
  const [replica, seq] = r.i.split('.')
  r.i = `${replica}.${Number(seq) + 1000}`
  edit(r)
  if (signer !== undefined) {
    delete r.g
    signRecord(r, signer, r.y!, r.yc!)
  }
  return encodeUpdateMessage(yUpdate, [r])
}

test('federation revisions are signed; tampered, non-member and other-replica records are refused on receipt', async (t) => {
  const { a, b, c } = await three(t)
  const fa = a.fm.get('shared')!
  const fb = b.fm.get('shared')!
  const fc = c.fm.get('shared')!
  const sent: Uint8Array[] = []
  const off = fa.store.onLocalUpdate((u) => sent.push(u))
  t.after(off)
  await a.api.apply(inNs('shared', pod('signed')), { author: 'user:alice', now: Date.now() })
  await waitFor('cloud has home pod', () => b.api.get(ref('shared', 'signed')) !== undefined, 30_000)
  const msg = sent.find((m) => decodeUpdateMessage(m).records.some((r) => r.k === 'Pod/shared/signed'))!
  const rec = decodeUpdateMessage(msg).records[0]!
  assert.equal(rec.n, fa.mesh.peerId, "signed by home's node, with its federation key")
  assert.ok(rec.g !== undefined, 'carries a signature')

  // A relaying member changes the reason and keeps home's signature: refused. (Each forgery is a
  // revision id the receivers have not seen: one they hold is skipped, whatever it says.)
  await refused(fb.store.applyRemote(forge(msg, (r) => (r.r = 'tampered'))), 'bad_signature')
  // A key that is no member of the federation signs home's revision: refused.
  const outsider = recordSigner(await generateKeyPair('Ed25519'))
  await refused(fb.store.applyRemote(forge(msg, (r) => (r.r = 'outsider'), outsider)), 'not_member')
  // Edge's node re-signs home's revision as its own, keeping home's replica in the id: the store
  // alone would take edge's signature; the federation's check refuses a revision numbered under
  // another node's replica, before the store sees it.
  const members = { clusterOfReplica: () => 'home' }
  const asEdge = forge(msg, (r) => (r.r = 'edge wrote this'), recordSigner(fc.mesh.privateKey))
  assert.equal(decodeUpdateMessage(asEdge).records[0]!.n, fc.mesh.peerId)
  assert.throws(() => checkAuthorship(asEdge, members), /is signed by .*, whose revisions are not numbered under replica/)
  // Nothing of the forgeries reached the stored object.
  assert.equal((await fb.store.history(ref('shared', 'signed'))).length, 1)
  assert.notEqual(fb.store.get(ref('shared', 'signed'))?.metadata, undefined)
})
