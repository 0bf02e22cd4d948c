/**
 * Pods that run: a real agent process, real bubblewrap sandboxes, everything checked through the
 * CLI a user would type (`orc apply/get/logs/why/rollback/delete`).
 */

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { after, before, test } from 'node:test'
import { pidsRunning, podManifest, skipReason, startTestAgent, type TestAgent, waitFor } from './helpers.ts'

const skip = skipReason()
let a: TestAgent

before(async () => {
  if (!skip) a = await startTestAgent()
})
after(async () => {
  if (!a) return
  for (const p of ['probe', 'web', 'never', 'always', 'stuck', 'rooty', 'oci-probe']) await a.orc(['delete', `pod/${p}`])
  await waitFor('pods stopped', () => pidsRunning(['sleep', '4701']).length + pidsRunning(['sleep', '4702']).length === 0, 15_000).catch(() => {})
  await a.stop()
  a.remove()
})

async function logs(name: string, extra: string[] = []): Promise<string[]> {
  const r = await a.orc(['logs', `pod/${name}`, ...extra])
  assert.equal(r.exitCode, 0, r.stderr)
  return r.stdout.split('\n').filter((l) => l !== '')
}

async function running(name: string, pred: (p: Record<string, any>) => boolean = () => true): Promise<Record<string, any>> {
  return waitFor(`pod/${name} running`, async () => {
    const p = await a.pod(name)
    return p?.status?.phase === 'Running' && pred(p) ? p : undefined
  })
}

const PROBE =
  'echo uid=$(id -u); echo procs=$(ls /proc | grep -cE "^[0-9]+$"); if touch /bin/x 2>/dev/null; then echo rootfs=rw; else echo rootfs=ro; fi; echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\\n" " "); echo done'

test('a pod runs confined: unprivileged, own pid namespace, read-only image, loopback only; get shows Running and the revision', { skip }, async () => {
  const ap = await a.orc(['apply', '-f', '-'], podManifest('probe', a.image, `${PROBE}; exec sleep 4700`))
  assert.equal(ap.exitCode, 0, ap.stderr)
  const pod = await running('probe')
  const lines = await waitFor('probe output', async () => {
    const l = await logs('probe')
    return l.includes('done') ? l : undefined
  })
  assert.ok(lines.includes('uid=65534'), lines.join('\n'))
  assert.ok(lines.includes('rootfs=ro'), lines.join('\n'))
  assert.match(lines.find((l) => l.startsWith('ifaces='))!, /^ifaces=lo\s*$/)
  const procs = Number(lines.find((l) => l.startsWith('procs='))!.slice(6))
  assert.ok(procs <= 6, `the pod sees only its own processes, saw ${procs}`)
  const get = await a.orc(['get', 'pods'])
  const row = get.stdout.split('\n').find((l) => l.startsWith('probe '))!
  assert.match(row, new RegExp(`^probe\\s+1/1\\s+Running\\s+n1\\s+${pod.status.runningRevision}\\s+0\\s`))
  assert.equal(pod.status.runningRevision, 1, 'the user wrote revision 1; status writes do not count')
  // and the process is really there, as nobody, on the host
  const [pid] = pidsRunning(['sleep', '4700'])
  assert.ok(pid, 'sleep 4700 runs on the host')
  assert.equal(execFileSync('stat', ['-c', '%u', `/proc/${pid}`], { encoding: 'utf8' }).trim(), '65534')
  const why = await a.orc(['why', 'pod/probe'])
  assert.match(why.stdout, /target running reached/)
  assert.match(why.stdout, /resolve-image\s+done in/)
  await a.orc(['delete', 'pod/probe'])
  await waitFor('probe process gone after delete', () => pidsRunning(['sleep', '4700']).length === 0)
})

