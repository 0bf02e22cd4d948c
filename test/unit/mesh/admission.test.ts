import assert from 'node:assert/strict'
import { test } from 'node:test'
import { pino } from 'pino'
import { ManualClock } from '../../../src/effects/index.ts'
import { Admission, type AdmissionComponents } from '../../../src/mesh/admission.ts'
import { meshDefaults } from '../../../src/mesh/index.ts'

// Trial slots (the gater asks startProbation): 16 in all, 4 per source address, 12 new a minute per address.
function admission(clock: ManualClock): Admission {
  const c = { clock, tunables: { ...meshDefaults }, log: pino({ level: 'silent' }) }
  return new Admission(c as unknown as AdmissionComponents)
}

test('trial slots: at most 4 at once from one address, 16 in all, 12 new a minute from one address', async () => {
  const clock = new ManualClock(1_000_000)
  const a = admission(clock)
  const from = (ip: string, n: number, tag: string) => Array.from({ length: n }, (_, i) => a.startProbation(`${tag}${i}`, ip))

  assert.deepEqual(from('10.0.0.1', 6, 'x'), [true, true, true, true, false, false], 'four per address')
  assert.equal(a.startProbation('x0', '10.0.0.1'), true, 'a peer already on trial keeps its slot')
  // Other addresses fill the remaining slots; the 17th is refused whatever its address.
  for (let i = 2; i <= 4; i++) assert.ok(from(`10.0.0.${i}`, 4, `p${i}-`).every(Boolean))
  assert.equal(a.startProbation('late', '10.0.0.9'), false, 'all 16 slots taken')

  // Probation over (10 s): the slots are free again, but one address may start only 12 a minute.
  await clock.advance(meshDefaults.probationMs + 1)
  assert.deepEqual(from('10.0.0.1', 4, 'y'), [true, true, true, true])
  await clock.advance(meshDefaults.probationMs + 1)
  assert.deepEqual(from('10.0.0.1', 4, 'z'), [true, true, true, true])
  await clock.advance(meshDefaults.probationMs + 1)
  assert.deepEqual(from('10.0.0.1', 4, 'w'), [false, false, false, false], '12 trials this minute from 10.0.0.1 already')
  assert.equal(a.startProbation('other', '10.0.0.5'), true, 'another address is not held back')
  await clock.advance(60_000)
  assert.equal(a.startProbation('v0', '10.0.0.1'), true, 'a minute later it may try again')
})

test('the join protocol refuses a removed peer before its token is looked at: a fresh valid token is not consumed', async () => {
  const { handleJoinRequest } = await import('../../../src/mesh/join.ts')
  const { MemoryTokenBook, TokenAuthority } = await import('../../../src/mesh/index.ts')
  const clock = new ManualClock(1_000_000)
  const authority = new TokenAuthority(new MemoryTokenBook(), clock, (n) => new Uint8Array(n).fill(7))
  const { token, record } = await authority.issue({ ttlMs: 60_000, uses: 1 }, { clusterId: 'c1', issuer: 'issuer', addrs: [] })
  const claims = JSON.parse(Buffer.from(token.slice('orcjoin1.'.length), 'base64url').toString())
  const admitted: string[] = []
  const deps = {
    authority,
    cluster: { clusterId: 'c1', createdAt: 0, adminKeys: [], psk: new Uint8Array(32).fill(9) },
    scopes: () => [],
    members: () => [],
    isRemoved: (p: string) => p === 'gone',
    admit: async (info: { peerId: string }) => void admitted.push(info.peerId),
  }
  const req = { v: 1 as const, token: { id: claims.id, secret: claims.secret, cluster: 'c1' }, name: 'b', addresses: [] }
  await assert.rejects(handleJoinRequest(deps, req, 'gone'), (err: any) => err.code === 'forbidden' && /removed from the cluster/.test(err.message))
  assert.equal((await authority.list()).find((r) => r.id === record.id)?.usesLeft, 1, 'the token was not used up')
  const res = await handleJoinRequest(deps, req, 'new-node')
  assert.deepEqual(admitted, ['new-node'])
  assert.equal(res.psk, '09'.repeat(32), 'the cluster key comes in the response, once the token is redeemed')
})
