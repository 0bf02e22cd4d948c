/**
 * Length-prefixed frames (4-byte big-endian length, then payload) over a byte stream. The protocol
 * logic (join, sync, api) speaks `FrameChannel`, so it runs over a libp2p stream in production and
 * over an in-memory pair in unit tests.
 */
import { OrcError } from '../model/index.ts'

export interface FrameChannel {
  /** Next frame, or null when the remote closed its side cleanly. Throws on an oversized frame. */
  read(): Promise<Uint8Array | null>
  write(frame: Uint8Array): Promise<void>
  /** Close our writing side (the remote sees end of stream after the pending frames). */
  close(): Promise<void>
  /** Tear down both directions at once. */
  abort(err: Error): void
}

/** Incremental decoder: push raw chunks, pull whole frames. */
export class FrameDecoder {
  private chunks: Uint8Array[] = []
  private buffered = 0
  constructor(private readonly maxFrameBytes: number) {}

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return
    this.chunks.push(chunk)
    this.buffered += chunk.length
  }

  /** The next complete frame, or undefined when more bytes are needed. */
  next(): Uint8Array | undefined {
    if (this.buffered < 4) return undefined
    const head = this.peek(4)
    const len = ((head[0] << 24) | (head[1] << 16) | (head[2] << 8) | head[3]) >>> 0
    if (len > this.maxFrameBytes) {
      throw new OrcError('too_large', `peer sent a ${len}-byte frame (limit ${this.maxFrameBytes})`, {
        bytes: len,
        limit: this.maxFrameBytes,
      })
    }
    if (this.buffered < 4 + len) return undefined
    const all = this.take(4 + len)
    return all.subarray(4)
  }

  get pendingBytes(): number {
    return this.buffered
  }

  private peek(n: number): Uint8Array {
    if (this.chunks[0].length >= n) return this.chunks[0].subarray(0, n)
    const flat = concatBytes(this.chunks)
    this.chunks = [flat]
    return flat.subarray(0, n)
  }

  private take(n: number): Uint8Array {
    const flat = this.chunks.length === 1 ? this.chunks[0] : concatBytes(this.chunks)
    const out = flat.slice(0, n)
    const rest = flat.subarray(n)
    this.chunks = rest.length > 0 ? [rest] : []
    this.buffered = rest.length
    return out
  }
}

export function encodeFrame(payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(4 + payload.length)
  new DataView(out.buffer).setUint32(0, payload.length)
  out.set(payload, 4)
  return out
}

export function concatBytes(parts: Uint8Array[]): Uint8Array {
  let total = 0
  for (const p of parts) total += p.length
  const out = new Uint8Array(total)
  let off = 0
  for (const p of parts) {
    out.set(p, off)
    off += p.length
  }
  return out
}

/** A connected pair of in-memory channels (unit tests, the simulator). */
export function memoryChannelPair(maxFrameBytes = 4 * 1024 * 1024): [FrameChannel, FrameChannel] {
  type Queue = { items: (Uint8Array | null | Error)[]; waiters: ((v: Uint8Array | null | Error) => void)[] }
  const mk = (): Queue => ({ items: [], waiters: [] })
  const aToB = mk()
  const bToA = mk()
  const deliver = (q: Queue, v: Uint8Array | null | Error) => {
    const w = q.waiters.shift()
    if (w) w(v)
    else q.items.push(v)
  }
  const side = (inbox: Queue, outbox: Queue): FrameChannel => {
    let closed = false
    return {
      async read() {
        const v = inbox.items.length > 0 ? inbox.items.shift()! : await new Promise<Uint8Array | null | Error>((r) => inbox.waiters.push(r))
        if (v instanceof Error) {
          inbox.items.unshift(v)
          throw v
        }
        if (v === null) inbox.items.unshift(null)
        if (v !== null && v.length > maxFrameBytes) {
          throw new OrcError('too_large', `peer sent a ${v.length}-byte frame (limit ${maxFrameBytes})`)
        }
        return v
      },
      async write(frame) {
        if (closed) throw new OrcError('unavailable', 'channel closed')
        deliver(outbox, frame.slice())
      },
      async close() {
        if (closed) return
        closed = true
        deliver(outbox, null)
      },
      abort(err) {
        closed = true
        deliver(outbox, err)
        deliver(inbox, err)
      },
    }
  }
  return [side(bToA, aToB), side(aToB, bToA)]
}
