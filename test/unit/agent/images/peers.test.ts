// Blobs from members before the registry (src/agent/images/peers.ts): every node names the same
// owner for a digest; a holder is used first; with no holder the owner fetches for the cluster;
// and three nodes starting one image at once make one registry download per blob.
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, it } from 'node:test'
import { pino } from 'pino'
import { type BlobMesh, blobOwner, MeshBlobSource, rankByRendezvous, StoreBlobProvider } from '../../../../src/agent/images/peers.ts'
import { MetricsRegistry, parsePrometheusText } from '../../../../src/agent/ops/metrics.ts'
import { type Descriptor, parseReference } from '../../../../src/images/index.ts'
import { type BlobBody, type BlobVia, parseBlobRequest } from '../../../../src/mesh/index.ts'
import { OrcError } from '../../../../src/model/index.ts'

const log = pino({ level: 'silent' })
const digestOf = (b: Uint8Array | string) => `sha256:${createHash('sha256').update(b).digest('hex')}`
const peers = ['12D3KooWAlpha', '12D3KooWBravo', '12D3KooWCharlie', '12D3KooWDelta', '12D3KooWEcho']
const image = { ref: parseReference('registry.example:5000/team/app:1.2'), namespace: 'team' }

async function* once(b: Uint8Array): AsyncGenerator<Uint8Array> {
  yield b
}
async function collect(body: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = []
  for await (const p of body) parts.push(p)
  return Buffer.concat(parts)
}

describe('rendezvous owner of a blob', () => {
  it('is the same on every node, whatever order each lists the members in, and moves only when the owner leaves', () => {
    const owned = new Map<string, number>()
    for (let i = 0; i < 500; i++) {
      const d = digestOf(`blob ${i}`)
      const views = [peers, [...peers].reverse(), [peers[2]!, peers[0]!, peers[4]!, peers[1]!, peers[3]!]]
      const owners = new Set(views.map((v) => blobOwner(d, v)))
      assert.equal(owners.size, 1, `one owner for ${d}`)
      const owner = [...owners][0]!
      owned.set(owner, (owned.get(owner) ?? 0) + 1)
      // A member that is not the owner leaving changes nothing for this digest.
      const other = peers.find((p) => p !== owner)!
      assert.equal(
        blobOwner(
          d,
          peers.filter((p) => p !== other),
        ),
        owner,
      )
      // The ranking starts with the owner and holds everyone once.
      const ranked = rankByRendezvous(d, [...peers, ...peers])
      assert.equal(ranked[0], owner)
      assert.equal(ranked.length, peers.length)
    }
    // Spread over the members (each owns a share; 500 digests, 5 members, expect ~100 each).
    for (const p of peers) assert.ok((owned.get(p) ?? 0) > 50, `${p} owns ${owned.get(p) ?? 0}`)
    assert.equal(blobOwner(digestOf('x'), []), undefined)
  })
})

