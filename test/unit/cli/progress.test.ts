import assert from 'node:assert/strict'
import { test } from 'node:test'
import { createProgress } from '../../../src/cli/progress.ts'

test('without a terminal each distinct step is one plain line', () => {
  let out = ''
  const p = createProgress({ write: (t) => (out += t), isTTY: false })
  p.update('connecting')
  p.update('connecting')
  p.update('syncing: 10 objects')
  p.done('ready: 12 objects')
  assert.equal(out, 'connecting\nsyncing: 10 objects\nready: 12 objects\n')
  assert.doesNotMatch(out, /\r|\x1b/)
})

test('on a terminal one line is redrawn in place and the last one kept', () => {
  let out = ''
  const p = createProgress({ write: (t) => (out += t), isTTY: true }, { intervalMs: 1_000_000 })
  p.update('connecting')
  p.update('syncing')
  p.done('ready')
  assert.match(out, /^\r\x1b\[2K. connecting\r\x1b\[2K. syncing\r\x1b\[2Kready\n$/)
})
