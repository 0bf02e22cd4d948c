/**
 * The operator's side of a node, as the agent exposes it: its metrics registry, the peers table of
 * `orc status` and the HTTP listener's address. The parts live in their own modules — node-metrics
 * (Prometheus), events and routes (the API), node-doctor (`orc doctor`), install-listener (the
 * bootstrap script and /metrics) — and are composed in the agent's composition root.
 */
import type { MetricsRegistry } from './metrics.ts'
import type { PeerRow } from './peers.ts'

export type { PeerRow } from './peers.ts'

export interface NodeOps {
  metrics: MetricsRegistry
  /** `host:port` the HTTP listener is bound to, when it runs. */
  httpAddress(): string | undefined
  /** `sha256//…` pin of its certificate's public key, when it runs. */
  httpPin(): string | undefined
  peers(): PeerRow[]
}
