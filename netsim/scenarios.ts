/**
 * Scenarios: each builds a simulator, drives faults and writes on virtual time, checks the
 * invariants, and returns its figures as a markdown table and an SVG plot.
 */

import { clusterOfMemberName, type FederatedScope, routedStore } from '../src/agent/federation/index.ts'
import type { ObjectStore } from '../src/store/index.ts'
import { checkAll, storesAgree } from './invariants.ts'
import { mdTable, svgPlot } from './report.ts'
import { type HaEpisode, LocalScheduler, type SchedNaming } from './scheduler.ts'
import { type SimNode, type SimOptions, Simulator, type Violation } from './sim.ts'

export interface ScenarioOptions {
  nodes: number
  seed: number
  /** Extra simulator options (tests shrink periods or turn membership off). */
  sim?: Partial<SimOptions>
  log?: (line: string) => void
}

export interface ScenarioResult {
  scenario: string
  seed: number
  nodes: number
  violations: Violation[]
  /** Key figures (also printed one per line by the CLI). */
  figures: Record<string, number | string>
  markdown: string
  svg?: string
  simMs: number
  wallMs: number
  heapPerNodeKB: number
}

export interface Scenario {
  name: string
  description: string
  defaultNodes: number
  run(o: ScenarioOptions): Promise<ScenarioResult>
}

/** log2 N + ln N: rounds for push gossip (one random target per informed node per round) to reach all N. */
export function pushGossipBound(n: number): number {
  return Math.log2(n) + Math.log(n)
}

function heapNow(): number {
  ;(globalThis as { gc?: () => void }).gc?.()
  return process.memoryUsage().heapUsed
}

async function setup(o: ScenarioOptions, extra: Partial<SimOptions> = {}): Promise<{ sim: Simulator; heapPerNodeKB: number; t0: number }> {
  const t0 = performance.now()
  const before = heapNow()
  const sim = new Simulator({ ...extra, ...o.sim, seed: o.seed, nodes: o.nodes })
  await sim.start()
  const heapPerNodeKB = (heapNow() - before) / o.nodes / 1024
  return { sim, heapPerNodeKB, t0 }
}

function finish(
  name: string,
  o: ScenarioOptions,
  sim: Simulator,
  t0: number,
  heapPerNodeKB: number,
  figures: Record<string, number | string>,
  markdown: string,
  svg?: string,
): ScenarioResult {
  const wallMs = performance.now() - t0
  figures['sim seconds'] = sim.now / 1000
  figures['wall seconds'] = wallMs / 1000
  figures['sim-seconds per wall-second'] = sim.now / wallMs
  figures['heap per node (KB)'] = heapPerNodeKB
  figures.events = sim.stats.events
  figures.messages = sim.stats.sent
  figures['sync sessions'] = sim.stats.syncSessions
  figures['sync results relayed on gossip'] = sim.stats.relays
  figures['out-of-turn syncs with recovered members'] = sim.stats.recoverySyncs
  figures.violations = sim.violations.length
  return { scenario: name, seed: o.seed, nodes: o.nodes, violations: sim.violations, figures, markdown, svg, simMs: sim.now, wallMs, heapPerNodeKB }
}

/** Wait for all live stores to agree; returns ms after `from`, or undefined past `maxMs`. */
async function converge(sim: Simulator, from: number, maxMs: number, stepMs = 1000): Promise<number | undefined> {
  const t = await sim.runUntilTrue(() => storesAgree(sim), maxMs, stepMs)
  return t === undefined ? undefined : t - from
}

function figuresTable(f: Record<string, number | string>): string {
  return mdTable(
    ['figure', 'value'],
    Object.entries(f).map(([k, v]) => [k, v]),
  )
}

// ---------------------------------------------------------------------- propagation

export interface PropagationPoint {
  nodes: number
  membership: string
  maxHops: number
  meanHops: number
  bound: number
  p50Ms: number
  allMs: number
  viaSync: number
}

const propagation: Scenario = {
  name: 'propagation',
  description: 'writes from random nodes; rounds (gossip hops) and time until every node holds each write',
  defaultNodes: 1000,
  async run(o) {
    const { sim, heapPerNodeKB, t0 } = await setup(o, { membership: o.nodes > 2000 ? 'oracle' : 'full' })
    await sim.runFor(5000)
    const W = 5
    for (let i = 0; i < W; i++) {
      await sim.write(sim.rng.pick(sim.upNodes), { track: true })
      await sim.runFor(2000)
    }
    await sim.runUntilTrue(() => [...sim.tracked.values()].every((t) => t.missing === 0), 120_000, 500)
    const hops: number[] = []
    const times: number[] = []
    const p50: number[] = []
    let viaSync = 0
    let incomplete = 0
    for (const t of sim.tracked.values()) {
      if (t.missing > 0) incomplete++
      let h = 0
      const arr: number[] = []
      for (let i = 0; i < t.at.length; i++) {
        if (t.hop[i]! > h) h = t.hop[i]!
        if (t.hop[i] === -2) viaSync++
        if (t.at[i]! >= 0) arr.push(t.at[i]! - t.t0)
      }
      arr.sort((a, b) => a - b)
      hops.push(h)
      times.push(arr[arr.length - 1]!)
      p50.push(arr[Math.floor(arr.length / 2)]!)
    }
    if (incomplete > 0) sim.violation(`${incomplete} tracked writes did not reach every node within 120 s`)
    await converge(sim, sim.now, 3 * sim.opts.syncIntervalMs)
    await checkAll(sim, 'propagation end')
    const point: PropagationPoint = {
      nodes: o.nodes,
      membership: sim.opts.membership,
      maxHops: Math.max(...hops),
      meanHops: hops.reduce((a, b) => a + b, 0) / hops.length,
      bound: pushGossipBound(o.nodes),
      p50Ms: p50.reduce((a, b) => a + b, 0) / p50.length,
      allMs: times.reduce((a, b) => a + b, 0) / times.length,
      viaSync,
    }
    const figures: Record<string, number | string> = {
      'max rounds (gossip hops) to all': point.maxHops,
      'mean over writes of max hops': point.meanHops,
      'push-gossip bound log2 N + ln N': point.bound,
      'ratio max hops / bound': point.maxHops / point.bound,
      'median node reached after (ms)': point.p50Ms,
      'last node reached after (ms)': point.allMs,
      'node-writes delivered only by anti-entropy': viaSync,
      membership: sim.opts.membership,
    }
    const r = finish('propagation', o, sim, t0, heapPerNodeKB, figures, figuresTable(figures))
    ;(r as ScenarioResult & { point: PropagationPoint }).point = point
    return r
  },
}

