import assert from 'node:assert/strict'
import { mkdtemp, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { decodeFederationToken, encodeFederationToken } from '../../../src/agent/federation/index.ts'
import {
  decodeToken,
  formatDuration,
  JsonFileTokenBook,
  MAX_TOKEN_TTL_MS,
  MAX_TOKEN_USES,
  MemoryTokenBook,
  TokenAuthority,
  type TokenBook,
} from '../../../src/mesh/index.ts'
import { seededRandom } from '../../mesh/helpers.ts'

const ctx = { clusterId: 'c1', issuer: '12D3KooWissuer', addrs: ['/ip4/10.0.0.1/tcp/4001'] }

function setup(book: TokenBook = new MemoryTokenBook()) {
  let now = 1_000_000
  const clock = { now: () => now, setTimeout: () => 0, clearTimeout: () => {} }
  return { auth: new TokenAuthority(book, clock, seededRandom(3)), advance: (ms: number) => (now += ms) }
}

test('a token carries what a joiner needs and admits exactly `uses` peers', async () => {
  const { auth } = setup()
  const { token } = await auth.issue({ ttlMs: 60_000, uses: 2 }, ctx)
  const c = decodeToken(token)
  assert.equal(c.cluster, 'c1')
  assert.equal(c.issuer, ctx.issuer)
  assert.deepEqual(c.addrs, ctx.addrs)
  assert.equal(c.v, 2)
  assert.deepEqual(Object.keys(c).sort(), ['addrs', 'cluster', 'exp', 'id', 'issuer', 'secret', 'v'], 'no cluster key in a node join token')
  await auth.redeem(c, 'c1', 'p1')
  await auth.redeem(c, 'c1', 'p1') // a retry by the same peer does not use another slot
  await auth.redeem(c, 'c1', 'p2')
  await assert.rejects(auth.redeem(c, 'c1', 'p3'), { code: 'forbidden', message: 'token already used' })
})

test('concurrent redemptions of a one-use token admit exactly one peer', async () => {
  const { auth } = setup()
  const c = decodeToken((await auth.issue({ ttlMs: 60_000, uses: 1 }, ctx)).token)
  const results = await Promise.allSettled(['a', 'b', 'c', 'd'].map((p) => auth.redeem(c, 'c1', p)))
  assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1)
})

test('expired, revoked, forged and foreign tokens are refused with one clear line', async () => {
  const { auth, advance } = setup()
  const c = decodeToken((await auth.issue({ ttlMs: 60_000, uses: 1 }, ctx)).token)
  await assert.rejects(auth.redeem({ ...c, secret: 'x' }, 'c1', 'p'), /token not recognised/)
  await assert.rejects(auth.redeem({ ...c, id: 'zzz' }, 'c1', 'p'), /token not recognised/)
  await assert.rejects(auth.redeem(c, 'other-cluster', 'p'), /token not recognised/)
  advance(60_000 + 3 * 60_000)
  await assert.rejects(auth.redeem(c, 'c1', 'p'), { code: 'forbidden', message: 'token expired 3m ago' })
  const d = decodeToken((await auth.issue({ ttlMs: 60_000, uses: 1 }, ctx)).token)
  await auth.revoke(d.id)
  await assert.rejects(auth.redeem(d, 'c1', 'p'), { message: 'token revoked' })
  await assert.rejects(auth.issue({ ttlMs: 0, uses: 1 }, ctx), /--ttl: a token's lifetime must be positive/)
  await assert.rejects(auth.issue({ ttlMs: 1, uses: 0 }, ctx), /--uses: must be a positive whole number/)
})

test('a TTL over 7 days or more than 1,000 uses is refused by the issuer, naming the flag and the cap', async () => {
  const { auth } = setup()
  await assert.rejects(
    auth.issue({ ttlMs: 1e20, uses: 1 }, ctx),
    (err: any) => err.code === 'invalid' && /^--ttl: a token may live at most 7d \(604800000ms\)/.test(err.message),
  )
  await assert.rejects(auth.issue({ ttlMs: MAX_TOKEN_TTL_MS + 1, uses: 1 }, ctx), /--ttl: a token may live at most 7d/)
  await assert.rejects(auth.issue({ ttlMs: Infinity, uses: 1 }, ctx), /--ttl/)
  await assert.rejects(
    auth.issue({ ttlMs: 60_000, uses: 1e9 }, ctx),
    (err: any) => err.code === 'invalid' && err.message === '--uses: a token may admit at most 1000 nodes, got 1000000000',
  )
  // The caps themselves are allowed.
  await auth.issue({ ttlMs: MAX_TOKEN_TTL_MS, uses: MAX_TOKEN_USES }, ctx)
  assert.equal((await auth.list()).length, 1, 'nothing was recorded for the refused ones')
})

test('expiry and revocation come before anything else: a peer that used the token gets no retry after', async () => {
  const { auth, advance } = setup()
  const c = decodeToken((await auth.issue({ ttlMs: 60_000, uses: 2 }, ctx)).token)
  await auth.redeem(c, 'c1', 'p1')
  await auth.redeem(c, 'c1', 'p1') // a retry while live still works
  advance(60_000 + 2 * 60_000)
  await assert.rejects(auth.check(c, 'c1', 'p1'), { code: 'forbidden', message: 'token expired 2m ago' })
  await assert.rejects(auth.redeem(c, 'c1', 'p1'), { code: 'forbidden', message: 'token expired 2m ago' })

  // Removing a member revokes the tokens it was admitted with, and only those.
  const d = decodeToken((await auth.issue({ ttlMs: 60_000, uses: 3 }, ctx)).token)
  const e = decodeToken((await auth.issue({ ttlMs: 60_000, uses: 3 }, ctx)).token)
  await auth.redeem(d, 'c1', 'p2')
  assert.deepEqual(await auth.revokeUsedBy('p2'), [d.id])
  await assert.rejects(auth.redeem(d, 'c1', 'p2'), { message: 'token revoked' })
  await assert.rejects(auth.redeem(d, 'c1', 'p3'), { message: 'token revoked' })
  await auth.redeem(e, 'c1', 'p3')
})

test('the join window is open while a token is live and for the grace period after', async () => {
  const { auth, advance } = setup()
  assert.equal(await auth.joinWindowOpen(10_000), false)
  const c = decodeToken((await auth.issue({ ttlMs: 60_000, uses: 1 }, ctx)).token)
  assert.equal(await auth.joinWindowOpen(10_000), true)
  await auth.redeem(c, 'c1', 'p')
  advance(5_000)
  assert.equal(await auth.joinWindowOpen(10_000), true)
  advance(6_000)
  assert.equal(await auth.joinWindowOpen(10_000), false)
})

test('malformed tokens are refused before anything else', () => {
  for (const t of ['', 'hello', 'orcjoin1.', 'orcjoin1.!!!', 'orcjoin1.' + Buffer.from('{"v":2}').toString('base64url')]) {
    assert.throws(() => decodeToken(t), /join token is malformed/)
  }
})

test('formatDuration reads like a person would say it', () => {
  assert.equal(formatDuration(45_000), '45s')
  assert.equal(formatDuration(3 * 60_000), '3m')
  assert.equal(formatDuration(2 * 3600_000), '2h')
  assert.equal(formatDuration(4 * 86400_000), '4d')
})

test('the JSON token book persists across restarts with mode 0600', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'orc-tok-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const { auth } = setup(JsonFileTokenBook.inDataDir(dir))
  const c = decodeToken((await auth.issue({ ttlMs: 60_000, uses: 1 }, ctx)).token)
  await auth.redeem(c, 'c1', 'p1')
  assert.equal((await stat(join(dir, 'tokens.json'))).mode & 0o777, 0o600)
  const again = setup(JsonFileTokenBook.inDataDir(dir)).auth
  await assert.rejects(again.redeem(c, 'c1', 'p2'), /token already used/)
})

