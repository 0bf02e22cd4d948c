import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import { type BlobSource, BlobStore, ImagePuller, parseReference } from '../../../src/images/index.ts'
import { isOrcError } from '../../../src/model/index.ts'
import { pushImage, pushIndex, registryBlobPath, registryMissing, skopeoDigest, startRegistry } from '../../helpers/registry.ts'
import { dir, file } from './fake-registry.ts'

const root = mkdtempSync(join(tmpdir(), 'orc-pull-reg-'))
after(() => rmSync(root, { recursive: true, force: true }))

test('an image index pushed with skopeo to a real registry is pulled for this platform, unpacked, then served by a peer with the registry gone', async (t) => {
  const why = registryMissing()
  if (why) return t.skip(why)
  const reg = await startRegistry()
  try {
    const layout = {
      layers: [
        [dir('etc/'), file('etc/motd', 'bottom\n'), file('etc/old', 'x')],
        [dir('etc/'), file('etc/motd', 'top\n'), file('etc/.wh.old', '')],
      ],
      config: { Cmd: ['/bin/sh', '-c', 'cat /etc/motd'] },
    }
    const pushed = await pushIndex(reg, 'team/app:1.0', layout)
    const a = new ImagePuller(new BlobStore(join(root, 'a', 'blobs')), join(root, 'a', 'cache'))
    const ref = parseReference(`${reg.host}/team/app:1.0`)
    const digest = await a.resolveDigest(ref)
    assert.equal(digest, pushed.digest)
    assert.equal(digest, await skopeoDigest(reg, 'team/app:1.0'))
    const res = await a.pull({ ...ref, digest })
    assert.equal(res.digest, pushed.digest)
    assert.ok(Object.values(pushed.manifests).includes(res.manifestDigest))
    assert.equal(res.bytes.registry, res.totalBytes)
    const img = a.unpack(digest)
    assert.equal(img.digest, res.manifestDigest)
    assert.equal(readFileSync(join(img.rootfs, 'etc/motd'), 'utf8'), 'top\n')
    assert.equal(existsSync(join(img.rootfs, 'etc/old')), false)
    assert.deepEqual(img.config.cmd, ['/bin/sh', '-c', 'cat /etc/motd'])
    assert.deepEqual(
      a.images().map((i) => [i.refs, i.complete]),
      [[[`${reg.host}/team/app:1.0`], true]],
    )

    // A corrupted blob in the registry's storage: the pull fails with the reason, nothing is kept.
    const other = await pushImage(reg, 'team/other:1', { layers: [[file('data', 'original contents of the layer\n')]] })
    const answer = await fetch(`${reg.url}/v2/team/other/manifests/${other}`, { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })
    const manifest = (await answer.json()) as { layers: { digest: string }[] }
    const layerDigest = manifest.layers[0]!.digest
    const onDisk = readFileSync(registryBlobPath(reg, layerDigest))
    onDisk[onDisk.length - 10] ^= 0xff
    writeFileSync(registryBlobPath(reg, layerDigest), onDisk)
    await assert.rejects(a.pull({ ...parseReference(`${reg.host}/team/other:1`), digest: other }), (e) => {
      assert.ok(isOrcError(e, 'corrupt'), String(e))
      assert.match(e.message, /does not match its digest/)
      return true
    })
    assert.equal(a.blobs.has(layerDigest), false)
    assert.ok(!readdirSync(join(a.blobs.dir, 'sha256')).some((f) => f.includes('.tmp-')))

    // The registry goes away; a second node gets every blob from the first.
    await reg.kill()
    const peer: BlobSource = {
      async fetch(d) {
        if (!a.blobs.has(d.digest)) return undefined
        return { body: a.blobs.open(d.digest).body, from: 'node-a' }
      },
    }
    const b = new ImagePuller(new BlobStore(join(root, 'b', 'blobs')), join(root, 'b', 'cache'), { peers: peer })
    await assert.rejects(b.resolveDigest(ref), (e) => isOrcError(e) && e.code !== 'internal')
    const res2 = await b.pull({ ...ref, digest })
    assert.deepEqual(res2.bytes, { registry: 0, peers: res.totalBytes, cached: 0 })
    assert.equal(readFileSync(join(b.unpack(digest).rootfs, 'etc/motd'), 'utf8'), 'top\n')
  } finally {
    await reg.stop()
  }
})
