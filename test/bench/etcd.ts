/**
 * etcd (Debian's etcd-server), the peer system the write benchmarks are measured against in the same
 * run: started on loopback in a temporary directory, written through its v3 JSON gateway with a
 * keep-alive client, the given concurrency and a value of the caller's size.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { cpuSeconds } from './proc.ts'

export interface EtcdRun {
  /** `etcd v3.4.23` */
  version: string
  /** Durable puts per second, for each in-flight count asked for. */
  rates: Map<number, number>
  /** The etcd process's CPU (every thread) per put, in ms, for each in-flight count. */
  cpuMsPerPut: Map<number, number>
}

/** undefined (and a `skipped` line) when etcd is not installed. */
export async function etcdWrites(
  inflights: number[],
  value: string,
  n = 10_000,
  countFor = (inflight: number) => (inflight === 1 ? Math.min(n, 2000) : n),
): Promise<EtcdRun | undefined> {
  if (spawnSync('sh', ['-c', 'command -v etcd']).status !== 0) {
    console.log('etcd: skipped: etcd-server is not installed (ORC_SETUP_BENCH=1 ./scripts/setup.sh installs it)')
    return undefined
  }
  const d = mkdtempSync(join(tmpdir(), 'orc-bench-etcd-'))
  const port = 23790 + Math.floor(Math.random() * 100)
  const peer = `http://127.0.0.1:${port + 1000}`
  const etcd = spawn(
    'etcd',
    [
      ...['--data-dir', d, '--listen-client-urls', `http://127.0.0.1:${port}`, '--advertise-client-urls', `http://127.0.0.1:${port}`],
      ...['--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer, '--initial-cluster', `default=${peer}`],
    ],
    { stdio: 'ignore' },
  )
  const b64 = Buffer.from(value).toString('base64')
  const req = (agent: Agent, path: string, body: string) =>
    new Promise<number>((resolve, reject) => {
      const r = request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode ?? 0))
      })
      r.on('error', reject)
      r.end(body)
    })
  try {
    const probe = new Agent({ keepAlive: true })
    for (let i = 0; ; i++) {
      const ok = await req(probe, '/v3/kv/put', JSON.stringify({ key: 'cHJvYmU=', value: 'eA==' })).catch(() => 0)
      if (ok === 200) break
      if (i > 100) throw new Error('etcd did not start')
      await new Promise((r) => setTimeout(r, 100))
    }
    probe.destroy()
    const rates = new Map<number, number>()
    const cpuMsPerPut = new Map<number, number>()
    for (const inflight of inflights) {
      const cpu0 = cpuSeconds(etcd.pid)
      const agent = new Agent({ keepAlive: true, maxSockets: inflight })
      const count = countFor(inflight)
      let next = 0
      const t0 = performance.now()
      await Promise.all(
        Array.from({ length: inflight }, async () => {
          while (next < count) {
            const i = next++
            const key = Buffer.from(`/pods/default/p${i}-${inflight}`).toString('base64')
            const st = await req(agent, '/v3/kv/put', JSON.stringify({ key, value: b64 }))
            if (st !== 200) throw new Error(`etcd put: HTTP ${st}`)
          }
        }),
      )
      rates.set(inflight, Math.round(count / ((performance.now() - t0) / 1000)))
      cpuMsPerPut.set(inflight, ((cpuSeconds(etcd.pid) - cpu0) * 1000) / count)
      agent.destroy()
    }
    const version = execFileSync('etcd', ['--version'], { encoding: 'utf8' }).split('\n')[0]!.replace('etcd Version: ', 'etcd v')
    return { version, rates, cpuMsPerPut }
  } finally {
    etcd.kill('SIGTERM')
    await new Promise((r) => etcd.once('exit', r))
    rmSync(d, { recursive: true, force: true })
  }
}