/** A cluster in memory: each node has blobs, a registry download with one flight per digest, and serves `has`/`get`/`get via`. */
function memoryCluster(ids: string[], registryBlobs: Map<string, Uint8Array>) {
  const registryDownloads: string[] = []
  const gets: Array<{ from: string; to: string; digest: string; via?: BlobVia }> = []
  type Node = { id: string; blobs: Map<string, Uint8Array>; flights: Map<string, Promise<void>>; down: boolean; busy: number; source: MeshBlobSource }
  const nodes = new Map<string, Node>()
  const download = async (n: Node, digest: string): Promise<void> => {
    // The puller's one-download-per-blob rule: its own pull and a member's fetch-through share a
    // flight, and what arrived meanwhile is not fetched again.
    if (n.blobs.has(digest)) return
    let f = n.flights.get(digest)
    if (f === undefined) {
      f = (async () => {
        registryDownloads.push(`${n.id} ${digest}`)
        await new Promise((r) => setTimeout(r, 20))
        const b = registryBlobs.get(digest)
        if (b === undefined) throw new OrcError('not_found', 'blob unknown to registry')
        n.blobs.set(digest, b)
      })().finally(() => n.flights.delete(digest))
      n.flights.set(digest, f)
    }
    await f
  }
  const meshOf = (self: string): BlobMesh => ({
    peerId: self,
    members: () =>
      ids.map((p) => ({
        peerId: p,
        name: `node-${p.slice(-5)}`,
        addresses: [],
        state: nodes.get(p)!.down ? 'dead' : 'alive',
        lastSeen: 0,
        rttMs: 1,
        self: p === self,
        connected: true,
      })),
    blobHas: async (peer: string, digests: string[]) => {
      const n = nodes.get(peer)!
      if (n.down) throw new OrcError('unavailable', 'down')
      return digests.filter((d) => n.blobs.has(d))
    },
    fetchBlob: async (peer: string, digest: string, via?: BlobVia): Promise<BlobBody> => {
      gets.push({ from: self, to: peer, digest, ...(via ? { via } : {}) })
      // What the member's handler would do with it: a malformed request is the asker's fault (it
      // would be scored as garbage and disconnected).
      parseBlobRequest(JSON.parse(JSON.stringify({ op: 'get', digest, ...(via ? { via } : {}) })))
      const n = nodes.get(peer)!
      if (n.down) throw new OrcError('unavailable', 'down')
      if (n.busy > 0) {
        n.busy--
        throw new OrcError('unavailable', 'node is busy serving blobs', { remote: true })
      }
      if (!n.blobs.has(digest) && via !== undefined) await download(n, digest)
      const b = n.blobs.get(digest)
      if (b === undefined) throw new OrcError('not_found', 'absent')
      return { size: b.length, body: once(b) }
    },
  })
  for (const id of ids) {
    const n: Node = { id, blobs: new Map(), flights: new Map(), down: false, busy: 0, source: undefined as unknown as MeshBlobSource }
    nodes.set(id, n)
  }
  for (const n of nodes.values()) n.source = new MeshBlobSource({ mesh: () => meshOf(n.id), log, busyWaitMs: 1 })
  /** What the puller does for one blob: members first, else the registry. */
  const pullBlob = async (id: string, d: Descriptor): Promise<string> => {
    const n = nodes.get(id)!
    if (n.blobs.has(d.digest)) return 'cache'
    const got = await n.source.fetch(d, image, AbortSignal.timeout(5000))
    if (got !== undefined) {
      n.blobs.set(d.digest, await collect(got.body))
      return 'peer'
    }
    await download(n, d.digest)
    return 'registry'
  }
  return { nodes, registryDownloads, gets, pullBlob }
}

