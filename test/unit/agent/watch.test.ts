// The watch route behind `orc get -w`: a long poll that answers once the list differs from the
// version the client has, with the `list` right of the kind (the view role has it).
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { pino } from 'pino'
import { objectRoutes, routeNotFound } from '../../../src/agent/api.ts'
import { createAuthorizer } from '../../../src/agent/authz.ts'
import { createRouter } from '../../../src/agent/router.ts'
import type { ApiRequest, Principal } from '../../../src/model/index.ts'
import type { Store } from '../../../src/store/store.ts'
import { pod, tempStore } from '../../helpers/store.ts'

const user = (name: string): Principal => ({ kind: 'user', name, via: 'remote' })

describe('GET /v1/watch/KIND', () => {
  let store: Store
  let cleanup: () => Promise<void>
  let h: (req: ApiRequest) => Promise<{ status: number; body?: any }>
  let t = Date.parse('2024-01-01T00:00:00Z')
  const clock = { now: () => t }
  /** Virtual waits: each moves the clock on, and a hook may write meanwhile. */
  let onSleep: (() => Promise<void>) | undefined
  let slept = 0

  before(async () => {
    ;({ store, cleanup } = await tempStore())
    const sleep = async (ms: number) => {
      slept += ms
      t += ms
      const f = onSleep
      onSleep = undefined
      await f?.()
    }
    h = createRouter(objectRoutes({ store, clock, sleep, logger: pino({ level: 'silent' }), node: () => ({}) as any }), {
      notFound: routeNotFound,
      authorize: createAuthorizer({ store }),
    })
    await store.apply(
      { apiVersion: 'orc/v1', kind: 'RoleBinding', metadata: { name: 'vera' }, spec: { role: 'view', users: ['vera'] } },
      { author: 'user:admin', now: t },
    )
    await store.apply(pod('web'), { author: 'user:admin', now: t })
  })
  after(() => cleanup())

  const watch = (query: Record<string, string>, who = user('vera')) => h({ method: 'GET', path: '/v1/watch/pods', query, principal: who })

  it('answers at once without a version, then waits while nothing changes, and answers early on a write', async () => {
    const first = await watch({})
    assert.equal(first.status, 200)
    assert.deepEqual(
      first.body.items.map((i: any) => i.metadata.name),
      ['web'],
    )
    slept = 0
    const idle = await watch({ known: first.body.version, waitMs: '1000' })
    assert.equal(idle.body.version, first.body.version)
    assert.equal(idle.body.items, undefined, 'no change: no list')
    assert.ok(slept >= 1000, `waited out waitMs (${slept} ms)`)
    slept = 0
    onSleep = async () => void (await store.apply(pod('db'), { author: 'user:admin', now: t }))
    const changed = await watch({ known: first.body.version, waitMs: '10000' })
    assert.ok(slept < 10_000, 'answered before waitMs')
    assert.notEqual(changed.body.version, first.body.version)
    assert.deepEqual(
      changed.body.items.map((i: any) => i.metadata.name),
      ['db', 'web'],
    )
    // A status-only write is a change too; a stale version answers at once.
    await store.patch({ kind: 'Pod', namespace: 'default', name: 'db' }, [{ path: ['status', 'phase'], value: 'Running' }], {
      author: 'controller:lifecycle',
      now: t,
    })
    slept = 0
    const again = await watch({ known: changed.body.version, waitMs: '5000' })
    assert.equal(slept, 0)
    assert.equal(again.body.items.find((i: any) => i.metadata.name === 'db').status.phase, 'Running')
  })

  it('needs the list right of the kind in the namespace', async () => {
    const r = await watch({}, user('nobody'))
    assert.equal(r.status, 403)
    assert.match(r.body.error.message, /^user:nobody may not list Pod in namespace default/)
  })
})
