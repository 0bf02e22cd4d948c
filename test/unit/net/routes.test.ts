import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { applyRouteDiff, diffRoutes, normalizeRoute, type Route, routeKey } from './helpers.ts'

const route: fc.Arbitrary<Route> = fc
  .record({
    v6: fc.boolean(),
    net: fc.integer({ min: 0, max: 7 }),
    dev: fc.constantFrom('wg0', 'eth0', 'orcv1'),
    via: fc.option(fc.integer({ min: 1, max: 3 }), { nil: undefined }),
    metric: fc.option(fc.constantFrom(100, 1024), { nil: undefined }),
    table: fc.option(fc.constantFrom(100), { nil: undefined }),
  })
  .map((r) => {
    const out: Route = r.v6 ? { dst: `fd00:0:0:${r.net}::/64`, dev: r.dev } : { dst: `10.${r.net}.0.0/16`, dev: r.dev }
    if (r.via !== undefined) out.via = r.v6 ? `fe80::${r.via}` : `192.0.2.${r.via}`
    if (r.metric !== undefined) out.metric = r.metric
    if (r.table !== undefined) out.table = r.table
    return out
  })

function asTable(routes: readonly Route[]): string[] {
  const seen = new Map<string, Route>()
  for (const r of routes) if (!seen.has(routeKey(r))) seen.set(routeKey(r), normalizeRoute(r))
  return [...seen.values()].map((r) => JSON.stringify(r)).sort()
}

test('applying diffRoutes(desired, actual) to actual yields desired', () => {
  fc.assert(
    fc.property(fc.array(route, { maxLength: 12 }), fc.array(route, { maxLength: 12 }), (desired, actual) => {
      const d = diffRoutes(desired, actual)
      assert.deepEqual(asTable(applyRouteDiff(actual, d)), asTable(desired))
      // And a second diff is empty: the driver then reports nothing changed.
      const again = diffRoutes(desired, applyRouteDiff(actual, d))
      assert.deepEqual(again, { add: [], remove: [], replace: [] })
    }),
    { numRuns: 500 },
  )
})

test('diff classifies add, replace and remove; spelling differences are not changes', () => {
  const actual: Route[] = [
    { dst: 'fd00:0:0:1::/64', dev: 'wg0', metric: 1024 },
    { dst: 'fd00:0:0:2::/64', dev: 'wg0' },
    { dst: '10.1.0.0/16', dev: 'eth0' },
  ]
  const desired: Route[] = [
    { dst: 'FD00:0000::1:0:0:0:5/64', dev: 'wg0' }, // same as the first, written differently
    { dst: 'fd00:0:0:2::/64', dev: 'wg1' },
    { dst: 'fd00:0:0:3::/64', dev: 'wg0' },
  ]
  const d = diffRoutes(desired, actual)
  assert.deepEqual(d.add, [{ dst: 'fd00:0:0:3::/64', dev: 'wg0' }])
  assert.deepEqual(d.replace, [{ dst: 'fd00:0:0:2::/64', dev: 'wg1' }])
  assert.deepEqual(d.remove, [{ dst: '10.1.0.0/16', dev: 'eth0' }])
})
