import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { concatBytes, encodeFrame, FrameDecoder } from '../../../src/mesh/framing.ts'
import { decodeMemberMessage } from '../../../src/mesh/gossip.ts'
import { SEED } from '../../mesh/helpers.ts'

test('frames survive any split of the byte stream', () => {
  fc.assert(
    fc.property(fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 20 }), fc.array(fc.nat(400), { maxLength: 30 }), (frames, cuts) => {
      const wire = concatBytes(frames.map(encodeFrame))
      const dec = new FrameDecoder(1000)
      const out: Uint8Array[] = []
      let off = 0
      for (const c of [...cuts, wire.length]) {
        const end = Math.min(wire.length, off + c)
        dec.push(wire.subarray(off, end))
        off = end
        for (let f = dec.next(); f !== undefined; f = dec.next()) out.push(f)
      }
      assert.deepEqual(
        out.map((f) => [...f]),
        frames.map((f) => [...f]),
      )
    }),
    { seed: SEED, numRuns: 200 },
  )
})

test('an oversized frame is refused from its header, before buffering it', () => {
  const dec = new FrameDecoder(16)
  dec.push(encodeFrame(new Uint8Array(17)).subarray(0, 4))
  assert.throws(() => dec.next(), { code: 'too_large' })
})

test('member messages: arbitrary bytes never throw, only decode or not', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (b) => {
      decodeMemberMessage(b)
    }),
    { seed: SEED, numRuns: 300 },
  )
  fc.assert(
    fc.property(fc.jsonValue(), (v) => {
      decodeMemberMessage(new TextEncoder().encode(JSON.stringify(v)))
    }),
    { seed: SEED, numRuns: 300 },
  )
  assert.deepEqual(decodeMemberMessage(new TextEncoder().encode('{"t":"hb","name":"a","addresses":[],"seq":1}')), {
    t: 'hb',
    name: 'a',
    addresses: [],
    seq: 1,
  })
})