export function propagationReport(
  points: PropagationPoint[],
  meta: { seed: number; wall: { nodes: number; heapKB: number; rate: number }[] },
): { markdown: string; svg: string } {
  const rows = points.map((p, i) => [
    p.nodes,
    p.membership,
    p.maxHops,
    p.bound,
    p.maxHops / p.bound,
    Math.round(p.p50Ms),
    Math.round(p.allMs),
    p.viaSync,
    Math.round(meta.wall[i]!.heapKB),
    meta.wall[i]!.rate,
  ])
  const markdown = mdTable(
    [
      'nodes',
      'membership',
      'max hops to all',
      'bound log2N+lnN',
      'hops / bound',
      'median reach (ms)',
      'all reached (ms)',
      'via anti-entropy',
      'heap/node (KB)',
      'sim-s per wall-s',
    ],
    rows,
  )
  const svg = svgPlot({
    title: `Write propagation vs cluster size (seed ${meta.seed})`,
    xLabel: 'nodes (log scale)',
    yLabel: 'rounds (gossip hops)',
    logX: true,
    series: [
      { name: 'measured: max hops to every node', points: points.map((p) => [p.nodes, p.maxHops]) },
      { name: 'bound log2 N + ln N', points: points.map((p) => [p.nodes, p.bound]), dashed: true, color: '#555' },
      { name: '1.5 × bound (target)', points: points.map((p) => [p.nodes, 1.5 * p.bound]), dashed: true, color: '#bbb' },
    ],
  })
  return { markdown, svg }
}

// ---------------------------------------------------------------------- partition and heal

function split2(sim: Simulator, fraction = 0.5): [number[], number[]] {
  const idx = sim.nodes.map((n) => n.idx)
  for (let i = idx.length - 1; i > 0; i--) {
    const j = sim.rng.int(i + 1)
    ;[idx[i], idx[j]] = [idx[j]!, idx[i]!]
  }
  const k = Math.max(1, Math.round(idx.length * fraction))
  return [idx.slice(0, k).sort((a, b) => a - b), idx.slice(k).sort((a, b) => a - b)]
}

async function writesOnSides(sim: Simulator, sides: number[][], perSide: number, spacingMs: number, collide: number): Promise<void> {
  for (let i = 0; i < perSide; i++) {
    for (const side of sides) {
      const n = sim.nodes[sim.rng.pick(side)]!
      // A few writes hit the same object on both sides (concurrent edits to merge).
      await sim.write(n, i < collide ? { name: `shared-${i}` } : { track: true })
    }
    await sim.runFor(spacingMs)
  }
}

/** Fraction of (live node, tracked write) pairs present. */
function coverage(sim: Simulator): number {
  let have = 0
  let total = 0
  for (const t of sim.tracked.values()) {
    for (const n of sim.upNodes) {
      total++
      if (t.at[n.idx]! >= 0) have++
    }
  }
  return total === 0 ? 1 : have / total
}

const partition: Scenario = {
  name: 'partition',
  description: 'a random half/half split for 60 s with writes on both sides, heal; then a one-way cut; convergence in anti-entropy periods',
  defaultNodes: 1000,
  async run(o) {
    const { sim, heapPerNodeKB, t0 } = await setup(o)
    const period = sim.opts.syncIntervalMs
    await sim.runFor(5000)
    const sides = split2(sim)
    sim.net.split(sides, sim.now)
    await writesOnSides(sim, sides, 10, 5000, 3)
    await sim.runFor(Math.max(0, 60_000 - 50_000))
    const healAt = sim.now
    sim.net.heal(sim.now)
    const curve: [number, number][] = [[0, coverage(sim)]]
    const conv = await sim.runUntilTrue(
      async () => {
        curve.push([(sim.now - healAt) / 1000, coverage(sim)])
        return storesAgree(sim)
      },
      6 * period,
      1000,
    )
    const symPeriods = conv === undefined ? Infinity : (conv - healAt) / period
    if (symPeriods > 3) sim.violation(`stores converged ${symPeriods.toFixed(2)} anti-entropy periods after heal (bound 3)`)
    await sim.runFor(2 * sim.opts.suspectAfterMs)
    await checkAll(sim, 'after symmetric heal')

    // One-way cut: side A cannot send to side B, B still reaches A.
    sim.tracked.clear()
    const sides2 = split2(sim)
    sim.net.split(sides2, sim.now, [[0, 1]])
    await writesOnSides(sim, sides2, 6, 5000, 2)
    const heal2 = sim.now
    sim.net.heal(sim.now)
    const conv2 = await sim.runUntilTrue(() => storesAgree(sim), 6 * period, 1000)
    const asymPeriods = conv2 === undefined ? Infinity : (conv2 - heal2) / period
    if (asymPeriods > 3) sim.violation(`stores converged ${asymPeriods.toFixed(2)} anti-entropy periods after the one-way cut healed (bound 3)`)
    await sim.runFor(2 * sim.opts.suspectAfterMs)
    await checkAll(sim, 'after one-way heal')

    const figures: Record<string, number | string> = {
      'converged after symmetric heal (s)': conv === undefined ? 'no' : (conv - healAt) / 1000,
      'anti-entropy periods (symmetric)': symPeriods,
      'converged after one-way heal (s)': conv2 === undefined ? 'no' : (conv2 - heal2) / 1000,
      'anti-entropy periods (one-way)': asymPeriods,
      'anti-entropy period (s)': period / 1000,
      'acknowledged writes': sim.acked.length,
    }
    const svg = svgPlot({
      title: `Convergence after a half/half partition heals (N=${o.nodes}, seed ${o.seed})`,
      xLabel: 'seconds after heal',
      yLabel: 'share of (node, write) pairs held',
      series: [{ name: 'writes made during the partition, share held', points: curve }],
      vlines: [1, 2, 3].map((k) => ({ x: (k * period) / 1000, label: `${k}×AE` })),
    })
    return finish('partition', o, sim, t0, heapPerNodeKB, figures, figuresTable(figures), svg)
  },
}

// ---------------------------------------------------------------------- churn

