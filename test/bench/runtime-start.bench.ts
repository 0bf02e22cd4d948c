/**
 * Sandbox start → first output latency over 100 containers (sequential), from the call to
 * start() until the container's first byte lands in its log file.
 * Run: node --import tsx test/bench/runtime-start.bench.ts   (needs bwrap and busybox-static)
 * Prints: p50 ms, p99 ms, mean ms (one figure per line).
 */
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxRuntime } from '../../src/runtime/index.ts'
import { busyboxImages, busyboxMissing } from '../fixtures/busybox-image.ts'

const N = Number(process.env.N ?? 100)
const missing = busyboxMissing()
if (missing) {
  console.error(`skipped: ${missing}`)
  process.exit(0)
}
const dir = mkdtempSync(join(tmpdir(), 'orc-bench-rt-'))
chmodSync(dir, 0o711)
const rt = new SandboxRuntime({ stateDir: join(dir, 'state') })
const image = busyboxImages().rootfs
const samples: number[] = []
try {
  for (let i = 0; i < N; i++) {
    const logDir = join(dir, 'logs', String(i))
    const t0 = performance.now()
    const h = await rt.start({ id: `b${i}`, image, command: ['/bin/echo', 'ready'], logDir })
    const file = join(logDir, '0.log')
    for (;;) {
      let size = 0
      try {
        size = statSync(file).size
      } catch {}
      if (size > 0) break
      await new Promise((r) => setImmediate(r))
    }
    samples.push(performance.now() - t0)
    await h.exited
    await rt.remove(`b${i}`)
  }
} finally {
  await rt.close()
  rmSync(dir, { recursive: true, force: true })
}
samples.sort((a, b) => a - b)
const q = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))]!
console.log(`sandbox_start_first_output_p50_ms ${q(0.5).toFixed(1)}`)
console.log(`sandbox_start_first_output_p99_ms ${q(0.99).toFixed(1)}`)
console.log(`sandbox_start_first_output_mean_ms ${(samples.reduce((a, b) => a + b, 0) / samples.length).toFixed(1)}`)
