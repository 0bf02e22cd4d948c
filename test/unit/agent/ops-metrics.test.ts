import assert from 'node:assert/strict'
import { test } from 'node:test'
import { MetricsRegistry, parsePrometheusText } from '../../../src/agent/ops/metrics.ts'

test('counters, gauges and histograms render as Prometheus text that parses back', () => {
  const r = new MetricsRegistry()
  const c = r.counter('orc_things_total', 'Things.')
  c.inc({ direction: 'in' })
  c.inc({ direction: 'in' }, 4)
  c.inc({ direction: 'out' })
  const g = r.gauge('orc_peers', 'Peers by state.')
  r.onCollect(() => g.set({ state: 'alive' }, 3))
  const h = r.histogram('orc_lag_seconds', 'Lag.', [0.1, 1, 10])
  for (const v of [0.05, 0.5, 0.5, 5, 50]) h.observe({}, v)
  const text = r.render()
  const { samples, types } = parsePrometheusText(text)
  const v = (name: string, labels: Record<string, string> = {}) =>
    samples.find((s) => s.name === name && Object.entries(labels).every(([k, x]) => s.labels[k] === x))?.value
  assert.equal(types.get('orc_things_total'), 'counter')
  assert.equal(v('orc_things_total', { direction: 'in' }), 5)
  assert.equal(v('orc_things_total', { direction: 'out' }), 1)
  assert.equal(v('orc_peers', { state: 'alive' }), 3, 'collectors run at scrape time')
  // Buckets are cumulative; +Inf equals the count.
  assert.deepEqual(
    [0.1, 1, 10].map((le) => v('orc_lag_seconds_bucket', { le: String(le) })),
    [1, 3, 4],
  )
  assert.equal(v('orc_lag_seconds_bucket', { le: '+Inf' }), 5)
  assert.equal(v('orc_lag_seconds_count'), 5)
  assert.equal(v('orc_lag_seconds_sum'), 56.05)
})

test('label values are escaped and read back unchanged', () => {
  const r = new MetricsRegistry()
  r.gauge('orc_info', 'Info.').set({ node: 'a"b\\c\nd' }, 1)
  const { samples } = parsePrometheusText(r.render())
  assert.equal(samples[0]!.labels.node, 'a"b\\c\nd')
})

test('the parser refuses what a scraper would refuse', () => {
  assert.throws(() => parsePrometheusText('orc_x 1\n'), /has no TYPE line/)
  assert.throws(() => parsePrometheusText('# TYPE orc_x gauge\norc_x{a="1" 1\n'), /not a sample|bad labels/)
  assert.throws(() => parsePrometheusText('# TYPE orc_x gauge\norc_x one\n'), /bad value/)
})
