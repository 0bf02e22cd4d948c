// Join tokens misused against a real agent: expired, used up, revoked, forged, name taken. Each
// refused join exits non-zero with one clear line and leaves no data dir behind; the issuer logs it.

import assert from 'node:assert/strict'
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { test } from 'node:test'
import { type NodeProcess, newNode, nodeNames, tokenFrom, Workspace, waitFor } from './helpers.ts'

async function refusedJoin(joiner: NodeProcess, peer: NodeProcess, token: string): Promise<string> {
  joiner.join(peer.addr, token)
  const code = await joiner.ended()
  assert.notEqual(code, 0, `join should fail: ${joiner.stdout}`)
  const lines = joiner.stderr
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('error:'))
  assert.equal(lines.length, 1, `one error line: ${joiner.stderr}`)
  assert.equal(existsSync(joiner.dataDir), false, 'no half-initialised data dir is left behind')
  return lines[0]!
}

test('join tokens: expired, used, revoked and forged tokens are refused with a clear message', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const a = await newNode(ws, 'a')
  await a.up().ready()

  await t.test('an expired token', async () => {
    const token = await tokenFrom(a, ['--ttl', '1s'])
    const exp = JSON.parse(Buffer.from(token.slice('orcjoin1.'.length), 'base64url').toString()).exp as number
    await waitFor('the token to expire', async () => Date.now() > exp + 50)
    const line = await refusedJoin(await newNode(ws, 'x1'), a, token)
    assert.match(line, /^error: join refused: token expired \d+s ago/)
  })

  await t.test('a used-up token', async () => {
    const token = await tokenFrom(a, ['--uses', '1'])
    const b = await newNode(ws, 'b')
    await b.join(a.addr, token).ready()
    const line = await refusedJoin(await newNode(ws, 'x2'), a, token)
    assert.match(line, /^error: join refused by issuer: token already used/)
    await waitFor('a to list b', async () => (await nodeNames(a)).includes('b'))
  })

  await t.test('a revoked token', async () => {
    const r = await a.cli(['token', 'create', '-o', 'json'])
    const { token, id } = JSON.parse(r.stdout)
    const rv = await a.cli(['token', 'revoke', id])
    assert.equal(rv.exitCode, 0, rv.stderr)
    const list = await a.cli(['token', 'list'])
    assert.match(list.stdout, new RegExp(`${id.replace(/[-]/g, '\\-')}\\s+revoked`))
    const line = await refusedJoin(await newNode(ws, 'x3'), a, token)
    assert.match(line, /^error: join refused by issuer: token revoked/)
  })

  await t.test('a forged token (a real one with another secret), and garbage', async () => {
    const real = await tokenFrom(a)
    const claims = JSON.parse(Buffer.from(real.slice('orcjoin1.'.length), 'base64url').toString())
    claims.secret = Buffer.alloc(32, 7).toString('base64url')
    const forged = 'orcjoin1.' + Buffer.from(JSON.stringify(claims)).toString('base64url')
    const line = await refusedJoin(await newNode(ws, 'x4'), a, forged)
    assert.match(line, /^error: join refused by issuer: token not recognised/)
    const junk = await refusedJoin(await newNode(ws, 'x5'), a, 'orcjoin1.bm90IGEgdG9rZW4')
    assert.match(junk, /^error: join token is malformed/)
    assert.match(a.stderr, /join refused/, 'the issuer logs the refusal')
  })

  await t.test('a taken node name is refused before the token is used; a non-empty data dir is refused', async () => {
    const token = await tokenFrom(a)
    const dup = await newNode(ws, 'b', 'b-again') // same name as the member b
    const line = await refusedJoin(dup, a, token)
    assert.match(line, /node name b is taken in this cluster; join with another --name/)
    const ok = await newNode(ws, 'c')
    await ok.join(a.addr, token).ready() // the token still had its use
    const busy = await newNode(ws, 'x6')
    mkdirSync(busy.dataDir, { recursive: true })
    writeFileSync(`${busy.dataDir}/keep`, 'x')
    busy.join(a.addr, await tokenFrom(a))
    assert.notEqual(await busy.ended(), 0)
    assert.match(busy.stderr, /is not empty: orc join needs a new data dir/)
    assert.deepEqual(readdirSync(busy.dataDir), ['keep'], 'an existing dir is left as it was')
  })
})
