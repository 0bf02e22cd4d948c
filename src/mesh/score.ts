/**
 * Per-peer misbehaviour score. Garbage (undecodable or unmergeable messages) costs points; at or
 * below the threshold the peer is refused for a while, then starts again from zero.
 */
export class PeerScores {
  private scores = new Map<string, number>()
  private bannedUntil = new Map<string, number>()
  constructor(private readonly opts: { banThreshold: number; banMs: number }) {}

  /** Returns true if this penalty banned the peer. */
  penalise(peerId: string, amount: number, now: number): boolean {
    const s = (this.scores.get(peerId) ?? 0) - amount
    this.scores.set(peerId, s)
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

  score(peerId: string): number {
    return this.scores.get(peerId) ?? 0
  }
}
