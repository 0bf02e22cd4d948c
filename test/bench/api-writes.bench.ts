/**
 * Durable writes per second through the local API: starts a real agent (`orc up` as a child
 * process), applies N pods over its unix socket with a few requests in flight, and prints:
 *   api_writes_per_s <n>          one pod per request (what `orc apply -f pod.yaml` does)
 *   api_writes_per_s_batch50 <n>  50 pods per request (`orc apply -f` of a multi-document file)
 * The pods are pinned to a node that does not exist, so no controller acts on them: this measures
 * the API and the store, not pod starts (test/bench/pods.bench.ts measures those).
 * Run: node --import tsx --import ./test/setup.ts test/bench/api-writes.bench.ts [N] [IN_FLIGHT]
 */
import { join } from 'node:path'
import { startAgentProcess, tempDir } from '../agent/helpers.ts'

const N = Number(process.argv[2] ?? 10_000)
const IN_FLIGHT = Number(process.argv[3] ?? 4)

const pod = (prefix: string, i: number) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name: `${prefix}-${i}`, labels: { app: 'bench', shard: String(i % 16) } },
  spec: {
    containers: [{ name: 'main', image: '/var/lib/orc/images/busybox', command: ['sh', '-c', 'sleep 3600'] }],
    placement: { node: 'bench-nowhere' },
  },
})

async function run(prefix: string, perRequest: number): Promise<number> {
  const tmp = tempDir('orc-bench-')
  const agent = await startAgentProcess(join(tmp.path, 'data'))
  try {
    let next = 0
    const t0 = performance.now()
    const worker = async () => {
      while (next < N) {
        const start = next
        next = Math.min(N, next + perRequest)
        const objects = []
        for (let i = start; i < next; i++) objects.push(pod(prefix, i))
        await agent.client.call('POST', '/v1/apply', { body: { objects, author: 'user:bench' } })
      }
    }
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker))
    const secs = (performance.now() - t0) / 1000
    const status = await agent.client.call<{ counts: { Pod: number } }>('GET', '/v1/status')
    if (status.counts.Pod !== N) throw new Error(`expected ${N} pods, agent has ${status.counts.Pod}`)
    return N / secs
  } finally {
    await agent.stop()
    tmp.remove()
  }
}

console.log(`api_writes_per_s ${Math.round(await run('p', 1))}`)
console.log(`api_writes_per_s_batch50 ${Math.round(await run('b', 50))}`)
