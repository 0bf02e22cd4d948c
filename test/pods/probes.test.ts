/**
 * Container probes on real sandboxed pods: a failing liveness probe restarts the container (count
 * and reason in the status, `orc why` and `orc events`); an HTTP readiness probe against busybox
 * httpd flips the pod's Ready condition and the READY column of `orc get pods`.
 */

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { after, before, test } from 'node:test'
import { pidsRunning, podManifest, skipReason, startTestAgent, type TestAgent, waitFor } from './helpers.ts'

const skip = skipReason()
let a: TestAgent

before(async () => {
  if (!skip) a = await startTestAgent()
})
after(async () => {
  if (!a) return
  for (const p of ['live', 'web', 'execd', 'started']) await a.orc(['delete', `pod/${p}`])
  const markers = ['4811', '4812', '4813', '4814']
  await waitFor('pods stopped', () => markers.every((m) => pidsRunning(['sleep', m]).length === 0), 15_000).catch(() => {})
  for (const m of markers) for (const pid of pidsRunning(['sleep', m])) process.kill(pid, 'SIGKILL')
  await a.stop()
  a.remove()
})

const ready = (p: Record<string, any> | undefined) => (p?.status?.conditions ?? []).find((c: { type: string }) => c.type === 'Ready')

test('a failing liveness probe restarts the container; the count and the probe output show in status, orc why and orc events', { skip }, async () => {
  const spec = {
    containers: [
      {
        name: 'main',
        image: a.image,
        command: ['/bin/sh', '-c', 'exec sleep 4811'],
        // Nothing listens on port 9 in the pod.
        livenessProbe: { tcpSocket: { port: 9 }, periodSeconds: 1, failureThreshold: 2 },
      },
    ],
  }
  const r = await a.orc(['apply', '-f', '-'], podManifest('live', a.image, '', spec))
  assert.equal(r.exitCode, 0, r.stderr)
  const p = await waitFor(
    'pod/live restarted by its liveness probe',
    async () => {
      const p = await a.pod('live')
      const c = p?.status?.containers?.[0]
      return c?.restarts >= 1 && c.lastTermination ? p : undefined
    },
    60_000,
  )
  const c = p.status.containers[0]
  assert.match(c.lastTermination.reason, /^liveness probe failed 2 times in a row: connect .*:9: ECONNREFUSED$/)
  const why = await a.orc(['why', 'pod/live'])
  assert.equal(why.exitCode, 0, why.stderr)
  assert.match(why.stdout, /last ended .*: liveness probe failed 2 times in a row: connect .*ECONNREFUSED/)
  const ev = await a.orc(['events', 'pod/live'])
  assert.match(ev.stdout, /Unhealthy.*container main stopped: liveness probe failed 2 times in a row/)
  const get = await a.orc(['get', 'pods'])
  assert.match(get.stdout, /live\s+\S+\s+\S+\s+n1\s+\d+\s+[1-9]\d*\s/, 'RESTARTS counts the liveness restarts')
})

