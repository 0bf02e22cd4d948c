import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { Clock } from '../../src/effects/index.ts'
import { decodeToken, joinMesh } from '../../src/mesh/index.ts'
import { Fixture } from './helpers.ts'

function manualClock(start = Date.now()): Clock & { advance(ms: number): void } {
  let now = start
  return {
    now: () => now,
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
    advance(ms) {
      now += ms
    },
  }
}

function retoken(token: string, change: (c: any) => void): string {
  const c: any = decodeToken(token)
  change(c)
  return 'orcjoin1.' + Buffer.from(JSON.stringify(c)).toString('base64url')
}

test('expired, used, revoked, forged and malformed tokens are refused with clear messages', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const clock = manualClock()
  const { mesh: a } = await fx.create('a', { clock })
  const join = async (name: string, token: string) => joinMesh({ ...(await fx.base(name)), token })

  // Used: one use, B takes it, C is refused by the issuer.
  const once = await a.createToken({ ttlMs: 10 * 60_000, uses: 1 })
  fx.track(await join('b', once.token))
  await assert.rejects(join('c', once.token), /token already used/)

  // Revoked.
  const rev = await a.createToken({ ttlMs: 10 * 60_000, uses: 5 })
  await a.revokeToken(rev.id)
  await assert.rejects(join('d', rev.token), /token revoked/)

  // Forged: a made-up secret, or an id the issuer never issued.
  const real = await a.createToken({ ttlMs: 10 * 60_000, uses: 5 })
  await assert.rejects(
    join(
      'e',
      retoken(real.token, (c) => (c.secret = 'A'.repeat(43))),
    ),
    /token not recognised/,
  )
  await assert.rejects(
    join(
      'e',
      retoken(real.token, (c) => (c.id = 'nope')),
    ),
    /token not recognised/,
  )

  // Expired on the issuer: the issuer's clock has moved on; the token's own expiry claim is
  // forged forward, so only the issuer's record can refuse it.
  const short = await a.createToken({ ttlMs: 60_000, uses: 1 })
  clock.advance(4 * 60_000)
  await assert.rejects(
    join(
      'f',
      retoken(short.token, (c) => (c.exp = Date.now() + 3_600_000)),
    ),
    (err: any) => err.code === 'forbidden' && /token expired 3m ago/.test(err.message),
  )
  // Expired on the joiner: refused before dialing.
  await assert.rejects(
    join(
      'g',
      retoken(short.token, (c) => (c.exp = Date.now() - 120_000)),
    ),
    (err: any) => err.code === 'forbidden' && err.message === 'token expired 2m ago',
  )
  await assert.rejects(join('h', 'orcjoin1.garbage'), /join token is malformed/)

  // The refused joiners were not admitted; B was.
  assert.deepEqual(
    a.members().map((m) => m.name),
    ['a', 'b'],
  )
  // The one-use token admits nobody else even after B is gone.
  assert.equal((await a.listTokens()).find((r) => r.id === once.id)?.usesLeft, 0)
})

test('removing a node revokes the tokens it joined with, and only those', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const { mesh: a } = await fx.create('a')
  // A multi-use token B joins with: before this, B could replay it after its removal.
  const multi = await a.createToken({ ttlMs: 10 * 60_000, uses: 5 })
  const untouched = await a.createToken({ ttlMs: 10 * 60_000, uses: 5 })
  const b = fx.track(await joinMesh({ ...(await fx.base('b')), token: multi.token }))
  await a.removeMember(b.peerId)
  const tokens = await a.listTokens()
  assert.equal(tokens.find((r) => r.id === multi.id)?.revoked, true, 'the token B joined with is revoked')
  assert.equal(tokens.find((r) => r.id === untouched.id)?.revoked, false, 'tokens B did not use are left alone')
  // B (or anyone holding its token) is refused with the reason.
  await assert.rejects(joinMesh({ ...(await fx.base('b2')), token: multi.token }), /token revoked/)
})
