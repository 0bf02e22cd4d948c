/**
 * Pods use Configs and Secrets (issue #18): as environment variables (`valueFrom`, `envFrom`) and
 * as files on a tmpfs (mode 0400, owned by the pod's user), seen from inside a real sandbox; an
 * updated Secret restarts the pod in place with the new file and a revision saying why; a missing
 * reference keeps the pod Pending with the reason in `orc why`; binary data in env is refused at
 * apply. Secrets are applied in their sealed form, sealed here with the node's keyring.
 */

import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, test } from 'node:test'
import { systemRandom } from '../../src/effects/index.ts'
import type { Secret } from '../../src/model/index.ts'
import { Keyring, sealSecret } from '../../src/secrets/index.ts'
import { pidsRunning, podManifest, skipReason, startTestAgent, type TestAgent, waitFor } from './helpers.ts'

const skip = skipReason()
let a: TestAgent

before(async () => {
  if (!skip) a = await startTestAgent()
})
after(async () => {
  if (!a) return
  for (const p of ['reader', 'waiter']) await a.orc(['delete', `pod/${p}`])
  await waitFor('pods stopped', () => pidsRunning(['sleep', '4731']).length + pidsRunning(['sleep', '4732']).length === 0, 15_000).catch(() => {})
  await a.stop()
  a.remove()
})

function ring(): Keyring {
  return Keyring.fromJSON(JSON.parse(readFileSync(join(a.dataDir, 'secrets.keyring'), 'utf8')))
}

/** Apply a Secret as the store holds it: sealed with the node's keyring (the API does this once the api slice lands). */
async function applySecret(name: string, spec: { data?: Record<string, string>; binaryData?: Record<string, string> }): Promise<void> {
  const existing = (await a.client.call('GET', `/v1/objects/Secret/default/${name}`).catch(() => undefined)) as { object: Secret } | undefined
  const manifest = { apiVersion: 'orc/v1', kind: 'Secret', metadata: { name, namespace: 'default' }, spec } as unknown as Secret
  const sealed = sealSecret(ring(), systemRandom, manifest, existing?.object)
  const r = await a.orc(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'orc/v1', kind: 'Secret', metadata: { name }, spec: sealed.spec }))
  assert.equal(r.exitCode, 0, r.stderr)
}

/** Host processes whose command line (readable by every user of the node) contains `text`. */
function cmdlinesWith(text: string): string[] {
  const out: string[] = []
  for (const d of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(d)) continue
    try {
      const cmd = readFileSync(`/proc/${d}/cmdline`, 'utf8')
      if (cmd.includes(text)) out.push(`${d}: ${cmd.replace(/\0/g, ' ').slice(0, 200)}`)
    } catch {}
  }
  return out
}

async function logLines(name: string): Promise<string[]> {
  const r = await a.orc(['logs', `pod/${name}`])
  return r.stdout.split('\n').filter((l) => l !== '')
}

const READER = [
  'echo pw=$PASSWORD',
  'echo user=$DB_user',
  'echo mode=$mode',
  'echo file=$(cat /etc/db/password)',
  "echo filemode=$(stat -c '%a %u' /etc/db/password)",
  "echo dirmode=$(stat -c '%a %u' /etc/db)",
  'if echo x > /etc/db/password 2>/dev/null; then echo writable=yes; else echo writable=no; fi',
  'echo done',
  'exec sleep 4731',
].join('; ')

