/**
 * `orc describe KIND/NAME`: one object as a reader wants it — who made it and when, its spec and
 * status, its conditions, for a pod why it is placed where it is (or nowhere), and the recent events
 * and revisions (what `orc events` and `orc history` show of it). Each part the agent cannot give
 * (a role without history rights, an older agent) is left out with a note, not an error.
 */
import type { Command } from 'commander'
import { type ClusterEvent, type FederationGovernanceView, type NodeAllocation, nodeAllocation, type ResponseOf } from '../../agent/index.ts'
import { age, getKind, labelsText, type Node, type ObjectRef, type Pod, type Service, type ServiceEndpoints, type VirtualMachine } from '../../model/index.ts'
import { formatCpu, formatMemory } from '../../sched/index.ts'
import type { Revision, Stored, StoredObject } from '../../store/index.ts'
import { callRoute } from '../call.ts'
import { examples, formatTable, historyTable, toYaml } from '../format.ts'
import { getObjectOf, objectRef, outputOption, refText, takesObjects } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'
import { governanceSection } from './federation.ts'
import { eventsTable } from './ops.ts'
import { describeEndpoints, endpointsSection } from './services.ts'

export interface DescribeCliIO {
  out(text: string): void
  err(text: string): void
  now(): number
}

/** What describe gathers of one object; `-o json|yaml` prints it as it is. */
export interface Description {
  object: StoredObject
  revisions?: Revision[]
  revisionCount?: number
  events?: ClusterEvent[]
  placement?: { explainedBy: string; text: string; status: string }
  /** A Service's endpoints, derived from the pods as the node's DNS resolver sees them. */
  endpoints?: ServiceEndpoints
  /** A Federation's quorum and membership proposals, as the federation's document holds them here. */
  governance?: FederationGovernanceView
  /** A Node's capacity and what its pods and VMs hold of it (as the scheduler counts them). */
  allocation?: NodeAllocation
  /** Parts left out, with why (`events: forbidden …`). */
  missing: string[]
}

const REVISIONS = 5
const EVENTS = 10

type Condition = { type?: unknown; status?: unknown; reason?: unknown; message?: unknown; lastTransitionTime?: unknown }

/** A Secret's sealed values as their key, size and hash; the ciphertext says nothing to a reader. */
function specForReading(obj: StoredObject): unknown {
  const spec = obj.spec as Record<string, unknown> | undefined
  if (obj.kind !== 'Secret' || spec === undefined || spec.sealed === null || typeof spec.sealed !== 'object') return spec
  const sealed = Object.fromEntries(
    Object.entries(spec.sealed as Record<string, { size?: unknown; hash?: unknown; binary?: unknown }>).map(([k, v]) => [
      k,
      `<sealed: ${String(v?.size)} bytes${v?.binary ? ', binary' : ''}, hash ${String(v?.hash)}>`,
    ]),
  )
  return { ...spec, sealed }
}

function indent(text: string, by = '  '): string {
  return text
    .replace(/\n$/, '')
    .split('\n')
    .map((l) => (l === '' ? l : by + l))
    .join('\n')
}

async function attempt<T>(what: string, missing: string[], f: () => Promise<T>): Promise<T | undefined> {
  try {
    return await f()
  } catch (err) {
    missing.push(`${what}: ${(err as Error).message.split('\n')[0]}`)
    return undefined
  }
}