describe('MeshBlobSource', () => {
  const layers = [0, 1, 2, 3, 4, 5].map((i) => Buffer.from(`layer ${i} `.repeat(1000 + i)))
  const descs: Descriptor[] = layers.map((b) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: digestOf(b), size: b.length }))
  const registry = () => new Map(layers.map((b, i) => [descs[i]!.digest, b]))

  it('three nodes starting one image at once download each blob from the registry once, at its owner', async () => {
    const ids = peers.slice(0, 3)
    const cl = memoryCluster(ids, registry())
    await Promise.all(ids.flatMap((id) => descs.map((d) => cl.pullBlob(id, d))))
    assert.equal(cl.registryDownloads.length, descs.length, cl.registryDownloads.join('\n'))
    for (const d of descs)
      assert.deepEqual(
        cl.registryDownloads.filter((x) => x.endsWith(d.digest)),
        [`${blobOwner(d.digest, ids)} ${d.digest}`],
      )
    for (const n of cl.nodes.values()) for (const d of descs) assert.equal(digestOf(n.blobs.get(d.digest)!), d.digest)
    // A via request carries what the owner needs to fetch it.
    const g = cl.gets.find((x) => x.via !== undefined)!
    const gd = descs.find((x) => x.digest === g.digest)!
    assert.equal(g.to, blobOwner(g.digest, ids))
    assert.deepEqual(g.via, { image: 'registry.example:5000/team/app:1.2', namespace: 'team', size: gd.size, mediaType: gd.mediaType })
  })

  it('a manifest known only by its digest (pinned: no media type, no size) is never asked of the owner with via; with no holder the node pulls it itself', async () => {
    const ids = peers.slice(0, 3)
    const manifest = Buffer.from('{"schemaVersion":2}')
    const pinned: Descriptor = { mediaType: '', digest: digestOf(manifest), size: 0 }
    const cl = memoryCluster(ids, new Map([[pinned.digest, manifest]]))
    const asker = ids.find((id) => blobOwner(pinned.digest, ids) !== id)!
    assert.equal(await cl.pullBlob(asker, pinned), 'registry')
    assert.deepEqual(
      cl.gets.filter((g) => g.via !== undefined),
      [],
    )
    // Once a member holds it, it comes from that member (no via needed).
    const other = ids.find((id) => id !== asker)!
    assert.equal(await cl.pullBlob(other, pinned), 'peer')
  })

  it('takes a blob from a member holding it, without via; a node joining later gets everything from members', async () => {
    const ids = peers.slice(0, 4)
    const cl = memoryCluster(ids, registry())
    const first = peers[0]!
    for (const d of descs) cl.nodes.get(first)!.blobs.set(d.digest, registry().get(d.digest)!)
    for (const d of descs) assert.equal(await cl.pullBlob(peers[1]!, d), 'peer')
    assert.equal(cl.registryDownloads.length, 0)
    assert.ok(cl.gets.every((g) => g.via === undefined && g.to === first))
    assert.deepEqual(cl.nodes.get(peers[1]!)!.source.stats(), {
      peerBlobs: descs.length,
      peerBytes: layers.reduce((n, b) => n + b.length, 0),
      fetchThroughBlobs: 0,
      fetchThroughBytes: 0,
      misses: 0,
      broken: 0,
    })
  })

  it('with the registry down, the image comes from any member that has it; with no member having it, the caller is told to go to the registry', async () => {
    const ids = peers.slice(0, 3)
    const cl = memoryCluster(ids, new Map()) // the registry has nothing (down)
    const holder = peers[2]!
    for (const d of descs) cl.nodes.get(holder)!.blobs.set(d.digest, registry().get(d.digest)!)
    for (const d of descs) assert.equal(await cl.pullBlob(peers[0]!, d), 'peer')
    const missing: Descriptor = { mediaType: 'a/b', digest: digestOf('nobody has this'), size: 3 }
    assert.equal(await cl.nodes.get(peers[1]!)!.source.fetch(missing, image, AbortSignal.timeout(5000)), undefined)
    assert.equal(cl.nodes.get(peers[1]!)!.source.stats().misses, 1)
  })

  it('the owner itself is told to go to the registry; a dead owner or holder is skipped', async () => {
    const ids = peers.slice(0, 3)
    const cl = memoryCluster(ids, registry())
    const d = descs[0]!
    const owner = blobOwner(d.digest, ids)!
    assert.equal(await cl.nodes.get(owner)!.source.fetch(d, image, AbortSignal.timeout(5000)), undefined)
    assert.ok(!cl.gets.some((g) => g.from === owner), 'the owner asks no member to fetch for it')
    // The owner is down (seen dead): the next node in rank owns it for the live view.
    cl.nodes.get(owner)!.down = true
    const others = ids.filter((p) => p !== owner)
    const got = await Promise.all(others.map((p) => cl.pullBlob(p, d)))
    assert.deepEqual(got.sort(), ['peer', 'registry'])
    assert.equal(cl.registryDownloads.length, 1)
  })

  it('waits for a busy owner rather than going to the registry, and gives up after its rounds', async () => {
    const ids = peers.slice(0, 3)
    const cl = memoryCluster(ids, registry())
    const d = descs[1]!
    const owner = blobOwner(d.digest, ids)!
    const asker = ids.find((p) => p !== owner)!
    cl.nodes.get(owner)!.busy = 2
    assert.equal(await cl.pullBlob(asker, d), 'peer')
    assert.deepEqual(cl.registryDownloads, [`${owner} ${d.digest}`], 'the owner downloaded it, once')
    assert.equal(cl.nodes.get(owner)!.busy, 0)
    // Busy for longer than the rounds: the asker goes to the registry itself.
    const d2 = descs[2]!
    const owner2 = blobOwner(d2.digest, ids)!
    const asker2 = ids.find((p) => p !== owner2)!
    cl.nodes.get(owner2)!.busy = 100
    assert.equal(await cl.pullBlob(asker2, d2), 'registry')
    assert.equal(cl.nodes.get(asker2)!.source.stats().misses, 1)
  })

  it('counts blobs and bytes by source and reports a hit ratio on /metrics', async () => {
    const metrics = new MetricsRegistry()
    const b = Buffer.from('hello blob')
    const d: Descriptor = { mediaType: 'a/b', digest: digestOf(b), size: b.length }
    let holds = true
    const mesh: BlobMesh = {
      peerId: 'self',
      members: () => [
        { peerId: 'self', name: 's', addresses: [], state: 'alive', lastSeen: 0, rttMs: 1, self: true },
        { peerId: 'other', name: 'o', addresses: [], state: 'alive', lastSeen: 0, rttMs: 1, self: false, connected: true },
      ],
      blobHas: async () => (holds ? [d.digest] : []),
      fetchBlob: async () => ({ size: b.length, body: once(b) }),
    }
    const src = new MeshBlobSource({ mesh: () => mesh, log, metrics })
    const got = await src.fetch(d, image, AbortSignal.timeout(1000))
    assert.equal((await collect(got!.body)).toString(), 'hello blob')
    assert.equal(got!.from, 'o')
    holds = false
    // Not held: the owner is `self` or `other`; either way the result is counted.
    await src.fetch(d, image, AbortSignal.timeout(1000)).then((g) => (g ? collect(g.body) : undefined))
    const { samples } = parsePrometheusText(metrics.render())
    const v = (name: string, labels: Record<string, string> = {}) =>
      samples.find((s) => s.name === name && Object.entries(labels).every(([k, x]) => s.labels[k] === x))?.value
    assert.equal(v('orc_image_peer_blobs_total', { result: 'peer' }), 1)
    assert.equal(v('orc_image_peer_bytes_total', { source: 'peer' }), b.length)
    const second = (v('orc_image_peer_blobs_total', { result: 'fetch_through' }) ?? 0) + (v('orc_image_peer_blobs_total', { result: 'miss' }) ?? 0)
    assert.equal(second, 1)
    assert.equal(v('orc_image_peer_hit_ratio'), src.hitRatio())
    assert.ok(src.hitRatio() === 1 || src.hitRatio() === 0.5)
  })

  it('gives up on a member that announces the wrong size, and on a mesh that is not up', async () => {
    const b = Buffer.from('right')
    const d: Descriptor = { mediaType: 'a/b', digest: digestOf(b), size: b.length }
    const mesh: BlobMesh = {
      peerId: 'self',
      members: () => [{ peerId: 'other', name: 'o', addresses: [], state: 'alive', lastSeen: 0, rttMs: 1, self: false, connected: true }],
      blobHas: async () => [d.digest],
      fetchBlob: async () => ({ size: 999, body: once(Buffer.alloc(999)) }),
    }
    assert.equal(
      await new MeshBlobSource({ mesh: () => mesh, log, members: () => ['other'], selfPeerId: () => 'aaa-self-wins-not' })
        .fetch(d, image, AbortSignal.timeout(1000))
        .then((g) => g?.from),
      undefined,
    )
    assert.equal(await new MeshBlobSource({ mesh: () => undefined, log }).fetch(d, image, AbortSignal.timeout(1000)), undefined)
  })
})

