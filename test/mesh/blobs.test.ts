// Image blobs over `/orc/blobs/1.0.0` on a real libp2p mesh: a member fetches a blob byte for byte,
// `has` answers, more transfers than the limits are refused at once (not queued), `via` makes the
// serving node fetch from the registry once however many members ask, and a connected non-member
// (a credential peer, which the gater lets in), a removed member and a peer sending a malformed request never get a blob.

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { test } from 'node:test'
import type { Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { pino } from 'pino'
import { MeshBlobSource, StoreBlobProvider } from '../../src/agent/images/peers.ts'
import { parseReference } from '../../src/images/index.ts'
import { streamChannel } from '../../src/mesh/host.ts'
import type { BlobBody, BlobProvider, BlobVia, Mesh } from '../../src/mesh/index.ts'
import { BLOBS_PROTOCOL } from '../../src/mesh/index.ts'
import { readJson, Tag, writeJson } from '../../src/mesh/wire.ts'
import { OrcError } from '../../src/model/index.ts'
import { credentialPeer, Fixture, seededRandom, waitFor } from './helpers.ts'

const digestOf = (b: Uint8Array) => `sha256:${createHash('sha256').update(b).digest('hex')}`
/** The registry refuses this one (fetchThrough throws). */
const forbiddenDigest = digestOf(new TextEncoder().encode('forbidden'))

async function* chunksOf(bytes: Uint8Array, gate?: Promise<void>): AsyncGenerator<Uint8Array> {
  if (gate !== undefined) await gate
  for (let off = 0; off < bytes.length; off += 100_000) yield bytes.subarray(off, off + 100_000)
}

async function collect(body: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = []
  for await (const p of body) parts.push(p)
  return Buffer.concat(parts)
}

/** A blob store in memory; `gate` holds every body back until released; `registry` is what fetchThrough finds. */
function memoryProvider(blobs: Map<string, Uint8Array>, registry = new Map<string, Uint8Array>()) {
  let release: () => void = () => undefined
  let gate: Promise<void> | undefined
  const opened: string[] = []
  const fetched: Array<{ digest: string; via: BlobVia }> = []
  const provider: BlobProvider = {
    has: (d) => blobs.has(d),
    open: (d) => {
      const b = blobs.get(d)
      if (b === undefined) return undefined
      opened.push(d)
      return { size: b.length, body: chunksOf(b, gate) }
    },
    fetchThrough: async (d, via): Promise<BlobBody | undefined> => {
      fetched.push({ digest: d, via })
      await new Promise((r) => setTimeout(r, 300)) // a registry round trip, long enough for both askers to arrive
      if (d === forbiddenDigest) throw new OrcError('forbidden', 'registry.example:5000: unauthorized (wrong or missing credentials)')
      const b = registry.get(d)
      if (b === undefined) return undefined
      blobs.set(d, b)
      return provider.open(d)
    },
  }
  return {
    provider,
    opened,
    fetched,
    hold() {
      gate = new Promise((r) => (release = r))
    },
    release() {
      gate = undefined
      release()
    },
  }
}

test('blobs protocol: a member fetches a 5 MB blob intact; has answers; over-limit gets are refused at once; via fetches once for two askers', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const random = seededRandom(7)
  const big = random(5 * 1024 * 1024)
  const bigDigest = digestOf(big)
  const remote = random(300_000)
  const remoteDigest = digestOf(remote)
  const absent = digestOf(random(10))
  const pa = memoryProvider(new Map([[bigDigest, big]]), new Map([[remoteDigest, remote]]))
  const tunables = { maxBlobServes: 3, maxBlobServesPerPeer: 2 }
  const { mesh: a } = await fx.create('a', { blobs: pa.provider, tunables })
  const b = await fx.join('b', a, { blobs: memoryProvider(new Map()).provider, tunables })
  const c = await fx.join('c', a, { blobs: memoryProvider(new Map()).provider, tunables })
  await waitFor(
    'b and c alive on a',
    () =>
      ['alive'].includes(a.members().find((m) => m.peerId === b.peerId)?.state ?? '') && a.members().some((m) => m.peerId === c.peerId && m.state === 'alive'),
  )

  // Fetch: the same bytes, the size announced first.
  const got = await b.fetchBlob(a.peerId, bigDigest)
  assert.equal(got.size, big.length)
  const bytes = await collect(got.body)
  assert.equal(bytes.length, big.length)
  assert.equal(digestOf(bytes), bigDigest, 'the bytes are the blob')

  // Has: only what the node holds.
  assert.deepEqual(await b.blobHas(a.peerId, [absent, bigDigest]), [bigDigest])
  assert.deepEqual(await c.blobHas(b.peerId, [bigDigest]), [])
  await assert.rejects(b.fetchBlob(a.peerId, absent), (err: Error & { code?: string }) => err.code === 'not_found')
  await assert.rejects(b.fetchBlob(c.peerId, bigDigest), (err: Error & { code?: string }) => err.code === 'not_found')

  // Limits: 2 per member, 3 in all. Bodies are held back, so every accepted transfer stays open.
  pa.hold()
  const b1 = await b.fetchBlob(a.peerId, bigDigest)
  const b2 = await b.fetchBlob(a.peerId, bigDigest)
  const started = Date.now()
  await assert.rejects(b.fetchBlob(a.peerId, bigDigest), (err: Error & { code?: string }) => err.code === 'unavailable' && /busy/.test(err.message))
  const c1 = await c.fetchBlob(a.peerId, bigDigest)
  await assert.rejects(c.fetchBlob(a.peerId, bigDigest), (err: Error & { code?: string }) => err.code === 'unavailable' && /busy/.test(err.message))
  assert.ok(Date.now() - started < 5000, 'refusals come at once, not after a timeout')
  pa.release()
  for (const x of [b1, b2, c1]) assert.equal(digestOf(await collect(x.body)), bigDigest)
  await waitFor('transfers over', () => a.blobServes() === 0)
  // Slots are free again.
  assert.equal(digestOf(await collect((await c.fetchBlob(a.peerId, bigDigest)).body)), bigDigest)

  // Via: a lacks the blob; b and c ask at the same moment; a fetches it from the registry once.
  const via = {
    image: 'registry.example:5000/team/app@' + remoteDigest,
    namespace: 'team',
    size: remote.length,
    mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
  }
  const [fromB, fromC] = await Promise.all([b.fetchBlob(a.peerId, remoteDigest, via), c.fetchBlob(a.peerId, remoteDigest, via)])
  assert.equal(digestOf(await collect(fromB.body)), remoteDigest)
  assert.equal(digestOf(await collect(fromC.body)), remoteDigest)
  assert.deepEqual(pa.fetched, [{ digest: remoteDigest, via }], 'one fetch from the registry for two askers')
  // Now held: served without fetching again. Without via, an absent blob is not fetched.
  assert.equal(digestOf(await collect((await b.fetchBlob(a.peerId, remoteDigest, via)).body)), remoteDigest)
  await assert.rejects(b.fetchBlob(a.peerId, absent), (err: Error & { code?: string }) => err.code === 'not_found')
  // The registry does not have it either: not_found, after asking it once.
  await assert.rejects(b.fetchBlob(a.peerId, absent, via), (err: Error & { code?: string }) => err.code === 'not_found')
  assert.equal(pa.fetched.length, 2)
  // The registry refuses: both askers at the same moment get its reason, from one registry call.
  const refused = await Promise.allSettled([b.fetchBlob(a.peerId, forbiddenDigest, via), c.fetchBlob(a.peerId, forbiddenDigest, via)])
  for (const r of refused) {
    assert.equal(r.status, 'rejected')
    assert.equal((r.reason as OrcError).code, 'forbidden')
    assert.match((r.reason as Error).message, /unauthorized/)
  }
  assert.equal(pa.fetched.length, 3)
})