test('changing the spec restarts the pod in place; rollback returns to the old spec the same way', { skip }, async () => {
  assert.equal((await a.orc(['apply', '-f', '-'], podManifest('web', a.image, 'echo version=1; exec sleep 4701'))).exitCode, 0)
  const v1 = await running('web')
  const [pid1] = await waitFor('v1 process', () => pidsRunning(['sleep', '4701']).length === 1 && pidsRunning(['sleep', '4701']))
  const up = await a.orc(['apply', '-f', '-'], podManifest('web', a.image, 'echo version=2; exec sleep 4702'))
  assert.equal(up.exitCode, 0, up.stderr)
  const v2 = await running('web', (p) => p.status.runningRevision > v1.status.runningRevision)
  assert.equal(v2.status.node, 'n1', 'same node')
  await waitFor('old process gone, new one running', () => pidsRunning(['sleep', '4701']).length === 0 && pidsRunning(['sleep', '4702']).length > 0)
  assert.equal(pidsRunning(['sleep', '4702']).length, 1, 'exactly one new process')
  assert.notEqual(pidsRunning(['sleep', '4702'])[0], pid1)
  assert.deepEqual(await waitFor('v2 logs', async () => ((await logs('web')).includes('version=2') ? logs('web') : undefined)), ['version=2'])
  assert.deepEqual(await logs('web', ['--revision', String(v1.status.runningRevision)]), ['version=1'], 'old revision logs are kept')

  const rb = await a.orc(['rollback', 'pod/web'])
  assert.equal(rb.exitCode, 0, rb.stderr)
  const v3 = await running('web', (p) => p.status.runningRevision > v2.status.runningRevision)
  assert.equal(v3.spec.containers[0].command[2], 'echo version=1; exec sleep 4701')
  await waitFor('rolled back process runs, v2 gone', () => pidsRunning(['sleep', '4702']).length === 0 && pidsRunning(['sleep', '4701']).length === 1)
  await a.orc(['delete', 'pod/web'])
  await waitFor('web gone', () => pidsRunning(['sleep', '4701']).length === 0)
})

test('restartPolicy Never leaves a failed container alone; Always restarts it with back-off', { skip }, async () => {
  await a.orc(['apply', '-f', '-'], podManifest('never', a.image, 'echo once; exit 3', { restartPolicy: 'Never' }))
  await a.orc(['apply', '-f', '-'], podManifest('always', a.image, 'echo again; exit 3', { restartPolicy: 'Always' }))
  const never = await waitFor('never fails', async () => {
    const p = await a.pod('never')
    return p?.status?.phase === 'Failed' ? p : undefined
  })
  assert.deepEqual(
    { state: never.status.containers[0].state, exitCode: never.status.containers[0].exitCode, restarts: never.status.containers[0].restarts },
    { state: 'exited', exitCode: 3, restarts: 0 },
  )
  const always = await waitFor('always restarted twice', async () => {
    const p = await a.pod('always')
    return p?.status?.containers?.[0]?.restarts >= 2 ? p : undefined
  })
  assert.equal(always.status.phase, 'Running', 'a crash-looping pod with Always stays Running, with restarts counted')
  assert.equal((await a.orc(['logs', 'pod/never'])).stdout, 'once\n')
  // Never really stayed down
  assert.equal((await a.pod('never'))!.status.containers[0].restarts, 0)
  await a.orc(['delete', 'pod/never'])
  await a.orc(['delete', 'pod/always'])
})

