/**
 * What another member of the cluster may ask this node over `/orc/member-api/1.0.0` (mesh/member-api.ts).
 * Membership proves only that the peer is one of ours, not that an operator is behind the request,
 * so a member-forwarded request may reach read-only internal routes and nothing else: no writes, no
 * routes that need the admin credential (tokens, credential export, node removal), no object reads
 * beyond what it already replicates. Today that is the logs of a pod this node runs.
 */
import { OrcError } from '../model/index.ts'
import { errorBody, httpStatusOf, type ApiHandler, type ApiRequest, type ApiResponse } from './api.ts'

/** Routes a member may call: method and path segments (`*` = any one segment). */
const MEMBER_ROUTES: ReadonlyArray<{ method: string; path: readonly string[] }> = [
  { method: 'GET', path: ['v1', 'pods', '*', '*', 'logs'] },
  // The node's clock, for `orc doctor`'s skew check.
  { method: 'GET', path: ['v1', 'clock'] },
  // Its durable state vector and member list, for tombstone pruning (stability.ts).
  { method: 'GET', path: ['v1', 'stability'] },
  // A single-use invite into a federation this cluster is in, so the asking node follows its
  // cluster there (federation/manager.ts); the invite travels inside the cluster's own mesh.
  { method: 'GET', path: ['v1', 'federation-invites', '*'] },
]

function segments(path: string): string[] | undefined {
  try {
    return path.split('?')[0]!.split('/').filter(Boolean).map((s) => decodeURIComponent(s))
  } catch {
    return undefined
  }
}

/** True when a member-forwarded request may run here. */
export function memberRouteAllowed(req: Pick<ApiRequest, 'method' | 'path'>): boolean {
  const seg = segments(req.path)
  if (seg === undefined) return false
  const m = req.method.toUpperCase()
  return MEMBER_ROUTES.some((r) => r.method === m && r.path.length === seg.length && r.path.every((p, i) => p === '*' || p === seg[i]))
}

/**
 * The handler served to members. `local` must be this node's own handler *without* forwarding (so
 * a forwarded request is answered here or refused, never forwarded again) and without the cluster
 * routes.
 */
export function createMemberApiHandler(local: ApiHandler, log?: { info(o: object, msg: string): void }): (req: ApiRequest, ctx: { peerId: string }) => Promise<ApiResponse> {
  return async (req, ctx) => {
    if (!memberRouteAllowed(req)) {
      log?.info({ peer: ctx.peerId, method: req.method, path: req.path.slice(0, 200) }, 'member request refused')
      const body = errorBody(
        new OrcError('forbidden', `node-to-node request refused: members may only read pod logs, not ${req.method.toUpperCase()} ${req.path.split('?')[0]!.slice(0, 200)}`, {
          peer: ctx.peerId,
        }),
      )
      return { status: httpStatusOf(body.error.code), body }
    }
    // Only what a read needs travels on: no body.
    return local({ method: 'GET', path: req.path, query: req.query })
  }
}
