/** Typed options of the net drivers, with defaults. */
import { type Logger, pino } from 'pino'
import { type Clock, type CommandRunner, execaRunner, type Random, systemClock, systemRandom } from '../effects/index.ts'
import { type ProcessTable, procfsProcessTable } from './exec.ts'

/**
 * Routes orc installs carry this `proto` number, so it can list and remove exactly its own routes
 * and never touch ones an operator or another daemon added. 79 is unassigned in iproute2's
 * rt_protos (ASCII 'O', for orc).
 */
export const ORC_ROUTE_PROTOCOL = 79

export interface NetComponents {
  /** Command runner (execa by default; a fake in unit tests). */
  run: CommandRunner
  /** Waits for daemons to come up or go away (the system clock by default). */
  clock: Clock
  logger: Logger
  processes: ProcessTable
}

export function defaultNetComponents(partial: Partial<NetComponents> = {}): NetComponents {
  return {
    run: partial.run ?? execaRunner,
    clock: partial.clock ?? systemClock,
    logger: partial.logger ?? pino({ level: 'silent' }),
    processes: partial.processes ?? procfsProcessTable,
  }
}

export type WireGuardModeOption = 'auto' | 'kernel' | 'wireguard-go'

export interface WireGuardDriverOptions {
  /** Network namespace to drive (tests and the testbed); undefined = the agent's own. */
  netns?: string
  /** 'auto' tries the kernel module and falls back to wireguard-go. */
  mode?: WireGuardModeOption
  /** Interface `down()` removes when `set()` was never called (e.g. after an agent restart). */
  iface?: string
  routeProtocol?: number
  /** How long to wait for a wireguard-go daemon to come up or go away. */
  processTimeoutMs?: number
}

export const WIREGUARD_DEFAULTS = {
  mode: 'auto' as WireGuardModeOption,
  routeProtocol: ORC_ROUTE_PROTOCOL,
  processTimeoutMs: 5000,
  mtu: 1420,
}

export interface PodNetworkDriverOptions {
  /** Network namespace of the node (where host-side veths, routes and nftables live). */
  netns?: string
  /** Pod network namespaces are named `<podNetnsPrefix><pod id>`; `set` owns every such name. */
  podNetnsPrefix?: string
  /** Host-side veths are `<vethPrefix><8 hex of hash(pod id)>` (≤ 15 chars in all). */
  vethPrefix?: string
  /** nftables table (family ip) holding the egress masquerade. */
  nftTable?: string
  routeProtocol?: number
  /** Chooses a pod's egress IPv4 given the ones in use; default: random free one in 10.88/16. */
  allocateIPv4?: (podId: string, taken: ReadonlySet<string>) => string
  random?: Random
  /** Node services pods may reach despite the host guard (the cluster DNS resolver: `[addr]:53`, UDP and TCP). */
  podServices?: { address: string; port: number }[]
}

export const PODNET_DEFAULTS = {
  podNetnsPrefix: 'orc-pod-',
  vethPrefix: 'orcv',
  nftTable: 'orc',
  routeProtocol: ORC_ROUTE_PROTOCOL,
  random: systemRandom,
  /** Interface name inside every pod. */
  podIface: 'eth0',
  /** Link-local address of the host side of every pod veth: the pods' IPv6 next hop. */
  hostLinkLocal: 'fe80::1',
}
