import { defineKind, type ObjectOfKind } from '../kind.ts'
import type { Infer, Issue, Typed } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt, dnsName, labelsSchema, labelsText } from './common.ts'

/**
 * Ingress: traffic from outside the cluster (IPv4 and/or IPv6) to a Service, kept out of core: the
 * object names the controller that serves it (`spec.controller`), and only that controller acts on
 * it and writes its status, one entry per node it listens on (`status.nodes.NODE`, written by that
 * node only). orc ships one controller, `tcp-proxy` (src/agent/ingress, docs/services.md).
 */

/** A service port's number or name (`spec.ports[].name` of the Service). */
const servicePortRef = s.any() as Typed<number | string>

const backend = s.object({
  service: s.required(dnsName),
  /** The service's namespace (default `default`): an Ingress is a cluster object. */
  namespace: dnsName,
  /** The service port: its number or its name. */
  port: s.required(servicePortRef),
})

const listenPort = s.int({ min: 1, max: 65535 })

const ingressSpec = s.object({
  /** The controller that serves this Ingress (`tcp-proxy`: the one orc ships). */
  controller: s.required(dnsName),
  /** Where the ports of `listen.ports` (and any port without a rule) send connections. */
  backend,
  /** A listen port with its own backend. */
  rules: s.array(s.object({ port: s.required(listenPort), backend: s.required(backend) }), { maxItems: 64 }),
  listen: s.object({
    /** Ports served by `spec.backend`. */
    ports: s.array(listenPort, { maxItems: 64 }),
    /** Address families to listen on (default both). */
    families: s.array(s.enum('IPv4', 'IPv6'), { maxItems: 2 }),
  }),
  /** The nodes to listen on, by name. */
  nodes: s.array(s.string({ minLength: 1, maxLength: 253 }), { maxItems: 1024 }),
  /** Or the nodes whose labels carry all of these. Neither: every node. */
  nodeSelector: labelsSchema,
})

export type IngressBackend = Infer<typeof backend>

/** One node's report (written by that node's controller only). */
export interface IngressNodeStatus {
  /** `ADDRESS:PORT` it listens on (`[v6]:port` for IPv6). */
  addresses?: string[]
  /** Ready endpoints behind it, over all its ports. */
  backends?: number
  /** Whether every port listens and has a ready endpoint. */
  ready?: boolean
  /** Why not, in one line. */
  reason?: string
  updatedAt?: string
}

/** Written by the serving controller (controller:ingress), each node its own entry. */
export interface IngressStatus {
  nodes?: Record<string, IngressNodeStatus>
  [field: string]: unknown
}

/** Each listen port and the backend serving it: rules first, then `listen.ports` with `spec.backend`. */
export function ingressPorts(
  spec: { backend?: IngressBackend; rules?: { port: number; backend: IngressBackend }[]; listen?: { ports?: number[] } } | undefined,
): {
  port: number
  backend: IngressBackend | undefined
}[] {
  const out: { port: number; backend: IngressBackend | undefined }[] = []
  const seen = new Set<number>()
  for (const r of spec?.rules ?? [])
    if (!seen.has(r.port)) {
      seen.add(r.port)
      out.push({ port: r.port, backend: r.backend })
    }
  for (const p of spec?.listen?.ports ?? [])
    if (!seen.has(p)) {
      seen.add(p)
      out.push({ port: p, backend: spec?.backend })
    }
  return out
}

function backendIssues(b: Record<string, unknown> | undefined, path: string): Issue[] {
  const p = b?.port
  if (p === undefined) return []
  if (typeof p === 'number')
    return Number.isInteger(p) && p >= 1 && p <= 65535
      ? []
      : [{ path: `${path}.port`, rule: `must be a port number 1-65535 or a service port's name; got ${p}` }]
  if (typeof p === 'string' && /^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$/.test(p)) return []
  return [{ path: `${path}.port`, rule: `must be a service port's number or name; got ${JSON.stringify(p)}` }]
}

