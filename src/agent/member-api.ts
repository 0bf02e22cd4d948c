/**
 * What another member of the cluster may ask this node over `/orc/member-api/1.0.0` (mesh/member-api.ts).
 * Membership proves only that the peer is one of ours, not that an operator is behind the request,
 * so a member-forwarded request may reach read-only internal routes and nothing else: no writes, no
 * routes that need the admin credential (tokens, credential export, node removal), no object reads
 * beyond what it already replicates. Today that is the logs of a pod this node runs. A request a
 * member forwards for a user carries that user's name, and the user's rights are checked here too
 * (authz.ts): a claim can narrow what the allow-list lets through, never widen it.
 */
import { type ApiRequest, type ApiResponse, errorResponse, OrcError, type Principal, type SignedRequest, splitPath } from '../model/index.ts'
import type { ApiHandler } from './router.ts'
import { MEMBER_ROUTES, matchPattern, patternOf, ROUTES } from './routes.ts'

const ALLOWED = MEMBER_ROUTES.map((name) => ({ method: ROUTES[name].method as string, pattern: patternOf(ROUTES[name].path) }))

/** True when a member-forwarded request may run here. */
export function memberRouteAllowed(req: Pick<ApiRequest, 'method' | 'path'>): boolean {
  let seg: string[]
  try {
    seg = splitPath(req.path).segments()
  } catch {
    return false
  }
  const m = req.method.toUpperCase()
  return ALLOWED.some((r) => r.method === m && matchPattern(r.pattern, seg) !== undefined)
}

/**
 * The handler served to members. `local` must be this node's own handler *without* forwarding (so
 * a forwarded request is answered here or refused, never forwarded again) and without the cluster
 * routes.
 */
/** How this node knows the user behind a forwarded request (the agent wires them: cluster.ts). */
export interface ForwardedUsers {
  /**
   * The user whose key signed `s`: the signature verifies, it was made for `forwarder` (the member
   * that took it), recently, and (`once`) this node has not seen it before. Throws `forbidden` otherwise.
   */
  signedUser(s: SignedRequest, forwarder: string, once: boolean): string
  /** May member `peer` name `user` without the user's signature (the cluster's policy, Cluster spec.userSignatures)? */
  unsignedAllowed(user: string, peer: string): boolean
}

export function createMemberApiHandler(
  local: ApiHandler,
  log?: { info(o: object, msg: string): void },
  users?: ForwardedUsers,
): (req: ApiRequest, ctx: { peerId: string; onBehalfOf?: string; signed?: SignedRequest }) => Promise<ApiResponse> {
  return async (given, ctx) => {
    let req = given
    let verified: { name: string; signed: SignedRequest } | undefined
    try {
      if (ctx.signed !== undefined && users !== undefined) {
        const s = ctx.signed
        // The user's own request (same method and path): run as the user signed it, not the member's
        // copy, and only once. A read the member derived from it (the logs of a pod of a Job, top
        // figures of every node) runs as the member asks, the signature naming the user; a write
        // (exec, port-forward) must be the signed request itself.
        const own = s.method.toUpperCase() === given.method.toUpperCase() && splitPath(s.path).pathname === splitPath(given.path).pathname
        if (!own && given.method.toUpperCase() !== 'GET') {
          throw new OrcError(
            'forbidden',
            `forwarded ${given.method.toUpperCase()} ${splitPath(given.path).pathname.slice(0, 200)} is not the request the user signed`,
            { peer: ctx.peerId },
          )
        }
        const name = users.signedUser(s, ctx.peerId, own)
        if (ctx.onBehalfOf !== undefined && ctx.onBehalfOf !== name) {
          throw new OrcError('forbidden', `the member names user ${ctx.onBehalfOf}, but the request is signed by ${name}`, { peer: ctx.peerId })
        }
        if (own) req = { method: s.method, path: s.path, query: s.query, ...(s.body !== null && s.body !== undefined ? { body: s.body } : {}) }
        verified = { name, signed: s }
      } else if (ctx.onBehalfOf !== undefined && users !== undefined && !users.unsignedAllowed(ctx.onBehalfOf, ctx.peerId)) {
        throw new OrcError(
          'forbidden',
          `a member forwarded a request for user ${ctx.onBehalfOf} without the user's signature, and the cluster requires users' signatures`,
          { peer: ctx.peerId },
        )
      }
    } catch (err) {
      log?.info({ peer: ctx.peerId, path: given.path.slice(0, 200), err: (err as Error).message }, 'member request refused')
      return errorResponse(err)
    }
    if (!memberRouteAllowed(req)) {
      log?.info({ peer: ctx.peerId, method: req.method, path: req.path.slice(0, 200) }, 'member request refused')
      return errorResponse(
        new OrcError(
          'forbidden',
          `node-to-node request refused: members may only read pod logs, open exec/port-forward sessions and read top figures, not ${req.method.toUpperCase()} ${splitPath(req.path).pathname.slice(0, 200)}`,
          {
            peer: ctx.peerId,
          },
        ),
      )
    }
    // The principal is the user the member forwards for (re-checked here against this node's
    // roles), else the member node itself. A body travels only to an allow-listed POST route.
    const principal: Principal =
      verified !== undefined
        ? { kind: 'user', name: verified.name, via: 'forwarded', peer: ctx.peerId, signed: verified.signed }
        : ctx.onBehalfOf !== undefined
          ? { kind: 'user', name: ctx.onBehalfOf, via: 'forwarded', peer: ctx.peerId }
          : { kind: 'node', peerId: ctx.peerId }
    const post = req.method.toUpperCase() === 'POST'
    return local({ method: post ? 'POST' : 'GET', path: req.path, query: req.query, ...(post && req.body !== undefined ? { body: req.body } : {}), principal })
  }
}