/** Everything describe shows of `ref`, asked of the agent in parallel. */
export async function describeObject(c: ApiCaller, ref: ObjectRef): Promise<Description> {
  const object = await getObjectOf(c, ref)
  const missing: string[] = []
  const target = refText(ref)
  const ns = ref.namespace || undefined
  const [history, events, placement] = await Promise.all([
    attempt('revisions', missing, () => callRoute(c, 'history', { kind: ref.kind, ns: ref.namespace || '_', name: ref.name })),
    attempt('events', missing, () => callRoute(c, 'events', {}, { query: { target, namespace: ns, since: 0, limit: EVENTS } })),
    ref.kind === 'Pod'
      ? attempt('placement', missing, () => callRoute(c, 'podPlacement', { ns: ref.namespace, name: ref.name }))
      : ref.kind === 'VirtualMachine' && (object.spec as { node?: unknown } | undefined)?.node === undefined
        ? attempt('placement', missing, () => callRoute(c, 'vmPlacement', { ns: ref.namespace, name: ref.name }))
        : Promise.resolve(undefined as ResponseOf<'podPlacement'> | undefined),
  ])
  const d: Description = { object, missing }
  if (history) {
    d.revisions = history.revisions.slice(-REVISIONS)
    d.revisionCount = history.revisions.length
  }
  if (events) d.events = events.events.slice(-EVENTS)
  if (placement) d.placement = { explainedBy: placement.explainedBy, text: placement.text, status: placement.explanation.status }
  if (ref.kind === 'Service') {
    const eps = await attempt('endpoints', missing, () => describeEndpoints(c, object as unknown as Service))
    if (eps) d.endpoints = eps
  }
  if (ref.kind === 'Node') {
    const lists = await attempt('allocated', missing, () =>
      Promise.all(['Pod', 'VirtualMachine'].map((kind) => callRoute(c, 'listObjects', { kind }, { query: { all: 1 } }))),
    )
    if (lists)
      d.allocation = nodeAllocation(
        object as unknown as Stored<Node>,
        lists[0]!.items as unknown as Stored<Pod>[],
        lists[1]!.items as unknown as Stored<VirtualMachine>[],
      )
  }
  if (ref.kind === 'Federation') {
    const f = await attempt('proposals', missing, () => callRoute(c, 'federation', { name: ref.name }))
    if (f?.federation.governance) d.governance = f.federation.governance
  }
  return d
}

/**
 * ```
 * Allocated (what pods and VMs hold of the capacity):
 *   HOLDER         CPU     MEMORY   NOTE
 *   1 pod          100m    128Mi
 *   vm/default/a   1       384Mi    Running; 256Mi guest + 128Mi qemu
 *   total          1100m   512Mi    28% cpu, 50% memory
 *   free           2900m   512Mi    of cpu 4, memory 1Gi
 * ```
 */
function allocationSection(a: NodeAllocation): string[] {
  const vmCpu = a.vms.reduce((s, v) => s + v.cpu, 0)
  const vmMem = a.vms.reduce((s, v) => s + v.mem, 0)
  const cpu = a.pods.cpu + vmCpu
  const mem = a.pods.mem + vmMem
  const pct = (used: number, of: number | undefined) => (of ? `${Math.round((used / of) * 100)}%` : '?')
  const rows = [
    [`${a.pods.count} pod${a.pods.count === 1 ? '' : 's'}`, formatCpu(a.pods.cpu), formatMemory(a.pods.mem), ''],
    ...a.vms.map((v) => [
      `vm/${v.name}`,
      formatCpu(v.cpu),
      formatMemory(v.mem),
      `${v.phase}; ${formatMemory(v.guestMem)} guest + ${formatMemory(v.mem - v.guestMem)} qemu`,
    ]),
    ['total', formatCpu(cpu), formatMemory(mem), `${pct(cpu, a.capacity.cpu)} cpu, ${pct(mem, a.capacity.mem)} memory`],
  ]
  const c = a.capacity
  if (c.cpu !== undefined && c.mem !== undefined)
    rows.push([
      'free',
      formatCpu(Math.max(0, c.cpu - cpu)),
      formatMemory(Math.max(0, c.mem - mem)),
      `of cpu ${formatCpu(c.cpu)}, memory ${formatMemory(c.mem)}`,
    ])
  return ['Allocated (what pods and VMs hold of the capacity):', indent(formatTable(['HOLDER', 'CPU', 'MEMORY', 'NOTE'], rows))]
}

/**
 * ```
 * Disks (in the guest's order; serial = name, /dev/disk/by-id/virtio-NAME):
 *   NAME     DEVICE   SOURCE
 *   data     vda      emptyDisk 1Gi
 *   cidata   vdb      cloud-init NoCloud seed (read-only)
 * ```
 * From status.disks (what the node attached), else the spec's (not prepared yet).
 */
function vmDisksSection(vm: VirtualMachine): string[] {
  const st = (vm.status?.disks ?? undefined) as { name: string; device: string; source: string; readOnly?: boolean }[] | undefined
  const rows = Array.isArray(st)
    ? st.map((x) => [x.name, x.device, `${x.source}${x.readOnly ? ' (read-only)' : ''}`])
    : [
        ...(vm.spec?.disks ?? []).map((x) => [
          x.name,
          '?',
          x.emptyDisk ? `emptyDisk ${x.emptyDisk.size}` : x.image !== undefined ? `image ${x.image}` : `volume ${x.volume?.name ?? '?'}`,
        ]),
        ...(vm.spec?.cloudInit ? [['cidata', '?', 'cloud-init NoCloud seed (read-only)']] : []),
      ]
  if (rows.length === 0) return []
  return ['', "Disks (in the guest's order; serial = name, /dev/disk/by-id/virtio-NAME):", indent(formatTable(['NAME', 'DEVICE', 'SOURCE'], rows))]
}

