/**
 * Baseline for the mesh benchmark: HashiCorp Serf (Debian package `serf`; `ORC_SETUP_BENCH=1
 * scripts/setup.sh` installs it) on the same machine, the same way: N agents on 127.0.0.1, one
 * event sent from one agent → received by every agent. Prints, per N:
 *   serf_idle_cpu_cores_n<N>          CPU all N agents use together over 10 s with no events
 *   serf_idle_sends_per_s_per_agent_n<N>  messages (send calls) one idle agent sends a second, mean of N (strace)
 *   serf_propagation_ms_p50_n<N> / …_p99_n<N>   `serf event` started → the event handler ran on every
 *       agent (handler time, one clock; includes starting the handler shell, as orc's figure
 *       includes the API call)
 *   serf_rss_mb_avg_n<N>              mean RSS of the N agents after the run
 * Serf's user events are gossiped (memberlist, UDP, LAN profile: every 200 ms to 3 random members)
 * and not stored: orc's figure is a replicated, persisted store write, so the comparison is of
 * spreading a small message to everyone, not of equal work.
 * Run: node --import tsx --import ./test/setup.ts test/bench/serf.bench.ts [SIZES=5,10,20] [SAMPLES=100]
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort, waitFor } from '../cluster/helpers.ts'
import { cpuSeconds, pct, rssMb, sendCallsPerSecond } from './proc.ts'

const SIZES = (process.argv[2] ?? '5,10,20').split(',').map(Number)
const SAMPLES = Number(process.argv[3] ?? 100)

interface SerfAgent {
  name: string
  bind: string
  rpc: string
  proc: ChildProcess
}

if (!existsSync('/usr/bin/serf')) {
  console.error('serf is not installed: run ORC_SETUP_BENCH=1 scripts/setup.sh')
  process.exit(1)
}

for (const size of SIZES) {
  const dir = mkdtempSync(join(tmpdir(), 'serf-bench-'))
  const log = join(dir, 'events.log')
  const handler = join(dir, 'handler.sh')
  writeFileSync(handler, `#!/bin/sh\nread -r payload\necho "$SERF_SELF_NAME $payload $(date +%s%3N)" >> ${log}\n`)
  chmodSync(handler, 0o755)
  const agents: SerfAgent[] = []
  try {
    for (let i = 0; i < size; i++) {
      const name = `s${i}`
      const bind = `127.0.0.1:${await freePort()}`
      const rpc = `127.0.0.1:${await freePort()}`
      const args = ['agent', `-node=${name}`, `-bind=${bind}`, `-rpc-addr=${rpc}`, `-event-handler=user:bench=${handler}`, '-log-level=err']
      if (i > 0) args.push(`-retry-join=${agents[0]!.bind}`, '-retry-interval=1s')
      agents.push({ name, bind, rpc, proc: spawn('serf', args, { stdio: 'ignore' }) })
    }
    await waitFor(
      `${size} serf agents alive`,
      async () => {
        try {
          const out = execFileSync('serf', ['members', `-rpc-addr=${agents[0]!.rpc}`, '-status=alive'], { encoding: 'utf8' })
          return out.trim().split('\n').length === size
        } catch {
          return false
        }
      },
      60_000,
    )
    const pids = agents.map((a) => a.proc.pid!)
    const cpu0 = pids.map(cpuSeconds)
    const t0 = Date.now()
    await new Promise((r) => setTimeout(r, 10_000))
    const used = pids.reduce((a, p, i) => a + cpuSeconds(p) - cpu0[i]!, 0)
    console.log(`serf_idle_cpu_cores_n${size} ${(used / ((Date.now() - t0) / 1000)).toFixed(2)}`)
    const sends = await sendCallsPerSecond(pids, Number(process.env.BENCH_SENDS_S ?? 10))
    if (sends) console.log(`serf_idle_sends_per_s_per_agent_n${size} ${(sends.reduce((a, b) => a + b, 0) / sends.length).toFixed(1)}`)
    const lat: number[] = []
    for (let s = -size; s < SAMPLES; s++) {
      // The first `size` events (one from each agent) are warm-up, as in the mesh benchmark.
      const writer = agents[(s + size) % size]!
      const payload = `lat-${size}-${s}`
      const start = Date.now()
      execFileSync('serf', ['event', `-rpc-addr=${writer.rpc}`, '-coalesce=false', 'bench', payload])
      let times: number[] = []
      await waitFor(
        `${payload} on all ${size}`,
        async () => {
          const lines = existsSync(log)
            ? readFileSync(log, 'utf8')
                .split('\n')
                .filter((l) => l.split(' ')[1] === payload)
            : []
          times = lines.map((l) => Number(l.split(' ')[2]))
          return new Set(lines.map((l) => l.split(' ')[0])).size === size
        },
        30_000,
      )
      if (s >= 0) lat.push(Math.max(...times) - start)
    }
    console.log(`serf_propagation_ms_p50_n${size} ${pct(lat, 50)}`)
    console.log(`serf_propagation_ms_p99_n${size} ${pct(lat, 99)}`)
    console.log(`serf_rss_mb_avg_n${size} ${(pids.reduce((a, p) => a + rssMb(p), 0) / size).toFixed(0)}`)
  } finally {
    for (const a of agents) a.proc.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  }
}
process.exit(0)
