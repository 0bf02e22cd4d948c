// The registry client against a REAL registry: Debian's docker-registry (distribution 2.8) on
// loopback, images pushed with skopeo — one plain registry, one with basic auth and self-signed TLS.

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { after, before, describe, test } from 'node:test'
import { MEDIA_TYPES, RegistryClient } from '../../src/images/index.ts'
import { isOrcError, type OrcError } from '../../src/model/index.ts'
import type { TarEntry } from '../../src/runtime/index.ts'
import {
  machinePlatform,
  type PushedIndex,
  pushImage,
  pushIndex,
  registryBlobPath,
  registryMissing,
  secureRegistryMissing,
  skopeoDigest,
  startRegistry,
  type TestRegistry,
  zstdMissing,
} from '../helpers/registry.ts'

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`
const file = (path: string, data: string | Buffer): TarEntry => ({ path, type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, data: Buffer.from(data) })
// Two layers, the second big enough to arrive in many chunks.
const IMAGE = {
  layers: [[file('etc/hello', 'hello\n')], [file('data/blob', createHash('sha512').update('seed').digest().toString('hex').repeat(20_000))]],
  config: { Cmd: ['/bin/sh'] },
}

async function drain(body: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of body) chunks.push(Buffer.from(c))
  return Buffer.concat(chunks)
}

async function rejects(p: Promise<unknown>, code: OrcError['code'], pattern: RegExp): Promise<OrcError> {
  try {
    await p
  } catch (err) {
    assert.ok(isOrcError(err, code), `expected OrcError ${code}, got ${(err as { code?: string }).code}: ${(err as Error).message}`)
    assert.match((err as Error).message, pattern)
    assert.doesNotMatch((err as Error).message, /\n/)
    return err as OrcError
  }
  assert.fail(`expected OrcError ${code}`)
}

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

describe('registry client against docker-registry (plain HTTP on loopback)', { skip: registryMissing() }, () => {
  let reg: TestRegistry
  let client: RegistryClient
  let digest: string
  let index: PushedIndex
  before(async () => {
    reg = await startRegistry()
    digest = await pushImage(reg, 'team/app:1.0', IMAGE)
    index = await pushIndex(reg, 'team/multi:2', IMAGE)
    client = new RegistryClient(reg.host)
  })
  after(async () => {
    client?.close()
    await reg?.stop()
  })

  test('a tag resolves to the digest skopeo sees, over plain HTTP by default on loopback', async () => {
    assert.equal(client.tls, 'plain')
    const d = await client.resolve('team/app', '1.0')
    assert.equal(d.digest, digest)
    assert.equal(d.digest, await skopeoDigest(reg, 'team/app:1.0'))
    assert.equal(d.mediaType, MEDIA_TYPES.ociManifest)
    const byDigest = await client.resolve('team/app', digest)
    assert.equal(byDigest.digest, digest)
    assert.equal(byDigest.size, d.size)
  })

  test('a manifest by digest is verified; its config and layers hash to their digests', async () => {
    const { descriptor, bytes } = await client.manifest('team/app', digest)
    assert.equal(descriptor.digest, digest)
    assert.equal(sha(bytes), digest)
    assert.equal(descriptor.size, bytes.length)
    assert.equal(descriptor.mediaType, MEDIA_TYPES.ociManifest)
    const m = JSON.parse(bytes.toString()) as { config: { digest: string; size: number }; layers: { digest: string; size: number }[] }
    assert.equal(m.layers.length, 2)
    for (const d of [m.config, ...m.layers]) {
      const { size, body } = await client.blob('team/app', d.digest)
      const got = await drain(body)
      assert.equal(size, d.size)
      assert.equal(got.length, d.size)
      assert.equal(sha(got), d.digest)
    }
    const byTag = await client.manifest('team/app', '1.0')
    assert.equal(byTag.descriptor.digest, digest)
  })

  test("a multi-platform tag resolves to the index, which lists this machine's platform and another", async () => {
    const d = await client.resolve('team/multi', '2')
    assert.equal(d.digest, index.digest)
    assert.equal(d.mediaType, MEDIA_TYPES.ociIndex)
    const { descriptor, bytes } = await client.manifest('team/multi', '2')
    assert.equal(descriptor.digest, index.digest)
    assert.equal(descriptor.mediaType, MEDIA_TYPES.ociIndex)
    const doc = JSON.parse(bytes.toString()) as { manifests: { digest: string; platform: { os: string; architecture: string } }[] }
    const me = machinePlatform()
    const byPlatform = Object.fromEntries(doc.manifests.map((m) => [`${m.platform.os}/${m.platform.architecture}`, m.digest]))
    assert.deepEqual(byPlatform, index.manifests)
    const mine = await client.manifest('team/multi', index.manifests[`${me.os}/${me.architecture}`]!)
    assert.equal(mine.descriptor.mediaType, MEDIA_TYPES.ociManifest)
  })

  test("Docker's manifest v2 and manifest list are asked for and returned as such", async () => {
    const one = await pushImage(reg, 'docker/app:1', IMAGE, { format: 'v2s2' })
    const list = await pushIndex(reg, 'docker/multi:1', IMAGE, undefined, { format: 'v2s2' })
    const d1 = await client.resolve('docker/app', '1')
    assert.deepEqual([d1.digest, d1.mediaType], [one, MEDIA_TYPES.dockerManifest])
    const d2 = await client.resolve('docker/multi', '1')
    assert.deepEqual([d2.digest, d2.mediaType], [list.digest, MEDIA_TYPES.dockerList])
    assert.equal((await client.manifest('docker/multi', list.digest)).descriptor.mediaType, MEDIA_TYPES.dockerList)
  })

  test('zstd layers arrive as pushed', { skip: zstdMissing() }, async () => {
    const d = await pushImage(reg, 'team/zstd:1', IMAGE, { compression: 'zstd' })
    const m = JSON.parse((await client.manifest('team/zstd', d)).bytes.toString()) as { layers: { mediaType: string; digest: string }[] }
    assert.deepEqual(
      m.layers.map((l) => l.mediaType),
      ['application/vnd.oci.image.layer.v1.tar+zstd', 'application/vnd.oci.image.layer.v1.tar+zstd'],
    )
    const { body } = await client.blob('team/zstd', m.layers[1]!.digest)
    const bytes = await drain(body)
    assert.equal(sha(bytes), m.layers[1]!.digest)
    assert.equal(bytes.readUInt32LE(0), 0xfd2fb528, 'zstd frame magic')
  })

  test('a tag, repository or blob that does not exist is not_found, naming registry and reference', async () => {
    await rejects(client.resolve('team/app', 'nope'), 'not_found', new RegExp(`^manifest unknown: ${esc(reg.host)}/team/app:nope$`))
    await rejects(client.manifest('team/app', 'nope'), 'not_found', new RegExp(`^manifest unknown: ${esc(reg.host)}/team/app:nope$`))
    await rejects(client.manifest('team/nothing', '1.0'), 'not_found', new RegExp(`^manifest unknown: ${esc(reg.host)}/team/nothing:1\\.0`))
    const missing = `sha256:${'1'.repeat(64)}`
    await rejects(client.blob('team/app', missing), 'not_found', new RegExp(`^blob unknown: ${esc(reg.host)}/team/app@${missing}$`))
  })

  test('a manifest tampered with in the registry storage is refused as corrupt when asked for by digest', async () => {
    const tampered = await pushImage(reg, 'team/tamper:1', { layers: [[file('x', 'x\n')]] })
    const path = registryBlobPath(reg, tampered)
    const original = readFileSync(path)
    writeFileSync(path, Buffer.from(original.toString().replace('"schemaVersion":2', '"schemaVersion": 2')))
    await rejects(client.manifest('team/tamper', tampered), 'corrupt', new RegExp(`^manifest ${esc(reg.host)}/team/tamper@${tampered}: `))
  })
})

describe('registry client against docker-registry with basic auth and self-signed TLS', { skip: secureRegistryMissing() }, () => {
  let reg: TestRegistry
  let digest: string
  const creds = { username: 'alice', password: 'correct-horse-9' }
  before(async () => {
    reg = await startRegistry({ basicAuth: creds, tls: true })
    digest = await pushImage(reg, 'lab/app:1.0', IMAGE)
  })
  after(() => reg?.stop())
  const use = async <T>(client: RegistryClient, fn: (c: RegistryClient) => Promise<T>): Promise<T> => {
    try {
      return await fn(client)
    } finally {
      client.close()
    }
  }

  test("with the registry's CA and good credentials a tag resolves and a blob arrives whole", async () => {
    await use(new RegistryClient(reg.host, { tls: 'verify', ca: reg.ca!, ...creds }), async (c) => {
      assert.equal((await c.resolve('lab/app', '1.0')).digest, digest)
      const m = JSON.parse((await c.manifest('lab/app', digest)).bytes.toString()) as { layers: { digest: string }[] }
      const { body } = await c.blob('lab/app', m.layers[1]!.digest)
      assert.equal(sha(await drain(body)), m.layers[1]!.digest)
    })
  })

  test('insecure TLS (no verification) works without the CA', async () => {
    await use(new RegistryClient(reg.host, { tls: 'insecure', ...creds }), async (c) => {
      assert.equal((await c.resolve('lab/app', '1.0')).digest, digest)
    })
  })

  test('without the CA the certificate is refused with a hint to give it or opt into insecure', async () => {
    await use(new RegistryClient(reg.host, { tls: 'verify', ...creds }), async (c) => {
      await rejects(
        c.resolve('lab/app', '1.0'),
        'unavailable',
        new RegExp(`^registry ${esc(reg.host)}: its TLS certificate is not trusted .*CA certificate.*insecure`),
      )
    })
  })

  test('plain HTTP against the HTTPS registry says it serves HTTPS', async () => {
    await use(new RegistryClient(reg.host, { ...creds }), async (c) => {
      assert.equal(c.tls, 'plain')
      await rejects(c.resolve('lab/app', '1.0'), 'unavailable', /serves HTTPS, not plain HTTP/)
    })
  })

  test('no credentials: forbidden, asking for credentials', async () => {
    await use(new RegistryClient(reg.host, { ca: reg.ca! }), async (c) => {
      assert.equal(c.tls, 'verify', 'a CA given means HTTPS, even on loopback')
      await rejects(
        c.resolve('lab/app', '1.0'),
        'forbidden',
        new RegExp(`^registry ${esc(reg.host)}: unauthorized \\(${esc(reg.host)}/lab/app:1\\.0\\): give credentials`),
      )
      await rejects(c.blob('lab/app', digest), 'forbidden', /give credentials/)
    })
  })

  test('wrong credentials: forbidden, saying they were refused, never showing the password', async () => {
    const password = 'Wrong-Pa55word'
    await use(new RegistryClient(reg.host, { ca: reg.ca!, username: 'alice', password }), async (c) => {
      for (const call of [() => c.resolve('lab/app', '1.0'), () => c.manifest('lab/app', digest), () => c.blob('lab/app', digest)]) {
        const err = await rejects(call(), 'forbidden', /credentials of user "alice" were refused/)
        const shown = JSON.stringify({ message: err.message, details: err.details })
        assert.ok(!shown.includes(password), shown)
        assert.ok(!shown.includes(Buffer.from(`alice:${password}`).toString('base64')), shown)
      }
    })
  })
})

test('a registry that stopped is unavailable, naming it', { skip: registryMissing() }, async () => {
  const reg = await startRegistry()
  const client = new RegistryClient(reg.host)
  try {
    const digest = await pushImage(reg, 'team/app:1.0', { layers: [[file('a', 'a\n')]] })
    assert.equal((await client.resolve('team/app', '1.0')).digest, digest)
    await reg.kill()
    await rejects(client.resolve('team/app', '1.0'), 'unavailable', new RegExp(`^registry ${esc(reg.host)} unreachable: `))
    await rejects(client.blob('team/app', digest), 'unavailable', new RegExp(`^registry ${esc(reg.host)} unreachable: `))
    // Back on the same storage: the client recovers.
    await reg.start()
    assert.equal((await client.resolve('team/app', '1.0')).digest, digest)
  } finally {
    client.close()
    await reg.stop()
  }
})
