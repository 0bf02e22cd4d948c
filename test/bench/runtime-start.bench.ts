/**
 * Pod runtimes compared: start → first output latency over N containers (sequential), from the call
 * to start() until the container's first byte lands in its log file; then the memory of one idle
 * container (`sleep`): its cgroup's working set (what `orc top` shows) and the summed PSS of every
 * host process it runs as (the runtime binary, the Sentry and gofer under gVisor).
 * Run: node --import tsx test/bench/runtime-start.bench.ts   (RUNTIMES=sandbox,oci,gvisor N=100)
 * Needs bwrap and busybox-static; oci and gvisor need root and runc / runsc (skipped loudly without).
 * Prints one figure per line: <runtime>_start_first_output_{p50,p99,mean}_ms, <runtime>_idle_{cgroup,pss}_mib.
 */
import { execFileSync } from 'node:child_process'
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createRuntime, detectRunscPlatform, type RuntimeKind } from '../../src/runtime/index.ts'
import { descendants } from '../../src/runtime/procfs.ts'
import { busyboxImages, busyboxMissing } from '../fixtures/busybox-image.ts'

const N = Number(process.env.N ?? 100)
const KINDS = (process.env.RUNTIMES ?? 'sandbox,oci,gvisor').split(',') as RuntimeKind[]

function missing(kind: RuntimeKind): string | undefined {
  const bb = busyboxMissing()
  if (bb) return bb
  const bin = { sandbox: 'bwrap', oci: 'runc', gvisor: 'runsc' }[kind]
  if (kind !== 'sandbox' && process.getuid?.() !== 0) return `${bin} needs root`
  try {
    execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'ignore' })
  } catch {
    return `${bin} not installed`
  }
  return undefined
}

function pssKiB(pid: number): number {
  try {
    const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'))
    return m ? Number(m[1]) : 0
  } catch {
    return 0
  }
}

async function waitOutput(file: string): Promise<void> {
  for (;;) {
    let size = 0
    try {
      size = statSync(file).size
    } catch {}
    if (size > 0) return
    await new Promise((r) => setImmediate(r))
  }
}

async function bench(kind: RuntimeKind): Promise<void> {
  const why = missing(kind)
  if (why) {
    console.error(`${kind}: skipped: ${why}`)
    return
  }
  if (kind === 'gvisor') {
    const p = await detectRunscPlatform()
    if (!p.platform) {
      console.error(`gvisor: skipped: ${p.detail}`)
      return
    }
    console.error(`gvisor: platform ${p.detail}`)
  }
  const dir = mkdtempSync(join(tmpdir(), `orc-bench-rt-${kind}-`))
  chmodSync(dir, 0o711)
  const rt = createRuntime(kind, { stateDir: join(dir, 'state') })
  const image = busyboxImages().rootfs
  const samples: number[] = []
  try {
    // one unmeasured start: the gVisor platform probe and first-use costs are not a pod start
    const warm = await rt.start({ id: 'warm', image, command: ['/bin/echo', 'ready'], logDir: join(dir, 'logs', 'warm') })
    await warm.exited
    await rt.remove('warm')
    for (let i = 0; i < N; i++) {
      const logDir = join(dir, 'logs', String(i))
      const t0 = performance.now()
      const h = await rt.start({ id: `b${i}`, image, command: ['/bin/echo', 'ready'], logDir })
      await waitOutput(join(logDir, '0.log'))
      samples.push(performance.now() - t0)
      await h.exited
      await rt.remove(`b${i}`)
    }
    const idleLog = join(dir, 'logs', 'idle')
    const idle = await rt.start({ id: 'idle', image, command: ['/bin/sh', '-c', 'echo up; exec sleep 600'], logDir: idleLog })
    await waitOutput(join(idleLog, '0.log'))
    await new Promise((r) => setTimeout(r, 1000)) // settle
    const usage = await rt.usage('idle')
    const pss = [idle.pid, ...descendants(idle.pid)].reduce((n, pid) => n + pssKiB(pid), 0)
    await rt.stop('idle', { graceMs: 0 })
    await rt.remove('idle')
    samples.sort((a, b) => a - b)
    const q = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))]!
    console.log(`${kind}_start_first_output_p50_ms ${q(0.5).toFixed(1)}`)
    console.log(`${kind}_start_first_output_p99_ms ${q(0.99).toFixed(1)}`)
    console.log(`${kind}_start_first_output_mean_ms ${(samples.reduce((a, b) => a + b, 0) / samples.length).toFixed(1)}`)
    console.log(`${kind}_idle_cgroup_mib ${usage?.memoryBytes != null ? (usage.memoryBytes / 2 ** 20).toFixed(1) : 'n/a'}`)
    console.log(`${kind}_idle_pss_mib ${(pss / 1024).toFixed(1)}`)
  } finally {
    await rt.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

for (const kind of KINDS) await bench(kind)
