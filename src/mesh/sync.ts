/**
 * Anti-entropy `/orc/sync/1.0.0`, one session per (peer, scope):
 *
 *   initiator → hello{scope, members}, state(sI)
 *   responder → hello{scope, members}, state(sR), data(missing for sI)
 *   initiator → data(missing for sR)
 *
 * `data` is zero or more `chunk` frames (each ≤ maxFrameBytes) and an `end` frame, bounded in total
 * by maxSyncBytes. Both sides apply what they receive with `applyRemote`; anything undecodable or
 * unmergeable is a peer fault (the caller scores the peer down and disconnects it). Member lists
 * ride along so that membership converges even if an admission announcement was lost.
 */
import { OrcError } from '../model/index.ts'
import type { ApplyRemoteOptions, RemoteApplied, Replicable } from '../store/index.ts'
import { concatBytes, type FrameChannel } from './framing.ts'
import { parseMemberInfo } from './join.ts'
import type { MemberInfo } from './membership.ts'
import { isRecord, peerFault, readJson, readTagged, remoteError, Tag, writeBytes, writeError, writeJson } from './wire.ts'

export const SYNC_PROTOCOL = '/orc/sync/1.0.0'

export interface SyncLimits {
  maxFrameBytes: number
  maxSyncBytes: number
}

export interface SyncResult {
  scope: string
  sentBytes: number
  receivedBytes: number
  /** Revisions the local store recorded from what it received. */
  revisions: number
  /** The local store still waits for updates it lacks (RemoteApplied.incomplete) after the session. */
  incomplete: boolean
  /** What the peer sent (empty when it had nothing we lacked); relayed on gossip when it was new here. */
  received: Uint8Array
  /** Members the remote listed. */
  remoteMembers: MemberInfo[]
}

interface Hello {
  v: 1
  scope: string
  members: MemberInfo[]
}

function parseHello(v: unknown): Hello {
  if (!isRecord(v) || v.v !== 1 || typeof v.scope !== 'string' || !Array.isArray(v.members) || v.members.length > 100_000) {
    throw peerFault('sync hello is malformed')
  }
  const members: MemberInfo[] = []
  for (const m of v.members) {
    const p = parseMemberInfo(m)
    if (p === undefined) throw peerFault('sync hello has a malformed member')
    members.push(p)
  }
  return { v: 1, scope: v.scope, members }
}

async function sendData(ch: FrameChannel, data: Uint8Array, limits: SyncLimits): Promise<number> {
  const chunk = limits.maxFrameBytes - 1
  for (let off = 0; off < data.length; off += chunk) {
    await writeBytes(ch, Tag.chunk, data.subarray(off, Math.min(data.length, off + chunk)))
  }
  await writeBytes(ch, Tag.end, new Uint8Array(0))
  return data.length
}

async function receiveData(ch: FrameChannel, limits: SyncLimits): Promise<Uint8Array> {
  const parts: Uint8Array[] = []
  let total = 0
  for (;;) {
    const f = await ch.read()
    if (f === null) throw new OrcError('unavailable', 'peer closed the stream in the middle of sync data')
    if (f.length === 0) throw peerFault('peer sent an empty sync frame')
    if (f[0] === Tag.end) break
    if (f[0] === Tag.error) throw remoteError(f.subarray(1), 'sync data')
    if (f[0] !== Tag.chunk) throw peerFault(`peer sent frame type ${f[0]} inside sync data`)
    total += f.length - 1
    if (total > limits.maxSyncBytes) {
      throw peerFault(`peer sent more than ${limits.maxSyncBytes} bytes of sync data`)
    }
    parts.push(f.subarray(1))
  }
  return parts.length === 1 ? parts[0]! : concatBytes(parts)
}

/** A store refusal that says this node lags (see applyFromPeer), not that the sender misbehaved. */
export function isLaggingRefusal(err: unknown): boolean {
  return (
    err instanceof OrcError &&
    err.code === 'forbidden' &&
    (err.details.refused === 'unresolved' || err.details.refused === 'not_member' || err.details.refused === 'role')
  )
}