test('blobs protocol: a connected non-member, a removed member and a malformed request get nothing (the malformed one is a peer fault); a stalled transfer ends at its deadline', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const blob = seededRandom(9)(50_000)
  const digest = digestOf(blob)
  const pa = memoryProvider(new Map([[digest, blob]]))
  // Five faults would ban c (50 each, -100): keep it admissible so each request is tried.
  // A transfer of this small blob must end within ~1 s.
  const tunables = { blobTransferBaseMs: 1000 }
  // The gater lets credential peers (the remote CLI) onto the mesh port without being members, so
  // the protocol itself must refuse them. (Strangers are refused at the gater: admission.test.ts.)
  const credentialKeys: string[] = []
  const { mesh: a } = await fx.create('a', { blobs: pa.provider, credentialKeys: () => credentialKeys, tunables: { ...tunables, banThreshold: -10_000 } })
  const b = await fx.join('b', a, { blobs: memoryProvider(new Map()).provider, tunables })
  const c = await fx.join('c', a, { blobs: memoryProvider(new Map()).provider, tunables })
  await waitFor('b and c alive on a', () => [b, c].every((x) => a.members().some((m) => m.peerId === x.peerId && m.state === 'alive')))
  assert.equal(digestOf(await collect((await b.fetchBlob(a.peerId, digest)).body)), digest)
  const served = pa.opened.length

  // A credential peer with the PSK: a connection, but no blobs.
  const s = await credentialPeer(fx, a, credentialKeys)
  const aId = peerIdFromString(a.peerId)
  await s.libp2p.peerStore.merge(aId, { multiaddrs: a.addresses().map((x) => multiaddr(x)) })
  await s.libp2p.dial(aId, { signal: AbortSignal.timeout(3000) })
  await s.libp2p.services.ping.ping(aId, { signal: AbortSignal.timeout(3000) })
  await assert.rejects(s.fetchBlob(a.peerId, digest))
  await assert.rejects(s.blobHas(a.peerId, [digest]))

  // Malformed requests from a member: scored down and disconnected, nothing served.
  const faults: Array<{ peerId: string; reason: string }> = []
  a.on('peer:misbehaved', (e) => faults.push(e))
  for (const req of [
    { op: 'get', digest: 'sha256:' + 'A'.repeat(64) },
    { op: 'get', digest, via: { image: 'x', namespace: 'Not A Namespace', size: 1, mediaType: 'a/b' } },
    { op: 'get', digest, via: { image: 'x', namespace: 'team', size: -1, mediaType: 'a/b' } },
    { op: 'has', digests: Array.from({ length: 65 }, () => digest) },
    { op: 'get', digest, extra: 1 },
    { op: 'put', digest },
  ]) {
    const before = faults.length
    // The previous fault hung up on c: dial again (the old connection may still be closing).
    let stream: Stream | undefined
    await waitFor('a stream from c to a', async () => {
      stream = await c.libp2p.dialProtocol(aId, BLOBS_PROTOCOL, { signal: AbortSignal.timeout(3000) }).catch(() => undefined)
      return stream !== undefined
    })
    const ch = streamChannel(stream!, 1024 * 1024)
    await writeJson(ch, Tag.json, req)
    await assert.rejects(readJson(ch, Tag.json, 'answer'))
    await waitFor(`fault recorded for ${JSON.stringify(req).slice(0, 60)}`, () => faults.length === before + 1)
    assert.equal(faults.at(-1)?.peerId, c.peerId)
  }

  assert.equal(pa.opened.length, served, 'nothing was opened for the non-member or the malformed requests')

  // A transfer that stalls ends at its deadline, on both sides: the reader gets an error, the slot is freed.
  pa.hold()
  const stalled = await b.fetchBlob(a.peerId, digest)
  const t0 = Date.now()
  await assert.rejects(collect(stalled.body), (err: Error & { code?: string }) => err.code === 'unavailable')
  assert.ok(Date.now() - t0 < 8000, `gave up after ${Date.now() - t0} ms`)
  await waitFor('the serving slot is free', () => a.blobServes() === 0)
  pa.release()
  const servedNow = pa.opened.length

  // Removed: never again.
  await a.removeMember(b.peerId)
  await assert.rejects(b.fetchBlob(a.peerId, digest))
  await assert.rejects(b.blobHas(a.peerId, [digest]))
  assert.equal(pa.opened.length, servedNow, 'nothing was opened for the removed member')
})

