/**
 * The files every pod gets (pure): `/etc/resolv.conf` pointing at the node's resolver with the
 * search path of its namespace, and `/etc/hosts` with its own name and address.
 */

export interface PodDnsFiles {
  resolvConf: string
  hosts: string
}

export interface PodDnsInput {
  /** The resolver's address (the cluster's DNS address in subnet 0), or undefined without one. */
  nameserver?: string
  domain: string
  namespace: string
  pod: string
  /** The pod's IPv6 address, when it has one. */
  address?: string
}

/** `ndots:5` as Kubernetes: `web.shop` and `web.shop.svc` are tried with the search path first. */
export const POD_NDOTS = 5

export function podDnsFiles(i: PodDnsInput): PodDnsFiles {
  const search = [`${i.namespace}.svc.${i.domain}`, `svc.${i.domain}`, i.domain]
  const resolv = [
    '# Written by orc for this pod (docs/services.md): the node resolver answers cluster names and forwards the rest.',
    ...(i.nameserver !== undefined ? [`nameserver ${i.nameserver}`] : ['# no resolver: this node has no pod network']),
    `search ${search.join(' ')}`,
    `options ndots:${POD_NDOTS} timeout:2 attempts:2`,
    '',
  ].join('\n')
  const fqdn = `${i.pod}.${i.namespace}.pod.${i.domain}`
  const hosts = [
    '# Written by orc for this pod.',
    '127.0.0.1\tlocalhost',
    '::1\tlocalhost ip6-localhost ip6-loopback',
    ...(i.address !== undefined ? [`${i.address}\t${fqdn} ${i.pod}`] : [`127.0.1.1\t${fqdn} ${i.pod}`]),
    '',
  ].join('\n')
  return { resolvConf: resolv, hosts }
}

/** The cluster's resolver address: `::53` in subnet 0 of the cluster /48 (RESERVED_SUBNETS). */
export function clusterDnsAddress(cluster: { addr: bigint; len: number }): bigint {
  return (cluster.addr & ~((1n << 80n) - 1n)) | 0x53n
}
