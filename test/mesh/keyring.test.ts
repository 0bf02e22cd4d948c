// The cluster keyring over `/orc/keyring/1.0.0` on a real libp2p mesh: a member gets it and can
// offer one; a connected non-member (a credential peer: the remote CLI's key, which the gater lets
// in) and a removed member never reach the provider.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { KeyringProvider } from '../../src/mesh/index.ts'
import { credentialPeer, Fixture, waitFor } from './helpers.ts'

function recordingProvider(ring: unknown) {
  const calls: string[] = []
  const offers: Array<{ from: string; keyring: unknown }> = []
  const provider: KeyringProvider = {
    current: () => {
      calls.push('current')
      return ring
    },
    offered: async (keyring, from) => {
      offers.push({ from, keyring })
    },
  }
  return { provider, calls, offers }
}

test('keyring protocol: members get and offer the keyring; a connected non-member and a removed member are refused', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const ring = { version: 1, marker: 'the-keyring' }
  const pa = recordingProvider(ring)
  // The gater lets credential peers (the remote CLI) onto the mesh port without being members, so
  // the protocol itself must refuse them. (Strangers are refused at the gater: admission.test.ts.)
  const credentialKeys: string[] = []
  const { mesh: a } = await fx.create('a', { keyring: pa.provider, credentialKeys: () => credentialKeys })
  const b = await fx.join('b', a, { keyring: recordingProvider(undefined).provider })
  await waitFor('b alive on a', () => a.members().some((m) => m.peerId === b.peerId && m.state === 'alive'))

  assert.deepEqual(await b.fetchKeyring(a.peerId), ring)
  await b.offerKeyring(a.peerId, { version: 1, marker: 'rotated' })
  assert.deepEqual(pa.offers, [{ from: b.peerId, keyring: { version: 1, marker: 'rotated' } }])
  // A member that holds none says so.
  await assert.rejects(a.fetchKeyring(b.peerId), /does not hold the cluster keyring yet/)
  const served = pa.calls.length

  // A credential peer with the PSK: the gater gives it a connection, but the keyring protocol is
  // for members only.
  const s = await credentialPeer(fx, a, credentialKeys)
  const aId = peerIdFromString(a.peerId)
  await s.libp2p.peerStore.merge(aId, { multiaddrs: a.addresses().map((x) => multiaddr(x)) })
  await s.libp2p.dial(aId, { signal: AbortSignal.timeout(3000) })
  await s.libp2p.services.ping.ping(aId, { signal: AbortSignal.timeout(3000) })
  await assert.rejects(s.fetchKeyring(a.peerId))
  await assert.rejects(s.offerKeyring(a.peerId, { version: 1, marker: 'forged' }))

  // Removed: never again, whatever connection it finds.
  await a.removeMember(b.peerId)
  await assert.rejects(b.fetchKeyring(a.peerId))
  assert.equal(pa.calls.length, served, 'the provider was not asked for the stranger or the removed member')
  assert.equal(pa.offers.length, 1, 'no offer from the stranger or the removed member was taken')
})
