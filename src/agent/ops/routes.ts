/** The ops routes of the local API: clock, metrics, doctor and events; the node's status gains the listener and the peers. */

import type { Query } from '../../model/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import type { RouteHandlers } from '../router.ts'
import type { StatusView } from '../routes.ts'
import type { Finding } from './doctor.ts'
import { collectEvents, eventTarget } from './events.ts'
import type { MetricsRegistry } from './metrics.ts'
import type { PeerRow } from './peers.ts'

export interface OpsRoutesComponents {
  store: ObjectStore
  now: () => number
  metrics: MetricsRegistry
  doctor: () => Promise<Finding[]>
  peers: () => PeerRow[]
  httpAddress: () => string | undefined
  httpPin: () => string | undefined
}

/** The ops routes, by route name (routes.ts): clock, metrics, doctor, events. */
export function opsRoutes(d: OpsRoutesComponents) {
  const one = (q: Query, k: string): string | undefined => {
    const v = q[k]
    return Array.isArray(v) ? v[v.length - 1] : v
  }
  return {
    clock: () => ({ now: d.now() }),
    metrics: () => ({ text: d.metrics.render() }),
    doctor: async () => ({ findings: await d.doctor() }),
    events: async ({ query: q }) => {
      const since = one(q, 'since')
      const limit = one(q, 'limit')
      const target = eventTarget(one(q, 'target'), one(q, 'namespace') || undefined)
      const events = await collectEvents(d.store, {
        ...target,
        since: since !== undefined ? Number(since) : undefined,
        limit: limit !== undefined ? Math.min(10_000, Math.max(1, Number(limit) || 500)) : undefined,
        namespace: target.ref === undefined ? one(q, 'namespace') || undefined : undefined,
      })
      return { events, now: d.now() }
    },
  } satisfies RouteHandlers
}

/** What the node's status answer gains from ops: the HTTP listener and the peers table. */
export function opsStatusFields(d: OpsRoutesComponents): Pick<StatusView, 'http' | 'peers'> {
  const h = d.httpAddress()
  // In the status answer itself: one round trip, which matters for `orc --node` (a libp2p dial per call).
  return { http: h === undefined ? null : { address: h, pin: d.httpPin() ?? '' }, peers: d.peers() }
}
