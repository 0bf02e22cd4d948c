// The API edge of Secrets as the agent wires it (objectRoutes with `prepare`, secretRoutes, the
// authorizer): apply seals, re-apply writes nothing, bad input is one line naming the key with the
// store unchanged, no keyring is a clear `unavailable`, and only roles granting Secret/reveal open values.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { pino } from 'pino'
import { objectRoutes, routeNotFound } from '../../../src/agent/api.ts'
import { createAuthorizer } from '../../../src/agent/authz.ts'
import { combineHandlers, createRouter } from '../../../src/agent/router.ts'
import { admitSealedKeys, type SecretApiComponents, sealAppliedSecret, secretRoutes } from '../../../src/agent/secrets-api.ts'
import { type ApiRequest, OrcError, type Principal } from '../../../src/model/index.ts'
import { Keyring, keyIdsOf, resealSecret } from '../../../src/secrets/index.ts'
import type { Store } from '../../../src/store/store.ts'
import { seededBytes } from '../../helpers/random.ts'
import { tempStore } from '../../helpers/store.ts'

const MARK = 'MARKER-pl41ntext-7c1e'
const random = seededBytes(18)
const user = (name: string): Principal => ({ kind: 'user', name, via: 'remote' })
const admin = user('admin')
const binding = (name: string, role: string) => ({ apiVersion: 'orc/v1', kind: 'RoleBinding', metadata: { name }, spec: { role, users: [name] } })
const secret = (name: string, spec: Record<string, unknown>, namespace?: string) => ({
  apiVersion: 'orc/v1',
  kind: 'Secret',
  metadata: { name, ...(namespace ? { namespace } : {}) },
  spec,
})

