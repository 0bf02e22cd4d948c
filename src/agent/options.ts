import { readFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import type { Clock, Random } from '../effects/index.ts'
import type { MeshTunables } from '../mesh/index.ts'
import { OrcError, parseQuantity, USER_NAME } from '../model/index.ts'
import { type DnsSetup, dnsSetupFromEnv } from './dns/options.ts'
import type { NetworkSetup } from './network/options.ts'
import type { HttpListenOption } from './ops/options.ts'
import { type PodTunables, podTunablesFromEnv } from './pods/options.ts'

/** Where an agent keeps its state when no `--data-dir` is given: system-wide as root, per user otherwise. */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env, uid: number = process.getuid?.() ?? -1): string {
  if (env.ORC_DATA_DIR) return env.ORC_DATA_DIR
  if (uid === 0) return '/var/lib/orc'
  const base = env.XDG_DATA_HOME || join(env.HOME || homedir(), '.local', 'share')
  return join(base, 'orc')
}

export const SOCKET_FILE = 'orc.sock'
export const PID_FILE = 'orc.pid'

/** The pid recorded in a data dir's pid file, if it holds one. */
export function readPid(dataDir: string): number | undefined {
  try {
    const n = Number(readFileSync(join(dataDir, PID_FILE), 'utf8').trim())
    return Number.isInteger(n) && n > 0 ? n : undefined
  } catch {
    return undefined
  }
}

export function socketPathOf(dataDir: string): string {
  return join(dataDir, SOCKET_FILE)
}

/** The socket the CLI talks to: `--socket`, then `ORC_SOCKET`, then the default data dir's socket. */
export function resolveSocketPath(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return flag || env.ORC_SOCKET || socketPathOf(defaultDataDir(env))
}

/**
 * What `startAgent` takes from the environment, read here at the edge (the CLI) rather than inside
 * the agent: `ORC_POD_TUNABLES` (JSON pod timers, for tests), `ORC_PRUNE_INTERVAL_MS` and
 * `ORC_IMAGE_STORES` (image directories the operator trusts besides `<data-dir>/images`), `ORC_VM_ACCEL`,
 * `ORC_NODE_CAPACITY` (what this node offers pods and VMs, `cpu=2,memory=4Gi`; default the machine's).
 */
export function agentOptionsFromEnv(
  env: NodeJS.ProcessEnv,
): Pick<AgentOptions, 'pods' | 'pruneIntervalMs' | 'imageStores' | 'socketUser' | 'dns' | 'volumes' | 'vms' | 'capacity'> {
  const prune = Number(env.ORC_PRUNE_INTERVAL_MS) || undefined
  const stores = (env.ORC_IMAGE_STORES ?? '').split(':').filter((s) => s.startsWith('/'))
  const user = env.ORC_SOCKET_USER
  if (user !== undefined && user !== '' && !USER_NAME.test(user)) {
    throw new OrcError('invalid', `ORC_SOCKET_USER ${JSON.stringify(user)}: not a user name (lower-case letters, digits, - _ .)`)
  }
  const capacity = env.ORC_NODE_CAPACITY ? parseNodeCapacity(env.ORC_NODE_CAPACITY) : undefined
  return {
    ...(capacity !== undefined ? { capacity } : {}),
    pods: { tunables: podTunablesFromEnv(env) },
    dns: dnsSetupFromEnv(env),
    ...(prune !== undefined ? { pruneIntervalMs: prune } : {}),
    ...(stores.length > 0 ? { imageStores: stores } : {}),
    ...(user !== undefined && user !== '' ? { socketUser: user } : {}),
    volumes: volumeOptionsFromEnv(env),
    ...(env.ORC_VM_ACCEL === 'kvm' || env.ORC_VM_ACCEL === 'tcg' || env.ORC_VM_ACCEL === 'auto' ? { vms: { accel: env.ORC_VM_ACCEL } } : {}),
  }
}

/** `cpu=2,memory=4Gi` (either or both) as a Node's capacity; an error names the variable and the part. */
export function parseNodeCapacity(text: string): { cpu?: string; memory?: string } {
  const out: { cpu?: string; memory?: string } = {}
  for (const part of text.split(',')) {
    const [k, v, ...rest] = part.trim().split('=')
    if ((k !== 'cpu' && k !== 'memory') || v === undefined || v === '' || rest.length > 0 || out[k] !== undefined)
      throw new OrcError('invalid', `ORC_NODE_CAPACITY ${JSON.stringify(text)}: ${JSON.stringify(part)} is not cpu=N or memory=N (e.g. cpu=2,memory=4Gi)`)
    let q: number
    try {
      q = parseQuantity(v)
    } catch (err) {
      throw new OrcError('invalid', `ORC_NODE_CAPACITY ${k}=${v}: ${(err as Error).message}`)
    }
    if (!(q > 0)) throw new OrcError('invalid', `ORC_NODE_CAPACITY ${k}=${v}: must be more than 0`)
    out[k] = v
  }
  return out
}

