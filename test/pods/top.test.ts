// `orc top pods|nodes` and the per-pod metrics against a real agent: a pod with a spinning container
// and one holding memory; the figures are checked against the containers' own cgroup files.

import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { test } from 'node:test'
import { pidsRunning, skipReason, startTestAgent, waitFor } from './helpers.ts'

const skip = skipReason()
const MARK = String(300_000 + (process.pid % 50_000))

/** The host directory of `pid`'s cgroup in the v1 hierarchy (or v2 tree) that holds `file`. */
function cgroupFile(pid: number, controller: 'memory' | 'cpuacct', file: string): string | undefined {
  for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
    const [, ctl = '', path = ''] = line.split(':')
    const ctls = ctl.split(',')
    const candidates =
      ctl === '' ? [`/sys/fs/cgroup${path}`, `/sys/fs/cgroup/unified${path}`] : ctls.includes(controller) ? [`/sys/fs/cgroup/${ctl}${path}`] : []
    for (const dir of candidates) {
      try {
        readFileSync(`${dir}/${file}`)
        return `${dir}/${file}`
      } catch {}
    }
  }
  return undefined
}

/** The value of `name` for container `container` of pod/top in the default namespace, from exposition text. */
function metricValue(text: string, name: string, container: string): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue
    if (line.includes('pod="top"') && line.includes('namespace="default"') && line.includes(`container="${container}"`)) return Number(line.split(' ').pop())
  }
  return undefined
}

function workingSet(pid: number): number {
  const v1 = cgroupFile(pid, 'memory', 'memory.usage_in_bytes')
  const used = Number(readFileSync(v1 ?? cgroupFile(pid, 'memory', 'memory.current')!, 'utf8'))
  const stat = readFileSync(cgroupFile(pid, 'memory', 'memory.stat')!, 'utf8')
  const inactive = Number(new RegExp(`^${v1 ? 'total_inactive_file' : 'inactive_file'} (\\d+)`, 'm').exec(stat)?.[1] ?? 0)
  return used - inactive
}

function cpuSeconds(pid: number): number {
  const v1 = cgroupFile(pid, 'cpuacct', 'cpuacct.usage')
  if (v1) return Number(readFileSync(v1, 'utf8')) / 1e9
  const stat = readFileSync(cgroupFile(pid, 'cpuacct', 'cpu.stat')!, 'utf8')
  return Number(/^usage_usec (\d+)/m.exec(stat)?.[1]) / 1e6
}

test('orc top pods and nodes: figures from the pods cgroups and /proc, also as per-pod metrics', { skip }, async (t) => {
  const a = await startTestAgent('n1')
  t.after(async () => {
    await a.stop()
    for (const m of [`${MARK}1`, `${MARK}2`]) for (const pid of pidsRunning(['sleep', m])) process.kill(pid, 'SIGKILL')
    a.remove()
  })
  const pod = {
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'top' },
    spec: {
      terminationGracePeriodSeconds: 1,
      containers: [
        // spins in the background beside a marked sleep (the sleep is how the test finds its cgroup)
        { name: 'busy', image: a.image, command: ['/bin/sh', '-c', `(while :; do :; done) & exec sleep ${MARK}1`] },
        // holds about 24 MB in the shell's memory
        { name: 'mem', image: a.image, command: ['/bin/sh', '-c', `x=$(head -c 24000000 /dev/zero | tr '\\0' a); echo held; sleep ${MARK}2; echo \${#x}`] },
      ],
    },
  }
  const ap = await a.orc(['apply', '-f', '-'], JSON.stringify(pod))
  assert.equal(ap.exitCode, 0, ap.stderr)
  await waitFor('pod/top running', async () => (await a.pod('top'))?.status?.phase === 'Running', 60_000)
  const busyPid = await waitFor('the busy container', async () => pidsRunning(['sleep', `${MARK}1`])[0], 30_000)
  const memPid = await waitFor('the mem container', async () => pidsRunning(['sleep', `${MARK}2`])[0], 60_000)

  const cpuBefore = cpuSeconds(busyPid)
  const r = await a.orc(['top', 'pods', '-o', 'json'])
  const cpuAfter = cpuSeconds(busyPid)
  assert.equal(r.exitCode, 0, r.stderr)
  const rows = JSON.parse(r.stdout) as any[]
  const row = rows.find((p) => p.name === 'top')
  assert.ok(row, r.stdout)
  assert.equal(row.node, 'n1')
  const busy = row.containers.find((c: any) => c.name === 'busy')
  const mem = row.containers.find((c: any) => c.name === 'mem')
  assert.ok(busy.cpuSeconds >= cpuBefore && busy.cpuSeconds <= cpuAfter, `busy cpu ${busy.cpuSeconds} s is between the cgroup's ${cpuBefore} and ${cpuAfter}`)
  assert.ok(busy.cpuMillis > 100, `a spinning container uses CPU: ${busy.cpuMillis}m`)
  const ws = workingSet(memPid)
  assert.ok(mem.memoryBytes > 20_000_000, `mem holds its 24 MB: ${mem.memoryBytes}`)
  assert.ok(Math.abs(mem.memoryBytes - ws) < ws * 0.1, `mem working set ${mem.memoryBytes} matches the cgroup's ${ws}`)
  assert.equal(row.memoryBytes, busy.memoryBytes + mem.memoryBytes, 'the pod is the sum of its containers')

  const table = await a.orc(['top', 'pods'])
  assert.equal(table.exitCode, 0, table.stderr)
  assert.match(table.stdout, /^NAME\s+CPU\s+MEMORY\s+NODE/m)
  assert.match(table.stdout, /^top\s+\d+m\s+\d+Mi\s+n1/m)

  const nodes = await a.orc(['top', 'nodes', '-o', 'json'])
  assert.equal(nodes.exitCode, 0, nodes.stderr)
  const n1 = (JSON.parse(nodes.stdout) as any[]).find((n) => n.node === 'n1')
  const memTotal = Number(/^MemTotal:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))![1]) * 1024
  assert.equal(n1.memoryTotalBytes, memTotal)
  assert.ok(n1.memoryBytes > 0 && n1.memoryBytes < memTotal)
  assert.ok(n1.cpuMillis > 0 && n1.cpuMillis <= n1.cpuCores * 1000, `node cpu ${n1.cpuMillis}m of ${n1.cpuCores} cores`)
  assert.equal(n1.pods, 1)

  // The metrics: the first scrape starts a reading, a later one shows it.
  const sample = await waitFor(
    'per-pod metrics',
    async () => {
      const m = await a.orc(['metrics'])
      return metricValue(m.stdout, 'orc_pod_memory_working_set_bytes', 'mem')
    },
    30_000,
  )
  const metricBytes = sample
  assert.ok(Math.abs(metricBytes - workingSet(memPid)) < metricBytes * 0.1, `metric ${metricBytes} matches the cgroup`)
  const m = await a.orc(['metrics'])
  assert.ok((metricValue(m.stdout, 'orc_pod_cpu_usage_seconds', 'busy') ?? 0) > 0, m.stdout)
})
