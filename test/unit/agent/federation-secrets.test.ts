// Secrets and federations: a Secret reaches a federation's document only when its namespace is
// shared and it says spec.shareable: true. On writing (the API's routed store keeps the others in
// the cluster's own scope) and on receipt (a federation update that would share one is refused
// before the store sees it).

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { routedStore, type ScopeRouter, verifiedReplica } from '../../../src/agent/federation/index.ts'
import { checkFederatedSecrets, mayFederate } from '../../../src/agent/federation/secrets.ts'
import type { Secret } from '../../../src/model/index.ts'
import { Keyring, sealSecret } from '../../../src/secrets/index.ts'
import { seededBytes, tempStore } from '../../helpers/store.ts'

const random = seededBytes(7)
const ring = Keyring.generate(random, 1)

function secret(ns: string, name: string, shareable?: boolean): Secret {
  return sealSecret(ring, random, {
    apiVersion: 'orc/v1',
    kind: 'Secret',
    metadata: { name, namespace: ns },
    spec: { data: { password: `${name}-marker` }, ...(shareable !== undefined ? { shareable } : {}) },
  })
}

const w = (author = 'user:alice') => ({ author, now: 1_000 })
const ref = (ns: string, name: string) => ({ kind: 'Secret', namespace: ns, name })

async function scopes(t: { after(fn: () => Promise<void>): void }) {
  const own = await tempStore()
  const fed = await tempStore()
  t.after(() => own.cleanup())
  t.after(() => fed.cleanup())
  const scope = { store: fed.store, cluster: 'home', federation: 'f' }
  const router: ScopeRouter = { scopeOf: (ns) => (ns === 'shared' ? scope : undefined), scopes: () => [{ namespaces: ['shared'], scope }] }
  return { own: own.store, fed: fed.store, api: routedStore(own.store, router) }
}

test('mayFederate: only a Secret marked shareable', () => {
  assert.equal(mayFederate(secret('shared', 'a')), false)
  assert.equal(mayFederate(secret('shared', 'a', false)), false)
  assert.equal(mayFederate(secret('shared', 'a', true)), true)
  assert.equal(mayFederate({ kind: 'Pod', spec: {} }), true)
})

test('writing: a Secret in a shared namespace stays private unless shareable; it does not move by an edit', async (t) => {
  const { own, fed, api } = await scopes(t)
  await api.apply(secret('shared', 'private'), w())
  await api.apply(secret('shared', 'public', true), w())
  await api.apply(secret('default', 'local', true), w())
  assert.ok(own.get(ref('shared', 'private')), 'a Secret that is not shareable stays in the cluster scope')
  assert.equal(fed.get(ref('shared', 'private')), undefined, 'and never reaches the federation document')
  assert.ok(fed.get(ref('shared', 'public')), 'shareable in a shared namespace: the federation document')
  assert.equal(fed.get(ref('default', 'local')), undefined, 'shareable in a namespace that is not shared: private')
  assert.ok(own.get(ref('default', 'local')))
  // Read back through the API wherever it is.
  assert.ok(api.get(ref('shared', 'private')))
  assert.ok(api.get(ref('shared', 'public')))
  assert.deepEqual(
    api
      .list('Secret', 'shared')
      .map((s) => s.metadata.name)
      .sort(),
    ['private', 'public'],
  )
  assert.deepEqual(
    api
      .list('Secret')
      .map((s) => `${s.metadata.namespace}/${s.metadata.name}`)
      .sort(),
    ['default/local', 'shared/private', 'shared/public'],
  )
  // Edits stay where the Secret is; sharing or unsharing one is refused in one line.
  await api.apply({ ...secret('shared', 'private'), metadata: { name: 'private', namespace: 'shared', labels: { x: 'y' } } }, w())
  assert.equal(fed.get(ref('shared', 'private')), undefined)
  await assert.rejects(
    api.apply(secret('shared', 'private', true), w()),
    /secret shared\/private is private to this cluster: to share it .*delete it and apply it again/,
  )
  await assert.rejects(api.apply(secret('shared', 'public', false), w()), /secret shared\/public is shared with federation f: spec.shareable stays true/)
  await assert.rejects(api.patch(ref('shared', 'public'), [{ path: ['spec', 'shareable'], value: undefined }], w()), /spec.shareable stays true/)
  await api.patch(ref('shared', 'public'), [{ path: ['spec', 'description'], value: 'db' }], w())
  assert.equal(fed.get(ref('shared', 'public'))?.spec?.description, 'db')
  await api.delete(ref('shared', 'private'), w())
  assert.equal(own.get(ref('shared', 'private')), undefined)
})

