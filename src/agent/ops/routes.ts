/** The ops routes of the local API: clock, metrics, doctor and events; `/v1/status` gains the listener and the peers. */
import type { ObjectStore } from '../../store/index.ts'
import { errorBody, httpStatusOf, type ApiHandler, type ApiResponse } from '../api.ts'
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
}

export function withOpsRoutes(base: ApiHandler, d: OpsRoutesComponents): ApiHandler {
  return async (req) => {
    const path = req.path.split('?')[0]!
    const m = req.method.toUpperCase()
    const one = (k: string): string | undefined => {
      const v = req.query?.[k]
      return Array.isArray(v) ? v[v.length - 1] : v
    }
    try {
      if (m === 'GET' && path === '/v1/clock') return { status: 200, body: { now: Date.now() } }
      if (m === 'GET' && path === '/v1/ops/metrics') return { status: 200, body: { text: d.metrics.render() } }
      if (m === 'GET' && path === '/v1/ops/doctor') return { status: 200, body: { findings: await d.doctor() } }
      if (m === 'GET' && path === '/v1/events') {
        const since = one('since')
        const limit = one('limit')
        const target = eventTarget(one('target'), one('namespace') || undefined)
        const events = await collectEvents(d.store, {
          ...target,
          since: since !== undefined ? Number(since) : undefined,
          limit: limit !== undefined ? Math.min(10_000, Math.max(1, Number(limit) || 500)) : undefined,
          namespace: target.ref === undefined ? one('namespace') || undefined : undefined,
        })
        return { status: 200, body: { events, now: d.now() } }
      }
    } catch (err) {
      const body = errorBody(err)
      return { status: httpStatusOf(body.error.code), body }
    }
    const res: ApiResponse = await base(req)
    if (m === 'GET' && path === '/v1/status' && res.status === 200 && res.body !== null && typeof res.body === 'object') {
      const h = d.httpAddress()
      ;(res.body as Record<string, unknown>).http = h === undefined ? null : { address: h }
      // In the status answer itself: one round trip, which matters for `orc --node` (a libp2p dial per call).
      ;(res.body as Record<string, unknown>).peers = d.peers()
    }
    return res
  }
}