test('token ids never look like a flag on the command line (`orc token revoke ID`)', async () => {
  const { auth } = setup()
  for (let i = 0; i < 300; i++) {
    const { record } = await auth.issue({ ttlMs: 60_000, uses: 1 }, ctx)
    assert.match(record.id, /^[0-9a-f]{18}$/)
  }
})

test('a token of an older orc (version 1, the PSK inside) is refused with a clear line; a new one has no key in it', async () => {
  const { auth } = setup()
  const { token } = await auth.issue({ ttlMs: 60_000, uses: 1 }, ctx)
  const claims = decodeToken(token)
  assert.deepEqual(Object.keys(claims).sort(), ['addrs', 'cluster', 'exp', 'id', 'issuer', 'secret', 'v'])
  const old = `orcjoin1.${Buffer.from(JSON.stringify({ ...claims, v: 1, psk: '07'.repeat(32) })).toString('base64url')}`
  assert.throws(() => decodeToken(old), { code: 'invalid', message: /token from an older orc .*create a new one/ })
})

test('a federation token (orcfed2.) is a node join token under its own prefix, no key inside; orcfed1. and orcjoin1. are refused naming the right format', async () => {
  const { auth } = setup()
  const { token } = await auth.issue({ ttlMs: 60_000, uses: 1 }, ctx)
  const fed = encodeFederationToken(token)
  assert.match(fed, /^orcfed2\.[A-Za-z0-9_-]+$/)
  // What `orc federation join` reads: the same claims, redeemed at the issuer's join host.
  assert.equal(decodeFederationToken(`  ${fed}\n`), token)
  assert.deepEqual(decodeToken(decodeFederationToken(fed)), decodeToken(token))
  assert.deepEqual(decodeToken(decodeFederationToken(fed)).addrs, ctx.addrs)
  const json = Buffer.from(fed.slice('orcfed2.'.length), 'base64url').toString('utf8')
  assert.doesNotMatch(json, /psk/i)
  // An invite of an older orc (its claims held the federation's PSK): refused before anything is dialed.
  const claims = decodeToken(token)
  const old = `orcfed1.${Buffer.from(JSON.stringify({ ...claims, v: 1, psk: '07'.repeat(32) })).toString('base64url')}`
  assert.throws(() => decodeFederationToken(old), {
    code: 'invalid',
    message: /older orc \(orcfed1\.….*ask for a new one \(orcfed2\.…\) with orc federation token/,
  })
  assert.throws(() => decodeFederationToken(token), /node join token \(orcjoin1\.…\) for `orc join`.*orcfed2\.…/)
  assert.throws(() => decodeFederationToken('orcfed3.abc'), /malformed \(expected orcfed2\.…\)/)
  // A truncated one: the claims' own check names what is wrong.
  assert.throws(() => decodeToken(decodeFederationToken(fed.slice(0, 20))), /join token is malformed/)
})
