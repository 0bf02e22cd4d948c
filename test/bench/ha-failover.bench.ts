// Node loss → every ha pod running elsewhere, in the simulator (virtual time, real store, membership
// and scheduler code): N nodes (default 50), 10 % crash at once, per seed the worst and median time
// from the crash until each ha pod of a lost node runs on a live node (its new node's own store
// binds it there). Each node runs the agent's binder, so haAfter counts from when a node last heard
// the lost one (`MemberView.lastSeen`), not from when it started suspecting it.
// Usage: node --expose-gc --import tsx --import ./test/setup.ts test/bench/ha-failover.bench.ts [nodes] [seeds] [haAfterSeconds]
// Prints one figure per line.

import { LocalScheduler } from '../../netsim/scheduler.ts'
import { type SimNode, Simulator } from '../../netsim/sim.ts'

const nodes = Number(process.argv[2] ?? 50)
const seeds = Number(process.argv[3] ?? 5)
const haAfterSeconds = Number(process.argv[4] ?? 30)

async function runSeed(seed: number): Promise<{ took: number[]; haPods: number; doubles: number }> {
  const sim = new Simulator({ seed, nodes })
  await sim.start()
  const sched = new LocalScheduler(sim, { haAfterSeconds })
  await sched.createPods(sim.nodes[0]!, Math.min(100, nodes * 2), (i) => (i % 2 === 0 ? 'ha' : 'best-effort'))
  await sim.runFor(20_000)
  const lost: SimNode[] = []
  const picked = new Set<number>()
  // Deterministic per seed: every 10th node from an offset.
  for (let i = seed % 10; lost.length < Math.max(1, Math.round(nodes / 10)); i = (i + 10) % nodes) {
    if (picked.has(i) || i === 0) {
      i++
      continue
    }
    picked.add(i)
    lost.push(sim.nodes[i]!)
  }
  for (const n of lost) sched.noteLost(n)
  for (const n of lost) sim.crash(n)
  await sim.runFor(haAfterSeconds * 1000 + 20_000)
  sched.checkDoubles = true
  await sim.runFor(2000)
  const took = sched.failovers.map((f) => (f.runningAgainAt === undefined ? Infinity : f.runningAgainAt - f.lostAt))
  return { took, haPods: sched.failovers.length, doubles: sim.violations.length }
}

const all: number[] = []
let worstSeed = 0
let worst = 0
let haPods = 0
let violations = 0
for (let s = 1; s <= seeds; s++) {
  const r = await runSeed(s)
  all.push(...r.took)
  haPods += r.haPods
  violations += r.doubles
  const w = Math.max(0, ...r.took)
  if (w > worst) {
    worst = w
    worstSeed = s
  }
}
all.sort((a, b) => a - b)
const fmt = (ms: number) => (Number.isFinite(ms) ? (ms / 1000).toFixed(1) : 'never')
console.log(`nodes: ${nodes}, seeds: ${seeds}, haAfter: ${haAfterSeconds} s, ha pods on lost nodes: ${haPods}`)
console.log(`node loss -> ha pod running elsewhere, median: ${fmt(all[Math.floor(all.length / 2)] ?? 0)} s`)
console.log(`node loss -> every ha pod running elsewhere (worst over seeds): ${fmt(worst)} s (seed ${worstSeed}); target <= ${haAfterSeconds + 2} s`)
console.log(`pods running twice after views converged: ${violations}`)
