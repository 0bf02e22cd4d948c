/**
 * Durable writes per second through the local API, side by side with etcd in the same run (issue
 * #23): a real agent (`orc up` as a child process) takes one pod per request over its unix socket
 * from a keep-alive client — as an integration would — with 1 and 16 requests in flight; etcd
 * (Debian's etcd-server, test/bench/etcd.ts) takes puts of the same manifest, same concurrency,
 * through its v3 JSON gateway. Also printed: 50 pods per request (`orc apply -f` of a multi-document
 * file) and one pod per request without keep-alive (what each `orc apply` process does), and the
 * agent process's CPU per write (all its threads) at 1 and 16 in flight.
 * The pods are pinned to a node that does not exist, so no controller acts on them: this measures
 * the API and the store, not pod starts (test/bench/pods.bench.ts measures those).
 * Run: node --import tsx --import ./test/setup.ts test/bench/api-writes.bench.ts [N]
 * BENCH_PROF_DIR=DIR CPU-profiles the agent of each run there (proc.ts profileEnv; from 2 s after
 * its start, so start-up is left out), one `<pid>.cpuprofile` per run in the order of the figures below;
 * `node test/bench/profile-summary.mjs FILE` sums one.
 */
import { Agent } from 'node:http'
import { join } from 'node:path'
import { ApiClient } from '../../src/cli/client.ts'
import { startAgentProcess, tempDir } from '../agent/helpers.ts'
import { etcdWrites } from './etcd.ts'
import { cpuSeconds, profileEnv } from './proc.ts'

const N = Number(process.argv[2] ?? 5_000)

const pod = (prefix: string, i: number) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name: `${prefix}-${i}`, labels: { app: 'bench', shard: String(i % 16) } },
  spec: {
    containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', 'sleep 3600'] }],
    placement: { node: 'bench-nowhere' },
  },
})

/**
 * Pods per second through one agent's API, `perRequest` pods a request, `inflight` requests at once,
 * and the agent process's CPU (every thread: JS, GC helpers, LevelDB, libuv's pool) per pod.
 */
async function run(prefix: string, perRequest: number, inflight: number, count: number, keepAlive: boolean): Promise<{ rate: number; cpuMs: number }> {
  const tmp = tempDir('orc-bench-')
  const agent = await startAgentProcess(join(tmp.path, 'data'), [], profileEnv(2000))
  const http = keepAlive ? new Agent({ keepAlive: true, maxSockets: inflight }) : undefined
  const client = new ApiClient(agent.socket, http ? { agent: http } : {})
  try {
    let next = 0
    const cpu0 = cpuSeconds(agent.proc.pid)
    const t0 = performance.now()
    const worker = async () => {
      while (next < count) {
        const start = next
        next = Math.min(count, next + perRequest)
        const objects = []
        for (let i = start; i < next; i++) objects.push(pod(prefix, i))
        await client.call('POST', '/v1/apply', { body: { objects } })
      }
    }
    await Promise.all(Array.from({ length: inflight }, worker))
    const secs = (performance.now() - t0) / 1000
    const cpuMs = ((cpuSeconds(agent.proc.pid) - cpu0) * 1000) / count
    const status = await client.call<{ counts: { Pod: number } }>('GET', '/v1/status')
    if (status.counts.Pod !== count) throw new Error(`expected ${count} pods, agent has ${status.counts.Pod}`)
    return { rate: count / secs, cpuMs }
  } finally {
    http?.destroy()
    await agent.stop()
    tmp.remove()
  }
}

const one = Math.min(N, 2000)
const a = await run('a', 1, 1, one, true)
const c = await run('c', 1, 16, N, true)
const orc1 = Math.round(a.rate)
const orc16 = Math.round(c.rate)
const etcd = await etcdWrites([1, 16], JSON.stringify(pod('p', 0)), N)
console.log(`api_writes_per_s_1_in_flight ${orc1}`)
console.log(`api_writes_per_s_16_in_flight ${orc16}`)
console.log(`api_agent_cpu_ms_per_write_1_in_flight ${a.cpuMs.toFixed(2)}`)
console.log(`api_agent_cpu_ms_per_write_16_in_flight ${c.cpuMs.toFixed(2)}`)
if (etcd) {
  console.log(`${etcd.version}_puts_per_s_1_in_flight ${etcd.rates.get(1)}`)
  console.log(`${etcd.version}_puts_per_s_16_in_flight ${etcd.rates.get(16)}`)
  console.log(`${etcd.version}_cpu_ms_per_put_1_in_flight ${etcd.cpuMsPerPut.get(1)!.toFixed(2)}`)
  console.log(`${etcd.version}_cpu_ms_per_put_16_in_flight ${etcd.cpuMsPerPut.get(16)!.toFixed(2)}`)
  console.log(`orc/etcd_1_in_flight ${(orc1 / etcd.rates.get(1)!).toFixed(2)}`)
  console.log(`orc/etcd_16_in_flight ${(orc16 / etcd.rates.get(16)!).toFixed(2)}`)
}
console.log(`api_writes_per_s_batch50_16_in_flight ${Math.round((await run('b', 50, 16, N, true)).rate)}`)
console.log(`api_writes_per_s_no_keepalive_16_in_flight ${Math.round((await run('d', 1, 16, N, false)).rate)}`)
