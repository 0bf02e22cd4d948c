/**
 * Mesh benchmark with real agents (separate processes, real libp2p on 127.0.0.1, real LevelDB).
 * Prints one figure per line:
 *   propagation_ms_p50_n<N> / propagation_ms_p99_n<N>   apply on one node (API call started) →
 *       the object is readable from the store of every one of N agents (merged in memory; each
 *       agent's own log time; one clock)
 *   propagation_durable_ms_p50_n<N> / …_p99_n<N>        …→ every agent's own synced write of it done
 *   idle_cpu_cores_n<N>                                CPU (in cores) all N agents use together with no writes
 *   idle_sends_per_s_per_agent_n<N>                    messages (send calls) one idle agent sends a second, mean of N (strace)
 *   rss_mb_avg_n<N>                                    mean RSS of the N agents after the run
 *   gossip_payload_bytes_one_field_change              store update published for a one-field change
 *   gossip_wire_bytes_one_field_change                 that as a signed gossipsub RPC + yamux/noise framing
 *   idle_rss_mb_1k_objects                              one agent holding 1k objects, idle
 *   join_10k_ready_ms                                   `orc join` "connecting" → "ready" with 10k objects
 *   join_10k_command_ms                                 `orc join` process start → "ready" (includes tsx start-up)
 *   agent_code                                          bundle (dist/orc.mjs) or tsx (sources): what the agents ran
 * Run: node --import tsx --import ./test/setup.ts test/bench/mesh.bench.ts [SIZES=5,10,20] [SAMPLES=60]
 * BENCH_PROF_DIR=DIR writes a CPU profile of agent BENCH_PROF_NODE (default n5; `joiner` / `issuer`: the two sides of the 10k join) there (cpu-profile.mjs).
 * Run `node scripts/build.mjs` first: bin/orc.mjs runs the bundle only when it is newer than src/.
 */
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { RPC } from '@libp2p/gossipsub/message'
import { storeTopic } from '../../src/mesh/index.ts'
import { openStore } from '../../src/store/index.ts'
import { type NodeProcess, newNode, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { cpuSeconds, pct, profileEnv, rssMb, sendCallsPerSecond } from './proc.ts'

const SIZES = (process.argv[2] ?? '5,10,20').split(',').map(Number)
const SAMPLES = Number(process.argv[3] ?? 60)
// Production timers; only the per-IP inbound rate limit is lifted (every agent dials from 127.0.0.1).
const ENV = {
  ORC_MESH_TUNABLES: JSON.stringify({
    inboundPerIpPerSecond: 100_000,
    maxProbationPerSource: 64,
    probationStartsPerSourcePerMinute: 100_000,
    ...JSON.parse(process.env.BENCH_TUNABLES ?? '{}'),
  }),
}

const pod = (name: string, i = 0) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name, labels: { app: 'bench', shard: String(i % 16) } },
  spec: { nodeSelector: { 'orc-test': 'nowhere' }, containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', 'sleep 3600'] }] },
})

/** What bin/orc.mjs runs right now: the bundle when it is newer than every source file. */
function agentCode(): 'bundle' | 'tsx' {
  const root = new URL('../..', import.meta.url).pathname
  const bundle = join(root, 'dist', 'orc.mjs')
  const newest = (dir: string): number =>
    Math.max(0, ...readdirSync(dir, { withFileTypes: true }).map((e) => (e.isDirectory() ? newest(join(dir, e.name)) : statSync(join(dir, e.name)).mtimeMs)))
  return existsSync(bundle) && statSync(bundle).mtimeMs > newest(join(root, 'src')) ? 'bundle' : 'tsx'
}

let profiled: NodeProcess | undefined

/**
 * Per node: key → time (ms) the object became readable in that node's store (a remote update merged
 * in memory, or the node's own write committed).
 */
const seen = new Map<NodeProcess, Map<string, number>>()
/** Per node: key → time (ms) that node's synced write of it completed. */
const durable = new Map<NodeProcess, Map<string, number>>()
function traced(n: NodeProcess): NodeProcess {
  const m = new Map<string, number>()
  const d = new Map<string, number>()
  seen.set(n, m)
  durable.set(n, d)
  n.env = ENV
  if (process.env.BENCH_PROF_DIR && n.name === (process.env.BENCH_PROF_NODE ?? 'n5')) {
    n.env = { ...ENV, ...profileEnv() }
    profiled = n
  }
  const logDir = process.env.BENCH_LOG_DIR // keep every agent's log (diagnosis)
  if (logDir) mkdirSync(logDir, { recursive: true })
  n.onStderrLine = (line) => {
    if (logDir) appendFileSync(join(logDir, `${n.name}.log`), line + '\n')
    const changed = line.includes('"objects changed"')
    if (!changed && !line.includes('"objects merged"')) return
    try {
      const e = JSON.parse(line) as { time: number; keys: string[] }
      for (const k of e.keys) {
        if (!m.has(k)) m.set(k, e.time)
        if (changed && !d.has(k)) d.set(k, e.time)
      }
    } catch {
      // not a log line
    }
  }
  return n
}

