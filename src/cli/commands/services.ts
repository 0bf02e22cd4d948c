/**
 * Services in the CLI: `orc get endpoints` (derived on the answering node from its Services and
 * Pods, as its DNS resolver answers them), `orc why service/NAME` and the Endpoints section of
 * `orc describe service/NAME`. Nothing here is stored: the same pure `serviceEndpoints` runs in
 * the resolver (docs/services.md).
 */
import { type Endpoint, OrcError, type Pod, type Service, type ServiceEndpoints, selectorMatches, serviceEndpoints } from '../../model/index.ts'
import type { Stored } from '../../store/index.ts'
import { callRoute } from '../call.ts'
import { formatTable, toYaml } from '../format.ts'
import { getObjectOf, type OutputFormat } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

/** The DNS name of a service, for the text outputs. */
export const CLUSTER_DOMAIN_HINT = 'cluster.local'

async function listOf<T>(c: ApiCaller, kind: 'Service' | 'Pod', namespace: string | undefined, all: boolean): Promise<Stored<T>[]> {
  const r = await callRoute(c, 'listObjects', { kind }, { query: { namespace, all: all ? 1 : undefined } })
  return r.items as unknown as Stored<T>[]
}

function endpointText(e: Endpoint): string[] {
  const addr = e.address ?? '<no address>'
  const ports = e.ports.length === 0 ? [`[${addr}]`] : e.ports.map((p) => `[${addr}]:${p.targetPort}`)
  return e.ready ? ports : ports.map((p) => `${p} (not ready)`)
}

/** `orc get endpoints [NAME]`: per service, address:port of its ready pods, then the not-ready ones marked. */
export async function endpointsOutput(
  c: ApiCaller,
  o: { namespace?: string; all: boolean; output: OutputFormat; name?: string },
): Promise<{ text: string; empty?: string }> {
  let services = await listOf<Service>(c, 'Service', o.namespace, o.all)
  if (o.name !== undefined) {
    services = services.filter((s) => s.metadata.name === o.name)
    if (services.length === 0)
      throw new OrcError('not_found', `service/${o.name} not found in namespace ${o.namespace || 'default'} (endpoints are a service's)`)
  }
  const pods = await listOf<Pod>(c, 'Pod', o.namespace, o.all)
  const eps = services.map((s) => serviceEndpoints(s, pods))
  if (o.output === 'json') return { text: JSON.stringify({ kind: 'EndpointsList', items: eps }, null, 2) + '\n' }
  if (o.output === 'yaml') return { text: toYaml({ kind: 'EndpointsList', items: eps }) }
  if (o.output === 'name') return { text: eps.map((e) => `endpoints/${e.service}\n`).join('') }
  if (eps.length === 0) return { text: '', empty: o.all ? 'No resources found.\n' : `No resources found in ${o.namespace || 'default'} namespace.\n` }
  const header = [...(o.all ? ['NAMESPACE'] : []), 'NAME', 'READY', 'ENDPOINTS']
  const rows = eps.map((e) => {
    const ready = e.endpoints.filter((x) => x.ready).length
    const list = e.endpoints.flatMap(endpointText)
    return [...(o.all ? [e.namespace] : []), e.service, `${ready}/${e.endpoints.length}`, list.length === 0 ? '<none>' : list.join(',')]
  })
  return { text: formatTable(header, rows) }
}