describe('the API edge of Secrets', () => {
  let store: Store
  let cleanup: () => Promise<void>
  let h: (req: ApiRequest) => Promise<{ status: number; body?: any }>
  let ring: Keyring | undefined
  let t = Date.parse('2024-01-01T00:00:00Z')

  before(async () => {
    ;({ store, cleanup } = await tempStore())
    ring = Keyring.generate(random, t)
    const keyring: SecretApiComponents['keyring'] = {
      get: () => ring,
      require: () => {
        if (ring === undefined) throw new OrcError('unavailable', 'this node does not hold the cluster data key yet')
        return ring
      },
    }
    const c: SecretApiComponents = { keyring, random, get: (ref) => store.get(ref), logger: pino({ level: 'silent' }) }
    const routes = combineHandlers(
      objectRoutes({
        store,
        clock: { now: () => (t += 1000) },
        logger: pino({ level: 'silent' }),
        node: () => ({}) as any,
        prepare: (raw, ns) => sealAppliedSecret(c, raw, ns),
        admit: (obj) => {
          if (obj.kind === 'Secret') admitSealedKeys(obj as any, ring)
        },
      }),
      secretRoutes(c),
    )
    h = createRouter(routes, { notFound: routeNotFound, authorize: createAuthorizer({ store }) })
    for (const [name, role] of [
      ['vera', 'view'],
      ['eddie', 'edit'],
    ]) {
      await store.apply(binding(name!, role!), { author: 'user:admin', now: t })
    }
  })
  after(() => cleanup())

  const apply = (objects: unknown[], p: Principal = admin, namespace?: string) =>
    h({ method: 'POST', path: '/v1/apply', body: { objects, ...(namespace ? { namespace } : {}) }, principal: p })
  const get = (path: string, p: Principal = admin) => h({ method: 'GET', path, principal: p })
  const revisions = async (name: string, ns = 'default') => (await get(`/v1/objects/Secret/${ns}/${name}/history`)).body.revisions.length

  it('stores only sealed values; re-applying the same values writes no revision', async () => {
    const r = await apply([secret('db', { data: { password: MARK, user: 'app' }, binaryData: { key: Buffer.from([0, 255]).toString('base64') } })])
    assert.equal(r.status, 200, JSON.stringify(r.body))
    assert.equal(r.body.results[0].outcome, 'created')
    const stored = store.get({ kind: 'Secret', namespace: 'default', name: 'db' })!
    assert.equal(JSON.stringify(stored).includes(MARK), false)
    assert.deepEqual(Object.keys((stored.spec as any).sealed).sort(), ['key', 'password', 'user'])
    const again = await apply([secret('db', { data: { password: MARK, user: 'app' }, binaryData: { key: Buffer.from([0, 255]).toString('base64') } })])
    assert.equal(again.body.results[0].outcome, 'unchanged')
    assert.equal(await revisions('db'), 1)
    // `orc get -o yaml | orc apply -f -`: the sealed form applied back changes nothing either.
    const { metadata, ...rest } = stored
    const back = await apply([{ ...rest, metadata: { name: metadata.name, namespace: metadata.namespace } }])
    assert.equal(back.body.results[0].outcome, 'unchanged')
    assert.equal(await revisions('db'), 1)
    const history = JSON.stringify((await get('/v1/objects/Secret/default/db/history')).body)
    assert.equal(history.includes(MARK), false)
  })

  it('seals for the namespace the request gives (the value is bound to its place)', async () => {
    const r = await apply([secret('ns-db', { data: { password: MARK } })], admin, 'team')
    assert.equal(r.status, 200, JSON.stringify(r.body))
    const open = await get('/v1/secrets/team/ns-db/reveal')
    assert.equal(open.body.object.spec.data.password, MARK)
  })

  it('a Secret in a multi-object apply is sealed too; a bad one leaves the whole batch unwritten', async () => {
    const config = { apiVersion: 'orc/v1', kind: 'Config', metadata: { name: 'cfg' }, spec: { data: { a: 'b' } } }
    const ok = await apply([config, secret('multi', { data: { token: MARK } })])
    assert.equal(ok.status, 200, JSON.stringify(ok.body))
    assert.equal(JSON.stringify(store.get({ kind: 'Secret', namespace: 'default', name: 'multi' })).includes(MARK), false)
    const before = store.get({ kind: 'Config', namespace: 'default', name: 'cfg' })!.metadata.revision
    const bad = await apply([{ ...config, spec: { data: { a: 'c' } } }, secret('multi', { data: { 'no/slash': MARK } })])
    assert.equal(bad.status, 400)
    assert.equal(store.get({ kind: 'Config', namespace: 'default', name: 'cfg' })!.metadata.revision, before)
  })

  for (const [what, spec, key] of [
    ['an invalid key name', { data: { 'a/b': MARK } }, 'spec.data.a/b'],
    ['bad base64', { binaryData: { blob: `${MARK}!!` } }, 'spec.binaryData.blob'],
    ['a value that is not text', { data: { n: 42 } }, 'spec.data.n'],
    ['more than 128 KiB', { data: { big: MARK + 'x'.repeat(1024 * 1024) } }, 'spec: 1048597 bytes of data; at most 131072'],
  ] as const) {
    it(`${what} is refused in one line naming the key, never the value; nothing changes`, async () => {
      const before = store.get({ kind: 'Secret', namespace: 'default', name: 'db' })!.metadata.revision
      const r = await apply([secret('db', spec)])
      assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 300))
      const msg: string = r.body.error.message
      assert.ok(msg.startsWith(`secret/db: ${key}`), msg.slice(0, 300))
      assert.equal(msg.includes('\n'), false)
      assert.equal(JSON.stringify(r.body).includes(MARK), false)
      assert.equal(store.get({ kind: 'Secret', namespace: 'default', name: 'db' })!.metadata.revision, before)
    })
  }

  it('a sealed value copied from another secret, or with a forged hash, is refused', async () => {
    const db = store.get({ kind: 'Secret', namespace: 'default', name: 'db' })!
    const sealed = (db.spec as any).sealed
    const copy = await apply([secret('copy', { sealed: { password: sealed.password } })])
    assert.equal(copy.status, 400)
    assert.match(copy.body.error.message, /^secret\/copy: spec\.sealed\.password: not a value sealed for this secret and key/)
    const forged = await apply([secret('db', { sealed: { ...sealed, password: { ...sealed.password, hash: '0000000000000000' } } })])
    assert.equal(forged.status, 400)
    assert.match(forged.body.error.message, /hash, size or binary do not match/)
  })

  it('--show-secrets: admin and edit may reveal; view sees the sealed form and is refused the values with a clear 403', async () => {
    for (const p of [admin, user('eddie')]) {
      const r = await get('/v1/secrets/default/db/reveal', p)
      assert.equal(r.status, 200, JSON.stringify(r.body))
      assert.equal(r.body.object.spec.data.password, MARK)
      assert.deepEqual(r.body.object.spec.binaryData, { key: Buffer.from([0, 255]).toString('base64') })
      assert.equal(r.body.object.spec.sealed, undefined)
    }
    const sealedView = await get('/v1/objects/Secret/default/db', user('vera'))
    assert.equal(sealedView.status, 200)
    assert.equal(JSON.stringify(sealedView.body).includes(MARK), false)
    const refused = await get('/v1/secrets/default/db/reveal', user('vera'))
    assert.equal(refused.status, 403)
    assert.match(refused.body.error.message, /^user:vera may not get Secret\/reveal in namespace default \(it opens the values; roles admin and edit grant/)
    assert.equal(JSON.stringify(refused.body).includes(MARK), false)
  })

  it('a revealed Secret applied back writes no revision', async () => {
    const r = await get('/v1/secrets/default/db/reveal')
    const n = await revisions('db')
    const { metadata, ...rest } = r.body.object
    const back = await apply([{ ...rest, metadata: { name: metadata.name } }])
    assert.equal(back.body.results[0].outcome, 'unchanged')
    assert.equal(await revisions('db'), n)
  })

  it('rollback to a revision sealed with a retired key is refused in one line, nothing written; after the rotation it works', async () => {
    assert.equal((await apply([secret('rot', { data: { password: `${MARK}-1` } })])).status, 200)
    const ref = { kind: 'Secret', namespace: 'default', name: 'rot' }
    const old = ring!.current().id
    ring!.rotate(random, (t += 1000))
    await store.apply(resealSecret(ring!, random, store.get(ref) as any), { author: 'user:admin', reason: 'data key rotated', now: (t += 1000) })
    assert.equal((await apply([secret('rot', { data: { password: `${MARK}-3` } })])).status, 200)
    assert.deepEqual(ring!.retire(keyIdsOf(store.get(ref) as any)), [old])
    const rollback = (to: number) => h({ method: 'POST', path: '/v1/objects/Secret/default/rot/rollback', body: { to }, principal: admin })
    const refused = await rollback(1)
    assert.equal(refused.status, 400, JSON.stringify(refused.body))
    assert.match(refused.body.error.message, new RegExp(`^secret/rot: key password is sealed with data key ${old}, which this cluster retired`))
    assert.equal(JSON.stringify(refused.body).includes(MARK), false)
    assert.equal(await revisions('rot'), 3)
    const ok = await rollback(2)
    assert.equal(ok.status, 200, JSON.stringify(ok.body))
    assert.equal((await get('/v1/secrets/default/rot/reveal')).body.object.spec.data.password, `${MARK}-1`)
  })

  it('without a keyring on this node: a clear unavailable error, nothing written; the sealed form still reads', async () => {
    const saved = ring
    ring = undefined
    try {
      const r = await apply([secret('nokey', { data: { password: MARK } })])
      assert.equal(r.status, 503, JSON.stringify(r.body))
      assert.equal(store.get({ kind: 'Secret', namespace: 'default', name: 'nokey' }), undefined)
      assert.equal((await get('/v1/objects/Secret/default/db')).status, 200)
      assert.equal((await get('/v1/secrets/default/db/reveal')).status, 503)
    } finally {
      ring = saved
    }
  })
})