function volumeOptionsFromEnv(env: NodeJS.ProcessEnv): NonNullable<AgentOptions['volumes']> {
  const grace = Number(env.ORC_VOLUME_GRACE_SECONDS)
  const timeout = Number(env.ORC_VOLUME_DRIVER_TIMEOUT_SECONDS)
  return {
    ...(env.ORC_VOLUME_DRIVERS?.startsWith('/') ? { driverDir: env.ORC_VOLUME_DRIVERS } : {}),
    ...(Number.isFinite(grace) && grace > 0 ? { graceMs: grace * 1000 } : {}),
    ...(Number.isFinite(timeout) && timeout > 0 ? { driverTimeoutMs: timeout * 1000 } : {}),
    ...(env.ORC_VOLUME_NO_LOOP === '1' ? { noLoop: true } : {}),
  }
}

/** How the agent's mesh listens, announces and joins (`orc start`, `orc join`; see cluster.ts). */
export interface MeshSetup {
  /** Listen multiaddrs (already parsed). Default: DEFAULT_LISTEN of the mesh. */
  listen?: string[]
  /** Addresses to advertise instead of the listen addresses. */
  announce?: string[]
  /** Listen multiaddrs of the join host (`--join-listen`); `[]`: none (`off`). Default: the mesh's, two ports lower. */
  joinListen?: string[]
  /** `orc join`: the token, the peer named on the command line, progress lines. */
  join?: { token: string; peer?: string; onProgress?: (line: string) => void }
  tunables?: Partial<MeshTunables>
}

export interface AgentOptions {
  dataDir: string
  /** Node name; defaults to the host name made into a DNS label. */
  nodeName?: string
  /** Labels for this node's Node object (`--labels k=v,…`). */
  labels?: Record<string, string>
  /** Name of the Cluster object created on a fresh data dir. */
  clusterName?: string
  /** Socket path; defaults to `<dataDir>/orc.sock`. */
  socketPath?: string
  /**
   * The user the local socket speaks as (`ORC_SOCKET_USER`). Default: `admin` on the node that
   * created the cluster (it holds admin.credential) or without the mesh; `root.NODE` (the role
   * `node-admin`) on a node that joined. docs/security.md, "Identities and roles".
   */
  socketUser?: string
  /** Time and timers of every component (the system clock unless given). */
  clock?: Clock
  /** Random bytes of every component: cluster ids, store replica ids, keys (system unless given). */
  random?: Random
  /** Log level (`info` unless given). */
  logLevel?: string
  /** Pretty logs (default: when stderr is a TTY). */
  prettyLogs?: boolean
  /** Run the mesh (create, restart or join the cluster; see cluster.ts). Off when absent. */
  mesh?: MeshSetup
  /** Pod lifecycle timers (production values unless given; the CLI reads `ORC_POD_TUNABLES`). */
  pods?: { tunables?: Partial<PodTunables> }
  /** HTTP listener for the install script, the package and /metrics (`--http-listen`). Off when absent. */
  http?: HttpListenOption
  /** How often the agent prunes stable Yjs tombstones (ms; default 2 min; the CLI reads ORC_PRUNE_INTERVAL_MS). */
  pruneIntervalMs?: number
  /** Node network (WireGuard, pod namespaces): `off` when absent; the CLI defaults to `auto`. */
  network?: NetworkSetup
  /**
   * Whether an author may approve SecurityPolicy grants (the two-party rule, pods/security.ts).
   * Default: any `user:` author, until roles decide it.
   */
  isAdmin?: (author: string) => boolean
  /**
   * Directories besides `<dataDir>/images` whose images pods may name without a hostPath grant:
   * the operator's choice at start (`ORC_IMAGE_STORES`, colon-separated), never a pod's.
   */
  imageStores?: readonly string[]
  /**
   * Volumes (docs/storage.md): where driver executables are (`ORC_VOLUME_DRIVERS`, default
   * `<dataDir>/volume-drivers`), how long a deleted Volume's data is kept (`ORC_VOLUME_GRACE_SECONDS`,
   * default 24 h), directory backing only (`ORC_VOLUME_NO_LOOP=1`), a driver call's timeout.
   */
  volumes?: { driverDir?: string; graceMs?: number; noLoop?: boolean; driverTimeoutMs?: number }
  /** VirtualMachines (docs/runtimes.md): qemu's accelerator (`ORC_VM_ACCEL`: auto, the default, kvm or tcg). */
  vms?: { accel?: 'auto' | 'kvm' | 'tcg' }
  /**
   * What this node offers pods and VMs (`Node.status.capacity`; `ORC_NODE_CAPACITY=cpu=2,memory=4Gi`):
   * each part given replaces the machine's figure (its cores, its total memory).
   */
  capacity?: { cpu?: string; memory?: string }
  /**
   * The node's DNS resolver (docs/services.md; the CLI reads `ORC_DNS`, `ORC_DNS_LISTEN`,
   * `ORC_DNS_UPSTREAM`, `ORC_CLUSTER_DOMAIN`). Off when absent, as for in-process test agents.
   */
  dns?: DnsSetup
}

export const DEFAULT_CLUSTER_NAME = 'default'