describe('StoreBlobProvider', () => {
  it('serves what the store holds, and fetches through with the reference, descriptor and namespace', async () => {
    const blobs = new Map<string, Buffer>()
    const calls: unknown[] = []
    const store = {
      has: (d: string) => blobs.has(d),
      open: (d: string) => {
        const b = blobs.get(d)
        if (b === undefined) throw new OrcError('not_found', 'absent')
        return { size: b.length, body: once(b) }
      },
    }
    const b = Buffer.from('layer bytes')
    const digest = digestOf(b)
    const p = new StoreBlobProvider({
      store,
      log,
      fetchThrough: async (ref, desc, ns) => {
        calls.push({ ref, desc, ns })
        blobs.set(desc.digest, b)
      },
    })
    assert.equal(p.has(digest), false)
    assert.equal(p.open(digest), undefined)
    const via = { image: 'registry.example:5000/team/app@' + digest, namespace: 'team', size: b.length, mediaType: 'a/b' }
    const got = await p.fetchThrough!(digest, via)
    assert.equal((await collect(got!.body)).toString(), 'layer bytes')
    assert.deepEqual(calls, [{ ref: parseReference(via.image), desc: { digest, size: b.length, mediaType: 'a/b' }, ns: 'team' }])
    assert.equal(p.has(digest), true)
    await assert.rejects(p.fetchThrough!(digest, { ...via, image: 'busybox' }), /names no registry/)
    await assert.rejects(p.fetchThrough!(digest, { ...via, image: 'registry.example:5000/UPPER' }), (e: OrcError) => e.code === 'invalid')
  })
})
