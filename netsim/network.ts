import type { Rng } from './rng.ts'

/** Latency of one message on a link, in ms. */
export type LatencyDist =
  | { kind: 'fixed'; ms: number }
  | { kind: 'uniform'; minMs: number; maxMs: number }
  /** Log-normal around a median with shape `sigma` (heavy right tail, like real RTTs). */
  | { kind: 'lognormal'; medianMs: number; sigma: number }

export interface LinkModel {
  latency: LatencyDist
  /** Probability a message is lost. */
  loss: number
  /** Probability a message is delivered twice (the copy takes its own latency). */
  duplicate: number
  /** Probability a message is held back by up to `reorderMs` extra (overtaken by later ones). */
  reorder: number
  reorderMs: number
}

export interface NetworkModel {
  /** Links between nodes of the same site. */
  local: LinkModel
  /** Links between sites. */
  wide: LinkModel
  /** Each node's uplink in bytes per second (messages queue behind each other). */
  uplinkBytesPerSec: number
}

export const DEFAULT_NETWORK: NetworkModel = {
  local: { latency: { kind: 'lognormal', medianMs: 2, sigma: 0.5 }, loss: 0, duplicate: 0, reorder: 0, reorderMs: 0 },
  wide: { latency: { kind: 'lognormal', medianMs: 40, sigma: 0.4 }, loss: 0, duplicate: 0, reorder: 0, reorderMs: 0 },
  uplinkBytesPerSec: 12_500_000, // 100 Mbit/s
}

export function sampleLatency(d: LatencyDist, rng: Rng): number {
  switch (d.kind) {
    case 'fixed':
      return d.ms
    case 'uniform':
      return d.minMs + rng.next() * (d.maxMs - d.minMs)
    case 'lognormal':
      return d.medianMs * Math.exp(d.sigma * rng.normal())
  }
}

export function medianLatency(d: LatencyDist): number {
  return d.kind === 'fixed' ? d.ms : d.kind === 'uniform' ? (d.minMs + d.maxMs) / 2 : d.medianMs
}

/**
 * Who can send to whom. Nodes carry a partition label (0 when healed); `cut` holds blocked
 * directed label pairs. A symmetric split blocks both directions, an asymmetric one only one.
 * Reachability for gossip relayed through other nodes is the transitive closure over labels.
 * Besides groups, single directed node pairs can be dropped (`dropPairs`: A cannot reach B, both
 * reach C); such a pair still reaches through one third node both ends can reach.
 */
export class Partitions {
  label: number[] = []
  private cut = new Set<string>()
  /** Virtual time the current cut began (ground truth for the invariants). */
  since = 0
  private closure: boolean[][] | null = null
  private labels = 1
  /** Dropped directed node pairs `from>to`, and the memo of their one-relay reachability. */
  private pairs = new Set<string>()
  private pairReach = new Map<string, boolean>()

  ensure(n: number): void {
    while (this.label.length < n) this.label.push(0)
  }

  get active(): boolean {
    return this.cut.size > 0 || this.pairs.size > 0
  }

  /** Drop direct traffic between node pairs (both directions unless `oneWay`); groups are unchanged. */
  dropPairs(pairs: [number, number][], now: number, oneWay = false): void {
    for (const [a, b] of pairs) {
      this.pairs.add(`${a}>${b}`)
      if (!oneWay) this.pairs.add(`${b}>${a}`)
    }
    this.pairReach.clear()
    this.since = now
  }

  /** Split into groups (node indexes); nodes not listed stay with label 0 (their own group). */
  split(groups: number[][], now: number, oneWay?: [number, number][]): void {
    this.label.fill(0)
    groups.forEach((g, i) => g.forEach((n) => (this.label[n] = i + 1)))
    this.labels = groups.length + 1
    this.cut.clear()
    if (oneWay) for (const [a, b] of oneWay) this.cut.add(`${a + 1}>${b + 1}`)
    else for (let a = 0; a < this.labels; a++) for (let b = 0; b < this.labels; b++) if (a !== b) this.cut.add(`${a}>${b}`)
    // Label 0 (unlisted nodes) with an explicit group list: keep it cut off from the groups too.
    this.since = now
    this.closure = null
    this.pairReach.clear()
  }

  heal(now: number): void {
    this.label.fill(0)
    this.cut.clear()
    this.pairs.clear()
    this.pairReach.clear()
    this.labels = 1
    this.since = now
    this.closure = null
  }

  blocked(from: number, to: number): boolean {
    if (this.pairs.size > 0 && this.pairs.has(`${from}>${to}`)) return true
    if (this.cut.size === 0) return false
    const a = this.label[from]!
    const b = this.label[to]!
    return a !== b && this.cut.has(`${a}>${b}`)
  }

  /** Can anything `from` sends reach `to`, possibly relayed by others? */
  reaches(from: number, to: number): boolean {
    if (!this.labelReaches(from, to)) return false
    if (this.pairs.size === 0 || !this.pairs.has(`${from}>${to}`)) return true
    const key = `${from}>${to}`
    let r = this.pairReach.get(key)
    if (r === undefined) {
      r = false
      for (let k = 0; k < this.label.length && !r; k++) {
        if (k === from || k === to || this.pairs.has(`${from}>${k}`) || this.pairs.has(`${k}>${to}`)) continue
        r = this.labelReaches(from, k) && this.labelReaches(k, to)
      }
      this.pairReach.set(key, r)
    }
    return r
  }

  private labelReaches(from: number, to: number): boolean {
    if (this.cut.size === 0) return true
    if (!this.closure) this.closure = this.computeClosure()
    return this.closure[this.label[from]!]![this.label[to]!]!
  }

  private computeClosure(): boolean[][] {
    const L = this.labels
    const r = Array.from({ length: L }, (_, a) => Array.from({ length: L }, (_, b) => a === b || !this.cut.has(`${a}>${b}`)))
    for (let k = 0; k < L; k++) for (let i = 0; i < L; i++) for (let j = 0; j < L; j++) if (r[i]![k] && r[k]![j]) r[i]![j] = true
    return r
  }
}
