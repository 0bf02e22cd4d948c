/**
 * The node's egress NAT: one nftables table (family ip) masquerading pods' node-local IPv4
 * addresses, applied atomically with `nft -f` and replaced whole, so applying it twice is harmless.
 */
import { type Host, nsCommand, runChecked } from './exec.ts'
import { canonicalIp, canonicalPrefix } from './ip.ts'

export interface EgressRulesetOptions {
  table: string
  /** The pods' node-local IPv4 range (10.88.0.0/16). */
  podRange: string
  /** Host-side pod veths match `<vethPrefix>*`: only they may open connections to pod addresses. */
  vethPrefix: string
}

/**
 * `table … / delete table … / table … { … }` is nft's idiom for an atomic, idempotent replace:
 * the first line makes sure the delete has something to delete, all in one transaction.
 */
export function renderEgressRuleset(o: EgressRulesetOptions): string {
  const range = canonicalPrefix(o.podRange, 4)
  return [
    `table ip ${o.table}`,
    `delete table ip ${o.table}`,
    `table ip ${o.table} {`,
    `\tchain postrouting {`,
    `\t\ttype nat hook postrouting priority srcnat; policy accept;`,
    `\t\tip saddr ${range} ip daddr != ${range} masquerade`,
    `\t}`,
    `\tchain forward {`,
    `\t\ttype filter hook forward priority filter; policy accept;`,
    // Pod IPv4 addresses are node-local: nobody but the node's own pods may open connections to them.
    `\t\tip daddr ${range} iifname != "${o.vethPrefix}*" ct state new drop`,
    `\t}`,
    `}`,
    '',
  ].join('\n')
}

/**
 * The host guard: pods may not open connections to the node itself (its HTTP install listener,
 * /metrics, libp2p, anything listening on any of its addresses, the pod gateways included). Only
 * packets for the node's own addresses pass the input hook; pod-to-pod and egress traffic is
 * forwarded and never sees this chain. ICMP stays (ping, IPv6 neighbour discovery of the gateway).
 *
 * And pods send only with their own addresses: a packet from a pod's veth whose source the node
 * would not route back out of that same veth (`fib saddr . iif`: a strict reverse-path check, for
 * IPv6 and IPv4 alike) is dropped before routing. Each pod's /128 and /32 are routed to its own
 * veth, and the link-local range to every veth, so a pod (or the VM guest in it, root on its own
 * NIC) that puts another pod's address on its interface can no longer send as that pod.
 */
export function renderHostGuardRuleset(o: { table: string; vethPrefix: string; services?: { address: string; port: number }[] }): string {
  // The node services pods are meant to reach (the cluster DNS resolver), by address and port.
  const services = (o.services ?? []).flatMap((s) => {
    const addr = canonicalIp(s.address)
    const family = addr.includes(':') ? 'ip6' : 'ip'
    return [`		iifname "${o.vethPrefix}*" ${family} daddr ${addr} meta l4proto { tcp, udp } th dport ${s.port} accept`]
  })
  return [
    `table inet ${o.table}`,
    `delete table inet ${o.table}`,
    `table inet ${o.table} {`,
    `	chain prerouting {`,
    `		type filter hook prerouting priority raw; policy accept;`,
    `		iifname "${o.vethPrefix}*" fib saddr . iif oif missing drop`,
    `	}`,
    `	chain input {`,
    `		type filter hook input priority filter; policy accept;`,
    `		iifname "${o.vethPrefix}*" meta l4proto { icmp, ipv6-icmp } accept`,
    ...services,
    `		iifname "${o.vethPrefix}*" ct state new drop`,
    `	}`,
    `}`,
    '',
  ].join('\n')
}

export type NftFamily = 'ip' | 'ip6' | 'inet'

/** Current listing of the table, or undefined when it does not exist. */
export async function listNftTable(host: Host, table: string, family: NftFamily = 'ip'): Promise<string | undefined> {
  const [cmd, args] = nsCommand(host, 'nft', ['list', 'table', family, table])
  const r = await host.run(cmd, args)
  return r.exitCode === 0 ? r.stdout : undefined
}

export async function applyNftRuleset(host: Host, ruleset: string, action: string): Promise<void> {
  // `cat |`: nft opens /dev/stdin, which fails on the socket node gives a child as stdin.
  await runChecked(host.run, nsCommand(host, 'sh', ['-c', 'cat | nft -f -']), action, { input: ruleset })
}

export async function deleteNftTable(host: Host, table: string, family: NftFamily = 'ip'): Promise<boolean> {
  if ((await listNftTable(host, table, family)) === undefined) return false
  await runChecked(host.run, nsCommand(host, 'nft', ['delete', 'table', family, table]), `delete nftables table ${family} ${table}`)
  return true
}
