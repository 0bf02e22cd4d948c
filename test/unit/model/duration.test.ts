import assert from 'node:assert/strict'
import { test } from 'node:test'
import { formatDuration, parseQuantity } from '../../../src/model/index.ts'

// The copies formatDuration replaced, as they were: each caller's text must stay exactly the same.
const before = {
  /** sched reasons (compound, down). */
  sched(ms: number): string {
    const s = Math.max(0, Math.floor(ms / 1000))
    if (s < 120) return `${s}s`
    const m = Math.floor(s / 60)
    if (m < 120) return `${m}m`
    const h = Math.floor(m / 60)
    if (h < 48) return m % 60 === 0 ? `${h}h` : `${h}h${m % 60}m`
    const d = Math.floor(h / 24)
    return h % 24 === 0 ? `${d}d` : `${d}d${h % 24}h`
  },
  /** the CLI's `… ago` (to the second, then down). */
  cliAgo(ms: number): string {
    const s = Math.max(0, Math.round(ms / 1000))
    if (s < 120) return `${s}s ago`
    if (s < 7200) return `${Math.floor(s / 60)}m ago`
    if (s < 172800) return `${Math.floor(s / 3600)}h ago`
    return `${Math.floor(s / 86400)}d ago`
  },
  /** `orc network` handshake ages (nearest, hours at most). */
  networkAgo(ms: number): string {
    if (ms < 1000) return 'now'
    const s = Math.round(ms / 1000)
    if (s < 120) return `${s}s ago`
    if (s < 7200) return `${Math.round(s / 60)}m ago`
    return `${Math.round(s / 3600)}h ago`
  },
  /** kubectl-style AGE columns, and `orc status` uptime (whole seconds), (down). */
  age(ms: number): string {
    const sec = Math.max(0, Math.floor(ms / 1000))
    if (sec < 120) return `${sec}s`
    if (sec < 7200) return `${Math.floor(sec / 60)}m`
    if (sec < 172800) return `${Math.floor(sec / 3600)}h`
    return `${Math.floor(sec / 86400)}d`
  },
}

function samples(): number[] {
  const out: number[] = [-5000, -1, -0.5, 0, 0.4, 499, 500, 999, 1000, 1499, 1500]
  for (let s = 0; s <= 4 * 86400; s += s < 10_000 ? 1 : 7) out.push(s * 1000, s * 1000 + 499, s * 1000 + 500, s * 1000 - 1)
  // Seeded (LCG), so a failure replays.
  let x = 42
  for (let i = 0; i < 20_000; i++) {
    x = (x * 1103515245 + 12345) % 2 ** 31
    out.push((x / 2 ** 31) * 40 * 86400_000)
  }
  return out
}

test('formatDuration keeps every former copy’s text', () => {
  for (const ms of samples()) {
    assert.equal(formatDuration(ms, { compound: true }), before.sched(ms), `sched, ${ms} ms`)
    assert.equal(`${formatDuration(ms, { rounding: 'seconds' })} ago`, before.cliAgo(ms), `cli ago, ${ms} ms`)
    assert.equal(ms < 1000 ? 'now' : `${formatDuration(ms, { rounding: 'nearest', largest: 'h' })} ago`, before.networkAgo(ms), `network ago, ${ms} ms`)
    assert.equal(formatDuration(ms), before.age(ms), `age, ${ms} ms`)
  }
})

test('formatDuration reads like a person would say it', () => {
  assert.equal(formatDuration(45_000), '45s')
  assert.equal(formatDuration(90 * 60_000), '90m')
  assert.equal(formatDuration(36 * 3600_000), '36h')
  assert.equal(formatDuration(4 * 86400_000), '4d')
  assert.equal(formatDuration(150 * 60_000, { compound: true }), '2h30m')
  assert.equal(formatDuration(7 * 86400_000 + 4 * 3600_000, { compound: true }), '7d4h')
  assert.equal(formatDuration(50 * 3600_000, { largest: 'h' }), '50h')
})

test('parseQuantity reads what the runtimes and the scheduler read', () => {
  assert.equal(parseQuantity('500m'), 0.5)
  assert.equal(parseQuantity('128Mi'), 128 * 1024 * 1024)
  assert.equal(parseQuantity('1G'), 1e9)
  assert.equal(parseQuantity('2.5'), 2.5)
  assert.equal(parseQuantity(3), 3)
  assert.throws(() => parseQuantity('12 cores'), /must be a quantity like 500m/)
  assert.throws(() => parseQuantity(-1), /non-negative/)
})