test('a hanging unit is named by orc why, with its attempt and timeout', { skip }, async () => {
  const fifo = join(a.dataDir, 'images', 'stuck.tar')
  execFileSync('mkfifo', [fifo])
  await a.orc(['apply', '-f', '-'], podManifest('stuck', fifo, 'true'))
  // The state asked for lasts one attempt (1.5 s); an `orc why` call takes ~0.5 s under load and
  // waitFor's back-off would wait twice that between calls, so they run back to back here.
  const why = await waitFor(
    'why names resolve-image after its first timeout',
    async () => {
      const r = await a.orc(['why', 'pod/stuck'])
      return /last error: timed out after 1\.5s/.test(r.stdout) ? r.stdout : undefined
    },
    20_000,
    { pollMs: 0 },
  )
  assert.match(why, /^pod\/stuck: Starting on node n1/)
  assert.match(
    why,
    /target running not reached: waiting for resolve-image, running [0-9.]+m?s \(attempt 2\/2, timeout 1\.5s, last error: timed out after 1\.5s\)/,
  )
  assert.match(why, /start-containers\s+waits for storage/)
  const json = JSON.parse((await a.orc(['why', 'pod/stuck', '-o', 'json'])).stdout)
  assert.equal(json.explanation.reached, false)
  assert.equal(json.explanation.blockedBy.at(-1).unit, 'resolve-image')
  // after the last attempt the pod is Failed and says why
  const failed = await waitFor('stuck pod failed', async () => {
    const p = await a.pod('stuck')
    return p?.status?.phase === 'Failed' ? p : undefined
  })
  assert.match(failed.status.reason, /resolve-image.*timed out after 1\.5s/)
  await a.orc(['delete', 'pod/stuck'])
})

test('an unsafe pod is refused at apply until an operator grants it; then it runs as root inside only', { skip }, async () => {
  // A developer (role edit, over the remote CLI) writes the pod; the admin (the local socket) grants it.
  const tester = await a.asUser('tester', 'edit')
  const manifest = podManifest('rooty', a.image, 'echo uid=$(id -u); exec sleep 4703', { security: { unsafe: ['root'] } }, { app: 'builder' })
  const refused = await tester(['apply', '-f', '-'], manifest)
  assert.equal(refused.exitCode, 1)
  assert.match(
    refused.stderr,
    /pod\/rooty asks for root, but no SecurityPolicy in namespace default allows it \(an operator other than the pod's author must grant it\)/,
  )
  assert.equal(await a.pod('rooty'), undefined, 'nothing was stored')
  const policy = JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'SecurityPolicy',
    metadata: { name: 'builders' },
    spec: { allow: ['root'], selector: { names: ['rooty'], matchLabels: { app: 'builder' } } },
  })
  // The operator: a second party (docs/security.md, "Pods and grants").
  assert.equal((await a.orc(['apply', '-f', '-'], policy)).exitCode, 0)
  const ok = await tester(['apply', '-f', '-'], manifest)
  assert.equal(ok.exitCode, 0, ok.stderr)
  await running('rooty')
  assert.deepEqual(await waitFor('uid line', async () => ((await logs('rooty')).length > 0 ? logs('rooty') : undefined)), ['uid=0'])
  const [pid] = await waitFor('rooty process', () => pidsRunning(['sleep', '4703']).length === 1 && pidsRunning(['sleep', '4703']))
  assert.equal(execFileSync('stat', ['-c', '%u', `/proc/${pid}`], { encoding: 'utf8' }).trim(), '65534', 'on the host it is still nobody')
  await a.orc(['delete', 'pod/rooty'])
  await waitFor('rooty gone', () => pidsRunning(['sleep', '4703']).length === 0)
})

test('a pod with runtime oci runs under runc, equally confined', { skip: skip ?? skipReason({ runc: true }) }, async () => {
  await a.orc(['apply', '-f', '-'], podManifest('oci-probe', a.image, `${PROBE}; exec sleep 4704`, { runtime: 'oci' }))
  await running('oci-probe')
  const lines = await waitFor('oci probe output', async () => {
    const l = await logs('oci-probe')
    return l.includes('done') ? l : undefined
  })
  assert.ok(lines.includes('uid=65534'), lines.join('\n'))
  assert.ok(lines.includes('rootfs=ro'), lines.join('\n'))
  await a.orc(['delete', 'pod/oci-probe'])
  await waitFor('oci pod gone', () => pidsRunning(['sleep', '4704']).length === 0)
})
