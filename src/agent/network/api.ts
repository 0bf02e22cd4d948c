/**
 * `GET /v1/network`: this node's live network view (what `orc get routes` prints).
 * `POST /v1/down`: `orc down` — stop the agent the way SIGTERM does, and also remove what the node
 * network made on the host (pod namespaces, NAT table, sysctls); answers before stopping, with the
 * agent's pid (to wait for) and what will be removed.
 */

import type { DownResponse } from '../api-types.ts'
import type { RouteHandlers } from '../router.ts'
import type { NodeNetwork } from './controller.ts'

export type { DownResponse } from '../api-types.ts'

export interface NetworkRoutesOptions {
  /** Stop the agent (the same path as SIGTERM); called after the answer is sent. */
  shutdown?: () => void
  pid?: number
  dataDir?: string
}

export function networkRoutes(network: NodeNetwork, opts: NetworkRoutesOptions = {}): RouteHandlers {
  const shutdown = opts.shutdown
  return {
    network: () => network.report(),
    // Served only when there is a way to stop the agent.
    ...(shutdown !== undefined
      ? {
          down: () => {
            const body: DownResponse = {
              node: network.nodeName,
              pid: opts.pid ?? process.pid,
              ...(opts.dataDir ? { dataDir: opts.dataDir } : {}),
              network: network.prepareDown(),
            }
            // Let the answer go out before the API closes.
            setTimeout(shutdown, 50)
            return body
          },
        }
      : {}),
  }
}
