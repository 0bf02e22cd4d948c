/** Container probes: the spec's rules, and the timing of a probe on a manual clock (no sockets, no sleeps). */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { type ProbeCheck, ProbeLoop, type ProbeOutcome } from '../../../src/agent/pods/prober.ts'
import { ManualClock } from '../../../src/effects/index.ts'
import { normalizeManifest, podIsReady, probeTiming, readyColumn } from '../../../src/model/index.ts'

const pod = (container: Record<string, unknown>) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name: 'p' },
  spec: { containers: [{ name: 'main', image: 'busybox', ...container }] },
})

function issuesOf(m: unknown): string {
  try {
    normalizeManifest(m)
    return ''
  } catch (err) {
    return (err as Error).message
  }
}

describe('probe spec', () => {
  it('accepts tcpSocket and httpGet probes with Kubernetes fields', () => {
    assert.equal(
      issuesOf(
        pod({
          startupProbe: { tcpSocket: { port: 8080 }, failureThreshold: 30, periodSeconds: 1 },
          readinessProbe: { httpGet: { path: '/healthz', port: 8080, httpHeaders: [{ name: 'X-Probe', value: '1' }] }, successThreshold: 2 },
          livenessProbe: { httpGet: { port: 8080, scheme: 'HTTP' }, initialDelaySeconds: 5, timeoutSeconds: 2 },
        }),
      ),
      '',
    )
  })

  it('refuses a port out of range, two handlers, none, an exec probe without a command', () => {
    assert.match(issuesOf(pod({ livenessProbe: { tcpSocket: { port: 70000 } } })), /spec\.containers\[0\]\.livenessProbe\.tcpSocket\.port: .*65535/)
    assert.match(issuesOf(pod({ readinessProbe: { httpGet: { port: 0 } } })), /readinessProbe\.httpGet\.port: /)
    assert.match(
      issuesOf(pod({ readinessProbe: { tcpSocket: { port: 80 }, httpGet: { port: 80 } } })),
      /spec\.containers\[0\]\.readinessProbe: exactly one handler \(exec, tcpSocket, httpGet\); got tcpSocket, httpGet/,
    )
    assert.match(issuesOf(pod({ startupProbe: { periodSeconds: 3 } })), /startupProbe: exactly one handler \(exec, tcpSocket, httpGet\); got none/)
    assert.equal(issuesOf(pod({ livenessProbe: { exec: { command: ['cat', '/tmp/healthy'] } } })), '', 'exec probes run through Runtime.exec')
    assert.match(issuesOf(pod({ livenessProbe: { exec: { command: [] } } })), /livenessProbe\.exec\.command: must name a program/)
    assert.match(
      issuesOf(pod({ livenessProbe: { tcpSocket: { port: 80 }, successThreshold: 2 } })),
      /livenessProbe\.successThreshold: must be 1 for livenessProbe/,
    )
    assert.match(issuesOf(pod({ readinessProbe: { tcpSocket: { port: 80 }, periodSeconds: 0 } })), /readinessProbe\.periodSeconds: /)
    assert.match(issuesOf(pod({ readinessProbe: { httpGet: { port: 80, path: 'healthz' } } })), /readinessProbe\.httpGet\.path: must start with \//)
  })

  it('the example in examples/probes.yaml is valid', async () => {
    const { readManifests } = await import('../../../src/cli/manifests.ts')
    const docs = await readManifests([new URL('../../../examples/probes.yaml', import.meta.url).pathname])
    assert.equal(issuesOf(docs[0]!.value), '')
  })

  it('fills in the Kubernetes defaults', () => {
    assert.deepEqual(probeTiming({ tcpSocket: { port: 1 } }), {
      initialDelayMs: 0,
      periodMs: 10_000,
      timeoutMs: 1000,
      successThreshold: 1,
      failureThreshold: 3,
    })
  })
})

describe('Ready', () => {
  it('is the Ready condition of a Running pod, or every container running when a status has no conditions', () => {
    const at = '2026-01-01T00:00:00Z'
    const running = [{ name: 'main', state: 'running' }]
    assert.equal(podIsReady({ status: { phase: 'Running', containers: running } }), true)
    assert.equal(
      podIsReady({ status: { phase: 'Running', containers: running, conditions: [{ type: 'Ready', status: 'False', reason: 'x', lastTransitionTime: at }] } }),
      false,
    )
    assert.equal(
      podIsReady({ status: { phase: 'Running', containers: running, conditions: [{ type: 'Ready', status: 'True', reason: 'x', lastTransitionTime: at }] } }),
      true,
    )
    assert.equal(
      podIsReady({ status: { phase: 'Failed', containers: running, conditions: [{ type: 'Ready', status: 'True', reason: 'x', lastTransitionTime: at }] } }),
      false,
    )
    assert.equal(
      readyColumn({
        status: {
          phase: 'Running',
          containers: [
            { state: 'running', ready: false },
            { state: 'running', ready: true },
          ],
        },
      }),
      '1/2',
    )
    assert.equal(readyColumn({ spec: { containers: [{}, {}] } }), '0/2')
  })
})

/** A check whose answers the test sets; each call records when it ran. */
function scripted(clock: ManualClock, answers: (n: number) => ProbeOutcome | 'hang'): { check: ProbeCheck; calls: number[] } {
  const calls: number[] = []
  return {
    calls,
    check: (signal) => {
      calls.push(clock.now())
      const a = answers(calls.length)
      if (a !== 'hang') return Promise.resolve(a)
      return new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted'))))
    },
  }
}

describe('probe timing', () => {
  const ok: ProbeOutcome = { ok: true, output: 'HTTP 200' }
  const bad: ProbeOutcome = { ok: false, output: 'HTTP 500' }

  it('waits the initial delay, checks every period, and fails only after failureThreshold failures in a row', async () => {
    const clock = new ManualClock(0)
    const seen: string[] = []
    const s = scripted(clock, (n) => (n <= 2 ? ok : bad))
    const loop = new ProbeLoop(clock, probeTiming({ tcpSocket: { port: 1 }, initialDelaySeconds: 5, periodSeconds: 2, failureThreshold: 3 }), s.check, {
      changed: (v, last, n) => seen.push(`${clock.now()} ${v} ${last.output} x${n}`),
    }).start()
    await clock.advance(4_999)
    assert.deepEqual(s.calls, [], 'nothing before initialDelaySeconds')
    await clock.advance(1)
    assert.deepEqual(seen, ['5000 passing HTTP 200 x1'])
    await clock.advance(2_000 * 4)
    assert.deepEqual(s.calls, [5000, 7000, 9000, 11000, 13000])
    assert.deepEqual(seen, ['5000 passing HTTP 200 x1', '13000 failing HTTP 500 x3'], 'the third failure in a row flips it')
    loop.stop()
    await clock.advance(10_000)
    assert.equal(s.calls.length, 5, 'stopped: no more checks')
  })

  it('needs successThreshold successes in a row to pass, and a failure resets the count', async () => {
    const clock = new ManualClock(0)
    const seen: string[] = []
    const pattern = [ok, bad, ok, ok]
    const s = scripted(clock, (n) => pattern[n - 1] ?? ok)
    new ProbeLoop(clock, probeTiming({ tcpSocket: { port: 1 }, periodSeconds: 1, successThreshold: 2 }), s.check, {
      changed: (v) => seen.push(`${clock.now()} ${v}`),
    }).start()
    await clock.advance(3_000)
    assert.deepEqual(seen, ['3000 passing'])
  })

  it('counts a check that outlives timeoutSeconds as a failure and never runs two at once', async () => {
    const clock = new ManualClock(0)
    const seen: string[] = []
    const s = scripted(clock, () => 'hang')
    const loop = new ProbeLoop(clock, probeTiming({ tcpSocket: { port: 1 }, periodSeconds: 1, timeoutSeconds: 3, failureThreshold: 1 }), s.check, {
      changed: (v, last) => seen.push(`${clock.now()} ${v} ${last.output}`),
    }).start()
    await clock.advance(2_999)
    assert.deepEqual(s.calls, [0], 'the next check waits for the running one')
    await clock.advance(1)
    assert.deepEqual(seen, ['3000 failing timed out after 3s'])
    await clock.advance(0)
    assert.deepEqual(s.calls, [0, 3000], 'the next one starts at once: the period has passed')
    loop.stop()
  })
})