async function allAlive(nodes: NodeProcess[]): Promise<void> {
  await waitFor(
    `all ${nodes.length} agents to see each other alive`,
    async () => {
      for (const n of nodes) {
        const r = await n.client.call<{ members: Array<{ state: string; self: boolean }> }>('GET', '/v1/members')
        if (r.members.filter((m) => m.state === 'alive').length < nodes.length) return false
      }
      return true
    },
    120_000,
  )
}

async function propagation(): Promise<void> {
  const ws = new Workspace()
  try {
    const nodes: NodeProcess[] = []
    const first = traced(await newNode(ws, 'n0'))
    await first.up(['--log-level', 'trace']).ready()
    nodes.push(first)
    for (const size of SIZES) {
      const want = size - nodes.length
      if (want > 0) {
        const token = await tokenFrom(first, ['--uses', String(want), '--ttl', '10m'])
        for (let i = 0; i < want; i += 3) {
          const batch: NodeProcess[] = []
          for (let j = i; j < Math.min(want, i + 3); j++) {
            const n = traced(await newNode(ws, `n${nodes.length + batch.length}`))
            n.join(first.addr, token, ['--log-level', 'trace'])
            batch.push(n)
          }
          const t0 = Date.now()
          await Promise.all(
            batch.map((n) =>
              n.ready().catch((err) => {
                console.error(`${n.name} stdout:\n${n.stdout}`)
                throw err
              }),
            ),
          )
          if (process.env.BENCH_VERBOSE) console.error(`joined ${batch.map((n) => n.name).join(',')} in ${Date.now() - t0} ms`)
          nodes.push(...batch)
        }
      }
      await allAlive(nodes)
      // Idle CPU of the whole cluster: what every agent burns with no writes (heartbeats, pings,
      // gossipsub's own heartbeat). All N share this machine's cores, so this is the floor under
      // every latency figure below.
      const cpu0 = nodes.map((n) => cpuSeconds(n.proc?.pid))
      const idle0 = Date.now()
      await new Promise((r) => setTimeout(r, Number(process.env.BENCH_IDLE_S ?? 10) * 1000))
      const used = nodes.reduce((a, n, i) => a + cpuSeconds(n.proc?.pid) - cpu0[i]!, 0)
      if (process.env.BENCH_VERBOSE)
        console.error('idle cpu s per agent:', nodes.map((n, i) => `${n.name}=${(cpuSeconds(n.proc?.pid) - cpu0[i]!).toFixed(2)}`).join(' '))
      console.log(`idle_cpu_cores_n${size} ${(used / ((Date.now() - idle0) / 1000)).toFixed(2)}`)
      // Messages each idle agent sends a second (its send calls; Serf's in serf.bench.ts), counted
      // after the CPU window: strace slows what it traces.
      const sends = await sendCallsPerSecond(
        nodes.map((n) => n.proc!.pid!),
        Number(process.env.BENCH_SENDS_S ?? 10),
      )
      if (sends) console.log(`idle_sends_per_s_per_agent_n${size} ${(sends.reduce((a, b) => a + b, 0) / sends.length).toFixed(1)}`)
      // Warm-up: one write from every node (a joiner's first publish may still find its gossip
      // mesh forming; that is join cost, reported by the join figures, not steady-state latency).
      for (const [i, w] of nodes.entries()) {
        const key = `Pod/default/warm-${size}-${i}`
        await w.client.call('POST', '/v1/apply', { body: { objects: [pod(`warm-${size}-${i}`)] } })
        await waitFor(`${key} on all ${size}`, async () => nodes.every((n) => seen.get(n)!.has(key)), 30_000)
      }
      const lat: number[] = []
      const latDurable: number[] = []
      for (let s = 0; s < SAMPLES; s++) {
        const writer = nodes[s % nodes.length]!
        const name = `lat-${size}-${s}`
        const key = `Pod/default/${name}`
        const t0 = Date.now()
        await writer.client.call('POST', '/v1/apply', { body: { objects: [pod(name)] } })
        await waitFor(`${key} durable on all ${size}`, async () => nodes.every((n) => durable.get(n)!.has(key)), 30_000)
        lat.push(Math.max(...nodes.map((n) => seen.get(n)!.get(key)!)) - t0)
        latDurable.push(Math.max(...nodes.map((n) => durable.get(n)!.get(key)!)) - t0)
        if (process.env.BENCH_VERBOSE) {
          const last = nodes.reduce((a, n) => (seen.get(n)!.get(key)! > seen.get(a)!.get(key)! ? n : a))
          console.error(`sample ${key} writer=${writer.name} t0=${t0} ${lat.at(-1)} ms, last=${last.name}`)
        }
      }
      if (process.env.BENCH_VERBOSE) console.error(size, lat.join(' '))
      console.log(`propagation_ms_p50_n${size} ${pct(lat, 50)}`)
      console.log(`propagation_ms_p99_n${size} ${pct(lat, 99)}`)
      console.log(`propagation_durable_ms_p50_n${size} ${pct(latDurable, 50)}`)
      console.log(`propagation_durable_ms_p99_n${size} ${pct(latDurable, 99)}`)
      console.log(`rss_mb_avg_n${size} ${(nodes.reduce((a, n) => a + rssMb(n.proc?.pid), 0) / nodes.length).toFixed(0)}`)
    }
  } finally {
    // A clean exit writes the CPU profile (SIGKILL, as ws.close() sends, would not).
    await profiled?.kill('SIGTERM')
    await ws.close()
  }
}