const churn: Scenario = {
  name: 'churn',
  description: 'nodes crash, leave for good, return and join continuously while writes go on; then quiet and check',
  defaultNodes: 1000,
  async run(o) {
    const { sim, heapPerNodeKB, t0 } = await setup(o, {
      network: { ...defaultNet(), local: { ...defaultNet().local, loss: 0.01, duplicate: 0.01, reorder: 0.02, reorderMs: 50 } },
    })
    const duration = 120_000
    const end = sim.now + duration
    let crashes = 0
    let leaves = 0
    let joins = 0
    let returns = 0
    const series: [number, number][] = []
    while (sim.now < end) {
      const r = sim.rng.next()
      const up = sim.upNodes
      const down = sim.nodes.filter((n) => !n.up && !n.gone)
      if (r < 0.3 && up.length > o.nodes / 2) {
        sim.crash(sim.rng.pick(up))
        crashes++
      } else if (r < 0.4 && up.length > o.nodes / 2) {
        sim.crash(sim.rng.pick(up), { gone: true })
        leaves++
      } else if (r < 0.7 && down.length > 0) {
        await sim.restart(sim.rng.pick(down))
        returns++
      } else {
        await sim.join(sim.rng.pick(sim.upNodes))
        joins++
      }
      await sim.write(sim.rng.pick(sim.upNodes), sim.rng.chance(0.2) ? { name: `hot-${sim.rng.int(5)}` } : {})
      series.push([sim.now / 1000, sim.upNodes.length])
      await sim.runFor(1000)
    }
    const quietAt = sim.now
    const conv = await converge(sim, quietAt, 6 * sim.opts.syncIntervalMs)
    if (conv === undefined || conv > 3 * sim.opts.syncIntervalMs)
      sim.violation(`stores did not converge within 3 anti-entropy periods after churn stopped (${conv})`)
    await sim.runFor(sim.opts.suspectAfterMs + 3 * sim.opts.heartbeatMs)
    await checkAll(sim, 'after churn')
    const figures: Record<string, number | string> = {
      crashes,
      'left for good': leaves,
      returns,
      joins,
      'live nodes at end': sim.upNodes.length,
      'acknowledged writes': sim.acked.length,
      'converged after churn stopped (s)': conv === undefined ? 'no' : conv / 1000,
      'messages lost': sim.stats.lost,
      'messages duplicated': sim.stats.duplicated,
    }
    const svg = svgPlot({
      title: `Churn: live nodes over time (N=${o.nodes}, seed ${o.seed})`,
      xLabel: 'seconds',
      yLabel: 'live nodes',
      series: [{ name: 'live nodes', points: series }],
    })
    return finish('churn', o, sim, t0, heapPerNodeKB, figures, figuresTable(figures), svg)
  },
}

function defaultNet() {
  return new Simulator({ seed: 0, nodes: 0 }).opts.network
}

// ---------------------------------------------------------------------- rolling restart

const rollingRestart: Scenario = {
  name: 'rolling-restart',
  description: 'every node restarts from its disk, a batch at a time, under writes and ±2 s clock skew',
  defaultNodes: 1000,
  async run(o) {
    const { sim, heapPerNodeKB, t0 } = await setup(o, { clockSkewMs: 2000 })
    await sim.runFor(3000)
    const batch = Math.max(1, Math.ceil(o.nodes / 25))
    const downMs = 10_000
    for (let i = 0; i < o.nodes; i += batch) {
      const group = sim.nodes.slice(i, i + batch)
      await sim.write(sim.rng.pick(sim.upNodes))
      // Writes acknowledged right before the crash must survive it.
      await sim.write(group[0]!)
      for (const n of group) sim.crash(n)
      await sim.runFor(downMs)
      for (const n of group) await sim.restart(n)
      await sim.runFor(1000)
    }
    const quietAt = sim.now
    const conv = await converge(sim, quietAt, 6 * sim.opts.syncIntervalMs)
    if (conv === undefined || conv > 3 * sim.opts.syncIntervalMs)
      sim.violation(`stores did not converge within 3 anti-entropy periods after the rolling restart (${conv})`)
    await sim.runFor(sim.opts.suspectAfterMs + 3 * sim.opts.heartbeatMs)
    await checkAll(sim, 'after rolling restart')
    const figures: Record<string, number | string> = {
      'batch size': batch,
      restarts: o.nodes,
      'acknowledged writes': sim.acked.length,
      'converged after last restart (s)': conv === undefined ? 'no' : conv / 1000,
    }
    return finish('rolling-restart', o, sim, t0, heapPerNodeKB, figures, figuresTable(figures))
  },
}

// ---------------------------------------------------------------------- site dark for a week

const siteDark: Scenario = {
  name: 'site-dark',
  description: 'three sites; one goes dark (cut off, still running) for 7 days and 1 hour with ha and best-effort pods; heal',
  defaultNodes: 300,
  async run(o) {
    const { sim, heapPerNodeKB, t0 } = await setup(o, { sites: 3 })
    const sched = new LocalScheduler(sim)
    const pods = Math.min(100, o.nodes)
    await sched.createPods(sim.nodes[0]!, pods, (i) => (i % 2 === 0 ? 'ha' : 'best-effort'))
    await sim.runFor(20_000)
    const boundBefore = sched.runners().size
    const dark = sim.nodes.filter((n) => n.site === 2).map((n) => n.idx)
    const rest = sim.nodes.filter((n) => n.site !== 2).map((n) => n.idx)
    const darkAt = sim.now
    sim.net.split([dark, rest], sim.now)
    // A write now and then on both sides for the whole week.
    sim.every(6 * 3600_000, 0, async () => {
      if (sim.now > darkAt + 7 * 24 * 3600_000) return false
      await sim.write(sim.nodes[sim.rng.pick(dark)]!)
      await sim.write(sim.nodes[sim.rng.pick(rest)]!)
    })
    await sim.runFor(10 * 60_000)
    // The quiet middle of the week at a coarse time resolution (see Simulator.heartbeatMs).
    sim.heartbeatMs = 3600_000
    sim.syncIntervalMs = 6 * 3600_000
    await sim.runUntil(darkAt + 7 * 24 * 3600_000 - 10 * 60_000)
    sim.heartbeatMs = sim.opts.heartbeatMs
    sim.syncIntervalMs = sim.opts.syncIntervalMs
    await sim.runUntil(darkAt + 7 * 24 * 3600_000 + 3600_000)
    const healAt = sim.now
    sim.net.heal(sim.now)
    const conv = await converge(sim, healAt, 6 * sim.opts.syncIntervalMs)
    const periods = conv === undefined ? Infinity : conv / sim.opts.syncIntervalMs
    if (periods > 3) sim.violation(`stores converged ${periods.toFixed(2)} anti-entropy periods after the site came back (bound 3)`)
    await sim.runFor(sim.opts.suspectAfterMs + 3 * sim.opts.heartbeatMs)
    sched.checkDoubles = true
    await sim.runFor(5000)
    await checkAll(sim, 'after the site came back')
    const figures: Record<string, number | string> = {
      'nodes in the dark site': dark.length,
      pods,
      'pods running before': boundBefore,
      'dark for (days)': (healAt - darkAt) / 86400_000,
      'converged after heal (s)': conv === undefined ? 'no' : conv / 1000,
      'anti-entropy periods': periods,
      'pods running at end': sched.runners().size,
      binds: sched.binds,
    }
    return finish('site-dark', o, sim, t0, heapPerNodeKB, figures, figuresTable(figures))
  },
}

