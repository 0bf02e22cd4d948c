/** Whether this machine can run the node network: root, iproute2, wireguard-tools, and WireGuard. */
import { existsSync } from 'node:fs'

const BIN_DIRS = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin']

function hasBin(name: string): boolean {
  return BIN_DIRS.some((d) => existsSync(`${d}/${name}`))
}

/** Why networking cannot run here (one line, says what to install), or undefined when it can. */
export async function probeNetwork(mode: 'auto' | 'kernel' | 'wireguard-go' = 'auto'): Promise<string | undefined> {
  if (process.platform !== 'linux') return 'pod networking needs Linux'
  if (process.getuid?.() !== 0) return 'pod networking needs a root agent'
  if (!hasBin('ip')) return 'pod networking needs ip (Debian package iproute2)'
  if (!hasBin('wg')) return 'pod networking needs wg (Debian package wireguard-tools)'
  const kernel = existsSync('/sys/module/wireguard')
  const userspace = hasBin('wireguard-go') && existsSync('/dev/net/tun')
  if (mode === 'kernel' && !kernel) return 'no kernel WireGuard module loaded (modprobe wireguard)'
  if (mode === 'wireguard-go' && !userspace) return 'wireguard-go or /dev/net/tun missing (Debian package wireguard-go)'
  // Without the module loaded, `ip link add … type wireguard` may still autoload it; the driver tries it first.
  if (!kernel && !userspace && !existsSync('/lib/modules')) return 'no WireGuard: no kernel module and no wireguard-go (Debian package wireguard-go)'
  return undefined
}