/** The text form: kubectl describe's sections, orc's content. */
export function formatDescription(d: Description, now: number): string {
  const o = d.object
  const meta = o.metadata as StoredObject['metadata'] & { createdAt?: string; updatedAt?: string; updatedBy?: string; revision?: number }
  const def = getKind(o.kind)
  const out: string[] = []
  const field = (k: string, v: string) => out.push(`${`${k}:`.padEnd(13)}${v}`)
  field('Name', meta.name)
  if (def.namespaced) field('Namespace', meta.namespace ?? 'default')
  field('Kind', o.kind)
  field('Labels', labelsText(meta.labels))
  field('Annotations', labelsText(meta.annotations))
  if (meta.createdAt) field('Created', `${meta.createdAt} (${age(meta.createdAt, now)} ago)`)
  if (meta.updatedAt) field('Updated', `${meta.updatedAt} by ${meta.updatedBy ?? '?'} (revision ${meta.revision ?? '?'})`)
  const spec = specForReading(o)
  if (spec !== undefined) out.push('', 'Spec:', indent(toYaml(spec)))
  const { workflow: _w, conditions, ...status } = (o.status ?? {}) as Record<string, unknown>
  if (Object.keys(status).length > 0) out.push('', 'Status:', indent(toYaml(status)))
  if (Array.isArray(conditions) && conditions.length > 0) {
    const rows = (conditions as Condition[]).map((c) => [
      String(c.type ?? '?'),
      String(c.status ?? '?'),
      typeof c.reason === 'string' ? c.reason : '',
      typeof c.lastTransitionTime === 'string' ? `${age(c.lastTransitionTime, now)} ago` : '',
      typeof c.message === 'string' ? c.message : '',
    ])
    out.push('', 'Conditions:', indent(formatTable(['TYPE', 'STATUS', 'REASON', 'SINCE', 'MESSAGE'], rows)))
  }
  if (d.placement) out.push('', `Placement (${d.placement.explainedBy}):`, indent(d.placement.text))
  if (d.endpoints) out.push('', ...endpointsSection(d.endpoints))
  if (d.governance) out.push('', ...governanceSection(d.governance))
  if (d.allocation) out.push('', ...allocationSection(d.allocation))
  if (o.kind === 'VirtualMachine') out.push(...vmDisksSection(o as unknown as VirtualMachine))
  if (d.revisions) {
    const shown =
      d.revisions.length < (d.revisionCount ?? 0)
        ? ` (last ${d.revisions.length} of ${d.revisionCount}; orc history ${refText({ kind: o.kind, name: o.metadata.name })})`
        : ''
    out.push('', `Revisions${shown}:`, d.revisions.length === 0 ? '  <none>' : indent(historyTable(d.revisions)))
  }
  if (d.events) out.push('', 'Events:', d.events.length === 0 ? '  <none>' : indent(eventsTable(d.events)))
  for (const m of d.missing) out.push('', `(${m})`)
  return out.join('\n') + '\n'
}

export function registerDescribeCommand(program: Command, io: DescribeCliIO, client: (cmd: Command) => ApiCaller): void {
  takesObjects(
    program
      .command('describe')
      .description('Show one object in detail: spec, status, conditions, placement (pods, unpinned VMs), recent events and revisions')
      .argument('<KIND/NAME>', 'like pod/web, or KIND NAME')
      .argument('[NAME]', 'the name, when KIND is given alone')
      .option('-n, --namespace <ns>', 'namespace (default: default)')
      .addOption(outputOption(['table', 'json', 'yaml']))
      .addHelpText(
        'after',
        examples(`
  # A pod: where it runs and why, what happened to it, who changed it
  orc describe pod/web

  # kubectl style
  orc describe pinneddeployment web

  # Everything, for a script
  orc describe node/n1 -o json`),
      ),
  ).action(async (target: string, name: string | undefined, opts, cmd: Command) => {
    const ref = objectRef([target, name ?? ''], { namespace: opts.namespace })
    const d = await describeObject(client(cmd), ref)
    if (opts.output === 'json') return io.out(JSON.stringify(d, null, 2) + '\n')
    if (opts.output === 'yaml') return io.out(toYaml(d))
    io.out(formatDescription(d, io.now()))
  })
}