/**
 * A store refusal judged on what this replica knows of the object (its content before, on which
 * a record's resulting content and so its schema check depend, its bindings, the Yjs clients it has bound): an honest member that knows more accepted and relayed
 * it, so it is no proof the sender misbehaved. Nothing is merged and it is counted and reported
 * (store.onRefused), but it costs the sender no score: banning members over a disagreement cut a
 * replica off from the whole cluster (chaos test, seed 1429252850).
 */
export function isDisputedRefusal(err: unknown): boolean {
  return err instanceof OrcError && err.code === 'forbidden' && ['unauthorized', 'unbound', 'schema'].includes(err.details.refused as string)
}

/** Apply a remote update; garbage is the peer's fault, a closed store is ours. */
export async function applyFromPeer(store: Replicable, update: Uint8Array, what: string, opts?: ApplyRemoteOptions): Promise<RemoteApplied> {
  if (update.length === 0) return { revisions: 0 }
  try {
    return await store.applyRemote(update, opts)
  } catch (err) {
    if (err instanceof OrcError && (err.code === 'unavailable' || err.code === 'locked')) throw err
    // Refused, but not the sender's fault: it builds on content not here yet, is signed by a
    // member this node has not heard of yet, is a user's write whose role binding is not here yet
    // (lagging), or was judged on what this replica knows (disputed). Nothing was merged.
    if (isLaggingRefusal(err) || isDisputedRefusal(err)) throw err
    throw peerFault(`peer sent ${what} the store refused: ${(err as Error).message}`, err)
  }
}

export async function initiateSync(ch: FrameChannel, scope: string, store: Replicable, members: MemberInfo[], limits: SyncLimits): Promise<SyncResult> {
  await writeJson(ch, Tag.hello, { v: 1, scope, members } satisfies Hello)
  await writeBytes(ch, Tag.state, store.encodeSyncState())
  const hello = parseHello(await readJson(ch, Tag.hello, 'sync hello'))
  if (hello.scope !== scope) throw peerFault(`peer answered sync for scope ${hello.scope}, asked ${scope}`)
  const remoteState = await readTagged(ch, Tag.state, 'sync state')
  const incoming = await receiveData(ch, limits)
  const applied = await applyFromPeer(store, incoming, 'a sync update')
  const missing = await store.encodeMissing(remoteState).catch((err) => {
    throw peerFault(`peer sent a sync state the store cannot read: ${(err as Error).message}`, err)
  })
  const sent = await sendData(ch, missing, limits)
  await ch.close()
  return resultOf(scope, sent, incoming, applied, hello.members)
}

export async function respondSync(
  ch: FrameChannel,
  stores: (scope: string) => Replicable | undefined,
  members: MemberInfo[],
  limits: SyncLimits,
): Promise<SyncResult> {
  const hello = parseHello(await readJson(ch, Tag.hello, 'sync hello'))
  const store = stores(hello.scope)
  if (store === undefined) {
    await writeError(ch, new OrcError('not_found', `scope ${hello.scope} is not replicated here`))
    await ch.close()
    throw new OrcError('not_found', `peer asked to sync unknown scope ${hello.scope}`, { scope: hello.scope })
  }
  const remoteState = await readTagged(ch, Tag.state, 'sync state')
  const missing = await store.encodeMissing(remoteState).catch((err) => {
    throw peerFault(`peer sent a sync state the store cannot read: ${(err as Error).message}`, err)
  })
  await writeJson(ch, Tag.hello, { v: 1, scope: hello.scope, members } satisfies Hello)
  await writeBytes(ch, Tag.state, store.encodeSyncState())
  const sent = await sendData(ch, missing, limits)
  const incoming = await receiveData(ch, limits)
  const applied = await applyFromPeer(store, incoming, 'a sync update')
  await ch.close()
  return resultOf(hello.scope, sent, incoming, applied, hello.members)
}

function resultOf(scope: string, sentBytes: number, received: Uint8Array, applied: RemoteApplied, remoteMembers: MemberInfo[]): SyncResult {
  return { scope, sentBytes, receivedBytes: received.length, revisions: applied.revisions, incomplete: applied.incomplete === true, received, remoteMembers }
}
