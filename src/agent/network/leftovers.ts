/**
 * `orc down` with no agent running: remove what a node network left on the host (an agent killed
 * with SIGKILL, a crash), found by the host names the agent recorded in `<data-dir>/network.json`.
 * Only those exact names are touched. Sysctls are left as they are: their earlier values died with
 * the agent.
 */
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { execaRunner } from '../../effects/index.ts'
import { OrcError } from '../../model/index.ts'
import { NetnsPodNetworkDriver, NftServiceNatDriver, WireGuardLinkDriver } from '../../net/index.ts'
import { NETWORK_NAMES_FILE } from './options.ts'
import type { NetworkNames } from './plan.ts'

const NAME_PATTERNS: Record<keyof NetworkNames, RegExp> = {
  iface: /^orc[0-9a-f]{8}$/,
  podNetnsPrefix: /^orc-[0-9a-f]{8}-$/,
  vethPrefix: /^ov[0-9a-f]{4}$/,
  nftTable: /^orc_[0-9a-f]{8}$/,
}

/** The names file of a data dir, validated (a corrupt one is an error, never a wildcard). */
export function readNetworkNames(dataDir: string): NetworkNames | undefined {
  const file = join(dataDir, NETWORK_NAMES_FILE)
  if (!existsSync(file)) return undefined
  let raw: unknown
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'))
  } catch (err) {
    throw new OrcError('corrupt', `${file} is not JSON: ${(err as Error).message}`)
  }
  const o = (raw ?? {}) as Record<string, unknown>
  for (const [k, re] of Object.entries(NAME_PATTERNS)) {
    if (typeof o[k] !== 'string' || !re.test(o[k] as string)) throw new OrcError('corrupt', `${file}: ${k} ${JSON.stringify(o[k])} is not a name orc makes`)
  }
  return { iface: o.iface as string, podNetnsPrefix: o.podNetnsPrefix as string, vethPrefix: o.vethPrefix as string, nftTable: o.nftTable as string }
}

/**
 * Remove the interface (and its wireguard-go), pod namespaces (stopping what runs in them) and the
 * NAT tables (egress, services) named in the data dir. Returns what was removed; `known: false` when the data dir never
 * had a node network.
 */
export async function removeNetworkLeftovers(dataDir: string, logger?: Logger): Promise<{ known: boolean; removed: string[] }> {
  const names = readNetworkNames(dataDir)
  if (names === undefined) return { known: false, removed: [] }
  const components = logger ? { logger } : {}
  const removed: string[] = []
  const wg = new WireGuardLinkDriver(components, { iface: names.iface })
  if ((await wg.down()).changed) removed.push(`wireguard interface ${names.iface} with its routes`)
  const podnet = new NetnsPodNetworkDriver(components, { podNetnsPrefix: names.podNetnsPrefix, vethPrefix: names.vethPrefix, nftTable: names.nftTable })
  removed.push(...(await podnet.down({ stopProcesses: true })).removed)
  removed.push(...(await new NftServiceNatDriver({ run: execaRunner }, { table: `${names.nftTable}_svc`, vethPrefix: names.vethPrefix }).down()).removed)
  return { known: true, removed }
}
