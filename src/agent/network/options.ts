/** Options of the node network (WireGuard mesh and pod networking). */
import { OrcError } from '../../model/index.ts'

/**
 * `on`: networking is required; the agent refuses to start without root, `ip`, `wg` and a
 * WireGuard implementation. `auto` (the CLI's default): used when available, otherwise the agent
 * runs with loopback-only pods and says why in the Node status and `orc why node/NAME`.
 * `off`: never touched (also the default of in-process agents, e.g. tests).
 */
export type NetworkMode = 'off' | 'auto' | 'on'

export function parseNetworkMode(text: string | undefined, fallback: NetworkMode = 'auto'): NetworkMode {
  if (text === undefined || text === '') return fallback
  if (text === 'off' || text === 'auto' || text === 'on') return text
  throw new OrcError('invalid', `--network ${JSON.stringify(text)}: want off, auto or on`)
}

export interface NetworkSetup {
  mode: NetworkMode
  /** WireGuard UDP port; 0 = any free one. Default 51820, falling back to a free one when taken. */
  listenPort?: number
  /** How often the full desired state is re-applied without a store change (drift repair). */
  reconcileMs?: number
  /** How long the `tunnels` unit waits for handshakes with alive peers, per attempt. */
  handshakeTimeoutMs?: number
  /** 'auto' | 'kernel' | 'wireguard-go'. */
  wireguard?: 'auto' | 'kernel' | 'wireguard-go'
}

export const NETWORK_DEFAULTS = {
  listenPort: 51820,
  reconcileMs: 10_000,
  handshakeTimeoutMs: 30_000,
  /** A tunnel whose last handshake is older than this is down (WireGuard's REJECT_AFTER_TIME). */
  handshakeFreshMs: 180_000,
}

/** Key file (0600) and names file (for cleanup tools) in the data dir. */
export const WIREGUARD_KEY_FILE = 'wireguard.key'
export const NETWORK_NAMES_FILE = 'network.json'
/**
 * This node's pods and their addresses (uid → IPv6), kept so that after an agent restart the pods
 * of federations (whose documents open after the node network) keep their namespaces until the
 * lifecycle controller has re-adopted them.
 */
export const NETWORK_PODS_FILE = 'network-pods.json'
/** What the last `orc down` removed (written by the stopping agent, read and removed by `orc down`). */
export const NETWORK_DOWN_FILE = 'network-down.json'
