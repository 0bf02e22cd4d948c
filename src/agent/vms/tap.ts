/**
 * The VM's NIC on the pod network: inside the VM's own pod network namespace (made by the node
 * network like any pod's, with its IPv6 address on `eth0` and the host-side route to it), a bridge
 * `br0` takes `eth0` and a tap device `tap0` that qemu opens. The guest sets the pod's address on
 * its NIC (given on the kernel command line), so the node's route and neighbour discovery reach the
 * guest through the bridge, and the guest's default route is the node's link-local `fe80::1` as a
 * pod's is. Declarative: run again, it changes only what is missing.
 */
import { createHash } from 'node:crypto'
import type { CommandRunner } from '../../effects/index.ts'
import { OrcError } from '../../model/index.ts'

export const VM_TAP = 'tap0'
export const VM_BRIDGE = 'br0'
const POD_IFACE = 'eth0'

/** A stable, locally administered MAC for the guest's NIC (qemu's 52:54:00 prefix), from the VM's uid. */
export function guestMac(uid: string): string {
  const h = createHash('sha256').update(uid).digest()
  return ['52', '54', '00', ...[h[0]!, h[1]!, h[2]!].map((b) => b.toString(16).padStart(2, '0'))].join(':')
}

interface LinkJson {
  ifname: string
  flags?: string[]
  master?: string
}

/** Make (or check) br0 + tap0 in the namespace at `netnsPath`; returns what it changed. */
export async function ensureVmTap(run: CommandRunner, nsenter: string, netnsPath: string): Promise<string[]> {
  const inNs = (args: string[], input?: string) =>
    run(nsenter, [`--net=${netnsPath}`, '--', 'ip', ...args], { timeoutMs: 10_000, ...(input !== undefined ? { input } : {}) })
  const shown = await inNs(['-j', 'link', 'show'])
  if (shown.exitCode !== 0) throw new OrcError('unavailable', `list links in ${netnsPath}: ${shown.stderr.trim()}`)
  const links = new Map((JSON.parse(shown.stdout || '[]') as LinkJson[]).map((l) => [l.ifname, l]))
  if (!links.has(POD_IFACE)) throw new OrcError('unavailable', `the VM's network namespace ${netnsPath} has no ${POD_IFACE}`)
  const lines: string[] = []
  // No multicast snooping: neighbour solicitations must reach the guest before it has sent any MLD report.
  if (!links.has(VM_BRIDGE)) lines.push(`link add ${VM_BRIDGE} type bridge mcast_snooping 0`)
  if (!(links.get(VM_BRIDGE)?.flags ?? []).includes('UP')) lines.push(`link set ${VM_BRIDGE} up`)
  if (!links.has(VM_TAP)) lines.push(`tuntap add dev ${VM_TAP} mode tap`)
  if (links.get(VM_TAP)?.master !== VM_BRIDGE) lines.push(`link set ${VM_TAP} master ${VM_BRIDGE}`)
  if (!(links.get(VM_TAP)?.flags ?? []).includes('UP')) lines.push(`link set ${VM_TAP} up`)
  if (links.get(POD_IFACE)?.master !== VM_BRIDGE) lines.push(`link set ${POD_IFACE} master ${VM_BRIDGE}`)
  if (lines.length === 0) return []
  const r = await inNs(['-batch', '-'], `${lines.join('\n')}\n`)
  if (r.exitCode !== 0) throw new OrcError('unavailable', `create ${VM_TAP} in ${netnsPath}: ${r.stderr.trim()}`)
  return lines
}
