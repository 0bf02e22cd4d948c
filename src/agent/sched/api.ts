/**
 * Scheduling routes of a node's API:
 * - `GET  /v1/pods/NS/NAME/placement`: `explainPod` on this node's view (which constraint ruled out
 *   which node, or what the policy decides for a bound pod) — `orc why` prints it;
 * - `GET  /v1/vms/NS/NAME/placement`: the same for an unpinned VirtualMachine (placed as a pod is);
 * - `POST /v1/nodes/NAME/forget`: `orc node forget` — mark the node gone in the replicated store
 *   (`Node.status.forgotten`), so its best-effort pods move now. The node's agent clears the mark
 *   when it starts again.
 */
import { isPlainObject, OrcError } from '../../model/index.ts'
import { type ClusterView, explainPod, formatExplanation, type SchedOptions } from '../../sched/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { NODE_CONTROLLER } from '../node-info.ts'
import type { RouteHandlers } from '../router.ts'
import { type NodeMember, vmSchedKey } from './view.ts'

export interface SchedApiComponents {
  store: ObjectStore
  nodeName: string
  now(): number
  members(): readonly NodeMember[]
  schedView(): { view: ClusterView; opts: SchedOptions }
  /** The store and view of the scope holding a namespace (a federation's shared namespace); absent: the cluster's. */
  scopeView?(ns: string): { store: ObjectStore; view: ClusterView; opts: SchedOptions }
}

const AUTHOR = /^(user|controller):[A-Za-z0-9][-A-Za-z0-9_.@]{0,127}$/

async function forgetNode(
  c: SchedApiComponents,
  name: string,
  author: string,
  reason: string | undefined,
  force: boolean,
): Promise<{ node: string; forgotten: true; pods: number }> {
  const ref = { kind: 'Node', namespace: '', name }
  const node = c.store.get(ref)
  if (node === undefined) throw new OrcError('not_found', `node/${name} not found`, { ...ref })
  if (name === c.nodeName) throw new OrcError('invalid', `node/${name} is this node: run orc node forget on another node of the cluster`)
  const member = c.members().find((x) => x.name === name)
  if (member?.state === 'alive' && !force) {
    throw new OrcError(
      'conflict',
      `node/${name} is alive as this node sees it: its pods would run twice until it hears of this (use --force if you are sure)`,
      { name },
    )
  }
  const now = c.now()
  const pods = c.store.list('Pod').filter((p) => p.status?.node === name).length
  await c.store.patch(ref, [{ path: ['status', 'forgotten'], value: { at: new Date(now).toISOString(), by: author, ...(reason ? { reason } : {}) } }], {
    author: NODE_CONTROLLER,
    reason: `${author} forgot node ${name}${reason ? `: ${reason}` : ''}`,
    now,
  })
  return { node: name, forgotten: true as const, pods }
}

/** The scheduling routes. */
export function schedRoutes(c: SchedApiComponents) {
  return {
    podPlacement: ({ params: { ns, name } }) => {
      const scoped = c.scopeView?.(ns)
      if ((scoped?.store ?? c.store).get({ kind: 'Pod', namespace: ns, name }) === undefined)
        throw new OrcError('not_found', `pod/${name} not found in namespace ${ns}`, { kind: 'Pod', namespace: ns, name })
      const { view, opts } = scoped ?? c.schedView()
      const e = explainPod(view, `${ns}/${name}`, opts)
      return { explainedBy: c.nodeName, explanation: e, text: formatExplanation(e) }
    },
    vmPlacement: ({ params: { ns, name } }) => {
      const vm = c.store.get({ kind: 'VirtualMachine', namespace: ns, name })
      if (vm === undefined)
        throw new OrcError('not_found', `virtualmachine/${name} not found in namespace ${ns}`, { kind: 'VirtualMachine', namespace: ns, name })
      if (typeof vm.spec?.node === 'string' && vm.spec.node !== '')
        throw new OrcError('invalid', `vm/${name} is pinned to node ${vm.spec.node} (spec.node): the scheduler does not place it`, { node: vm.spec.node })
      if (vm.spec?.runStrategy === 'Halted') throw new OrcError('invalid', `vm/${name} is Halted: it needs no node until it is started`)
      const { view, opts } = c.schedView()
      // Its entry in the plan is `NS/vm/NAME`; said as the VM (the policy's words name pods).
      const x = explainPod(view, vmSchedKey(ns, name), opts)
      const e = { ...x, pod: `${ns}/${name}`, summary: x.summary.replace(/\b(ha|best-effort) pod\b/g, '$1 VM') }
      return { explainedBy: c.nodeName, explanation: e, text: formatExplanation(e).replace(/^pod\//, 'vm/') }
    },
    forgetNode: async ({ params, body }) => {
      const b = isPlainObject(body) ? body : {}
      const author = typeof b.author === 'string' && AUTHOR.test(b.author) ? b.author : undefined
      if (author === undefined) throw new OrcError('invalid', 'author: must be user:<name> or controller:<name>')
      const reason = typeof b.reason === 'string' && b.reason !== '' ? b.reason.slice(0, 1024) : undefined
      return forgetNode(c, params.name, author, reason, b.force === true)
    },
  } satisfies RouteHandlers
}