// ---------------------------------------------------------------------- HA failover

const haFailover: Scenario = {
  name: 'ha-failover',
  description: '10% of nodes crash; ha pods must run elsewhere within suspectAfter + haAfter (+ 3 heartbeats); best-effort pods stay; nodes return',
  defaultNodes: 300,
  async run(o) {
    const { sim, heapPerNodeKB, t0 } = await setup(o)
    const sched = new LocalScheduler(sim)
    const pods = Math.min(100, o.nodes)
    await sched.createPods(sim.nodes[0]!, pods, (i) => (i % 2 === 0 ? 'ha' : 'best-effort'))
    await sim.runFor(20_000)
    sched.checkDoubles = true
    await sim.runFor(3000)
    sched.checkDoubles = false
    const lost = sim.rng.sample(o.nodes, Math.max(1, Math.round(o.nodes / 10))).map((i) => sim.nodes[i]!)
    const crashAt = sim.now
    for (const n of lost) sched.noteLost(n)
    for (const n of lost) sim.crash(n)
    const haAfter = (sched.opts.haAfterSeconds ?? 30) * 1000
    const bound = sim.opts.suspectAfterMs + haAfter + 3 * sim.opts.heartbeatMs
    await sim.runFor(bound + 10_000)
    let worst = 0
    for (const f of sched.failovers) {
      const took = f.runningAgainAt === undefined ? Infinity : f.runningAgainAt - f.lostAt
      worst = Math.max(worst, took)
      if (took > bound) sim.violation(`ha pod ${f.pod} (was on ${f.from}) not running again within ${bound / 1000}s (took ${took / 1000}s)`)
    }
    await sim.runFor(60_000)
    const returnAt = sim.now
    for (const n of lost) await sim.restart(n)
    const conv = await converge(sim, returnAt, 6 * sim.opts.syncIntervalMs)
    await sim.runFor(sim.opts.suspectAfterMs + 3 * sim.opts.heartbeatMs)
    sched.checkDoubles = true
    await sim.runFor(5000)
    await checkAll(sim, 'after the nodes returned')
    const took = sched.failovers.map((f) => (f.runningAgainAt ?? Infinity) - f.lostAt).sort((a, b) => a - b)
    const figures: Record<string, number | string> = {
      pods,
      'nodes lost': lost.length,
      'ha pods on lost nodes': sched.failovers.length,
      'failover bound (s)': bound / 1000,
      'median failover (s)': took.length ? took[Math.floor(took.length / 2)]! / 1000 : 0,
      'worst failover (s)': worst / 1000,
      'spurious ha moves': sched.spuriousHaMoves,
      'converged after return (s)': conv === undefined ? 'no' : conv / 1000,
      binds: sched.binds,
    }
    const tl = sched.timeline.filter((p) => p.t >= crashAt - 10_000)
    const rel = (t: number) => (t - crashAt) / 1000
    const svg = svgPlot({
      title: `HA failover timeline (N=${o.nodes}, ${lost.length} nodes lost, seed ${o.seed})`,
      xLabel: 'seconds after the crash',
      yLabel: 'pods',
      series: [
        { name: 'pods running', points: tl.map((p) => [rel(p.t), p.running]) },
        { name: 'pods not running', points: tl.map((p) => [rel(p.t), p.pending]) },
        { name: 'pods running twice', points: tl.map((p) => [rel(p.t), p.doubled]) },
      ],
      vlines: [
        { x: 0, label: 'crash' },
        { x: bound / 1000, label: 'ha bound' },
        { x: rel(returnAt), label: 'nodes return' },
      ],
    })
    return finish('ha-failover', o, sim, t0, heapPerNodeKB, figures, figuresTable(figures), svg)
  },
}

// ---------------------------------------------------------------------- ha fencing

function shuffled(sim: Simulator): number[] {
  const idx = sim.nodes.map((n) => n.idx)
  for (let i = idx.length - 1; i > 0; i--) {
    const j = sim.rng.int(i + 1)
    ;[idx[i], idx[j]] = [idx[j]!, idx[i]!]
  }
  return idx
}

/** Cut `order` into groups of the given sizes. */
function groupsOf(order: number[], sizes: number[]): number[][] {
  const out: number[][] = []
  let at = 0
  for (const k of sizes) {
    out.push(order.slice(at, at + k).sort((a, b) => a - b))
    at += k
  }
  return out
}

/** `k` random group sizes (each ≥ 1) adding up to `n`. */
function randomSizes(sim: Simulator, n: number, k: number): number[] {
  const cuts = new Set<number>()
  while (cuts.size < k - 1) cuts.add(1 + sim.rng.int(n - 1))
  const points = [0, ...[...cuts].sort((a, b) => a - b), n]
  return points.slice(1).map((p, i) => p - points[i]!)
}

