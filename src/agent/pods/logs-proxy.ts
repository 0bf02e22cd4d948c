/**
 * `orc logs` from any node: a pod's logs live on the node that runs it, so when that is another
 * member, the request is forwarded to it over the mesh (`/orc/member-api/1.0.0`) and its answer
 * returned as is. A follow (`-f`) is a series of long-polls; each poll is forwarded the same way,
 * so the cursor is the remote node's and nothing is kept here.
 *
 * When the pod's node cannot answer, the error names it and its liveness as this node sees it:
 * `pod/web runs on node n2, which is dead (last seen 2m ago)`.
 */

import { formatDuration } from '../../mesh/index.ts'
import type { ApiRequest, ApiResponse, Query } from '../../model/index.ts'
import { OrcError, vmNodeOf } from '../../model/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { Passthrough, type RouteHandler } from '../router.ts'
import type { RouteName } from '../routes.ts'

export interface LogsProxyMember {
  peerId: string
  name: string
  state: string
  lastSeen: number | null
  self: boolean
}

export interface LogsProxyComponents {
  store: Pick<ObjectStore, 'get'>
  nodeName: string
  /** This node's live view of the members (mesh.members()). */
  members(): readonly LogsProxyMember[]
  /** Send `req` to member `peerId` (mesh.memberRequest). */
  forward(peerId: string, req: ApiRequest, timeoutMs: number): Promise<ApiResponse>
  now(): number
  log?: { debug(o: object, msg: string): void }
}

/** A plain request waits for the remote node's answer at most this long. */
const READ_TIMEOUT_MS = 30_000
/** A follow poll: the poll's own wait (≤ 30 s on the remote) plus this margin. */
const POLL_MARGIN_MS = 15_000

function one(q: Query | undefined, key: string): string | undefined {
  const v = q?.[key]
  return Array.isArray(v) ? v[v.length - 1] : v
}

/** How long to wait for the forwarded answer: a follow poll waits on the remote first. */
export function forwardTimeoutMs(q: Query | undefined): number {
  const follow = one(q, 'follow')
  if ((follow !== '1' && follow !== 'true') || one(q, 'cursor') === undefined) return READ_TIMEOUT_MS
  const w = Number(one(q, 'waitMs') ?? 10_000)
  return Math.min(Number.isFinite(w) && w >= 0 ? w : 10_000, 30_000) + POLL_MARGIN_MS
}

function seen(m: LogsProxyMember | undefined, now: number): string {
  if (m === undefined || m.lastSeen === null) return 'never seen'
  return `last seen ${formatDuration(now - m.lastSeen)} ago`
}

/**
 * Forward `req` (a request about pod NS/NAME) to the member that runs the pod; undefined when the pod
 * is unknown or runs here. `what` names what the user wanted, for the error when it cannot be had.
 */
export async function forwardToPodNode(
  c: LogsProxyComponents,
  req: ApiRequest,
  ns: string,
  name: string,
  timeoutMs: number,
  what = 'its logs',
): Promise<ApiResponse | undefined> {
  const pod = c.store.get({ kind: 'Pod', namespace: ns, name })
  if (pod === undefined) return undefined
  const node = pod.spec?.placement?.node ?? pod.status?.node
  if (node === undefined || node === c.nodeName) return undefined
  return forwardToNode(c, req, { kind: 'Pod', namespace: ns, name }, node, `pod/${name} runs on`, timeoutMs, what)
}

/**
 * Forward `req` about object `ref` to member `node` (not this one). `where` says how the object is
 * there (`pod/web runs on`, `volume/db lives on`); `what`, what the user wanted.
 */
export async function forwardToNode(
  c: LogsProxyComponents,
  req: ApiRequest,
  ref: { kind: string; namespace: string; name: string },
  node: string,
  where: string,
  timeoutMs: number,
  what: string,
): Promise<ApiResponse> {
  const { namespace: ns, name } = ref
  const details = { kind: ref.kind, namespace: ns, name, node }
  const nodeObj = c.store.get({ kind: 'Node', namespace: '', name: node })
  if (nodeObj?.status?.state === 'Removed') {
    throw new OrcError('unavailable', `${where} node ${node}, which was removed from the cluster; ${what} are not reachable`, {
      ...details,
      state: 'removed',
    })
  }
  const members = c.members().filter((m) => !m.self)
  const recorded = typeof nodeObj?.status?.peerId === 'string' ? nodeObj.status.peerId : undefined
  const member = (recorded !== undefined ? members.find((m) => m.peerId === recorded) : undefined) ?? members.find((m) => m.name === node)
  if (member === undefined) {
    throw new OrcError(
      'unavailable',
      `${where} node ${node}, which is not a member this node knows${nodeObj === undefined ? ' (no such node)' : ''}; ${what} are not reachable from here`,
      {
        ...details,
        state: 'unknown',
      },
    )
  }
  if (member.state === 'dead') {
    // Fail at once: a dial to a node nobody has heard from in a while mostly just times out.
    throw new OrcError('unavailable', `${where} node ${node}, which is dead (${seen(member, c.now())})`, {
      ...details,
      state: 'dead',
      peer: member.peerId,
    })
  }
  c.log?.debug({ kind: ref.kind, ns, name, node, peer: member.peerId, path: req.path }, 'forwarding request to the node holding it')
  try {
    // The principal travels with the request: the member re-checks the user's right.
    return await c.forward(
      member.peerId,
      {
        method: req.method,
        path: req.path,
        query: req.query,
        ...(req.body !== undefined ? { body: req.body } : {}),
        ...(req.principal !== undefined ? { principal: req.principal } : {}),
      },
      timeoutMs,
    )
  } catch (err) {
    const now = c.members().find((m) => m.peerId === member.peerId) ?? member
    const why = err instanceof Error ? err.message : String(err)
    throw new OrcError(
      'unavailable',
      `${where} node ${node}, which is ${now.state} (${seen(now, c.now())}) and did not answer: ${why}`,
      {
        ...details,
        state: now.state,
        peer: member.peerId,
      },
      err,
    )
  }
}

