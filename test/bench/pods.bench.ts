/**
 * Pods on one node, real agent in-process with the sandbox runtime (bwrap):
 *   apply → Running (status.phase written by controller:lifecycle), over N pods, sequential;
 *   in-place update: apply of new args → Running with the new revision (old process stopped
 *   with SIGTERM, new one started).
 * Run: node --import tsx --import ./test/setup.ts test/bench/pods.bench.ts   (root or bwrap + busybox-static)
 * Prints (one figure per line): apply→Running p50 ms, p99 ms; in-place update p50 ms, p99 ms.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { startAgent } from '../../src/agent/index.ts'
import { buildBusyboxRootfs, busyboxUnavailable } from '../../src/runtime/index.ts'

const N = Number(process.env.N ?? 100)
const U = Number(process.env.U ?? 20)
const missing = busyboxUnavailable()
if (missing) {
  console.error(`skipped: ${missing}`)
  process.exit(0)
}
const dir = mkdtempSync(join(tmpdir(), 'orc-bench-pods-'))
const image = join(dir, 'images', 'busybox')
buildBusyboxRootfs(image)
const agent = await startAgent({ dataDir: dir, nodeName: 'bench', logLevel: 'silent' }, { logger: pino({ level: 'silent' }) })
const store = agent.store

function pod(name: string, arg: string) {
  return {
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default' },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['/bin/sleep', arg] }] },
  }
}

function whenRunning(name: string, pred: (s: Record<string, unknown>) => boolean): Promise<void> {
  const ref = { kind: 'Pod', namespace: 'default', name }
  return new Promise((resolve) => {
    const check = () => {
      const s = (store.get(ref)?.status ?? {}) as Record<string, unknown>
      if (s.phase === 'Running' && pred(s)) {
        off()
        resolve()
        return true
      }
      return false
    }
    const off = store.onChange(() => void setImmediate(check))
    check()
  })
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!

const start: number[] = []
try {
  for (let i = 0; i < N; i++) {
    const t0 = performance.now()
    const res = await store.apply(pod(`b${i}`, '3600'), { author: 'user:bench', now: Date.now() })
    const rev = res.revision!.number
    await whenRunning(`b${i}`, (s) => s.runningRevision === rev)
    start.push(performance.now() - t0)
  }
  const upd: number[] = []
  for (let i = 0; i < U; i++) {
    const t0 = performance.now()
    const res = await store.apply(pod(`b${i}`, '3601'), { author: 'user:bench', now: Date.now() })
    const rev = res.revision!.number
    await whenRunning(`b${i}`, (s) => s.runningRevision === rev)
    upd.push(performance.now() - t0)
  }
  console.log(`${pct(start, 50).toFixed(1)} ms apply→Running p50 (${N} pods, sandbox)`)
  console.log(`${pct(start, 99).toFixed(1)} ms apply→Running p99`)
  console.log(`${pct(upd, 50).toFixed(1)} ms in-place update→Running p50 (${U} updates)`)
  console.log(`${pct(upd, 99).toFixed(1)} ms in-place update→Running p99`)
} finally {
  for (let i = 0; i < N; i++)
    await store.delete({ kind: 'Pod', namespace: 'default', name: `b${i}` }, { author: 'user:bench', now: Date.now() }).catch(() => {})
  const deadline = Date.now() + 60_000
  while (
    agent.lifecycle
      .runtime('sandbox')
      .list()
      .some((c) => c.state === 'running') &&
    Date.now() < deadline
  )
    await new Promise((r) => setTimeout(r, 100))
  await agent.lifecycle.idle()
  await agent.stop()
  rmSync(dir, { recursive: true, force: true })
}
