/**
 * `orc why ingress/NAME`: what stands between an Ingress and traffic — the controller, the nodes it
 * chose (or that none match), each port's backend service and ready endpoints, each node's report.
 * And the derived columns of `orc get services` (TYPE, CLUSTER-IP).
 */
import { clusterEndpointReach, explainIngress, objectParams } from '../../agent/index.ts'
import type { Column, Ingress, KindDef, Node, Pod, Service } from '../../model/index.ts'
import { clusterPrefix, type IpPrefix, serviceVirtualAddress, sharedServiceVirtualAddress, type VirtualAddressService } from '../../net/index.ts'
import { callRoute } from '../call.ts'
import type { ApiCaller } from '../remote.ts'

export async function ingressWhyOutput(c: ApiCaller, name: string, output: 'table' | 'json'): Promise<string> {
  const { object } = (await callRoute(c, 'getObject', objectParams({ kind: 'Ingress', namespace: '', name }))) as { object: Ingress }
  const list = async <T>(kind: string): Promise<T[]> => (await callRoute(c, 'listObjects', { kind }, { query: { all: 1 } })).items as unknown as T[]
  const [nodes, services, pods, clusters, federations] = await Promise.all([
    list<Node>('Node'),
    list<Service>('Service'),
    list<Pod>('Pod'),
    list<{ spec?: { id?: unknown } }>('Cluster').catch(() => []),
    list<{ spec?: { cluster?: unknown; namespaces?: unknown }; status?: { namespaces?: unknown } }>('Federation').catch(() => []),
  ])
  // As the serving node decides: a shared namespace's backends are its pods in this cluster only.
  const id = clusters.find((c) => typeof c.spec?.id === 'string')?.spec?.id as string | undefined
  const clusterOf = new Map<string, string>()
  for (const f of federations) {
    const now = f.status?.namespaces ?? f.spec?.namespaces
    if (typeof f.spec?.cluster === 'string' && Array.isArray(now)) for (const ns of now) if (typeof ns === 'string') clusterOf.set(ns, f.spec.cluster)
  }
  const reach = id === undefined || clusterOf.size === 0 ? undefined : clusterEndpointReach(clusterPrefix(id), (ns) => clusterOf.get(ns))
  const lines = explainIngress(object, nodes, services, pods, reach)
  if (output === 'json') return JSON.stringify({ ingress: `ingress/${name}`, status: object.status ?? {}, explanation: lines }, null, 2) + '\n'
  return [`ingress/${name} (controller ${object.spec?.controller ?? '<none>'}):`, ...lines.map((l) => `  ${l}`)].join('\n') + '\n'
}

/**
 * `orc get services`: the kind's columns plus TYPE and CLUSTER-IP after NAME. The address is derived
 * (never stored) from the cluster id, as every node derives it (src/net/services.ts); a service of a
 * namespace shared with a federation has its address in the federation's range (from its id).
 */
export async function withServiceAddressColumns(c: ApiCaller, def: KindDef): Promise<KindDef> {
  let cluster: IpPrefix | undefined
  try {
    const id = (
      (await callRoute(c, 'listObjects', { kind: 'Cluster' })).items.find((o) => typeof (o.spec as { id?: unknown } | undefined)?.id === 'string')?.spec as
        | { id?: string }
        | undefined
    )?.id
    if (typeof id === 'string') cluster = clusterPrefix(id)
  } catch {
    cluster = undefined // a role that may not read the Cluster: the column says so
  }
  // Shared namespace → federation id, from the cluster's own Federation records.
  const shared = new Map<string, string>()
  try {
    for (const f of (await callRoute(c, 'listObjects', { kind: 'Federation' })).items) {
      const spec = (f.spec ?? {}) as { id?: unknown; namespaces?: unknown }
      const now = (f.status as { namespaces?: unknown } | undefined)?.namespaces ?? spec.namespaces
      if (typeof spec.id !== 'string' || !Array.isArray(now)) continue
      for (const ns of now) if (typeof ns === 'string') shared.set(ns, spec.id)
    }
  } catch {
    // a role that may not read Federations: every service's address is taken as the cluster's
  }
  const address = (o: VirtualAddressService): string => {
    const fed = shared.get(o.metadata.namespace ?? 'default')
    if (fed !== undefined) return sharedServiceVirtualAddress(o, fed) ?? 'None'
    return cluster === undefined ? '<unknown>' : (serviceVirtualAddress(o, cluster) ?? 'None')
  }
  const extra: Column[] = [
    { header: 'TYPE', value: (o) => String((o.spec as { type?: string } | undefined)?.type ?? 'ClusterIP') },
    { header: 'CLUSTER-IP', value: (o) => address(o as unknown as VirtualAddressService) },
  ]
  const [first, ...rest] = def.columns
  return { ...def, columns: [first!, ...extra, ...rest] }
}
