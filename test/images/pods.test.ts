// Pods from a real registry (Debian's docker-registry) on one real agent: the tag resolved once per
// spec revision and pinned in the status, a moved tag picked up only by a new revision, rollback
// restoring the bytes the old revision ran, and the reasons a user sees when a pull cannot work.

import assert from 'node:assert/strict'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import type { TarEntry } from '../../src/runtime/index.ts'
import { busyboxLayerEntries } from '../fixtures/busybox-image.ts'
import { pushImage, registryBlobPath, registryMissing, secureRegistryMissing, startRegistry } from '../helpers/registry.ts'
import { pidsRunning, podManifest, skipReason, startTestAgent, waitFor } from '../pods/helpers.ts'

const skip = skipReason() ?? registryMissing()

function versionLayer(v: string): TarEntry[] {
  return [{ path: 'etc/version', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, data: Buffer.from(`${v}\n`) }]
}

const image = (version: string) => ({ layers: [busyboxLayerEntries(), versionLayer(version)], config: { Env: ['FROM_IMAGE=yes'] } })
const MARKER = '4719501'
const SCRIPT = `echo "version $(cat /etc/version) $FROM_IMAGE"; exec sleep ${MARKER}`

test('a pod runs a registry image pinned by digest; a moved tag needs a new revision; rollback restores the same bytes', { skip }, async (t) => {
  const reg = await startRegistry()
  const agent = await startTestAgent()
  t.after(async () => {
    await agent.orc(['delete', 'pod/web', 'pod/bad', 'pod/pinned']).catch(() => {})
    await agent.stop()
    agent.remove()
    await reg.stop()
    for (const pid of pidsRunning(['sleep', MARKER]))
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
  })
  const ref = `${reg.host}/team/app:1`
  const d1 = await pushImage(reg, 'team/app:1', image('one'))

  const logsOf = async (name: string) => (await agent.orc(['logs', `pod/${name}`])).stdout
  const runs = async (name: string, line: string) =>
    waitFor(`pod/${name} to print ${line}`, async () => (await agent.pod(name))?.status?.phase === 'Running' && (await logsOf(name)).includes(line), 60_000)

  await t.test('the tag is resolved to a digest, recorded in the status, pulled and run', async () => {
    const ap = await agent.orc(['apply', '-f', '-'], podManifest('web', ref, SCRIPT))
    assert.equal(ap.exitCode, 0, ap.stderr)
    await runs('web', 'version one yes')
    const pod = await agent.pod('web')
    assert.deepEqual(
      pod?.status?.images?.map((p: Record<string, unknown>) => [p.name, p.image, p.digest]),
      [['main', ref, d1]],
    )
    const wide = await agent.orc(['get', 'pod', 'web', '-o', 'wide'])
    assert.match(wide.stdout, new RegExp(d1.slice(0, 19)))
    const why = await agent.orc(['why', 'pod/web'])
    assert.match(why.stdout, /pull-image/)
    assert.match(why.stdout, new RegExp(`image main: ${ref.replace(/[.]/g, '\\.')} is ${d1}`))
  })

  await t.test('after an agent restart the adopted pod keeps its pin: a crashed container restarts from the same digest', async () => {
    await agent.stop()
    await agent.start()
    await waitFor('web adopted', async () => (await agent.pod('web'))?.status?.phase === 'Running')
    const before = (await agent.pod('web'))?.status?.containers?.[0]?.restarts ?? 0
    for (const pid of pidsRunning(['sleep', MARKER])) process.kill(pid, 'SIGKILL')
    await waitFor(
      'web restarted by the new agent',
      async () => {
        const p = await agent.pod('web')
        return p?.status?.phase === 'Running' && (p.status.containers?.[0]?.restarts ?? 0) > before
      },
      30_000,
    )
    const pod = await agent.pod('web')
    assert.equal(pod?.status?.images?.[0]?.digest, d1)
    const logs = (await agent.orc(['logs', 'pod/web'])).stdout
    assert.equal(logs.match(/version one yes/g)?.length, 2, logs)
  })

  await t.test('orc image list and inspect show what the node holds and which pod uses it', async () => {
    const list = await agent.orc(['image', 'list'])
    assert.equal(list.exitCode, 0, list.stderr)
    assert.match(list.stdout, /team\/app:1/)
    assert.match(list.stdout, /default\/web/)
    const insp = await agent.orc(['image', 'inspect', ref, '-o', 'json'])
    assert.equal(insp.exitCode, 0, insp.stderr)
    const v = JSON.parse(insp.stdout)
    assert.equal(v.digest, d1)
    assert.equal(v.layers.length, 2)
    assert.deepEqual(v.config.env, ['FROM_IMAGE=yes'])
    const rm = await agent.orc(['image', 'rm', ref])
    assert.notEqual(rm.exitCode, 0)
    assert.match(rm.stderr, /used by default\/web/)
  })

  await t.test('the image routes need their rights: view may not pull, edit may not remove or prune; nothing changes', async () => {
    const viewer = await agent.asUser('vera', 'view')
    const pull = await viewer(['image', 'pull', `${reg.host}/team/app:1`])
    assert.notEqual(pull.exitCode, 0)
    assert.match(pull.stderr, /forbidden|may not/i)
    const editor = await agent.asUser('eddie', 'edit')
    for (const args of [
      ['image', 'rm', ref],
      ['image', 'prune'],
    ]) {
      const r = await editor(args)
      assert.notEqual(r.exitCode, 0, args.join(' '))
      assert.match(r.stderr, /forbidden|may not/i)
    }
    const insp = await agent.orc(['image', 'inspect', ref, '-o', 'json'])
    assert.equal(JSON.parse(insp.stdout).digest, d1, 'the image is still there')
  })

  await t.test('the tag moves: the running revision keeps its digest; a new revision takes the new one', async () => {
    const d2 = await pushImage(reg, 'team/app:1', image('one-b'))
    assert.notEqual(d2, d1)
    assert.equal((await agent.pod('web'))?.status?.images?.[0]?.digest, d1, 'the running revision keeps its digest')
    const ap = await agent.orc(['apply', '-f', '-'], podManifest('web', ref, `${SCRIPT} # revision 2`))
    assert.equal(ap.exitCode, 0, ap.stderr)
    await runs('web', 'version one-b yes')
    assert.equal((await agent.pod('web'))?.status?.images?.[0]?.digest, d2)
  })

  await t.test('rollback restores the digest the old revision ran, not what the tag names now', async () => {
    const rb = await agent.orc(['rollback', 'pod/web'])
    assert.equal(rb.exitCode, 0, rb.stderr)
    await waitFor('the rolled-back revision to run', async () => (await agent.pod('web'))?.status?.images?.[0]?.digest === d1, 60_000)
    await runs('web', 'version one yes')
    const pod = await agent.pod('web')
    assert.equal(pod?.spec?.containers?.[0]?.image, `${ref}@${d1}`)
  })

  await t.test('a nonexistent tag leaves the pod Pending with the reason in orc why; the agent keeps serving', async () => {
    const ap = await agent.orc(['apply', '-f', '-'], podManifest('bad', `${reg.host}/team/app:nope`, SCRIPT))
    assert.equal(ap.exitCode, 0, ap.stderr)
    const why = await waitFor(
      'orc why to name the missing tag',
      async () => {
        const w = await agent.orc(['why', 'pod/bad'])
        return /manifest unknown|not found/i.test(w.stdout) ? w.stdout : undefined
      },
      30_000,
    )
    assert.match(why, /team\/app:nope/)
    // The reason is an event too: a failed attempt (UnitRetrying), the unit failed (UnitFailed), or
    // the status write that said it — whichever the run is at (it retries the whole run as well).
    await waitFor(
      'orc events to show the pull failure',
      async () => /pull-image.*manifest unknown: .*team\/app:nope/.test((await agent.orc(['events', 'pod/bad'])).stdout),
      30_000,
    )
    assert.equal((await agent.pod('bad'))?.status?.phase, 'Pending')
    assert.equal((await agent.orc(['get', 'pods'])).exitCode, 0)
  })

  await t.test('a malformed reference is refused at apply, naming the bad part; nothing is stored', async () => {
    const ap = await agent.orc(['apply', '-f', '-'], podManifest('malformed', `${reg.host}/Team/App:1`, SCRIPT))
    assert.notEqual(ap.exitCode, 0)
    assert.match(ap.stderr, /spec\.containers\[0\]\.image.*repository component "Team"/)
    assert.equal(await agent.pod('malformed'), undefined)
  })

  await t.test('a corrupted blob in the registry is refused with a digest mismatch and nothing of it is kept', async () => {
    const d3 = await pushImage(reg, 'team/app:2', image('two'))
    const insp = await agent.orc(['image', 'inspect', ref, '-o', 'json'])
    const base = JSON.parse(insp.stdout).layers.map((l: { digest: string }) => l.digest)
    // The version layer of tag 2 is new to this node: corrupt it in the registry's storage.
    const manifest = JSON.parse(readFileSync(registryBlobPath(reg, d3), 'utf8'))
    const target = manifest.layers.map((l: { digest: string }) => l.digest).find((d: string) => !base.includes(d))
    const path = registryBlobPath(reg, target)
    const data = readFileSync(path)
    data[data.length - 5] = (data[data.length - 5]! + 1) % 256
    writeFileSync(path, data)
    const ap = await agent.orc(['apply', '-f', '-'], podManifest('pinned', `${reg.host}/team/app:2`, SCRIPT))
    assert.equal(ap.exitCode, 0, ap.stderr)
    const why = await waitFor(
      'orc why to name the digest mismatch',
      async () => {
        const w = await agent.orc(['why', 'pod/pinned'])
        return /does not match its digest/.test(w.stdout) ? w.stdout : undefined
      },
      30_000,
    )
    assert.match(why, new RegExp(target.slice(7, 19)))
    assert.equal(existsSync(join(agent.dataDir, 'blobs', 'sha256', target.slice(7))), false, 'the corrupt blob is not kept')
    assert.deepEqual(
      readdirSync(join(agent.dataDir, 'blobs', 'sha256')).filter((n) => n.includes('tmp')),
      [],
      'no partial download left',
    )
  })
})