test('receipt: a federation update that would share a Secret not marked shareable is refused before the store sees it', async (t) => {
  // A modified agent of another cluster writes straight into its federation document. (Each case
  // from its own writer: a refused write holds back the same writer's later ones.)
  const receiver = await tempStore()
  t.after(() => receiver.cleanup())
  const replica = verifiedReplica(receiver.store, { clusterOfReplica: () => 'cloud' })
  const writer = async () => {
    const s = await tempStore()
    t.after(() => s.cleanup())
    const updates: Uint8Array[] = []
    s.store.onLocalUpdate((u) => updates.push(u))
    return { store: s.store, take: () => updates.splice(0) }
  }

  const rogue = await writer()
  await rogue.store.apply(secret('shared', 'leak'), w('user:bob@cloud'))
  const leak = rogue.take()
  assert.ok(leak.length > 0)
  for (const u of leak) await assert.rejects(replica.applyRemote(u), /would share Secret\/shared\/leak, which is not marked spec.shareable: true/)
  assert.equal(receiver.store.get(ref('shared', 'leak')), undefined, 'nothing of it stored')

  const sender = await writer()
  const take = sender.take
  await sender.store.apply(secret('shared', 'ok', true), w('user:bob@cloud'))
  for (const u of take()) await replica.applyRemote(u)
  assert.ok(receiver.store.get(ref('shared', 'ok')), 'a shareable Secret is received')
  // An edit of other fields passes; one that makes it private is refused.
  await sender.store.patch(ref('shared', 'ok'), [{ path: ['spec', 'description'], value: 'db' }], w('user:bob@cloud'))
  for (const u of take()) await replica.applyRemote(u)
  assert.equal(receiver.store.get(ref('shared', 'ok'))?.spec?.description, 'db')
  await sender.store.patch(ref('shared', 'ok'), [{ path: ['spec', 'shareable'], value: false }], w('user:bob@cloud'))
  for (const u of take()) await assert.rejects(replica.applyRemote(u), /not marked spec.shareable/)
  assert.equal(receiver.store.get(ref('shared', 'ok'))?.spec?.shareable, true)
})

test('checkFederatedSecrets judges full copies, creations and changes', () => {
  const rec = (o: string, extra: Record<string, unknown>) => ({ i: 'aaaaaaaaaaaaaaaa.1', k: 'Secret/shared/x', o, ...extra })
  assert.throws(() => checkFederatedSecrets([rec('update', { f: { spec: { sealed: {} } } })]), /not marked spec.shareable/)
  checkFederatedSecrets([rec('update', { f: { spec: { shareable: true } } })])
  assert.throws(() => checkFederatedSecrets([rec('create', { c: [['s', ['spec'], { sealed: {} }]] })]), /not marked/)
  checkFederatedSecrets([rec('create', { c: [['s', [], { spec: { shareable: true } }]] })])
  assert.throws(() => checkFederatedSecrets([rec('update', { c: [['u', ['spec', 'shareable']]] })]), /not marked/)
  checkFederatedSecrets([rec('update', { c: [['s', ['metadata', 'labels'], { a: 'b' }]] })])
  checkFederatedSecrets([rec('delete', {})])
  checkFederatedSecrets([{ i: 'aaaaaaaaaaaaaaaa.1', k: 'Pod/shared/x', o: 'create', c: [['s', [], { spec: {} }]] }])
})