/** The lines of `orc why service/NAME`: its DNS name, its endpoints, and why any are missing. */
export function serviceWhyLines(svc: Service, pods: readonly Pod[], eps: ServiceEndpoints, domain = CLUSTER_DOMAIN_HINT): string[] {
  const ns = svc.metadata.namespace ?? 'default'
  const sel = Object.entries(svc.spec?.selector ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(',')
  const ready = eps.endpoints.filter((e) => e.ready)
  const out = [`service/${svc.metadata.name}: ${ready.length} ready endpoint(s) of ${eps.endpoints.length} matched`]
  const headless = svc.spec?.type === 'Headless'
  out.push(
    `  DNS: ${svc.metadata.name}.${ns}.svc.${domain} (AAAA: ${headless ? "the ready pods' addresses" : 'its virtual address, on nodes whose pod network is up'})`,
  )
  for (const p of svc.spec?.ports ?? [])
    if (p.name) out.push(`       _${p.name}._${(p.protocol ?? 'TCP').toLowerCase()}.${svc.metadata.name}.${ns}.svc.${domain} (SRV)`)
  out.push(`  selector: ${sel || '<none>'}`)
  if (eps.endpoints.length === 0) {
    const inNs = pods.filter((p) => (p.metadata.namespace ?? 'default') === ns)
    out.push('', `No pod of namespace ${ns} carries every label of the selector (${inNs.length} pod(s) in the namespace).`)
    // The pods that miss by one label: most likely what was meant.
    const near = inNs
      .map((p) => ({ p, miss: Object.entries(svc.spec?.selector ?? {}).filter(([k, v]) => p.metadata.labels?.[k] !== v) }))
      .filter((x) => x.miss.length === 1)
      .slice(0, 5)
    for (const { p, miss } of near) {
      const [k, v] = miss[0]!
      const has = p.metadata.labels?.[k]
      out.push(`  pod/${p.metadata.name} misses only ${k}=${v} (it has ${has === undefined ? `no ${k}` : `${k}=${has}`})`)
    }
    const other = pods.filter((p) => (p.metadata.namespace ?? 'default') !== ns && selectorMatches(svc.spec?.selector, p.metadata.labels))
    if (other.length > 0)
      out.push(
        `  ${other.length} pod(s) in other namespaces match (${other
          .slice(0, 3)
          .map((p) => `${p.metadata.namespace}/${p.metadata.name}`)
          .join(', ')}): a service selects only in its own`,
      )
    return out
  }
  out.push('', 'Endpoints:')
  for (const e of eps.endpoints) {
    const ports = e.ports.map((p) => `${p.name ?? p.port}→${p.targetPort}`).join(', ')
    out.push(
      `  pod/${e.pod}${e.node ? ` on ${e.node}` : ''}: ${e.ready ? 'ready' : `not ready (${e.reason})`}${e.address ? ` ${e.address}` : ''}${ports ? ` ports ${ports}` : ''}`,
    )
    for (const u of e.unresolved)
      out.push(`    port ${u}: no container port of this pod is named ${JSON.stringify(portTarget(svc, u))} (not in its SRV record)`)
  }
  if (ready.length === 0) out.push('', 'No endpoint is ready: the DNS name answers no address (NOERROR, empty) until one is.')
  return out
}

function portTarget(svc: Service, portName: string): string {
  const p = (svc.spec?.ports ?? []).find((x) => (x.name ?? String(x.port)) === portName)
  return String(p?.targetPort ?? portName)
}

/** `orc why service/NAME`. */
export async function serviceWhyOutput(c: ApiCaller, ref: { namespace: string; name: string }, output: OutputFormat): Promise<string> {
  const svc = (await getObjectOf(c, { kind: 'Service', namespace: ref.namespace, name: ref.name })) as Stored<Service>
  // Every namespace, to point at matching pods elsewhere; a role limited to one namespace gets its own.
  const pods = await listOf<Pod>(c, 'Pod', ref.namespace, true).catch((err) => {
    if (err instanceof OrcError && err.code === 'forbidden') return listOf<Pod>(c, 'Pod', ref.namespace, false)
    throw err
  })
  const eps = serviceEndpoints(svc, pods)
  if (output === 'json') return JSON.stringify({ ...eps, selector: svc.spec?.selector ?? {} }, null, 2) + '\n'
  return serviceWhyLines(svc, pods, eps).join('\n') + '\n'
}

/** The Endpoints section of `orc describe service/NAME`. */
export async function describeEndpoints(c: ApiCaller, svc: Service): Promise<ServiceEndpoints> {
  return serviceEndpoints(svc, await listOf<Pod>(c, 'Pod', svc.metadata.namespace ?? 'default', false))
}

export function endpointsSection(eps: ServiceEndpoints): string[] {
  if (eps.endpoints.length === 0) return ['Endpoints:   <none> (no pod matches the selector; orc why service/NAME)']
  const rows = eps.endpoints.map((e) => [
    e.pod,
    e.ready ? 'true' : 'false',
    e.address ?? '<none>',
    e.ports.map((p) => `${p.name ?? p.port}:${p.targetPort}/${p.protocol}`).join(',') || '<none>',
    e.node ?? '',
    e.reason ?? '',
  ])
  return [
    'Endpoints:',
    ...formatTable(['POD', 'READY', 'ADDRESS', 'PORTS', 'NODE', 'WHY NOT READY'], rows)
      .replace(/\n$/, '')
      .split('\n')
      .map((l) => `  ${l}`),
  ]
}
