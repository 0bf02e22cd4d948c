/**
 * Testbed benchmark (root, wireguard-go): real agents in network namespaces. Prints one figure per line:
 *   mesh_nodes                          N
 *   full_mesh_after_last_join_ms        last `orc join` up → every node Ready with N-1 tunnels up
 *   full_mesh_from_first_up_ms          first `orc up` → the same
 *   pod_apply_to_first_connect_ms       `orc apply` of a server pod on A → first TCP connect from B (median of runs)
 *   pod_running_to_first_connect_ms     its container started (status) → first TCP connect from B (median)
 * Usage: node --import tsx --import ./test/setup.ts test/bench/testbed.bench.ts [N=10] [runs=3]
 */
import '../../src/polyfill.ts'
import { execa } from 'execa'
import { Testbed, testbedUnavailable } from '../../netsim/testbed/testbed.ts'
import { busyboxMissing } from '../fixtures/busybox-image.ts'
import { applyPod, podManifest, waitMesh, waitPodRunning } from '../testbed/helpers.ts'

const n = Number(process.argv[2] ?? 10)
const runs = Number(process.argv[3] ?? 3)
const missing = testbedUnavailable() ?? busyboxMissing()
if (missing) {
  console.error(`skipped: ${missing}`)
  process.exit(0)
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const names = Array.from({ length: n }, (_, i) => `n${i + 1}`)
const tb = await Testbed.create({ hosts: names.map((name) => ({ name })) })
try {
  const t0 = Date.now()
  await tb.up(names[0]!)
  for (const name of names.slice(1)) await tb.join(name, names[0]!)
  const tJoined = Date.now()
  await waitMesh(tb, names[0]!, names, 600_000)
  const tMesh = Date.now()
  console.log(`mesh_nodes ${n}`)
  console.log(`full_mesh_after_last_join_ms ${tMesh - tJoined}`)
  console.log(`full_mesh_from_first_up_ms ${tMesh - t0}`)

  const [a, b] = [names[0]!, names[1]!]
  const fromApply: number[] = []
  const fromRunning: number[] = []
  for (let i = 0; i < runs; i++) {
    const pod = `srv${i}`
    const tApply = Date.now()
    await applyPod(tb, a, podManifest(pod, a, `exec nc -ll -p 8080 -e echo up`))
    const { ipv6 } = await waitPodRunning(tb, a, pod, 120_000)
    for (;;) {
      // From B's host namespace: the route goes through B's tunnel to A.
      const r = await execa('ip', ['netns', 'exec', tb.host(b).ns, 'busybox', 'nc', '-w', '1', ipv6, '8080'], { reject: false, input: '', timeout: 5000 })
      if (r.exitCode === 0 && String(r.stdout).includes('up')) break
      if (Date.now() - tApply > 120_000) throw new Error(`no connection to ${pod} after 120 s`)
    }
    const tConnect = Date.now()
    const st = (await tb.orcJson(a, ['get', 'pod', pod])).status
    fromApply.push(tConnect - tApply)
    fromRunning.push(tConnect - Date.parse(st.containers[0].startedAt))
    await tb.orc(a, ['delete', `pod/${pod}`])
  }
  console.log(`pod_apply_to_first_connect_ms ${median(fromApply)}`)
  console.log(`pod_running_to_first_connect_ms ${median(fromRunning)}`)
} finally {
  await tb.destroy()
}
