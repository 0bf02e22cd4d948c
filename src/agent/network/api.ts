/** `GET /v1/network`: this node's live network view (what `orc get routes` prints). */
import { errorBody, httpStatusOf, type ApiHandler } from '../api.ts'
import type { NodeNetwork } from './controller.ts'

export function withNetworkRoutes(base: ApiHandler, network: NodeNetwork): ApiHandler {
  return async (req) => {
    const path = req.path.split('?')[0]!.replace(/\/+$/, '')
    if (path === '/v1/network' && req.method.toUpperCase() === 'GET') {
      try {
        return { status: 200, body: await network.report() }
      } catch (err) {
        const body = errorBody(err)
        return { status: httpStatusOf(body.error.code), body }
      }
    }
    return base(req)
  }
}
