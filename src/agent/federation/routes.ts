/**
 * `/v1/federations…`: the API of `orc federation`. `/v1/federation-invites/<id>` is what another
 * node of this cluster asks (over the member API) to follow the cluster into a federation.
 */
import { OrcError, isPlainObject } from '../../model/index.ts'
import { errorBody, httpStatusOf, type ApiHandler, type ApiResponse } from '../api.ts'
import type { FederationManager } from './manager.ts'

const AUTHOR = /^(user|controller):[A-Za-z0-9][-A-Za-z0-9_.]{0,127}$/

function authorOf(body: Record<string, unknown>): string {
  const a = body.author ?? 'user:unknown'
  if (typeof a !== 'string' || !AUTHOR.test(a)) throw new OrcError('invalid', `author ${JSON.stringify(a)}: must be user:<name> or controller:<name> (the cluster is added to it in federated history)`)
  return a
}

export function withFederationRoutes(base: ApiHandler, fm: FederationManager): ApiHandler {
  const route = async (method: string, seg: string[], body: Record<string, unknown>): Promise<ApiResponse | undefined> => {
    if (seg[1] === 'federation-invites' && seg.length === 3 && method === 'GET') return { status: 200, body: await fm.invite(seg[2]!) }
    if (seg[1] !== 'federations') return undefined
    if (seg.length === 2 && method === 'GET') return { status: 200, body: { federations: fm.list() } }
    if (seg.length === 2 && method === 'POST') {
      return { status: 200, body: { federation: await fm.create({ name: body.name, namespaces: body.namespaces, as: body.as, author: authorOf(body) }) } }
    }
    if (seg.length === 3 && seg[2] === 'join' && method === 'POST') {
      return { status: 200, body: { federation: await fm.join({ token: body.token, peer: body.peer, as: body.as, author: authorOf(body) }) } }
    }
    const name = seg[2]
    if (name === undefined) return undefined
    if (seg.length === 3 && method === 'GET') return { status: 200, body: { federation: fm.status(name) } }
    if (seg.length === 4 && seg[3] === 'token' && method === 'POST') {
      const ttl = body.ttlSeconds === undefined ? undefined : Number(body.ttlSeconds) * 1000
      return { status: 200, body: await fm.token(name, ttl === undefined ? {} : { ttlMs: ttl }) }
    }
    if (seg.length === 4 && seg[3] === 'leave' && method === 'POST') return { status: 200, body: { federation: await fm.leave(name, authorOf(body)) } }
    if (seg.length === 5 && seg[3] === 'clusters' && method === 'DELETE') {
      return { status: 200, body: { federation: await fm.remove(name, seg[4]!, authorOf(body)) } }
    }
    throw new OrcError('not_found', `no such federation route: ${method} /${seg.join('/')}`)
  }
  return async (req) => {
    const seg = req.path.split('?')[0]!.split('/').filter(Boolean)
    if (seg[0] !== 'v1' || (seg[1] !== 'federations' && seg[1] !== 'federation-invites')) return base(req)
    try {
      const decoded = seg.map((s) => decodeURIComponent(s))
      const r = await route(req.method.toUpperCase(), decoded, isPlainObject(req.body) ? req.body : {})
      return r ?? base(req)
    } catch (err) {
      const body = errorBody(err)
      return { status: httpStatusOf(body.error.code), body }
    }
  }
}
