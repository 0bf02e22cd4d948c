/**
 * `GET /v1/vms/{ns}/{name}/logs`: a VM's serial console, answered by the node that runs it (another
 * node forwards the request there, as for pods: cluster.ts) with the pods' query and answer
 * (`tail`, `revision`, `follow` long-polls).
 */
import { join } from 'node:path'
import { type Clock, sleep } from '../../effects/index.ts'
import { OrcError, type Query, vmNodeOf } from '../../model/index.ts'
import { listLogRevisions } from '../../runtime/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { answerLogs } from '../pods/api.ts'
import type { RouteHandlers } from '../router.ts'

export interface VmApiComponents {
  store: ObjectStore
  nodeName: string
  clock: Clock
  /** `<data-dir>/vms/<uid>` (the console logs are in its `console/`). */
  vmDir(uid: string): string
}

export function vmRoutes(c: VmApiComponents) {
  return {
    vmLogs: async ({ params, query }) => {
      const ref = { kind: 'VirtualMachine' as const, namespace: params.ns, name: params.name }
      const vm = c.store.get(ref)
      if (!vm) throw new OrcError('not_found', `virtualmachine/${ref.name} in namespace ${ref.namespace} not found`, { ...ref })
      const node = vmNodeOf(vm)
      if (node === undefined) throw new OrcError('unavailable', `vm/${ref.name} is not placed on a node yet (orc why vm/${ref.name})`, { ...ref })
      if (node !== c.nodeName)
        throw new OrcError('unavailable', `vm/${ref.name} runs on node ${node}; its console is there (orc --node ${node} logs vm/${ref.name})`, {
          ...ref,
          node,
        })
      const dir = join(c.vmDir(vm.metadata.uid), 'console')
      const revs = listLogRevisions(dir)
      const asked = (query as Query).revision
      let revision: number | undefined
      if (asked !== undefined && asked !== '') {
        revision = Number(asked)
        if (!revs.includes(revision))
          throw new OrcError(
            'not_found',
            `vm/${ref.name} has no console log of revision ${asked} on this node (revisions with logs: ${revs.join(', ') || 'none'})`,
            {
              ...ref,
            },
          )
      } else {
        const running = vm.status?.runningRevision ?? vm.status?.targetRevision
        revision = typeof running === 'number' && revs.includes(running) ? running : revs[revs.length - 1]
      }
      return answerLogs(
        { dir, container: 'console', revision },
        query,
        c.clock,
        (ms) => sleep(c.clock, ms),
        () => {
          const now = c.store.get(ref)
          return now === undefined || now.metadata.uid !== vm.metadata.uid || now.status?.phase === 'Stopped' || now.status?.phase === 'Failed'
        },
      )
    },
  } satisfies RouteHandlers
}
