import { defineKind, type ObjectOfKind } from '../kind.ts'
import type { Infer, Issue, Typed } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt, labelsSchema, labelsText } from './common.ts'

/**
 * Service: a name for the ready pods of a namespace that match `selector`, with named ports. Its
 * endpoints are not stored: every node derives them from the replicated pods (src/model/kinds/
 * service.ts `serviceEndpoints`), and the node's DNS resolver answers `NAME.NS.svc.CLUSTER` with the
 * ready pods' addresses and SRV records for the named ports (docs/services.md). A stable virtual
 * address (`spec.type` ClusterIP, the default) is derived on every node from the namespace and name
 * (src/net/services.ts `serviceVirtualAddress`) and load-balanced to the ready pods with nftables.
 */

/** A port name: an IANA service name (≤ 15 characters, lowercase letters, digits and -, at least one letter). */
export const PORT_NAME = /^(?=.*[a-z])[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$/
const PORT_NAME_TEXT = 'a port name (≤15 lowercase letters, digits and -, at least one letter)'
const portName = s.string({ pattern: PORT_NAME, patternName: PORT_NAME_TEXT })

/** A container port's number or its name (`containers[].ports[].name`). Checked by `serviceIssues`. */
const targetPort = s.any() as Typed<number | string>

const servicePort = s.object({
  /** Required when the service has more than one port; names the SRV record `_NAME._tcp.SERVICE.NS.svc.CLUSTER`. */
  name: portName,
  /** The port clients use (today the same as the pod's: there is no virtual address translating it yet). */
  port: s.required(s.int({ min: 1, max: 65535 })),
  /** The pods' port: a number, or the name of a container port (default: `port`). */
  targetPort,
  protocol: s.enum('TCP', 'UDP'),
})

export const MAX_SERVICE_PORTS = 64

const serviceSpec = s.object({
  /** ClusterIP (default): a stable virtual address load-balanced to the ready pods (src/net/services.ts); Headless: none, DNS answers the pods. */
  type: s.enum('ClusterIP', 'Headless'),
  /** The labels a pod of the service's namespace must all carry (at least one). */
  selector: s.required(labelsSchema),
  ports: s.array(servicePort, { maxItems: MAX_SERVICE_PORTS }),
})

function serviceIssues(spec: Record<string, any> | undefined): Issue[] {
  if (spec === undefined) return []
  const issues: Issue[] = []
  const sel = spec.selector
  if (sel !== null && typeof sel === 'object' && !Array.isArray(sel) && Object.keys(sel).length === 0)
    issues.push({ path: 'spec.selector', rule: 'must name at least one label (an empty selector would select every pod of the namespace)' })
  const ports: unknown[] = Array.isArray(spec.ports) ? spec.ports : []
  const names = new Map<string, number>()
  const numbers = new Map<string, number>()
  ports.forEach((raw, i) => {
    const p = (raw ?? {}) as Record<string, unknown>
    const base = `spec.ports[${i}]`
    if (ports.length > 1 && (p.name === undefined || p.name === ''))
      issues.push({ path: `${base}.name`, rule: 'required when a service has more than one port' })
    if (typeof p.name === 'string') {
      const j = names.get(p.name)
      if (j !== undefined) issues.push({ path: `${base}.name`, rule: `duplicates spec.ports[${j}].name ${JSON.stringify(p.name)}` })
      else names.set(p.name, i)
    }
    if (typeof p.port === 'number') {
      const key = `${p.port}/${p.protocol ?? 'TCP'}`
      const j = numbers.get(key)
      if (j !== undefined) issues.push({ path: `${base}.port`, rule: `duplicates spec.ports[${j}] (${key})` })
      else numbers.set(key, i)
    }
    const t = p.targetPort
    if (t === undefined) return
    if (typeof t === 'number') {
      if (!Number.isInteger(t) || t < 1 || t > 65535)
        issues.push({ path: `${base}.targetPort`, rule: `must be a port number 1-65535 or a container port's name; got ${t}` })
    } else if (typeof t === 'string') {
      if (!PORT_NAME.test(t))
        issues.push({ path: `${base}.targetPort`, rule: `must be a port number or a container port's name (${PORT_NAME_TEXT}); got ${JSON.stringify(t)}` })
    } else {
      issues.push({
        path: `${base}.targetPort`,
        rule: `must be a port number or a container port's name, got ${t === null ? 'null' : Array.isArray(t) ? 'array' : typeof t}`,
      })
    }
  })
  return issues
}

/** `PORTS` column: `80/TCP,dns:53/UDP→5353`. */
export function portsText(spec: { ports?: ServicePort[] } | undefined): string {
  const ports = Array.isArray(spec?.ports) ? spec.ports : []
  if (ports.length === 0) return '<none>'
  return ports
    .map((p) => {
      const target = p.targetPort !== undefined && p.targetPort !== p.port ? `→${p.targetPort}` : ''
      return `${p.name ? `${p.name}:` : ''}${p.port}/${p.protocol ?? 'TCP'}${target}`
    })
    .join(',')
}

export const serviceKind = defineKind({
  kind: 'Service',
  plural: 'services',
  aliases: ['service', 'svc'],
  namespaced: true,
  spec: serviceSpec,
  owned: [],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'PORTS', value: (o) => portsText(o.spec) },
    { header: 'SELECTOR', value: (o) => labelsText(o.spec?.selector) },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
  check(obj) {
    return serviceIssues(obj.spec)
  },
})

// Interfaces (not aliases) so that type errors name them.
export interface Service extends ObjectOfKind<typeof serviceKind> {}
export type ServiceSpec = NonNullable<Service['spec']>
export type ServicePort = Infer<typeof servicePort>