test('a pod sees a Secret as env (valueFrom, envFrom) and as a 0400 file owned by its user; an update restarts it in place with the new file', {
  skip,
}, async () => {
  await applySecret('db', { data: { password: 's3cret-v1', user: 'admin' } })
  const cfg = await a.orc(
    ['apply', '-f', '-'],
    JSON.stringify({ apiVersion: 'orc/v1', kind: 'Config', metadata: { name: 'app' }, spec: { data: { mode: 'prod' } } }),
  )
  assert.equal(cfg.exitCode, 0, cfg.stderr)
  const pod = JSON.parse(podManifest('reader', a.image, READER, { volumes: [{ name: 'db', secret: { name: 'db' } }] }))
  Object.assign(pod.spec.containers[0], {
    env: [{ name: 'PASSWORD', valueFrom: { secret: { name: 'db', key: 'password' } } }],
    envFrom: [{ secret: 'db', prefix: 'DB_' }, { config: 'app' }],
    volumeMounts: [{ name: 'db', mountPath: '/etc/db' }],
  })
  const ap = await a.orc(['apply', '-f', '-'], JSON.stringify(pod))
  assert.equal(ap.exitCode, 0, ap.stderr)
  const lines = await waitFor('reader output', async () => {
    const l = await logLines('reader')
    return l.includes('done') ? l : undefined
  })
  for (const want of ['pw=s3cret-v1', 'user=admin', 'mode=prod', 'file=s3cret-v1', 'filemode=400 65534', 'dirmode=500 65534', 'writable=no'])
    assert.ok(lines.includes(want), `${want} in\n${lines.join('\n')}`)
  const first = await waitFor('reader running', async () => {
    const p = await a.pod('reader')
    return p?.status?.phase === 'Running' ? p : undefined
  })
  const secretRev = ((await a.client.call('GET', '/v1/objects/Secret/default/db')) as { object: Secret & { metadata: { revision: number } } }).object.metadata
    .revision
  assert.deepEqual(first.status.configRefs, { 'config/app': first.status.configRefs['config/app'], 'secret/db': secretRev })
  const [pid1] = pidsRunning(['sleep', '4731'])

  await applySecret('db', { data: { password: 's3cret-v2', user: 'admin' } })
  const rev2 = ((await a.client.call('GET', '/v1/objects/Secret/default/db')) as { object: { metadata: { revision: number } } }).object.metadata.revision
  assert.ok(rev2 > secretRev)
  await waitFor('reader restarted with the new file', async () => (await logLines('reader')).includes('file=s3cret-v2'))
  const p2 = await waitFor('reader running again', async () => {
    const p = await a.pod('reader')
    return p?.status?.phase === 'Running' && p.status.configRefs?.['secret/db'] === rev2 ? p : undefined
  })
  assert.equal(p2.status.node, 'n1', 'in place: same node')
  assert.equal(p2.metadata.uid, first.metadata.uid, 'same pod')
  assert.ok((await logLines('reader')).includes('pw=s3cret-v2'))
  assert.equal(pidsRunning(['sleep', '4731']).length, 1, 'one copy running')
  assert.deepEqual(cmdlinesWith('s3cret-v'), [], "no process's argv (world-readable) holds the Secret")
  assert.notEqual(pidsRunning(['sleep', '4731'])[0], pid1, 'a new process')
  const hist = await a.orc(['history', 'pod/reader'])
  assert.match(hist.stdout, new RegExp(`secret/db changed \\(revision ${rev2}\\)`), hist.stdout)
})

test('a missing Secret keeps the pod Pending with the reason in orc why; once created, the pod starts', { skip }, async () => {
  const pod = JSON.parse(podManifest('waiter', a.image, 'echo token=$TOKEN; exec sleep 4732'))
  pod.spec.containers[0].env = [{ name: 'TOKEN', valueFrom: { secret: { name: 'api-token', key: 'token' } } }]
  const ap = await a.orc(['apply', '-f', '-'], JSON.stringify(pod))
  assert.equal(ap.exitCode, 0, ap.stderr)
  await waitFor('waiter pending with a reason', async () => {
    const p = await a.pod('waiter')
    return p?.status?.phase === 'Pending' && /secret\/api-token not found/.test(p.status.reason ?? '')
  })
  const why = await a.orc(['why', 'pod/waiter'])
  assert.match(why.stdout, /resolve-data/)
  assert.match(why.stdout, /secret\/api-token not found in namespace default/)
  assert.equal(pidsRunning(['sleep', '4732']).length, 0, 'not started')
  const crashes = (await a.pod('waiter'))!.status.containers.reduce((n: number, c: { restarts: number }) => n + c.restarts, 0)
  assert.equal(crashes, 0, 'no crash loop')

  await applySecret('api-token', { data: { token: 'tok-42' } })
  await waitFor('waiter starts once the Secret exists', async () => (await logLines('waiter')).includes('token=tok-42'))
})

test('binary Secret data in an environment variable is refused at apply, in one line naming the key', { skip }, async () => {
  await applySecret('tls', { binaryData: { cert: Buffer.from([0, 1, 2, 255]).toString('base64') } })
  const pod = JSON.parse(podManifest('binenv', a.image, 'true'))
  pod.spec.containers[0].env = [{ name: 'CERT', valueFrom: { secret: { name: 'tls', key: 'cert' } } }]
  const r = await a.orc(['apply', '-f', '-'], JSON.stringify(pod))
  assert.notEqual(r.exitCode, 0)
  assert.match(r.stderr, /secret\/tls key cert holds binary data/)
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr)
  assert.equal(await a.pod('binenv'), undefined)
})

/** Every file under `dir` whose bytes contain `text`. */
function filesContaining(dir: string, text: string): string[] {
  const out: string[] = []
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.isFile() && readFileSync(p).includes(text)) out.push(p)
    }
  }
  walk(dir)
  return out
}

