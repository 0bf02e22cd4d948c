// The HTTPS listener (install script, package, /metrics) binds the node's mesh addresses by
// default, never every interface; `--http-listen 0.0.0.0:PORT` widens it on purpose.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { type NodeProcess, newNode, Workspace, waitFor } from '../cluster/helpers.ts'
import { httpsGetPinned } from '../helpers/https.ts'

async function listener(n: NodeProcess): Promise<{ address: string; pin: string }> {
  return await waitFor(
    `${n.name}'s HTTPS listener`,
    async () => (await n.client.call<{ http: { address: string; pin: string } | null }>('GET', '/v1/status')).http ?? undefined,
    20_000,
  )
}

test('the HTTPS listener binds the mesh addresses by default, every interface only when asked', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const a = await newNode(ws, 'a')
  a.env = { ORC_NETWORK: 'off', ORC_HTTP_LISTEN: '' }
  await a.up().ready() // mesh on 127.0.0.1 only; no --http-listen
  const byDefault = await listener(a)
  assert.match(byDefault.address, /^127\.0\.0\.1:[0-9]+$/, 'on the mesh address, not 0.0.0.0')
  const health = await httpsGetPinned(`https://${byDefault.address}/healthz`, byDefault.pin)
  assert.equal(health.body, 'ok\n')

  await a.kill()
  await a.up(['--http-listen', '0.0.0.0:0']).ready()
  const wide = await listener(a)
  assert.match(wide.address, /^0\.0\.0\.0:[0-9]+$/)
  assert.equal(wide.pin, byDefault.pin, 'the same certificate after a restart')
})