function ingressIssues(spec: Record<string, any> | undefined): Issue[] {
  if (spec === undefined) return []
  const issues: Issue[] = []
  if (spec.backend !== undefined) issues.push(...backendIssues(spec.backend, 'spec.backend'))
  const rules: any[] = Array.isArray(spec.rules) ? spec.rules : []
  const ports = new Map<number, string>()
  rules.forEach((r, i) => {
    issues.push(...backendIssues(r?.backend, `spec.rules[${i}].backend`))
    if (typeof r?.port !== 'number') return
    const j = ports.get(r.port)
    if (j !== undefined) issues.push({ path: `spec.rules[${i}].port`, rule: `duplicates ${j}` })
    else ports.set(r.port, `spec.rules[${i}].port`)
  })
  const listen: unknown[] = Array.isArray(spec.listen?.ports) ? spec.listen.ports : []
  listen.forEach((p, i) => {
    if (typeof p !== 'number') return
    const j = ports.get(p)
    if (j !== undefined) issues.push({ path: `spec.listen.ports[${i}]`, rule: `duplicates ${j}` })
    else ports.set(p, `spec.listen.ports[${i}]`)
  })
  if (listen.length > 0 && spec.backend === undefined)
    issues.push({ path: 'spec.backend', rule: 'required to serve spec.listen.ports (or give each port a rule)' })
  if (ports.size === 0) issues.push({ path: 'spec.listen.ports', rule: 'at least one port to listen on (spec.listen.ports with spec.backend, or spec.rules)' })
  const families: unknown[] = Array.isArray(spec.listen?.families) ? spec.listen.families : []
  if (new Set(families).size !== families.length) issues.push({ path: 'spec.listen.families', rule: 'lists a family twice' })
  if (spec.nodes !== undefined && spec.nodeSelector !== undefined)
    issues.push({ path: 'spec.nodeSelector', rule: 'give spec.nodes or spec.nodeSelector, not both' })
  return issues
}

function backendText(b: IngressBackend | undefined): string {
  if (b === undefined) return '<none>'
  return `${b.namespace && b.namespace !== 'default' ? `${b.namespace}/` : ''}${b.service}:${b.port}`
}

/** `PORTS` column: `80→web:http,443→web:https`. */
export function ingressPortsText(spec: Parameters<typeof ingressPorts>[0]): string {
  const ps = ingressPorts(spec)
  return ps.length === 0 ? '<none>' : ps.map((p) => `${p.port}→${backendText(p.backend)}`).join(',')
}

/** `NODES` column: nodes ready / nodes reporting. */
function nodesText(st: IngressStatus | undefined): string {
  const nodes = Object.values(st?.nodes ?? {})
  if (nodes.length === 0) return '<none>'
  return `${nodes.filter((n) => n?.ready === true).length}/${nodes.length}`
}

export const ingressKind = defineKind({
  kind: 'Ingress',
  plural: 'ingresses',
  aliases: ['ingress', 'ing'],
  namespaced: false,
  spec: ingressSpec,
  status: s.open<IngressStatus>(),
  owned: [{ path: 'status', owner: 'controller:ingress' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'CONTROLLER', value: (o) => o.spec?.controller ?? '<none>' },
    { header: 'PORTS', value: (o) => ingressPortsText(o.spec) },
    { header: 'READY', value: (o) => nodesText(o.status) },
    { header: 'NODES', value: (o) => (o.spec?.nodes ? o.spec.nodes.join(',') : o.spec?.nodeSelector ? labelsText(o.spec.nodeSelector) : '<all>'), wide: true },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
  check(obj) {
    return ingressIssues(obj.spec)
  },
})

// An interface (not an alias) so that type errors name it.
export interface Ingress extends ObjectOfKind<typeof ingressKind> {}
export type IngressSpec = NonNullable<Ingress['spec']>
