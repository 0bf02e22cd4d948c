/** Min-heap of events ordered by (time, insertion order): equal times run in the order scheduled. */
export interface SimEvent {
  t: number
  seq: number
  fn: () => void | Promise<void>
}

export class EventHeap {
  private h: SimEvent[] = []
  private seq = 0

  get size(): number {
    return this.h.length
  }

  peekTime(): number | undefined {
    return this.h[0]?.t
  }

  push(t: number, fn: SimEvent['fn']): void {
    const e = { t, seq: this.seq++, fn }
    const h = this.h
    h.push(e)
    let i = h.length - 1
    while (i > 0) {
      const p = (i - 1) >> 1
      if (less(h[p]!, e)) break
      h[i] = h[p]!
      i = p
    }
    h[i] = e
  }

  pop(): SimEvent | undefined {
    const h = this.h
    if (h.length === 0) return undefined
    const top = h[0]!
    const last = h.pop()!
    if (h.length > 0) {
      let i = 0
      const n = h.length
      for (;;) {
        const l = 2 * i + 1
        if (l >= n) break
        const r = l + 1
        const c = r < n && less(h[r]!, h[l]!) ? r : l
        if (less(last, h[c]!)) break
        h[i] = h[c]!
        i = c
      }
      h[i] = last
    }
    return top
  }
}

function less(a: SimEvent, b: SimEvent): boolean {
  return a.t < b.t || (a.t === b.t && a.seq < b.seq)
}
