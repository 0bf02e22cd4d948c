/**
 * Rollout routes of a node's API (`orc rollout …`):
 * - `GET  /v1/rollouts/NS/NAME`: the split and, per version, desired/created/running/ready, computed
 *   now from this node's replica (not the stored status, which the writer node refreshes), plus the
 *   deployment's pods;
 * - `POST /v1/rollouts/NS/NAME/set` `{nextReplicas | nextPercent}`, `/promote`, `/abort`: a user write
 *   of the PinnedDeployment's spec (author and reason recorded like any apply, so `orc history` and
 *   `orc rollback` work on rollouts).
 */
import { API_VERSION, isPlainObject, type Node, OrcError, type OrcObject, type PinnedDeployment } from '../../model/index.ts'
import { DEPLOYMENT_LABEL, TEMPLATE_LABEL } from '../../sched/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import type { RolloutView } from '../api-types.ts'
import type { RouteHandlers } from '../router.ts'
import { observePod, statusOf } from './plan.ts'

export type { RolloutView } from '../api-types.ts'

export interface RolloutApiComponents {
  /** The API's store (a shared namespace's objects are in its federation's document). */
  store: ObjectStore
  nodeName: string
  now(): number
  /** The nodes of namespace `ns` (a shared namespace: its federation's `node@cluster`); default the store's Nodes. */
  nodes?(ns: string): readonly Stored<Node>[]
}

const AUTHOR = /^(user|controller):[A-Za-z0-9][-A-Za-z0-9_.@]{0,127}$/

function getDeployment(c: RolloutApiComponents, namespace: string, name: string): Stored<PinnedDeployment> {
  const d = c.store.get({ kind: 'PinnedDeployment', namespace, name })
  if (!d) throw new OrcError('not_found', `pinneddeployment/${name} not found in namespace ${namespace}`, { kind: 'PinnedDeployment', namespace, name })
  return d
}

export function rolloutView(c: RolloutApiComponents, d: Stored<PinnedDeployment>): RolloutView {
  const ns = d.metadata.namespace ?? 'default'
  const pods = c.store.list('Pod', ns).filter((p) => p.metadata.labels?.[DEPLOYMENT_LABEL] === d.metadata.name)
  const s = statusOf(d, c.store.list('Pod', ns), c.nodes?.(ns) ?? c.store.list('Node'))
  const spec: Partial<NonNullable<PinnedDeployment['spec']>> = d.spec ?? {}
  return {
    deployment: d.metadata.name,
    namespace: ns,
    revision: d.metadata.revision,
    observedBy: c.nodeName,
    everyNode: spec.placement?.everyNode === true,
    split: {
      ...(typeof spec.replicas === 'number' ? { replicas: spec.replicas } : {}),
      ...(typeof spec.nextReplicas === 'number' ? { nextReplicas: spec.nextReplicas } : {}),
      ...(typeof spec.nextPercent === 'number' ? { nextPercent: spec.nextPercent } : {}),
    },
    ...s,
    pods: pods
      .map((p) => {
        const o = observePod(p)
        const st = p.status ?? {}
        const version = o.template === s.previous.template ? 'previous' : o.template === s.next?.template ? 'next' : 'old'
        return {
          name: p.metadata.name,
          version: version as RolloutView['pods'][number]['version'],
          template: p.metadata.labels?.[TEMPLATE_LABEL],
          node: typeof st.node === 'string' ? st.node : null,
          phase: typeof st.phase === 'string' ? st.phase : 'Pending',
          ready: o.ready === true,
        }
      })
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    ...(d.status?.rollout !== undefined ? { rollout: d.status.rollout } : {}),
  }
}

function manifestWith(d: Stored<PinnedDeployment>, spec: Record<string, unknown>): OrcObject {
  const metadata: OrcObject['metadata'] = { name: d.metadata.name, namespace: d.metadata.namespace ?? 'default' }
  if (d.metadata.labels) metadata.labels = d.metadata.labels
  if (d.metadata.annotations) metadata.annotations = d.metadata.annotations
  return { apiVersion: API_VERSION, kind: 'PinnedDeployment', metadata, spec }
}

function count(v: unknown, what: string, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max)
    throw new OrcError('invalid', `${what}: must be a whole number from 0 to ${max}, got ${JSON.stringify(v)}`, { field: what })
  return v
}

/** The new spec for set / promote / abort (pure; errors name the field or say what is missing). */
export function changedSpec(d: OrcObject, action: string, body: Record<string, unknown>): { spec: Record<string, unknown>; summary: string } {
  const spec = structuredClone(d.spec ?? {}) as Record<string, unknown>
  const name = `pinneddeployment/${d.metadata.name}`
  const noNext = () => new OrcError('conflict', `${name} has no spec.next to ${action}: add the new template as spec.next with orc apply first`, { action })
  switch (action) {
    case 'set': {
      if (spec.next === undefined) throw noNext()
      const hasR = body.nextReplicas !== undefined
      const hasP = body.nextPercent !== undefined
      if (hasR === hasP) throw new OrcError('invalid', 'give exactly one of nextReplicas (--next-replicas) and nextPercent (--next-percent)')
      delete spec.nextReplicas
      delete spec.nextPercent
      const everyNode = (spec.placement as { everyNode?: boolean } | undefined)?.everyNode === true
      if (hasR) {
        const max = everyNode || typeof spec.replicas !== 'number' ? 1000 : spec.replicas
        spec.nextReplicas = count(body.nextReplicas, 'nextReplicas', max)
        return { spec, summary: `next runs on ${spec.nextReplicas} replica${spec.nextReplicas === 1 ? '' : 's'}` }
      }
      spec.nextPercent = count(body.nextPercent, 'nextPercent', 100)
      return { spec, summary: `next runs on ${spec.nextPercent}% of replicas` }
    }
    case 'promote': {
      if (spec.next === undefined) throw noNext()
      spec.previous = spec.next
      delete spec.next
      delete spec.nextReplicas
      delete spec.nextPercent
      return { spec, summary: 'next promoted: every replica runs it' }
    }
    case 'abort': {
      if (spec.next === undefined) throw noNext()
      delete spec.next
      delete spec.nextReplicas
      delete spec.nextPercent
      return { spec, summary: 'rollout aborted: every replica runs previous' }
    }
    default:
      throw new OrcError('invalid', `unknown rollout action ${JSON.stringify(action)} (set, promote, abort)`)
  }
}

/** `orc rollout`'s routes. */
export function rolloutRoutes(c: RolloutApiComponents) {
  return {
    rollout: ({ params }) => rolloutView(c, getDeployment(c, params.ns, params.name)),
    rolloutAction: async ({ params: { ns, name, action }, body }) => {
      const b = isPlainObject(body) ? body : {}
      const author = typeof b.author === 'string' && AUTHOR.test(b.author) ? b.author : undefined
      if (author === undefined) throw new OrcError('invalid', 'author: must be user:<name> or controller:<name>')
      const d = getDeployment(c, ns, name)
      const { spec, summary } = changedSpec(d, action, b)
      const reason = typeof b.reason === 'string' && b.reason !== '' ? b.reason.slice(0, 1024) : `rollout ${action}: ${summary}`
      const res = await c.store.apply(manifestWith(d, spec), { author, reason, now: c.now() })
      const after = c.store.get({ kind: 'PinnedDeployment', namespace: ns, name }) ?? d
      return { summary, changed: res.revision !== null, revision: res.revision?.number ?? d.metadata.revision, rollout: rolloutView(c, after) }
    },
  } satisfies RouteHandlers
}
