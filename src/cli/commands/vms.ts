/** `orc why vm/NAME` and `orc logs vm/NAME`: a VirtualMachine's lifecycle and serial console. */
import type { LogsQuery } from '../../agent/index.ts'
import { type VirtualMachine, vmNodeOf } from '../../model/index.ts'
import { formatMemory } from '../../sched/index.ts'
import type { Stored } from '../../store/index.ts'
import { criticalChain, explainWhy, parseWorkflowSnapshot } from '../../workflow/index.ts'
import { callRoute } from '../call.ts'
import { runSnapshotText } from '../format.ts'
import type { ApiCaller } from '../remote.ts'

/** Whether `orc why`/`orc logs` TARGET [NAME] names a VM (`vm/web`, `vm web`, `virtualmachine/web`). */
export function vmTarget(target: string, nameArg: string | undefined): string | undefined {
  const m = /^(vm|vms|virtualmachine|virtualmachines)(\/(.*))?$/i.exec(target)
  if (m === null) return undefined
  return m[3] !== undefined && m[3] !== '' ? m[3] : nameArg
}

/** The scheduler's answer for an unpinned VM (the vmPlacement route). */
export interface VmPlacement {
  explainedBy: string
  explanation: { status: string; summary: string }
  text: string
}

export function vmWhyOutput(vm: Stored<VirtualMachine>, opts: { output?: string; criticalChain?: boolean }, now: number, placement?: VmPlacement): string {
  const st = vm.status ?? {}
  const subject = `vm/${vm.metadata.name}`
  const snap = st.workflow === undefined ? undefined : parseWorkflowSnapshot(st.workflow)
  const bound = vmNodeOf(vm)
  if (opts.output === 'json') {
    const body: Record<string, unknown> = { vm: subject, namespace: vm.metadata.namespace ?? 'default', status: st }
    if (placement) body.placement = { explainedBy: placement.explainedBy, ...placement.explanation, text: placement.text }
    if (snap) body.explanation = opts.criticalChain ? criticalChain(snap, 'running', { subject, now }) : explainWhy(snap, 'running', { subject, now })
    return JSON.stringify(body, null, 2) + '\n'
  }
  const lines = [
    `${subject}: ${String(st.phase ?? 'Pending')} on node ${bound ?? '<none>'}` +
      (typeof st.runningRevision === 'number' ? `, running revision ${st.runningRevision}` : '') +
      (typeof st.targetRevision === 'number' && st.targetRevision !== st.runningRevision ? `, starting revision ${st.targetRevision}` : ''),
  ]
  if (st.accel !== undefined) lines.push(`  accel: ${st.accel}${st.accelReason ? ` (${st.accelReason})` : ''}`)
  if (st.pid !== undefined) lines.push(`  qemu pid ${st.pid}${st.restarts ? `, ${st.restarts} restarts` : ''}`)
  const lim = st.limits as
    | { memoryBytes?: number; cpu?: number; pids?: number; cgroup?: string[]; enforced?: Record<string, string>; unenforced?: string }
    | undefined
  if (lim !== undefined) {
    const how = [...new Set(Object.values(lim.enforced ?? {}))].join(', ') || 'nothing'
    lines.push(
      `  limits: memory ${lim.memoryBytes === undefined ? '?' : formatMemory(lim.memoryBytes)}, cpu ${lim.cpu ?? '?'}, pids ${lim.pids ?? '?'} (enforced by ${how}${lim.cgroup?.[0] ? ` in ${lim.cgroup[0]}` : ''})`,
    )
    if (lim.unenforced !== undefined) lines.push(`  limits ${lim.unenforced}: qemu runs without them`)
  }
  if (st.ipv6 !== undefined) lines.push(`  address ${st.ipv6}`)
  else if (typeof st.network === 'string') lines.push(`  network ${st.network}`)
  if (st.reason !== undefined) lines.push(`  reason: ${st.reason}`)
  if (st.lastStop !== undefined) lines.push(`  last stop ${st.lastStop.at}: ${st.lastStop.how}${st.lastStop.detail ? ` (${st.lastStop.detail})` : ''}`)
  const sched = st.scheduling
  if (vm.spec?.node === undefined && sched?.node !== undefined)
    lines.push(`  bound to ${sched.node}${sched.from ? ` (from ${sched.from})` : ''} at ${sched.at ?? '?'}: ${sched.reason ?? ''}`)
  // Unpinned: where the scheduler puts it, or which check ruled out each node.
  if (placement && placement.explanation.status !== 'bound')
    lines.push('', `Placement (${placement.explainedBy}):`, ...placement.text.split('\n').map((l) => `  ${l}`))
  // Bound to a node the answering node does not hear: what the policy does about it (moves after haAfter, …).
  else if (placement && !placement.explanation.summary.startsWith('running on ')) lines.push(`  placement: ${placement.explanation.summary}`)
  if (!snap) {
    const node = bound ?? '<none>'
    // The VM controller's refusal for want of room (admitVms): "needs 640Mi memory; node n1 has …".
    const waiting = st.phase === 'Pending' && typeof st.reason === 'string' && /^needs /.test(st.reason)
    lines.push(
      '',
      waiting
        ? `Not started: node ${node} has no room for it yet. It starts by itself when room frees (a pod or VM leaves, or the node offers more).`
        : bound === undefined
          ? 'No lifecycle run recorded yet: no node is bound (Placement above).'
          : `No lifecycle run recorded yet: node ${node} has not started it.`,
    )
    return lines.join('\n') + '\n'
  }
  lines.push('', runSnapshotText(snap, 'running', subject, now, opts.criticalChain === true))
  return lines.join('\n') + '\n'
}

/** `orc logs vm/NAME`: the console lines, or with `follow` each new line until the guest stops. */
export async function vmLogs(
  c: ApiCaller,
  ref: { ns: string; name: string },
  opts: { revision?: string; tail?: string; follow?: boolean; json: boolean },
  out: (text: string) => void,
): Promise<void> {
  const query: LogsQuery = { revision: opts.revision, tail: opts.tail }
  const print = (lines: string[], revision: number | null) => {
    if (opts.json) for (const line of lines) out(JSON.stringify({ vm: ref.name, revision, line }) + '\n')
    else if (lines.length > 0) out(lines.join('\n') + '\n')
  }
  if (!opts.follow) {
    const r = await callRoute(c, 'vmLogs', ref, { query })
    if (opts.json) return out(JSON.stringify({ vm: `vm/${ref.name}`, namespace: ref.ns, revision: r.revision, lines: r.lines }, null, 2) + '\n')
    return print(r.lines, r.revision)
  }
  let r = await callRoute(c, 'vmLogs', ref, { query: { ...query, follow: '1' } })
  for (;;) {
    print(r.lines, r.revision)
    if (r.ended) return
    r = await callRoute(c, 'vmLogs', ref, { query: { revision: String(r.revision), follow: '1', cursor: String(r.cursor), waitMs: '10000' } })
  }
}
