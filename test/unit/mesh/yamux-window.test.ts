import assert from 'node:assert/strict'
import { test } from 'node:test'
import { StreamState, YamuxStream } from '@chainsafe/libp2p-yamux/stream'
import { halfWindowUpdates } from '../../../src/mesh/yamux-window.ts'

/** A stream with just the fields the window logic reads; sendFrame records what would go out. */
function stream(state: StreamState, capacity: number) {
  const frames: Array<{ type: number; flag: number; length: number }> = []
  const s = Object.assign(Object.create(YamuxStream.prototype), {
    state,
    recvWindow: 256 * 1024,
    recvWindowCapacity: capacity,
    maxStreamWindowSize: 256 * 1024,
    epochStart: 0,
    getRTT: () => -1,
    sendFrame: (h: { type: number; flag: number; length: number }) => frames.push(h),
  }) as { sendWindowUpdate(): void; recvWindowCapacity: number }
  return { s, frames }
}

test('yamux sends a window update only once half the receive window is used, as go-yamux does', () => {
  assert.equal(halfWindowUpdates(), true, 'the yamux stream class no longer has the shape this patch expects')
  // A small gossip message used a little of the window: no frame.
  const small = stream(StreamState.Established, 256 * 1024 - 700)
  small.s.sendWindowUpdate()
  assert.equal(small.frames.length, 0)
  // More than half used: one update restoring the whole window.
  const big = stream(StreamState.Established, 100 * 1024)
  big.s.sendWindowUpdate()
  assert.equal(big.frames.length, 1)
  assert.equal(big.frames[0]!.length, 156 * 1024)
  assert.equal(big.s.recvWindowCapacity, 256 * 1024)
  // A stream that still owes its peer an ACK sends it with the first update, however small.
  const opening = stream(StreamState.SYNReceived, 256 * 1024 - 10)
  opening.s.sendWindowUpdate()
  assert.equal(opening.frames.length, 1)
  assert.notEqual(opening.frames[0]!.flag, 0)
})
