/**
 * Fakes of the net drivers for other modules' unit tests: same interfaces, in-memory state, the
 * same `changed` semantics (a repeated identical `set` reports false), no processes.
 */
import type { CommandOptions, CommandResult, CommandRunner, Random } from '../effects/index.ts'
import { chooseEgressIPv4 } from './addressing.ts'
import { canonicalIp } from './ip.ts'
import { publicKeyOf } from './keys.ts'
import type { PodNetworkConfig, PodNetworkDriver, PodNetworkSetResult, PodNetworkState } from './podnet.ts'
import type { ServiceNatConfig, ServiceNatDriver } from './services.ts'
import {
  normalizeWireGuardConfig,
  type WireGuardConfig,
  type WireGuardDriver,
  type WireGuardMode,
  type WireGuardSetResult,
  type WireGuardStatus,
} from './wireguard.ts'

export class FakeWireGuardDriver implements WireGuardDriver {
  /** The applied (normalised) config; undefined when down. */
  config: WireGuardConfig | undefined
  /** Every config passed to set, in order. */
  readonly history: WireGuardConfig[] = []
  /** Public key → the latest handshake (ms) that `status()` reports for that peer. */
  readonly handshakes = new Map<string, number>()
  constructor(readonly mode: WireGuardMode = 'kernel') {}

  async set(input: WireGuardConfig): Promise<WireGuardSetResult> {
    const config = normalizeWireGuardConfig(input)
    this.history.push(config)
    const changed = JSON.stringify(config) !== JSON.stringify(this.config)
    this.config = config
    return { changed, mode: this.mode, actions: changed ? ['set'] : [] }
  }

  async status(): Promise<WireGuardStatus | undefined> {
    const c = this.config
    if (c === undefined) return undefined
    return {
      iface: c.iface,
      publicKey: publicKeyOf(c.privateKey),
      listenPort: c.listenPort,
      peers: c.peers.map((p) => {
        const hs = this.handshakes.get(p.publicKey)
        return { ...p, allowedIps: [...p.allowedIps], rxBytes: 0, txBytes: 0, ...(hs !== undefined ? { latestHandshakeMs: hs } : {}) }
      }),
    }
  }

  async down(): Promise<{ changed: boolean }> {
    const changed = this.config !== undefined
    this.config = undefined
    return { changed }
  }
}

export class FakePodNetworkDriver implements PodNetworkDriver {
  readonly pods = new Map<string, PodNetworkState>()
  egress = false

  constructor(
    private readonly random: Random,
    private readonly netnsPrefix = 'orc-pod-',
  ) {}

  async set(config: PodNetworkConfig): Promise<PodNetworkSetResult> {
    const actions: string[] = []
    const want = new Set(config.pods.map((p) => p.id))
    for (const id of [...this.pods.keys()]) {
      if (!want.has(id)) {
        this.pods.delete(id)
        actions.push(`remove pod ${id}`)
      }
    }
    for (const p of config.pods) {
      const old = this.pods.get(p.id)
      const ipv6 = canonicalIp(p.ipv6)
      const taken = new Set([...this.pods.values()].map((s) => s.ipv4))
      const ipv4 = p.ipv4 !== undefined ? canonicalIp(p.ipv4) : (old?.ipv4 ?? chooseEgressIPv4(taken, this.random))
      const state: PodNetworkState = { id: p.id, netns: `${this.netnsPrefix}${p.id}`, hostVeth: `fake-${p.id}`.slice(0, 15), ipv6, ipv4 }
      if (JSON.stringify(old) !== JSON.stringify(state)) actions.push(`configure pod ${p.id}`)
      this.pods.set(p.id, state)
    }
    const egress = config.egress ?? true
    if (egress !== this.egress) actions.push(egress ? 'apply egress nat' : 'remove egress nat')
    this.egress = egress
    return { changed: actions.length > 0, pods: config.pods.map((p) => this.pods.get(p.id)!), actions }
  }

  async down(): Promise<{ changed: boolean }> {
    const changed = this.pods.size > 0 || this.egress
    this.pods.clear()
    this.egress = false
    return { changed }
  }
}

export interface RecordedCommand {
  cmd: string
  args: string[]
  opts?: CommandOptions
}

/**
 * A command runner that records every call and answers with `respond` (default: success, no
 * output), for unit tests of code that drives `ip`/`wg`/`nft`.
 */
export function recordingRunner(
  respond: (c: RecordedCommand) => Partial<CommandResult> | undefined = () => undefined,
): CommandRunner & { calls: RecordedCommand[] } {
  const calls: RecordedCommand[] = []
  const run = (async (cmd: string, args: readonly string[], opts?: CommandOptions) => {
    const c: RecordedCommand = { cmd, args: [...args], ...(opts ? { opts } : {}) }
    calls.push(c)
    const r = respond(c) ?? {}
    return { stdout: r.stdout ?? '', stderr: r.stderr ?? '', exitCode: r.exitCode ?? 0 }
  }) as CommandRunner & { calls: RecordedCommand[] }
  run.calls = calls
  return run
}

/** The service NAT driver's fake: the last config applied (undefined when down). */
export class FakeServiceNatDriver implements ServiceNatDriver {
  config: ServiceNatConfig | undefined

  async set(config: ServiceNatConfig): Promise<{ changed: boolean; actions: string[] }> {
    const text = (c: ServiceNatConfig | undefined) => JSON.stringify(c, (_k, v) => (typeof v === 'bigint' ? String(v) : v))
    const changed = text(config) !== text(this.config)
    this.config = config
    return { changed, actions: changed ? ['apply'] : [] }
  }

  async down(): Promise<{ changed: boolean; removed: string[] }> {
    const had = this.config !== undefined
    this.config = undefined
    return { changed: had, removed: had ? ['service table'] : [] }
  }
}