/** `local`, unless `forward` sent the call to another member: then that member's answer. */
function proxied<N extends RouteName>(
  local: RouteHandler<N>,
  forward: (call: Parameters<RouteHandler<N>>[0]) => Promise<ApiResponse | undefined>,
): RouteHandler<N> {
  return async (call) => {
    const res = await forward(call)
    return res !== undefined ? new Passthrough(res) : local(call)
  }
}

/** A pod route answered by the node that runs the pod: forwarded there when that is another member, else `local`. */
export function proxiedPodRoute<N extends 'podExec' | 'podExecIo' | 'podPortForward' | 'podPortForwardIo'>(
  c: LogsProxyComponents,
  local: RouteHandler<N>,
  timeoutMs: number,
  what: string,
): RouteHandler<N> {
  return proxied(local, (call) => {
    const p = call.params as { ns: string; name: string }
    return forwardToPodNode(c, call.req, p.ns, p.name, timeoutMs, what)
  })
}

/** The logs route of a node in a cluster: forwarded for pods that run on another member, else `local`. */
export function proxiedLogs(c: LogsProxyComponents, local: RouteHandler<'podLogs'>): RouteHandler<'podLogs'> {
  return proxied(local, ({ req, params }) =>
    forwardToPodNode(
      c,
      { method: 'GET', path: req.path, query: req.query, ...(req.principal !== undefined ? { principal: req.principal } : {}) },
      params.ns,
      params.name,
      forwardTimeoutMs(req.query),
    ),
  )
}

/** A Volume route answered by the node holding the volume's data: forwarded there when that is another member. */
export function proxiedVolumeRoute<N extends 'volumeSnapshot' | 'volumeRestoreSnapshot' | 'volumeExport'>(
  c: LogsProxyComponents,
  local: RouteHandler<N>,
  timeoutMs: number,
  what: string,
): RouteHandler<N> {
  return proxied(local, async (call) => {
    const { ns, name } = call.params as { ns: string; name: string }
    const vol = c.store.get({ kind: 'Volume', namespace: ns, name })
    const node = vol?.status?.node ?? vol?.spec?.node
    if (node === undefined || node === c.nodeName) return undefined
    return forwardToNode(c, call.req, { kind: 'Volume', namespace: ns, name }, node, `volume/${name} lives on`, timeoutMs, what)
  })
}

/** A VM's console session route: forwarded to the node that runs the VM when that is another member. */
export function proxiedVmRoute<N extends 'vmConsole' | 'vmConsoleIo'>(c: LogsProxyComponents, local: RouteHandler<N>, timeoutMs: number): RouteHandler<N> {
  return proxied(local, async (call) => {
    const { ns, name } = call.params as { ns: string; name: string }
    const vm = c.store.get({ kind: 'VirtualMachine', namespace: ns, name })
    const node = vm === undefined ? undefined : vmNodeOf(vm)
    if (node === undefined || node === c.nodeName) return undefined
    return forwardToNode(c, call.req, { kind: 'VirtualMachine', namespace: ns, name }, node, `vm/${name} runs on`, timeoutMs, 'its console')
  })
}

/** A VM's console route: forwarded to the node the VM is pinned to when that is another member. */
export function proxiedVmLogs(c: LogsProxyComponents, local: RouteHandler<'vmLogs'>): RouteHandler<'vmLogs'> {
  return proxied(local, async ({ req, params }) => {
    const node = vmNodeOf(c.store.get({ kind: 'VirtualMachine', namespace: params.ns, name: params.name }))
    if (node === undefined || node === c.nodeName) return undefined
    const fwd = { method: 'GET' as const, path: req.path, query: req.query, ...(req.principal !== undefined ? { principal: req.principal } : {}) }
    return forwardToNode(
      c,
      fwd,
      { kind: 'VirtualMachine', namespace: params.ns, name: params.name },
      node,
      `vm/${params.name} runs on`,
      forwardTimeoutMs(req.query),
      'its console',
    )
  })
}
