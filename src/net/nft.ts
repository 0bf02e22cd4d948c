/**
 * The node's egress NAT: one nftables table (family ip) masquerading pods' node-local IPv4
 * addresses, applied atomically with `nft -f` and replaced whole, so applying it twice is harmless.
 */
import { type Host, nsCommand, runChecked } from './exec.ts'
import { canonicalPrefix } from './ip.ts'

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

/** Current listing of the table, or undefined when it does not exist. */
export async function listNftTable(host: Host, table: string): Promise<string | undefined> {
  const [cmd, args] = nsCommand(host, 'nft', ['list', 'table', 'ip', table])
  const r = await host.run(cmd, args)
  return r.exitCode === 0 ? r.stdout : undefined
}

export async function applyNftRuleset(host: Host, ruleset: string, action: string): Promise<void> {
  // `cat |`: nft opens /dev/stdin, which fails on the socket node gives a child as stdin.
  await runChecked(host.run, nsCommand(host, 'sh', ['-c', 'cat | nft -f -']), action, { input: ruleset })
}

export async function deleteNftTable(host: Host, table: string): Promise<boolean> {
  if ((await listNftTable(host, table)) === undefined) return false
  await runChecked(host.run, nsCommand(host, 'nft', ['delete', 'table', 'ip', table]), `delete nftables table ${table}`)
  return true
}
