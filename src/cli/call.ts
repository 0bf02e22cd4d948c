/**
 * A CLI call by route name: the method and path come from the agent's route table and the answer
 * is typed by it (agent/routes.ts), so no command spells a path or a response shape of its own.
 */
import { type BodyOf, type ParamsOf, pathOf, type QueryOf, type ResponseOf, ROUTES, type RouteName } from '../agent/index.ts'
import type { ClientRequest } from './client.ts'
import type { ApiCaller } from './remote.ts'

export interface RouteRequest<N extends RouteName> {
  query?: QueryOf<N>
  body?: BodyOf<N>
}

/** Routes without path params may leave the params out. */
type Args<N extends RouteName> = keyof ParamsOf<N> extends never ? [params?: ParamsOf<N>, req?: RouteRequest<N>] : [params: ParamsOf<N>, req?: RouteRequest<N>]

export function callRoute<N extends RouteName>(c: ApiCaller, name: N, ...[params, req]: Args<N>): Promise<ResponseOf<N>> {
  return c.call<ResponseOf<N>>(ROUTES[name].method, pathOf(name, (params ?? {}) as ParamsOf<N>), (req ?? {}) as ClientRequest)
}
