// The pnet cipher's memory growth (src/mesh/xsalsa20-fix.ts): three streams alternating 1 MiB
// updates — what several connections carrying replica syncs do — exhaust the WebAssembly memory
// without the fix (shown in a child process) and stay small with it; the ciphertext is unchanged.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { test } from 'node:test'
import xsalsa20 from 'xsalsa20'
import { fixXsalsa20 } from '../../../src/mesh/xsalsa20-fix.ts'

const ALTERNATE = `
const X = require('xsalsa20')
const xs = [0, 1, 2].map(() => X(Buffer.alloc(24), Buffer.alloc(32)))
const buf = Buffer.alloc(1 << 20)
for (let i = 0; i < 200; i++) for (const x of xs) x.update(buf)
console.log('ok')
`

test('xsalsa20: alternating large updates exhaust its memory without the fix, not with it; same ciphertext', () => {
  const child = spawnSync(process.execPath, ['-e', ALTERNATE], { encoding: 'utf8' })
  assert.match(child.stderr, /Maximum memory size exceeded/, 'the unfixed module fails (if this changes, the fix may be dropped)')

  const nonce = randomBytes(24)
  const key = randomBytes(32)
  const data = randomBytes(3 << 20)
  const reference = xsalsa20(nonce, key).update(data)
  assert.equal(fixXsalsa20(), true)
  assert.equal(fixXsalsa20(), false, 'installed once')
  const xs = [0, 1, 2].map(() => xsalsa20(Buffer.alloc(24), Buffer.alloc(32)))
  const buf = Buffer.alloc(1 << 20)
  for (let i = 0; i < 200; i++) for (const x of xs) x.update(buf)
  // The same stream cipher output in pieces, interleaved with other streams' updates and with new
  // streams opened meanwhile (the package moves its data area when it runs out of stream slots).
  const enc = xsalsa20(nonce, key)
  const opened: unknown[] = []
  const out = Buffer.concat(
    [0, 1, 2].map((i) => {
      // Another stream grows the memory (this one's view is detached), and the slots run out.
      xs[i]!.update(Buffer.alloc((4 + i) << 20))
      for (let k = 0; k < 5; k++) opened.push(xsalsa20(Buffer.alloc(24), Buffer.alloc(32)).update(buf))
      return Buffer.from(enc.update(data.subarray(i << 20, (i + 1) << 20)))
    }),
  )
  assert.ok(out.equals(Buffer.from(reference)), 'ciphertext unchanged by the fix')
  const dec = xsalsa20(nonce, key).update(out)
  assert.ok(Buffer.from(dec).equals(data))
})

// Several live streams (every pointer slot taken), each growing the memory in turn with updates of
// rising size: every stream's output must be the cipher stream it would give alone. A fix that made
// a stream of its own to read the memory shifted the shared scratch area in the middle of an update
// when no slot was free, and that update came out wrong.
test('xsalsa20 (fixed): interleaved streams that grow the memory keep their exact output', () => {
  fixXsalsa20()
  const keys = [0, 1, 2, 3].map(() => ({ nonce: randomBytes(24), key: randomBytes(32) }))
  const sizes = [1000, 70_000, 200_000, 1 << 20, 3 << 20, 5 << 20]
  const data = randomBytes(sizes.reduce((a, b) => a + b, 0))
  // Alone, one at a time: the reference stream of each key.
  const reference = keys.map(({ nonce, key }) => {
    const s = xsalsa20(nonce, key)
    const out = Buffer.from(s.update(data))
    s.finalize()
    return out
  })
  const live = keys.map(({ nonce, key }) => xsalsa20(nonce, key))
  const outs: Buffer[][] = keys.map(() => [])
  let at = 0
  for (const size of sizes) {
    for (let i = 0; i < live.length; i++) outs[i]!.push(Buffer.from(live[i]!.update(data.subarray(at, at + size))))
    at += size
  }
  for (let i = 0; i < live.length; i++) assert.ok(Buffer.concat(outs[i]!).equals(reference[i]!), `stream ${i} differs from its cipher stream`)
})