test('an HTTP readiness probe against busybox httpd flips the Ready condition and the READY column', { skip }, async () => {
  const spec = {
    containers: [
      {
        name: 'main',
        image: a.image,
        // /ready appears after a first connection to port 9000, and goes after one to 9001.
        command: [
          '/bin/sh',
          '-c',
          'mkdir -p /tmp/www && httpd -p 8080 -h /tmp/www && (nc -l -p 9000 </dev/null >/dev/null; echo ok > /tmp/www/ready; nc -l -p 9001 </dev/null >/dev/null; rm /tmp/www/ready) & exec sleep 4812',
        ],
        readinessProbe: { httpGet: { path: '/ready', port: 8080 }, periodSeconds: 1, failureThreshold: 1 },
      },
    ],
  }
  const r = await a.orc(['apply', '-f', '-'], podManifest('web', a.image, '', spec))
  assert.equal(r.exitCode, 0, r.stderr)
  const notReady = await waitFor(
    'pod/web running and not ready (404)',
    async () => {
      const p = await a.pod('web')
      const c = ready(p)
      return p?.status?.phase === 'Running' && c?.status === 'False' && /HTTP 404/.test(c.message ?? '') ? p : undefined
    },
    60_000,
  )
  assert.equal(ready(notReady).reason, 'ReadinessProbeFailed')
  assert.match((await a.orc(['get', 'pods', 'web'])).stdout, /web\s+0\/1\s+Running/)

  // Knock on the container's port 9000 (from inside its network namespace, as the test is root).
  const [pid] = pidsRunning(['sleep', '4812'])
  assert.ok(pid, 'the container runs')
  const knock = (port: number) =>
    execFileSync('nsenter', [`--net=/proc/${pid}/ns/net`, '--', 'busybox', 'nc', '-w', '2', '127.0.0.1', String(port)], { input: '', timeout: 10_000 })
  knock(9000)
  const p = await waitFor('pod/web ready', async () => {
    const p = await a.pod('web')
    return ready(p)?.status === 'True' ? p : undefined
  })
  assert.equal(ready(p).reason, 'ContainersReady')
  assert.equal(p.status.containers[0].ready, true)
  assert.match((await a.orc(['get', 'pods', 'web'])).stdout, /web\s+1\/1\s+Running/)

  knock(9001)
  await waitFor('pod/web not ready again', async () => ready(await a.pod('web'))?.status === 'False')
  assert.equal((await a.pod('web'))!.status.containers[0].restarts, 0, 'readiness never restarts')
})

test('an exec liveness probe runs inside the sandbox: a failing command restarts the container with its output', { skip }, async () => {
  const spec = {
    containers: [
      {
        name: 'main',
        image: a.image,
        command: ['/bin/sh', '-c', 'echo ok > /tmp/healthy; exec sleep 4813'],
        // /tmp is the container's own: the file is there on the first start and the check passes;
        // it then fails once the file is gone — which the command removes itself after 3 checks.
        livenessProbe: {
          exec: { command: ['/bin/sh', '-c', 'n=$(cat /tmp/count 2>/dev/null || echo 0); echo $((n+1)) > /tmp/count; [ $n -lt 3 ] || { echo sick; exit 3; }'] },
          periodSeconds: 1,
          failureThreshold: 2,
        },
      },
    ],
  }
  const r = await a.orc(['apply', '-f', '-'], podManifest('execd', a.image, '', spec))
  assert.equal(r.exitCode, 0, r.stderr)
  const p = await waitFor(
    'pod/execd restarted by its exec liveness probe',
    async () => {
      const p = await a.pod('execd')
      const c = p?.status?.containers?.[0]
      return c?.restarts >= 1 && c.lastTermination ? p : undefined
    },
    60_000,
  )
  assert.equal(p.status.containers[0].lastTermination.reason, 'liveness probe failed 2 times in a row: exit 3: sick')
})

test('a startup probe is a lifecycle unit: the pod is Running once it passed, then readiness makes it Ready', { skip }, async () => {
  const spec = {
    containers: [
      {
        name: 'main',
        image: a.image,
        // httpd listens only after 2 s: the startup probe fails a few times first.
        command: ['/bin/sh', '-c', 'mkdir -p /tmp/www && echo ok > /tmp/www/healthz && (sleep 2; httpd -p 8080 -h /tmp/www) & exec sleep 4814'],
        startupProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1, failureThreshold: 30 },
        readinessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 1 },
        livenessProbe: { exec: { command: ['cat', '/tmp/www/healthz'] }, periodSeconds: 2 },
      },
    ],
  }
  const r = await a.orc(['apply', '-f', '-'], podManifest('started', a.image, '', spec))
  assert.equal(r.exitCode, 0, r.stderr)
  const p = await waitFor(
    'pod/started Ready',
    async () => {
      const p = await a.pod('started')
      return ready(p)?.status === 'True' ? p : undefined
    },
    60_000,
  )
  assert.equal(p.status.phase, 'Running')
  const unit = p.status.workflow.units.find((u: { name: string }) => u.name === 'startup-probe')
  assert.equal(unit?.state, 'done', 'the startup probe is a unit of the run')
  const why = await a.orc(['why', 'pod/started'])
  assert.match(why.stdout, /startup-probe/)
  assert.match(why.stdout, /Ready: True \(ContainersReady\)/)
  assert.equal(p.status.containers[0].restarts, 0, 'the passing liveness probe restarts nothing')
})
