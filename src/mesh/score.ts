/**
 * Per-peer misbehaviour score. Garbage (undecodable or unmergeable messages) costs points; at or
 * below the threshold the peer is refused for a while, then starts again from zero. Points come
 * back with time, half the threshold for each half `banMs` without garbage (50 per 5 minutes by
 * default): two bad messages within five minutes ban, while a member that sends one now and then
 * (a bug, a version skew in a rolling upgrade) is not cut off for ten minutes by two of them an
 * hour apart.
 */
export class PeerScores {
  private scores = new Map<string, { score: number; at: number }>()
  private bannedUntil = new Map<string, number>()
  constructor(private readonly opts: { banThreshold: number; banMs: number }) {}

  /** Returns true if this penalty banned the peer. */
  penalise(peerId: string, amount: number, now: number): boolean {
    const s = this.scoreAt(peerId, now) - amount
    this.scores.set(peerId, { score: s, at: now })
    if (this.scores.size > 4096) for (const [p, e] of this.scores) if (this.recovered(e, now) >= 0) this.scores.delete(p)
    if (s <= this.opts.banThreshold && !this.isBanned(peerId, now)) {
      this.bannedUntil.set(peerId, now + this.opts.banMs)
      return true
    }
    return false
  }

  isBanned(peerId: string, now: number): boolean {
    const until = this.bannedUntil.get(peerId)
    if (until === undefined) return false
    if (now >= until) {
      this.bannedUntil.delete(peerId)
      this.scores.delete(peerId)
      return false
    }
    return true
  }

  /** The peer's score now (0 when clean; negative after garbage, back towards 0 with time). */
  score(peerId: string, now?: number): number {
    return now === undefined ? (this.scores.get(peerId)?.score ?? 0) : this.scoreAt(peerId, now)
  }

  private scoreAt(peerId: string, now: number): number {
    const e = this.scores.get(peerId)
    return e === undefined ? 0 : this.recovered(e, now)
  }

  private recovered(e: { score: number; at: number }, now: number): number {
    if (this.opts.banMs <= 0 || this.opts.banThreshold >= 0) return e.score
    // Half the threshold back for every half ban time without garbage (in steps, so two bad
    // messages within one step reach the threshold exactly).
    const step = this.opts.banMs / 2
    return Math.min(0, e.score + Math.floor(Math.max(0, now - e.at) / step) * (-this.opts.banThreshold / 2))
  }
}
