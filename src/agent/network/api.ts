/**
 * `GET /v1/network`: this node's live network view (what `orc get routes` prints).
 * `POST /v1/down`: `orc down` — stop the agent the way SIGTERM does, and also remove what the node
 * network made on the host (pod namespaces, NAT table, sysctls); answers before stopping, with the
 * agent's pid (to wait for) and what will be removed.
 */
import { errorBody, httpStatusOf, type ApiHandler } from '../api.ts'
import type { DownPlan, NodeNetwork } from './controller.ts'

export interface DownResponse {
  node: string
  pid: number
  dataDir?: string
  network: DownPlan
}

export interface NetworkRoutesOptions {
  /** Stop the agent (the same path as SIGTERM); called after the answer is sent. */
  shutdown?: () => void
  pid?: number
  dataDir?: string
}

export function withNetworkRoutes(base: ApiHandler, network: NodeNetwork, opts: NetworkRoutesOptions = {}): ApiHandler {
  return async (req) => {
    const path = req.path.split('?')[0]!.replace(/\/+$/, '')
    const method = req.method.toUpperCase()
    if (path === '/v1/network' && method === 'GET') {
      try {
        return { status: 200, body: await network.report() }
      } catch (err) {
        const body = errorBody(err)
        return { status: httpStatusOf(body.error.code), body }
      }
    }
    if (path === '/v1/down' && method === 'POST' && opts.shutdown !== undefined) {
      const shutdown = opts.shutdown
      const body: DownResponse = { node: network.nodeName, pid: opts.pid ?? process.pid, ...(opts.dataDir ? { dataDir: opts.dataDir } : {}), network: network.prepareDown() }
      // Let the answer go out before the API closes.
      setTimeout(shutdown, 50)
      return { status: 202, body }
    }
    return base(req)
  }
}
