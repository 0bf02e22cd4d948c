// The replication wire between two agents on loopback, captured by a TCP relay in front of each
// node (both announce their relay, so every connection between them passes one): a Secret created
// on one node reaches the other, and its value is never among the bytes. (The mesh is Noise
// encrypted under a private-network key as well, so this checks the sum of both layers; the
// document itself is checked in test/agent/secrets.test.ts.)
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { createConnection, createServer, type Server } from 'node:net'
import { test } from 'node:test'
import { freePort, newNode, tokenFrom, Workspace, waitFor } from './helpers.ts'

/** A relay on `listen` to 127.0.0.1:`target` that keeps every byte it carries, both ways. */
async function relay(listen: number, target: number): Promise<{ bytes: () => Buffer; close: () => Promise<void>; server: Server }> {
  const chunks: Buffer[] = []
  const sockets = new Set<import('node:net').Socket>()
  const server = createServer((client) => {
    const upstream = createConnection({ host: '127.0.0.1', port: target })
    for (const s of [client, upstream]) {
      sockets.add(s)
      s.on('error', () => {})
      s.on('close', () => sockets.delete(s))
    }
    client.on('data', (d) => chunks.push(Buffer.from(d)))
    upstream.on('data', (d) => chunks.push(Buffer.from(d)))
    client.pipe(upstream)
    upstream.pipe(client)
  })
  await new Promise<void>((r) => server.listen(listen, '127.0.0.1', r))
  return {
    server,
    bytes: () => Buffer.concat(chunks),
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy()
        server.close(() => r())
      }),
  }
}

test('a Secret replicates between two agents without its value on the wire', async (t) => {
  const ws = new Workspace()
  const relays: Array<Awaited<ReturnType<typeof relay>>> = []
  t.after(async () => {
    await ws.close()
    for (const r of relays) await r.close()
  })
  const [a, b] = [await newNode(ws, 'a'), await newNode(ws, 'b')]
  const [pa, pb] = [await freePort(), await freePort()]
  relays.push(await relay(pa, a.port), await relay(pb, b.port))
  await a.up(['--announce', `127.0.0.1:${pa}`]).ready()
  await b.join(`127.0.0.1:${pa}`, await tokenFrom(a), ['--announce', `127.0.0.1:${pb}`]).ready()

  const MARK = `MARKER-${randomBytes(8).toString('hex')}-wire`
  const created = await a.cli(['create', 'secret', 'db', '--from-literal', `password=${MARK}`])
  assert.equal(created.exitCode, 0, created.stderr)
  const sealedOnA = JSON.parse((await a.cli(['get', 'secret', 'db', '-o', 'json'])).stdout).spec.sealed.password.value as string
  await waitFor('secret/db to reach b', async () => {
    const r = await b.cli(['get', 'secret', 'db', '-o', 'json'])
    return r.exitCode === 0 && JSON.parse(r.stdout).spec.sealed.password.value === sealedOnA ? true : undefined
  })
  const wire = Buffer.concat(relays.map((r) => r.bytes()))
  assert.ok(wire.byteLength > 10_000, `the relays carried the mesh (${wire.byteLength} bytes)`)
  assert.equal(wire.includes(MARK), false, 'the plaintext crossed the wire')
  assert.equal(wire.includes(sealedOnA.slice(-24)), false, 'the sealed value crossed the wire unencrypted')
})
