/**
 * Network commands: `orc get routes` (this node's tunnels, live), the `--network` flag of
 * `orc up`/`orc join`, the network columns of `orc get nodes -o wide`, and `orc why node/NAME`.
 */

import { type FederatedTunnelReport, type NetworkSetup, parseNetworkMode, type TunnelReport } from '../../agent/index.ts'
import { type Node, type NodeNetworkStatus, type NodeStatus, OrcError } from '../../model/index.ts'
import type { Stored } from '../../store/index.ts'
import { criticalChain, explainWhy, formatCriticalChain, formatWhy, parseWorkflowSnapshot } from '../../workflow/index.ts'
import { callRoute } from '../call.ts'
import { ago, formatTable } from '../format.ts'
import type { ApiCaller } from '../remote.ts'

export const NETWORK_FLAG_HELP =
  'pod network: auto (use WireGuard and pod namespaces when root and WireGuard are available), on (required), off (loopback-only pods); default $ORC_NETWORK or auto'

/** `--network`, `--wg-port` (or ORC_NETWORK) → the agent's network setup. */
export function networkSetupFromFlags(opts: { network?: string; wgPort?: string }, env: NodeJS.ProcessEnv): NetworkSetup {
  const mode = parseNetworkMode(opts.network ?? env.ORC_NETWORK, 'auto')
  const setup: NetworkSetup = { mode }
  if (opts.wgPort !== undefined) {
    const port = Number(opts.wgPort)
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      throw new OrcError('invalid', `--wg-port ${opts.wgPort}: want a UDP port number (0 = any free one)`)
    setup.listenPort = port
  }
  return setup
}

/** A handshake's age: to the nearest unit, in hours at most (a tunnel re-handshakes every few minutes). */
function handshakeAge(ms: number): string {
  return ms < 1000 ? 'now' : ago(ms, { rounding: 'nearest', largest: 'h' })
}

