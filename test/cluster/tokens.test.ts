// Join tokens misused against a real agent: expired, used up, revoked, forged, name taken. Each
// refused join exits non-zero with one clear line and leaves no data dir behind; the issuer logs it.

import assert from 'node:assert/strict'
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { type AddressInfo, createServer } from 'node:net'
import { test } from 'node:test'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { createJoinerGater } from '../../src/mesh/gater.ts'
import { createHost, createJoinHost, streamChannel } from '../../src/mesh/host.ts'
import { JOIN_PROTOCOL } from '../../src/mesh/index.ts'
import { joinRequestFromToken, requestJoin } from '../../src/mesh/join.ts'
import { resolveTunables } from '../../src/mesh/options.ts'
import { encodePsk, loadPsk } from '../../src/mesh/psk.ts'
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

/** The claims of a join token as JSON (what anyone holding it can read). */
const claimsOf = (token: string) => JSON.parse(Buffer.from(token.slice('orcjoin1.'.length), 'base64url').toString())

test('the cluster key is not in the token: a leaked token gives no mesh connection; an impostor at the join address learns nothing', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const a = await newNode(ws, 'a')
  await a.up().ready()
  const psk = await loadPsk(a.dataDir)
  assert.ok(psk !== undefined && psk.length === 32)
  const pskHex = Buffer.from(psk).toString('hex')

  // A token holds no PSK, in any encoding; it names the join host, two ports below the mesh.
  const token = await tokenFrom(a)
  const claims = claimsOf(token)
  assert.deepEqual(Object.keys(claims).sort(), ['addrs', 'cluster', 'exp', 'id', 'issuer', 'secret', 'v'])
  for (const form of [pskHex, pskHex.toUpperCase(), Buffer.from(psk).toString('base64url'), Buffer.from(psk).toString('base64')]) {
    assert.equal(token.includes(form), false, 'the PSK is not in the token')
    assert.equal(Buffer.from(token.slice('orcjoin1.'.length), 'base64url').toString('latin1').includes(form), false, 'nor in its decoded bytes')
  }
  assert.deepEqual(claims.addrs, [`/ip4/127.0.0.1/tcp/${a.port - 2}`])
  assert.match((await a.cli(['status'])).stdout, new RegExp(`^Joins at: +/ip4/127\\.0\\.0\\.1/tcp/${a.port - 2}$`, 'm'), 'orc status says where')

  // A token of an older orc (the PSK inside) is refused before anything is dialed.
  const old = `orcjoin1.${Buffer.from(JSON.stringify({ ...claims, v: 1, psk: pskHex })).toString('base64url')}`
  assert.match(await refusedJoin(await newNode(ws, 'x0'), a, old), /^error: join.*token from an older orc .*create a new one/)

  // The normal join gets the key over Noise, after admission: the joiner's swarm.key is the cluster's.
  const b = await newNode(ws, 'b')
  await b.join(a.addr, token).ready()
  assert.deepEqual(await loadPsk(b.dataDir), psk)
  assert.match(b.stdout, /admitted to cluster/)

  // Someone holding the PSK (an old token leaked it) and a fresh key: no connection to the mesh port,
  // with no token live and with one live.
  const stranger = await createHost({
    privateKey: await generateKeyPair('Ed25519'),
    psk: encodePsk(psk),
    listen: [],
    gater: {},
    tunables: resolveTunables({ dialTimeoutMs: 2000 }),
    appSpecificScore: () => 0,
  })
  await stranger.start()
  t.after(() => stranger.stop())
  const aId = peerIdFromString(claims.issuer)
  await stranger.peerStore.merge(aId, { multiaddrs: [multiaddr(`/ip4/127.0.0.1/tcp/${a.port}`)] })
  const meshConnects = async () => {
    try {
      await stranger.dial(aId, { signal: AbortSignal.timeout(3000) })
      await stranger.services.ping.ping(aId, { signal: AbortSignal.timeout(3000) })
      return true
    } catch {
      return false
    }
  }
  assert.equal(await meshConnects(), false, 'no token live: the mesh port refuses a PSK holder')
  const live = await tokenFrom(a)
  assert.equal(await meshConnects(), false, 'a token live: the mesh port still refuses a PSK holder')

  // A holder of an expired or revoked token, presenting it at the join host: refused, no key.
  const revoked = JSON.parse((await a.cli(['token', 'create', '-o', 'json'])).stdout)
  assert.equal((await a.cli(['token', 'revoke', revoked.id])).exitCode, 0)
  const expired = await tokenFrom(a, ['--ttl', '1s'])
  await waitFor('the token to expire', async () => Date.now() > claimsOf(expired).exp + 50)
  for (const [tok, why] of [
    [revoked.token, /token revoked/],
    [expired, /token expired/],
  ] as const) {
    const holder = await createJoinHost({
      privateKey: await generateKeyPair('Ed25519'),
      listen: [],
      gater: createJoinerGater(claims.issuer),
      tunables: resolveTunables({ dialTimeoutMs: 2000 }),
    })
    await holder.start()
    const c = claimsOf(tok)
    await holder.peerStore.merge(aId, { multiaddrs: c.addrs.map((x: string) => multiaddr(x)) })
    const answer = await (async () => {
      const stream = await holder.dialProtocol(aId, JOIN_PROTOCOL, { signal: AbortSignal.timeout(5000) })
      return requestJoin(streamChannel(stream, 1 << 20), joinRequestFromToken(c, 'thief', []))
    })().then(
      (res) => `answered${res.psk !== undefined ? ' with the key' : ''}`,
      (err: Error) => err.message,
    )
    await holder.stop()
    assert.match(answer, why, `the join host refuses it: ${answer}`)
    assert.doesNotMatch(answer, /answered/)
  }

  // An impostor (another cluster's node, its own key) at the address a token names: the joiner's
  // Noise handshake fails on its key, so the token never reaches it and nothing is admitted.
  const i = await newNode(ws, 'i')
  await i.up().ready()
  const iJoin = claimsOf(await tokenFrom(i)).addrs as string[]
  const misdirected = `orcjoin1.${Buffer.from(JSON.stringify({ ...claimsOf(live), addrs: iJoin })).toString('base64url')}`
  const joiner = await newNode(ws, 'x9')
  joiner.join(`127.0.0.1:${i.port}`, misdirected)
  assert.notEqual(await joiner.ended(), 0)
  assert.match(joiner.stderr, /^error: join.*not the token's issuer/m)
  assert.equal(existsSync(joiner.dataDir), false, 'no half-initialised data dir is left behind')
  assert.doesNotMatch(i.stderr, /join refused|peer joined/, 'the impostor never saw a join request')
  const rec = JSON.parse((await a.cli(['token', 'list', '-o', 'json'])).stdout).find((r: any) => r.id === claimsOf(live).id)
  assert.equal(rec.usesLeft, 1, 'the token the impostor was shown still has its use')

  // A node started with --join-listen off serves no joins: it says so instead of printing a token.
  const o = await newNode(ws, 'o')
  await o.up(['--join-listen', 'off']).ready()
  const none = await o.cli(['token', 'create'])
  assert.equal(none.exitCode, 1)
  assert.match(none.stderr, /^error: this node serves no joins \(its join listener is off\)/)
  assert.match((await o.cli(['status'])).stdout, /^Joins at: +off/m)

  // A join port that is taken, given explicitly: the agent stops, naming the listener and the flag.
  const busy = createServer()
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve))
  t.after(() => busy.close())
  const q = await newNode(ws, 'q')
  q.up(['--join-listen', `127.0.0.1:${(busy.address() as AddressInfo).port}`])
  assert.equal(await q.ended(), 1)
  assert.match(
    q.stderr,
    /^error: join listener on \/ip4\/127\.0\.0\.1\/tcp\/\d+: address in use or not on this machine; choose another with --join-listen ADDR, or --join-listen off$/m,
  )
})
