import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { ORC_VERSION } from '../../../src/agent/index.ts'
import { buildProgram } from '../../../src/cli/main.ts'

/** An agent socket that answers like a node running orc `nodeVersion`, in a cluster with another node on 0.0.1. */
async function fakeAgent(nodeVersion: string): Promise<{ socket: string; close(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'orc-version-'))
  const socket = join(dir, 'orc.sock')
  const srv = createServer((req, res) => {
    const body =
      req.url === '/v1/status'
        ? { node: { name: 'n1', version: nodeVersion } }
        : {
            items: [
              { metadata: { name: 'n1' }, status: { version: nodeVersion } },
              { metadata: { name: 'old' }, status: { version: '0.0.1' } },
            ],
          }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(body))
  })
  await new Promise<void>((r) => srv.listen(socket, r))
  return { socket, close: () => new Promise<void>((r) => srv.close(() => (rmSync(dir, { recursive: true, force: true }), r()))) }
}

async function run(args: string[], env: Record<string, string>): Promise<{ out: string; err: string }> {
  let out = ''
  let err = ''
  const program = buildProgram({ out: (t) => (out += t), err: (t) => (err += t), env, now: () => 0 })
  await program.parseAsync(args, { from: 'user' })
  return { out, err }
}

test('orc version shows client, node and cluster versions and warns on skew', async () => {
  const agent = await fakeAgent('9.9.9')
  try {
    const r = await run(['version'], { ORC_SOCKET: agent.socket })
    assert.equal(r.out, `Client: orc ${ORC_VERSION} (Node.js ${process.versions.node})\nNode:   orc 9.9.9 (n1)\nCluster: n1 9.9.9, old 0.0.1\n`)
    assert.equal(
      r.err,
      `warning: version skew: client ${ORC_VERSION} and node n1 9.9.9 differ\nwarning: version skew: node old runs 0.0.1, node n1 runs 9.9.9\n`,
    )
    const j = JSON.parse((await run(['version', '-o', 'json'], { ORC_SOCKET: agent.socket })).out)
    assert.deepEqual(j.nodes, { n1: '9.9.9', old: '0.0.1' })
    assert.equal(j.skew.length, 2)
  } finally {
    await agent.close()
  }
})

test('orc version --client needs no agent; without one the node version is reported unknown', async () => {
  const c = await run(['version', '--client'], { ORC_SOCKET: '/nonexistent/orc.sock' })
  assert.equal(c.out, `Client: orc ${ORC_VERSION} (Node.js ${process.versions.node})\n`)
  assert.equal(c.err, '')
  const r = await run(['version'], { ORC_SOCKET: '/nonexistent/orc.sock' })
  assert.match(r.err, /^warning: node version unknown: no orc agent is listening at \/nonexistent\/orc\.sock/)
})