async function gossipBytes(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'orc-bench-store-'))
  const store = await openStore({ dir })
  try {
    await store.apply(pod('one-field') as any, { author: 'user:bench', now: Date.now() })
    const sizes: number[] = []
    const off = store.onLocalUpdate((u) => sizes.push(u.length))
    const changed = pod('one-field')
    changed.spec.containers[0]!.image = 'busybox-2'
    await store.apply(changed as any, { author: 'user:bench', now: Date.now() })
    off()
    const payload = sizes.reduce((a, b) => a + b, 0)
    console.log(`gossip_payload_bytes_one_field_change ${payload}`)
    // The same payload as gossipsub sends it: a signed message (from, seqno, topic, signature) in an
    // RPC, length-prefixed, in one yamux frame (12 B header) inside one noise frame (2 B length + 16 B tag).
    const rpc = RPC.encode({
      subscriptions: [],
      messages: [
        {
          from: new Uint8Array(38),
          data: new Uint8Array(payload),
          seqno: new Uint8Array(8),
          topic: storeTopic('0'.repeat(32), 'cluster'),
          signature: new Uint8Array(64),
        },
      ],
    })
    const varint = rpc.length < 128 ? 1 : rpc.length < 16384 ? 2 : 3
    console.log(`gossip_wire_bytes_one_field_change ${rpc.length + varint + 12 + 18}`)
  } finally {
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

async function applyMany(n: NodeProcess, prefix: string, count: number): Promise<void> {
  for (let i = 0; i < count; i += 500) {
    const objects = Array.from({ length: Math.min(500, count - i) }, (_, j) => pod(`${prefix}-${i + j}`, i + j))
    await n.client.call('POST', '/v1/apply', { body: { objects } })
  }
}

async function joinAndRss(): Promise<void> {
  const ws = new Workspace()
  try {
    const s0 = await newNode(ws, 's0')
    s0.env = process.env.BENCH_PROF_DIR && process.env.BENCH_PROF_NODE === 'issuer' ? { ...ENV, ...profileEnv() } : ENV
    await s0.up().ready()
    await applyMany(s0, 'idle', 1000)
    // Idle: 20 s without writes, so the agent's heap keeper (src/agent/heap.ts, every 15 s) has run.
    await new Promise((r) => setTimeout(r, 20_000))
    console.log(`idle_rss_mb_1k_objects ${rssMb(s0.proc?.pid).toFixed(0)}`)
    await applyMany(s0, 'bulk', 9000)
    const token = await tokenFrom(s0)
    const j = await newNode(ws, 'j')
    // BENCH_VERBOSE: the joiner logs its join phases (debug), printed below.
    j.env = process.env.BENCH_VERBOSE ? { ...ENV, ORC_LOG_LEVEL: 'debug' } : ENV
    if (process.env.BENCH_PROF_DIR && process.env.BENCH_PROF_NODE === 'joiner') j.env = { ...j.env, ...profileEnv() }
    const t0 = Date.now()
    let connecting = 0
    let ready = 0
    j.join(s0.addr, token)
    await waitFor(
      'the joiner to print ready',
      async () => {
        if (connecting === 0 && j.stdout.includes('connecting to')) connecting = Date.now()
        if (j.stdout.includes('\nready: ') || j.stdout.startsWith('ready: ')) ready = Date.now()
        if (j.exited) throw new Error(j.stderr)
        return ready > 0
      },
      120_000,
    )
    await j.ready()
    const count = (await j.client.call<{ objects: number }>('GET', '/v1/status')).objects
    if (count < 10_000) throw new Error(`joiner has ${count} objects`)
    if (process.env.BENCH_VERBOSE) for (const l of j.stderr.split('\n')) if (/join progress|sync done|heap compacted/.test(l)) console.error(l.slice(0, 300))
    if (process.env.BENCH_LOG_DIR) appendFileSync(join(process.env.BENCH_LOG_DIR, 'joiner.log'), j.stderr)
    console.log(`join_10k_ready_ms ${ready - connecting}`)
    console.log(`join_10k_command_ms ${ready - t0}`)
    // A clean exit writes the profile.
    if (process.env.BENCH_PROF_NODE === 'joiner') await j.kill('SIGTERM')
    if (process.env.BENCH_PROF_NODE === 'issuer') await s0.kill('SIGTERM')
  } finally {
    await ws.close()
  }
}

console.log(`agent_code ${agentCode()}`)
const only = process.env.BENCH_ONLY
if (!only || only === 'gossip') await gossipBytes()
if (!only || only === 'join') await joinAndRss()
if (!only || only === 'propagation') await propagation()
console.log(`agent_code_at_end ${agentCode()}`)
process.exit(0)