function bytes(n: number): string {
  if (n < 1024) return `${n}B`
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)}KiB`
  return `${(n / 1024 / 1024).toFixed(1)}MiB`
}

const PATHS: Record<string, string> = { direct: 'direct', 'peer-dials': 'direct (peer behind NAT dials)', unknown: 'none (no endpoint known)' }

function pathText(t: TunnelReport): string {
  if (t.path === 'relayed') return `relay via ${t.via ?? '?'}`
  if (t.path === 'direct' && t.punched) return 'direct (through its NAT)'
  return PATHS[t.path] ?? t.path
}

/** PATH of another cluster's pod route: `federation NAME`, relayed (`relay via NODE[@CLUSTER], federation NAME`) or carried for a node of ours. */
function fedPathText(f: FederatedTunnelReport): string {
  const fed = `federation ${f.federations.join(',')}`
  if (f.path === 'relayed') return `relay via ${f.via ?? '?'}, ${fed}`
  if (f.relayFor !== undefined && f.relayFor.length > 0) return `relay for ${f.relayFor.join(',')}, ${fed}`
  return fed
}

/**
 * `orc get routes`: the answering node's routes to every other node's /64, with tunnel state, and
 * the /128s of federated pods in other clusters (PATH `federation NAME`, NODE `node@cluster`).
 */
export async function routesOutput(client: ApiCaller, output: string, now: number): Promise<string> {
  const r = await callRoute(client, 'network')
  if (output === 'json') return JSON.stringify(r, null, 2) + '\n'
  const head = [`node ${r.node}: network ${r.state}${r.reason ? ` (${r.reason})` : ''}`]
  if (r.iface) {
    head.push(
      `  interface ${r.iface} (${r.mode ?? 'wireguard'}), prefix ${r.prefix ?? '<none yet>'}, port ${r.listenPort ?? '-'}, endpoints ${(r.endpoints ?? []).join(',') || '<none>'}`,
      `  pods: ${r.pods.length}, IPv4 egress: ${r.egress ?? '-'}`,
    )
  }
  const federated = r.federated ?? []
  if (r.tunnels.length === 0 && federated.length === 0) return head.join('\n') + '\n' + (r.iface ? '\nNo other nodes publish a tunnel yet.\n' : '')
  const wide = output === 'wide'
  const rows = r.tunnels.map((t) => {
    const row = [
      t.prefix,
      t.node,
      t.state,
      t.endpoint ?? '<learned when it dials>',
      t.latestHandshakeMs === undefined ? 'never' : handshakeAge(now - t.latestHandshakeMs),
      pathText(t),
    ]
    if (wide) row.push(bytes(t.rxBytes), bytes(t.txBytes))
    return row
  })
  // Other federated clusters' nodes: one row per federated pod /128 routed to them (NODE is node@cluster).
  for (const f of federated) {
    for (const dst of f.routes) {
      const row = [
        dst,
        f.node,
        f.state,
        f.endpoint ?? '<learned when it dials>',
        f.latestHandshakeMs === undefined ? 'never' : handshakeAge(now - f.latestHandshakeMs),
        fedPathText(f),
      ]
      if (wide) row.push(bytes(f.rxBytes), bytes(f.txBytes))
      rows.push(row)
    }
  }
  const header = ['DESTINATION', 'NODE', 'TUNNEL', 'ENDPOINT', 'HANDSHAKE', 'PATH', ...(wide ? ['RX', 'TX'] : [])]
  return head.join('\n') + '\n\n' + formatTable(header, rows)
}

/** NETWORK column of `orc get nodes -o wide`: state, prefix, tunnels up/total. */
export function nodeNetworkCell(o: Stored<Node>): string {
  const n = o.status?.network
  if (n === undefined) return '<none>'
  const t = n.tunnels as { up?: number; total?: number } | undefined
  const bits = [String(n.state ?? 'Unknown')]
  if (typeof n.prefix === 'string') bits.push(n.prefix)
  if (t && typeof t.total === 'number') bits.push(`tunnels ${t.up ?? 0}/${t.total}`)
  return bits.join(' ')
}

/** `orc why node/NAME`: the node's bring-up (network-online → ready) from its replicated status. */
export function nodeWhyOutput(node: Stored<Node>, opts: { output: string; criticalChain?: boolean }, now: number): string {
  const st: NodeStatus = node.status ?? {}
  const net: NodeNetworkStatus = st.network ?? {}
  const subject = `node/${node.metadata.name}`
  const raw = st.workflow
  const snap = raw === undefined ? undefined : parseWorkflowSnapshot(raw)
  if (opts.output === 'json') {
    const body: Record<string, unknown> = { node: subject, status: st }
    if (snap) body.explanation = opts.criticalChain ? criticalChain(snap, 'ready', { subject, now }) : explainWhy(snap, 'ready', { subject, now })
    return JSON.stringify(body, null, 2) + '\n'
  }
  const lines = [`${subject}: ${String(st.state ?? 'Unknown')}`]
  lines.push(`  network: ${String(net.state ?? 'unknown')}${net.reason ? ` (${String(net.reason)})` : ''}`)
  if (typeof net.prefix === 'string')
    lines.push(
      `  prefix ${net.prefix}, interface ${String(net.iface ?? '-')}, endpoints ${((net.endpoints as string[] | undefined) ?? []).join(',') || '<none>'}`,
    )
  const t = net.tunnels as { up?: number; total?: number } | undefined
  if (t && typeof t.total === 'number') lines.push(`  tunnels up: ${t.up ?? 0}/${t.total}`)
  if (!snap) {
    lines.push('', 'No network bring-up recorded: the node runs without a pod network (see the reason above).')
    return lines.join('\n') + '\n'
  }
  const running = snap.units.some((u) => u.state === 'running' || u.state === 'waiting') && snap.cancelled === undefined
  const at = running ? Math.max(now, snap.at) : snap.at
  lines.push('')
  lines.push(
    opts.criticalChain ? formatCriticalChain(criticalChain(snap, 'ready', { subject, now: at })) : formatWhy(explainWhy(snap, 'ready', { subject, now: at })),
  )
  return lines.join('\n') + '\n'
}