for (const runtime of ['sandbox', 'oci', 'gvisor'] as const) {
  test(`${runtime}: a Secret's value reaches the pod (env and a 0400 file) but no file of the node's data dir`, {
    skip: skipReason(runtime === 'oci' ? { runc: true } : runtime === 'gvisor' ? { runsc: true } : {}),
  }, async () => {
    const marker = `marker-${runtime}-7d1f3a`
    await applySecret(`token-${runtime}`, { data: { token: marker } })
    const script = [
      `echo envlen=\${#TOKEN}`,
      'echo filelen=$(cat /run/token/token | wc -c)',
      "echo filemode=$(stat -c '%a %u' /run/token/token)",
      'echo done',
      'exec sleep 4733',
    ].join('; ')
    const pod = JSON.parse(podManifest(`disk-${runtime}`, a.image, script, { runtime, volumes: [{ name: 't', secret: { name: `token-${runtime}` } }] }))
    Object.assign(pod.spec.containers[0], {
      env: [{ name: 'TOKEN', valueFrom: { secret: { name: `token-${runtime}`, key: 'token' } } }],
      volumeMounts: [{ name: 't', mountPath: '/run/token' }],
    })
    const ap = await a.orc(['apply', '-f', '-'], JSON.stringify(pod))
    assert.equal(ap.exitCode, 0, ap.stderr)
    try {
      const lines = await waitFor(`disk-${runtime} output`, async () => {
        const l = await logLines(`disk-${runtime}`)
        return l.includes('done') ? l : undefined
      })
      for (const want of [`envlen=${marker.length}`, `filelen=${marker.length}`, 'filemode=400 65534'])
        assert.ok(lines.includes(want), `${want} in\n${lines.join('\n')}`)
      assert.deepEqual(filesContaining(a.dataDir, marker), [], 'the clear value is in no file of the data dir (store, runtime state, bundles, logs)')
      assert.deepEqual(cmdlinesWith(marker), [], "no process's argv holds the Secret")
    } finally {
      await a.orc(['delete', `pod/disk-${runtime}`])
      await waitFor('stopped', () => pidsRunning(['sleep', '4733']).length === 0, 15_000)
    }
  })
}

test('after an agent restart, an adopted pod keeps its Secret: a crashed container restarts with it; an update still restarts the pod in place', {
  skip,
}, async () => {
  await applySecret('adopt', { data: { key: 'adopt-v1' } })
  const script = 'echo file=$(cat /etc/adopt/key) env=$KEY; exec sleep 4734'
  const pod = JSON.parse(podManifest('adoptee', a.image, script, { volumes: [{ name: 'a', secret: { name: 'adopt' } }] }))
  Object.assign(pod.spec.containers[0], {
    env: [{ name: 'KEY', valueFrom: { secret: { name: 'adopt', key: 'key' } } }],
    volumeMounts: [{ name: 'a', mountPath: '/etc/adopt' }],
  })
  assert.equal((await a.orc(['apply', '-f', '-'], JSON.stringify(pod))).exitCode, 0)
  try {
    await waitFor('adoptee output', async () => (await logLines('adoptee')).includes('file=adopt-v1 env=adopt-v1'))
    const [pid] = await waitFor('adoptee running', () => pidsRunning(['sleep', '4734']).length === 1 && pidsRunning(['sleep', '4734']))
    await a.stop()
    await a.start()
    await waitFor('adopted', () => /pod adopted after agent restart/.test(a.output()))
    assert.deepEqual(pidsRunning(['sleep', '4734']), [pid], 'adopted, not restarted')
    // The container dies: the restart policy starts it again, with its Secret (resolved by this agent).
    process.kill(pid!, 'SIGKILL')
    await waitFor('restarted after the crash', async () => {
      const p = await a.pod('adoptee')
      return p?.status?.containers?.[0]?.restarts === 1 && pidsRunning(['sleep', '4734']).length === 1
    })
    await waitFor(
      'the restarted container sees its Secret',
      async () => (await logLines('adoptee')).filter((l) => l === 'file=adopt-v1 env=adopt-v1').length === 2,
    )
    await applySecret('adopt', { data: { key: 'adopt-v2' } })
    await waitFor('restarted in place with the new value', async () => (await logLines('adoptee')).includes('file=adopt-v2 env=adopt-v2'))
  } finally {
    await a.orc(['delete', 'pod/adoptee'])
    await waitFor('stopped', () => pidsRunning(['sleep', '4734']).length === 0, 15_000)
  }
})
