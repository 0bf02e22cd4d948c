/**
 * `/v1/federations…`: the API of `orc federation`. `/v1/federation-invites/<id>` is what another
 * node of this cluster asks (over the member API) to follow the cluster into a federation.
 */
import { isPlainObject, OrcError } from '../../model/index.ts'
import type { RouteHandlers } from '../router.ts'
import type { FederationManager } from './manager.ts'

const AUTHOR = /^(user|controller):[A-Za-z0-9][-A-Za-z0-9_.]{0,127}$/

function authorOf(body: Record<string, unknown>): string {
  const a = body.author ?? 'user:unknown'
  if (typeof a !== 'string' || !AUTHOR.test(a))
    throw new OrcError('invalid', `author ${JSON.stringify(a)}: must be user:<name> or controller:<name> (the cluster is added to it in federated history)`)
  return a
}

export function federationRoutes(fm: FederationManager) {
  const bodyOf = (b: unknown) => (isPlainObject(b) ? b : {})
  return {
    federationInvite: ({ params }) => fm.invite(params.id),
    federations: () => ({ federations: fm.list() }),
    createFederation: async ({ body }) => {
      const b = bodyOf(body)
      return { federation: await fm.create({ name: b.name, namespaces: b.namespaces, as: b.as, author: authorOf(b) }) }
    },
    joinFederation: async ({ body }) => {
      const b = bodyOf(body)
      return { federation: await fm.join({ token: b.token, peer: b.peer, as: b.as, author: authorOf(b) }) }
    },
    federation: ({ params }) => ({ federation: fm.status(params.name) }),
    federationToken: ({ params, body }) => {
      const b = bodyOf(body)
      const ttl = b.ttlSeconds === undefined ? undefined : Number(b.ttlSeconds) * 1000
      const readmit = b.readmit === undefined ? {} : { readmit: String(b.readmit) }
      return fm.token(params.name, { ...(ttl === undefined ? {} : { ttlMs: ttl }), ...readmit, author: authorOf(b) })
    },
    leaveFederation: async ({ params, body }) => ({ federation: await fm.leave(params.name, authorOf(bodyOf(body))) }),
    proposeFederationChange: ({ params, body }) => {
      const b = bodyOf(body)
      return fm.propose(params.name, b.action, b.target, authorOf(b), { writers: b.writers })
    },
    approveFederationProposal: ({ params, body }) => fm.approve(params.name, params.id, authorOf(bodyOf(body))),
    withdrawFederationProposal: ({ params, body }) => fm.withdraw(params.name, params.id, authorOf(bodyOf(body))),
    removeFederationCluster: async ({ params, body }) => ({ federation: await fm.remove(params.name, params.cluster, authorOf(bodyOf(body))) }),
  } satisfies RouteHandlers
}