const haFencing: Scenario = {
  name: 'ha-fencing',
  description:
    'ha pods under self-fencing (src/sched/fencing.ts): majority|minority, even, three-way and random splits, an isolated node, pairwise drops (relayed and direct heartbeats), agent crashes of a minority and of a majority; no two copies of an ha pod for longer than haAfter + margin',
  defaultNodes: 5,
  async run(o) {
    const { sim, heapPerNodeKB, t0 } = await setup(o, { clockSkewMs: 1000 })
    const sched = new LocalScheduler(sim)
    const N = o.nodes
    const pods = Math.max(8, 4 * N)
    await sched.createPods(sim.nodes[0]!, pods, (i) => (i % 2 === 0 ? 'ha' : 'best-effort'))
    await sim.runFor(20_000)
    sched.checkDoubles = true
    await sim.runFor(3000)
    sched.checkDoubles = false
    const haAfter = sched.haAfterMs
    // Long enough for the other side to move ha pods (suspectAfter + haAfter) and for fences to fall.
    const faultMs = sim.opts.suspectAfterMs + haAfter + 20_000
    const settle = sim.opts.suspectAfterMs + 3 * sim.opts.heartbeatMs
    const rows: (string | number)[][] = []
    let worstConv = 0

    const afterHeal = async (label: string, shape: string) => {
      const at = sim.now
      const conv = await converge(sim, at, 6 * sim.opts.syncIntervalMs)
      if (conv === undefined) sim.violation(`${label}: stores did not converge within 6 anti-entropy periods of the heal`)
      else worstConv = Math.max(worstConv, conv)
      await sim.runFor(settle)
      sched.checkDoubles = true
      await sim.runFor(5000)
      sched.checkDoubles = false
      const ep = sched.closeEpisode()!
      await checkAll(sim, label)
      rows.push([label, shape, ep.overlapFault / 1000, ep.overlapAfter / 1000, ep.down / 1000, conv === undefined ? 'no' : conv / 1000])
    }
    const partitionPhase = async (label: string, groups: number[][], drop?: { pairs: [number, number][]; oneWay?: boolean; direct?: boolean }) => {
      if (drop) {
        sim.heartbeatRelay = !drop.direct
        sim.net.dropPairs(drop.pairs, sim.now, drop.oneWay)
      } else sim.net.split(groups, sim.now)
      // Fencing counts heard nodes: with direct heartbeats only, A and B both keep a quorum (they hear
      // the rest) while each sees the other lost — outside what quorum fencing can cover (docs/netsim.md).
      sched.beginFault(label, { checked: !drop?.direct })
      await sim.runFor(faultMs)
      sim.net.heal(sim.now)
      sim.heartbeatRelay = true
      sched.endFault()
      await afterHeal(label, drop ? `node-${groups[0]![0]} ${drop.oneWay ? '→' : '↔'} node-${groups[1]![0]}` : groups.map((g) => g.length).join('|'))
    }
    // Random node order with a node that runs an ha pod first: the side cut off (the first group)
    // always holds one, so each fault tests fencing, not an empty side.
    const haFirst = () => {
      const order = shuffled(sim)
      const run = sched.runners()
      const holders = new Set([...sched.haPods].flatMap((p) => run.get(p) ?? []))
      const i = order.findIndex((k) => holders.has(sched.naming.name(k)))
      if (i > 0) order.unshift(order.splice(i, 1)[0]!)
      return order
    }
    const crashPhase = async (label: string, k: number) => {
      const lost = haFirst()
        .slice(0, k)
        .map((i) => sim.nodes[i]!)
      for (const n of lost) sched.crashAgent(n)
      sched.beginFault(label)
      await sim.runFor(faultMs)
      for (const n of lost) await sim.restart(n)
      sched.endFault()
      await afterHeal(label, `${k} of ${N} down`)
    }

    const minority = 1 + sim.rng.int(Math.max(1, Math.floor((N - 1) / 2)))
    await partitionPhase('minority cut off', groupsOf(haFirst(), [minority, N - minority]))
    if (N % 2 === 0) await partitionPhase('even split', groupsOf(haFirst(), [N / 2, N / 2]))
    if (N >= 3) {
      const a = Math.ceil(N / 3)
      const b = Math.ceil((N - a) / 2)
      await partitionPhase('three-way split', groupsOf(haFirst(), [a, b, N - a - b]))
    }
    const one = haFirst()[0]!
    await partitionPhase('isolated node', [[one], sim.nodes.map((n) => n.idx).filter((k) => k !== one)])
    if (N >= 4) {
      const k = 2 + sim.rng.int(Math.min(3, N - 2))
      await partitionPhase(`random ${k}-way split`, groupsOf(haFirst(), randomSizes(sim, N, k)))
    }
    if (N >= 3) {
      const [a, b] = haFirst() as [number, number]
      await partitionPhase(`A ↔ B dropped, both reach the rest (relayed heartbeats)`, [[a], [b]], { pairs: [[a, b]] })
      await partitionPhase(`A ↔ B dropped, both reach the rest (direct heartbeats only)`, [[a], [b]], { pairs: [[a, b]], direct: true })
      await partitionPhase(`A → B dropped, B → A works (direct heartbeats only)`, [[a], [b]], { pairs: [[a, b]], oneWay: true, direct: true })
    }
    await crashPhase('agent crash of a minority', Math.max(1, Math.floor((N - 1) / 2)))
    if (N >= 2) await crashPhase('agent crash of a majority', Math.floor(N / 2) + 1)

    const checked = sched.episodes.filter((e) => e.checked)
    const worst = (eps: HaEpisode[], f: (e: HaEpisode) => number) => Math.max(0, ...eps.map(f)) / 1000
    const total = (e: HaEpisode) => Math.max(0, ...[...e.byPod.values()].map((t) => t.fault + t.after))
    const figures: Record<string, number | string> = {
      'ha pods': sched.haPods.size,
      'fault episodes': sched.episodes.length,
      'overlap bound haAfter + margin (s)': sched.overlapBoundMs / 1000,
      'worst ha overlap during a fault (s)': worst(checked, (e) => e.overlapFault),
      'worst ha overlap after a heal (s)': worst(checked, (e) => e.overlapAfter),
      'worst ha overlap in all (s)': worst(checked, total),
      'worst ha overlap, pairwise drop with direct heartbeats (not covered) (s)': worst(
        sched.episodes.filter((e) => !e.checked),
        total,
      ),
      'worst ha downtime in one episode (s)': worst(sched.episodes, (e) => e.down),
      'spurious ha moves': sched.spuriousHaMoves,
      'slowest convergence after a heal (s)': worstConv / 1000,
      binds: sched.binds,
    }
    for (const e of sched.episodes) {
      const kind = e.label.replace(/^random \d-way/, 'random')
      figures[`${kind}: ha overlap (s)`] = Math.max((figures[`${kind}: ha overlap (s)`] as number | undefined) ?? 0, total(e) / 1000)
      figures[`${kind}: ha downtime (s)`] = Math.max((figures[`${kind}: ha downtime (s)`] as number | undefined) ?? 0, e.down / 1000)
    }
    const markdown = `${figuresTable(figures)}\n\n${mdTable(['fault', 'groups', 'worst ha overlap during (s)', 'after heal (s)', 'worst ha downtime (s)', 'converged after heal (s)'], rows)}`
    const r = finish('ha-fencing', o, sim, t0, heapPerNodeKB, figures, markdown)
    ;(r as ScenarioResult & { episodes: (string | number)[][] }).episodes = rows
    return r
  },
}