test('blobs through the agent side: three members pulling one image at the same moment download each blob from the registry once', async (t) => {
  const fx = new Fixture()
  t.after(() => fx.close())
  const random = seededRandom(11)
  const layers = [400_000, 1_000_000, 50_000, 2_000].map((n) => random(n))
  const descs = layers.map((b) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: digestOf(b), size: b.length }))
  const registry = new Map(layers.map((b, i) => [descs[i]!.digest, b]))
  const downloads: string[] = []
  const log = pino({ level: 'silent' })
  type Node = { name: string; blobs: Map<string, Uint8Array>; flights: Map<string, Promise<void>>; mesh?: Mesh; source?: MeshBlobSource }
  // The puller's one download per blob per node: its own pull and a member's fetch-through share it,
  // and a blob that arrived meanwhile (a member's fetch-through stored it) is not fetched again.
  const download = (n: Node, digest: string): Promise<void> => {
    if (n.blobs.has(digest)) return Promise.resolve()
    let f = n.flights.get(digest)
    if (f === undefined) {
      f = (async () => {
        downloads.push(`${n.name} ${digest.slice(7, 19)}`)
        await new Promise((r) => setTimeout(r, 50))
        n.blobs.set(digest, registry.get(digest)!)
      })().finally(() => n.flights.delete(digest))
      n.flights.set(digest, f)
    }
    return f
  }
  const node = (name: string): Node => ({ name, blobs: new Map(), flights: new Map() })
  const provider = (n: Node) =>
    new StoreBlobProvider({
      store: {
        has: (d) => n.blobs.has(d),
        open: (d) => ({ size: n.blobs.get(d)!.length, body: chunksOf(n.blobs.get(d)!) }),
      },
      fetchThrough: (_ref, desc) => download(n, desc.digest),
      log,
    })
  const nodes = [node('a'), node('b'), node('c')]
  nodes[0]!.mesh = (await fx.create('a', { blobs: provider(nodes[0]!) })).mesh
  for (const n of nodes.slice(1)) n.mesh = await fx.join(n.name, nodes[0]!.mesh, { blobs: provider(n) })
  for (const n of nodes) n.source = new MeshBlobSource({ mesh: () => n.mesh, log })
  // "When members are reachable": each alive and connected to each (a member heard of only through
  // gossip may have no address to dial yet, and an owner that cannot be reached sends the asker to the registry).
  const reachable = (n: Node, count: number) => n.mesh!.members().filter((m) => !m.self && m.state === 'alive' && m.connected === true).length === count
  await waitFor('every member reachable from every member', () => nodes.every((n) => reachable(n, 2)), 20_000)

  const image = { ref: parseReference('registry.example:5000/team/app:1.2'), namespace: 'team' }
  const pull = async (n: Node, d: (typeof descs)[number]): Promise<string> => {
    const got = await n.source!.fetch(d, image, AbortSignal.timeout(20_000))
    if (got === undefined) {
      await download(n, d.digest)
      return 'registry'
    }
    const bytes = await collect(got.body)
    assert.equal(digestOf(bytes), d.digest)
    n.blobs.set(d.digest, bytes)
    return 'peer'
  }
  await Promise.all(nodes.flatMap((n) => descs.map((d) => pull(n, d))))
  assert.equal(downloads.length, descs.length, `one download per blob, got:\n${downloads.join('\n')}`)
  for (const n of nodes) for (const d of descs) assert.equal(digestOf(n.blobs.get(d.digest)!), d.digest, `${n.name} has ${d.digest}`)
  const hits = nodes.map((n) => n.source!.stats())
  assert.equal(
    hits.reduce((s, x) => s + x.peerBlobs + x.fetchThroughBlobs, 0),
    2 * descs.length,
    'every node but the owner got each blob from a member',
  )

  // The registry goes away; a fourth node gets the whole image from members.
  registry.clear()
  const d4 = node('d')
  d4.mesh = await fx.join('d', nodes[0]!.mesh, { blobs: provider(d4) })
  d4.source = new MeshBlobSource({ mesh: () => d4.mesh, log })
  await waitFor('d reaches everyone', () => reachable(d4, 3), 20_000)
  for (const d of descs) assert.equal(await pull(d4, d), 'peer')
  assert.equal(downloads.length, descs.length)
  assert.equal(d4.source.hitRatio(), 1)
})
