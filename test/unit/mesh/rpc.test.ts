import assert from 'node:assert/strict'
import { mkdtemp, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { memoryChannelPair } from '../../../src/mesh/framing.ts'
import { decodeAdminCredential, initCluster, loadCluster, loadOrCreateIdentity } from '../../../src/mesh/index.ts'
import { callApi, serveApi } from '../../../src/mesh/rpc.ts'
import { seededRandom } from '../../mesh/helpers.ts'

async function tmp(t: { after: (fn: () => Promise<void>) => void }) {
  const d = await mkdtemp(join(tmpdir(), 'orc-rpc-'))
  t.after(() => rm(d, { recursive: true, force: true }))
  return d
}

test('cluster creation writes secrets 0600 and reloads them; identity is stable across restarts', async (t) => {
  const dir = await tmp(t)
  const { cluster, adminCredential } = await initCluster({ dataDir: dir, random: seededRandom(1), now: 5 })
  for (const f of ['swarm.key', 'cluster.json']) assert.equal((await stat(join(dir, f))).mode & 0o777, 0o600)
  const again = await loadCluster(dir)
  assert.deepEqual(again, cluster)
  assert.ok(adminCredential.startsWith('orcadmin1.'))
  await assert.rejects(initCluster({ dataDir: dir, random: seededRandom(2), now: 6 }), /already belongs to a cluster/)
  const k1 = await loadOrCreateIdentity(dir, seededRandom(3))
  const k2 = await loadOrCreateIdentity(dir, seededRandom(4))
  assert.ok(k1.equals(k2))
  assert.equal((await stat(join(dir, 'peer.key'))).mode & 0o777, 0o600)
})

test('api calls are signed over a fresh nonce and the server peer id', async (t) => {
  const { cluster, adminCredential } = await initCluster({ dataDir: await tmp(t), random: seededRandom(1), now: 5 })
  const other = await initCluster({ dataDir: await tmp(t), random: seededRandom(2), now: 5 })
  const run = async (cred: string | undefined, serverClaims = 'server', signedFor = 'server') => {
    const [c, s] = memoryChannelPair()
    const served = serveApi(
      s,
      {
        selfPeerId: serverClaims,
        keyOwner: (k) => (cluster.adminKeys.includes(k) ? 'admin' : undefined),
        random: seededRandom(9),
        handler: async (req) => ({ status: 200, body: req.path }),
      },
      'client',
    ).catch((e) => e)
    const res = await callApi(c, { method: 'GET', path: '/x' }, cred === undefined ? undefined : decodeAdminCredential(cred), signedFor).catch((e) => e)
    await served
    return res
  }
  assert.deepEqual(await run(adminCredential), { status: 200, body: '/x' })
  assert.match((await run(undefined)).message, /no credential presented/)
  assert.match((await run(other.adminCredential)).message, /belongs to no user of this cluster/)
  // A signature made for another node does not verify here.
  assert.match((await run(adminCredential, 'server', 'elsewhere')).message, /signature does not verify/)
})