// ---------------------------------------------------------------------- federation

/** Clusters of the federation scenario (node K of the federation mesh is in cluster K mod 5). */
export const FED_CLUSTERS = 5
const SHARED = 'shared'
const PRIVATE = 'private'

/**
 * A federation of 5 clusters. The federation document is one simulator (every node of every
 * cluster replicates it; links inside a cluster are `local`, between clusters `wide`); each
 * cluster's private scope is a simulator of its own (a separate document on a separate mesh, as in
 * the agent). Writes go through the agent's real `routedStore`: the shared namespace to the
 * federation document, everything else to the cluster's own. Pods of the shared namespace are
 * scheduled on every node by the real `plan` over all clusters' nodes (`node-K@cluster-C`), with
 * `placement.clusters` / `preferClusters`.
 */
const federation: Scenario = {
  name: 'federation',
  description:
    '5 clusters sharing a namespace: whole-cluster cuts and heals, a lost cluster, a 3-way split; convergence, no private leak, ha re-placed in allowed clusters, best-effort stays',
  defaultNodes: 1000,
  async run(o) {
    const C = FED_CLUSTERS
    const perCluster = Math.max(2, Math.floor(o.nodes / C))
    const total = perCluster * C
    const { sim, heapPerNodeKB, t0 } = await setup({ ...o, nodes: total }, { sites: C })
    const clusterName = (c: number) => `cluster-${c}`
    const clusterOfIdx = (k: number) => k % C
    const naming: SchedNaming = {
      namespace: SHARED,
      name: (k) => `node-${k}@${clusterName(clusterOfIdx(k))}`,
      index: (name) => Number(name.slice('node-'.length, name.indexOf('@'))),
      cluster: (k) => clusterName(clusterOfIdx(k)),
    }
    // Fencing off: which quorum should fence ha pods placed across clusters is not settled (docs/netsim.md).
    const sched = new LocalScheduler(sim, {}, naming, false)
    // Each cluster's private scope: its own simulator (oracle liveness: it only carries writes).
    const privateSims: Simulator[] = []
    for (let c = 0; c < C; c++) {
      const ps = new Simulator({ ...o.sim, seed: o.seed * 31 + c + 1, nodes: perCluster, membership: 'oracle' })
      await ps.start()
      privateSims.push(ps)
    }
    const privNode = (k: number) => privateSims[clusterOfIdx(k)]!.nodes[Math.floor(k / C)]!
    const membersOf = (c: number) => sim.nodes.filter((n) => clusterOfIdx(n.idx) === c).map((n) => n.idx)
    /** The API's store on node K: the shared namespace in the federation document, the rest private. */
    const apiOf = (k: number): ObjectStore | undefined => {
      const fed = sim.nodes[k]!
      const own = privNode(k)
      if (!fed.up || !own.up || !fed.store || !own.store) return undefined
      const scope: FederatedScope = { store: fed.store, cluster: clusterName(clusterOfIdx(k)), federation: 'lab' }
      return routedStore(own.store, { scopeOf: (ns) => (ns === SHARED ? scope : undefined), scopes: () => [{ namespaces: [SHARED], scope }] })
    }
    const advance = async (ms: number) => {
      await sim.runFor(ms)
      for (const ps of privateSims) await ps.runUntil(sim.now)
    }
    let privSeq = 0
    const writePrivate = async (k: number) => {
      const api = apiOf(k)
      if (!api) return
      const c = clusterOfIdx(k)
      const name = `p${privSeq++}`
      const r = await api.apply(
        {
          apiVersion: 'orc/v1',
          kind: 'Pod',
          metadata: { name, namespace: PRIVATE, labels: { cluster: clusterName(c) } },
          spec: { containers: [{ name: 'main', image: '/images/app' }] },
        } as never,
        { author: 'user:netsim', now: sim.localNow(sim.nodes[k]!) },
      )
      const ps = privateSims[c]!
      if (r.revision) ps.acked.push({ revisionId: r.revision.id, key: `${PRIVATE}/${name}`, node: Math.floor(k / C), at: ps.now })
    }
    const writeShared = async (k: number) => {
      const n = sim.nodes[k]!
      if (n.up) await sim.write(n)
    }

    // Pods of the shared namespace, created on cluster-0 through the API's routing: each allowed
    // in two clusters (preferring the first); every 10th without placement.clusters (cluster-0 only).
    await advance(10_000)
    const pods = Math.min(200, Math.max(20, Math.floor(total / 5)))
    const allowed = new Map<string, string[] | undefined>()
    const via = membersOf(0)[0]!
    for (let i = 0; i < pods; i++) {
      const a = i % C
      const b = (i + 1 + Math.floor(i / C)) % C === a ? (a + 1) % C : (i + 1 + Math.floor(i / C)) % C
      const clusters = i % 10 === 9 ? undefined : [clusterName(a), clusterName(b)]
      allowed.set(`app-${i}`, clusters ?? [clusterName(0)])
      const spec: Record<string, unknown> = {
        policy: i % 2 === 0 ? 'ha' : 'best-effort',
        containers: [{ name: 'main', image: '/images/app', resources: { requests: { cpu: '100m', memory: '64Mi' } } }],
      }
      if (clusters) spec.placement = { clusters, preferClusters: [clusters[0]] }
      const r = await apiOf(via)!.apply(
        { apiVersion: 'orc/v1', kind: 'Pod', metadata: { name: `app-${i}`, namespace: SHARED, labels: { app: `app-${i}` } }, spec } as never,
        {
          author: 'user:netsim',
          now: sim.localNow(sim.nodes[via]!),
        },
      )
      if (r.revision) sim.acked.push({ revisionId: r.revision.id, key: `${SHARED}/app-${i}`, node: via, at: sim.now })
    }
    await advance(20_000)
    sched.checkDoubles = true
    await advance(3000)
    sched.checkDoubles = false
    // The agent's own reading of a federation member name (node@cluster).
    const clusterOfNode = (name: string) => clusterOfMemberName(name) ?? ''
    const placedWrong = () => {
      let wrong = 0
      for (const [pod, nodes] of sched.runners()) {
        const ok = allowed.get(pod)
        for (const n of nodes)
          if (ok && !ok.includes(clusterOfNode(n))) {
            wrong++
            sim.violation(`pod ${pod} runs on ${n}, outside placement.clusters [${ok.join(', ')}]`)
          }
      }
      return wrong
    }
    const runningBefore = sched.runners().size
    placedWrong()
    if (runningBefore < pods) sim.violation(`${pods - runningBefore} of ${pods} shared pods not running before any fault`)

    const haAfter = (sched.opts.haAfterSeconds ?? 30) * 1000
    const settle = sim.opts.suspectAfterMs + 3 * sim.opts.heartbeatMs
    const during = async (ms: number, sides: number[][]) => {
      const end = sim.now + ms
      while (sim.now < end) {
        for (const side of sides) {
          await writeShared(sim.rng.pick(side))
          await writePrivate(sim.rng.pick(side))
        }
        await advance(Math.min(10_000, end - sim.now))
      }
    }
    const healAndConverge = async (label: string) => {
      const at = sim.now
      sim.net.heal(sim.now)
      const conv = await converge(sim, at, 6 * sim.opts.syncIntervalMs)
      for (const ps of privateSims) await ps.runUntil(sim.now)
      if (conv === undefined) sim.violation(`${label}: federation document did not converge within ${(6 * sim.opts.syncIntervalMs) / 1000}s of the heal`)
      await advance(settle)
      sched.checkDoubles = true
      await advance(5000)
      sched.checkDoubles = false
      return conv
    }
    const bestEffortBound = () => {
      const out = new Map<string, string>()
      const ref = sim.upNodes[0]!.store!
      for (const p of ref.list('Pod', SHARED)) {
        const st = p.status as { node?: string } | undefined
        if ((p.spec as { policy?: string }).policy !== 'ha' && st?.node) out.set(p.metadata.name, st.node)
      }
      return out
    }

    // 1. Whole-cluster cut: cluster-0 alone against the other four, past haAfter; writes on both sides.
    const c0 = membersOf(0)
    const rest0 = sim.nodes.map((n) => n.idx).filter((k) => clusterOfIdx(k) !== 0)
    const beBefore1 = bestEffortBound()
    sim.net.split([c0, rest0], sim.now)
    await during(haAfter + settle + 20_000, [c0, rest0])
    const conv1 = await healAndConverge('cut of cluster-0')
    const beAfter1 = bestEffortBound()
    let beMoved = 0
    for (const [pod, node] of beBefore1) if (beAfter1.get(pod) !== node) beMoved++

    // 2. A cluster is lost: every node of cluster-1 (and its private scope) crashes.
    const c1 = membersOf(1)
    const beBefore2 = bestEffortBound()
    for (const k of c1) sched.noteLost(sim.nodes[k]!)
    for (const k of c1) {
      sim.crash(sim.nodes[k]!)
      privateSims[1]!.crash(privNode(k))
    }
    const bound = sim.opts.suspectAfterMs + haAfter + 3 * sim.opts.heartbeatMs
    await during(bound + 10_000, [sim.upNodes.map((n) => n.idx)])
    let worst = 0
    let notAllowed = 0
    let stuck = 0
    for (const f of sched.failovers) {
      const ok = allowed.get(f.pod)!
      const movable = ok.some((c) => c !== clusterName(1))
      if (!movable) {
        stuck++
        continue
      }
      const took = f.runningAgainAt === undefined ? Infinity : f.runningAgainAt - f.lostAt
      worst = Math.max(worst, took)
      if (took > bound) sim.violation(`ha pod ${f.pod} (was on ${f.from}) not running again within ${bound / 1000}s of cluster-1's loss (took ${took / 1000}s)`)
      if (f.to !== undefined && !ok.includes(clusterOfNode(f.to))) {
        notAllowed++
        sim.violation(`ha pod ${f.pod} re-placed on ${f.to}, outside placement.clusters [${ok.join(', ')}]`)
      }
    }
    const beAfter2 = bestEffortBound()
    for (const [pod, node] of beBefore2)
      if (c1.some((k) => naming.name(k) === node) && beAfter2.get(pod) !== node) {
        beMoved++
        sim.violation(`best-effort pod ${pod} moved off lost ${node} (goneAfter not reached)`)
      }

    // 3. Three-way split of the clusters still up: [cluster-2] [cluster-3] [cluster-0 + cluster-4].
    const g2 = membersOf(2)
    const g3 = membersOf(3)
    const g04 = [...membersOf(0), ...membersOf(4)]
    sim.net.split([g2, g3, g04], sim.now)
    await during(haAfter + settle + 10_000, [g2, g3, g04])
    const conv2 = await healAndConverge('three-way split')

    // 4. cluster-1 comes back from its disks: it stops the copies that moved away.
    const returnAt = sim.now
    for (const k of c1) {
      await sim.restart(sim.nodes[k]!)
      await privateSims[1]!.restart(privNode(k))
    }
    const conv3 = await converge(sim, returnAt, 6 * sim.opts.syncIntervalMs)
    for (const ps of privateSims) await ps.runUntil(sim.now)
    await advance(settle)
    sched.checkDoubles = true
    await advance(5000)
    placedWrong()
    await checkAll(sim, 'federation document at the end')

    // Private scopes: each converged within its cluster, and held nothing of another cluster's; the
    // federation document held no private object.
    let leaks = 0
    for (let c = 0; c < C; c++) {
      const ps = privateSims[c]!
      await ps.runUntilTrue(() => storesAgree(ps), 6 * ps.opts.syncIntervalMs, 1000)
      for (const v of await checkAll(ps, `private scope of ${clusterName(c)}`)) sim.violation(v)
      for (const n of ps.upNodes) {
        for (const p of n.store!.list('Pod')) {
          if (p.metadata.namespace === SHARED || (p.metadata.namespace === PRIVATE && p.metadata.labels?.cluster !== clusterName(c))) {
            leaks++
            sim.violation(
              `private scope of ${clusterName(c)} on ${n.name} holds ${p.metadata.namespace}/${p.metadata.name} (${p.metadata.labels?.cluster ?? 'shared'})`,
            )
          }
        }
      }
    }
    for (const n of sim.upNodes) {
      const leaked = n.store!.list('Pod', PRIVATE)
      if (leaked.length > 0) {
        leaks += leaked.length
        sim.violation(`federation document on ${n.name} holds private object ${PRIVATE}/${leaked[0]!.metadata.name}`)
      }
    }
    const privateWrites = privateSims.reduce((s, ps) => s + ps.acked.length, 0)
    const took = sched.failovers
      .filter((f) => f.runningAgainAt !== undefined)
      .map((f) => f.runningAgainAt! - f.lostAt)
      .sort((a, b) => a - b)
    const figures: Record<string, number | string> = {
      clusters: C,
      'nodes per cluster': perCluster,
      'shared pods': pods,
      'pods running before faults': runningBefore,
      'converged after cut of cluster-0 healed (s)': conv1 === undefined ? 'no' : conv1 / 1000,
      'converged after 3-way split healed (s)': conv2 === undefined ? 'no' : conv2 / 1000,
      'converged after cluster-1 returned (s)': conv3 === undefined ? 'no' : conv3 / 1000,
      'ha pods on lost cluster-1': sched.failovers.length,
      'of them allowed only in cluster-1 (wait)': stuck,
      'ha re-placement bound (s)': bound / 1000,
      'median ha re-placement (s)': took.length ? took[Math.floor(took.length / 2)]! / 1000 : 0,
      'worst ha re-placement (s)': worst / 1000,
      'ha re-placed outside placement.clusters': notAllowed,
      'best-effort pods moved': beMoved,
      'private writes': privateWrites,
      'private objects seen outside their cluster': leaks,
      'pods running at end': sched.runners().size,
      binds: sched.binds,
    }
    return finish('federation', { ...o, nodes: total }, sim, t0, heapPerNodeKB, figures, figuresTable(figures))
  },
}