test('registry credentials are a Secret the pod names: TLS with the registry CA and basic auth; never printed', {
  skip: skip ?? secureRegistryMissing(),
}, async (t) => {
  const reg = await startRegistry({ tls: true, basicAuth: { username: 'lab', password: 'pw-4719-not-printed' } })
  const agent = await startTestAgent()
  const dir = mkdtempSync(join(tmpdir(), 'orc-regcred-'))
  t.after(async () => {
    await agent.orc(['delete', 'pod/private', 'pod/nocred']).catch(() => {})
    await agent.stop()
    agent.remove()
    await reg.stop()
    rmSync(dir, { recursive: true, force: true })
  })
  const digest = await pushImage(reg, 'team/private:1', image('private'))
  const ref = `${reg.host}/team/private:1`

  // Without credentials: Pending, and the reason says unauthorized.
  let ap = await agent.orc(['apply', '-f', '-'], podManifest('nocred', ref, SCRIPT))
  assert.equal(ap.exitCode, 0, ap.stderr)
  const refused = await waitFor(
    'orc why to say the registry wants credentials or a CA',
    async () => {
      const w = await agent.orc(['why', 'pod/nocred'])
      return /serves HTTPS|certificate|unauthorized/i.test(w.stdout) ? w.stdout : undefined
    },
    30_000,
  )
  assert.match(refused, /pull-image/)

  writeFileSync(join(dir, 'ca.crt'), reg.ca!)
  writeFileSync(join(dir, 'password'), 'pw-4719-not-printed')
  const cs = await agent.orc([
    'create',
    'secret',
    'regcred',
    '--from-literal',
    `server=${reg.host}`,
    '--from-literal',
    'username=lab',
    '--from-file',
    `password=${join(dir, 'password')}`,
    '--from-file',
    `ca.crt=${join(dir, 'ca.crt')}`,
  ])
  assert.equal(cs.exitCode, 0, cs.stderr)
  ap = await agent.orc(['apply', '-f', '-'], podManifest('private', ref, SCRIPT, { imagePullSecrets: ['regcred'] }))
  assert.equal(ap.exitCode, 0, ap.stderr)
  await waitFor('pod/private to run the private image', async () => (await agent.orc(['logs', 'pod/private'])).stdout.includes('version private yes'), 60_000)
  assert.equal((await agent.pod('private'))?.status?.images?.[0]?.digest, digest)

  // The password is in no status, no why, no log of the agent.
  const seen = [
    JSON.stringify(await agent.pod('private')),
    JSON.stringify(await agent.pod('nocred')),
    (await agent.orc(['why', 'pod/nocred'])).stdout,
    (await agent.orc(['get', 'secret', 'regcred', '-o', 'yaml'])).stdout,
    agent.output(),
  ].join('\n')
  assert.doesNotMatch(seen, /pw-4719-not-printed/)
})