// ---------------------------------------------------------------------- failure detector

/** The p-quantile of sorted numbers. */
function quantile(sorted: number[], p: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!
}

const detector: Scenario = {
  name: 'detector',
  description:
    'The SWIM detector (failureDetector swim) on an idle cluster: messages each node sends a second, how stale the evidence of a quorum is (what the fence counts), then one node crashes: when every other node has it suspect, then dead',
  defaultNodes: 50,
  async run(o) {
    const { sim, heapPerNodeKB, t0 } = await setup(o, { detector: 'swim' })
    const n = o.nodes
    await sim.runFor(20_000)
    const m0 = sim.stats.swimMessages
    const b0 = sim.stats.swimBytes
    const quietMs = 60_000
    // The fence's lastQuorumAt lag on each node, sampled every second: the (needed − 1)-th freshest evidence.
    const needed = Math.floor(n / 2) + 1
    const lags: number[] = []
    for (let t = 0; t < quietMs; t += 1000) {
      await sim.runFor(1000)
      for (const node of sim.upNodes) {
        const now = sim.localNow(node)
        const seen = [...node.lastHeard.entries()]
          .filter(([k]) => k !== node.idx)
          .map(([, v]) => now - v)
          .sort((a, b) => a - b)
        lags.push(needed <= 1 ? 0 : (seen[needed - 2] ?? Number.POSITIVE_INFINITY))
      }
    }
    const perNode = (sim.stats.swimMessages - m0) / n / (quietMs / 1000)
    const bytesPerNode = (sim.stats.swimBytes - b0) / n / (quietMs / 1000)
    const falseSuspicions = sim.upNodes.reduce((a, nd) => a + nd.notAlive.size, 0)
    lags.sort((a, b) => a - b)
    // One node crashes.
    const victim = sim.nodes[sim.rng.int(n)]!
    sim.crash(victim)
    const crashAt = sim.now
    const others = () => sim.upNodes
    const suspectedAt = await sim.runUntilTrue(() => others().every((nd) => sim.swimState(nd, victim.idx) !== 'alive'), 120_000, 100)
    const deadAt = await sim.runUntilTrue(() => others().every((nd) => sim.swimState(nd, victim.idx) === 'dead'), 240_000, 100)
    if (deadAt === undefined) sim.violation(`${victim.name} not dead everywhere within 240 s of its crash`)
    const figures: Record<string, number | string> = {
      'messages sent per node per second (idle)': Number(perNode.toFixed(2)),
      'bytes sent per node per second (idle, JSON)': Math.round(bytesPerNode),
      'heartbeat detector for comparison: heartbeats sent per node per second': Number(((n - 1) / (meshHeartbeatMs / 1000)).toFixed(1)),
      'quorum evidence lag p50 (s)': quantile(lags, 0.5) / 1000,
      'quorum evidence lag p99 (s)': quantile(lags, 0.99) / 1000,
      'quorum evidence lag max (s)': (lags[lags.length - 1] ?? 0) / 1000,
      'false suspicions at the end of the idle minute': falseSuspicions,
      'crash → suspect on every node (s)': suspectedAt === undefined ? 'no' : (suspectedAt - crashAt) / 1000,
      'crash → dead on every node (s)': deadAt === undefined ? 'no' : (deadAt - crashAt) / 1000,
    }
    return finish('detector', o, sim, t0, heapPerNodeKB, figures, figuresTable(figures))
  },
}

/** The agent's heartbeat interval (meshDefaults.heartbeatIntervalMs), for the comparison figure. */
const meshHeartbeatMs = 2000

export const SCENARIOS: Record<string, Scenario> = Object.fromEntries(
  [propagation, partition, churn, rollingRestart, siteDark, haFailover, haFencing, federation, detector].map((s) => [s.name, s]),
)

/** The command that replays a run exactly. */
export function replayCommand(scenario: string, nodes: number, seed: number): string {
  return `node --expose-gc --import tsx --import ./test/setup.ts netsim/cli.ts ${scenario} --nodes ${nodes} --seed ${seed}`
}

export type { SimNode }
