/**
 * The page's live updates as server-sent events, fed by the API's long polls: `GET /v1/watch/KIND`
 * for stored objects (the page gets the whole list once, then only what changed), `GET /v1/members`
 * for liveness (ephemeral, so no watch sees it), and `GET /v1/pods/NS/NAME/logs?follow` for logs.
 */
import { OrcError } from '../../model/index.ts'
import type { StoredObject } from '../../store/index.ts'
import { callRoute } from '../call.ts'
import type { ApiCaller } from '../remote.ts'

/** A server-sent event stream: send(event, data); closed() once the browser went away. */
export interface EventStream {
  send(event: string, data: unknown): void
  closed(): boolean
  /** Resolves when the browser goes away (or after ms). */
  idle(ms: number): Promise<void>
}

const RETRY_MS = 2_000

function keyOf(o: StoredObject): string {
  return `${o.metadata.namespace ?? ''}/${o.metadata.name}`
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

/**
 * One stream for the page: per kind `snapshot` {kind, items} then `change` {kind, upserts, removed}
 * (keys `NS/NAME`); `members` {members, now} when a member's state changes (and every 10 s for the
 * latencies); `problem` {source, message} when a poll fails (it is retried).
 */
export async function watchKinds(
  client: ApiCaller,
  kinds: string[],
  stream: EventStream,
  opts: { waitMs: number; membersPollMs: number; now: () => number },
): Promise<void> {
  await Promise.all([...kinds.map((k) => watchKind(client, k, stream, opts.waitMs)), watchMembers(client, stream, opts)])
}

async function watchKind(client: ApiCaller, kind: string, stream: EventStream, waitMs: number): Promise<void> {
  let known: string | undefined
  let prev = new Map<string, string>()
  while (!stream.closed()) {
    let r
    try {
      r = await callRoute(client, 'watchObjects', { kind }, { query: { all: 'true', known, waitMs: known === undefined ? undefined : waitMs } })
    } catch (err) {
      stream.send('problem', { source: `watch ${kind}`, message: messageOf(err) })
      // A kind this user may not list, or that does not exist: asking again will not help.
      if (err instanceof OrcError && (err.code === 'forbidden' || err.code === 'invalid')) return
      await stream.idle(RETRY_MS)
      continue
    }
    if (r.items === undefined) continue
    const next = new Map(r.items.map((o) => [keyOf(o), o.metadata.revisionId]))
    if (known === undefined) stream.send('snapshot', { kind, items: r.items })
    else {
      const upserts = r.items.filter((o) => prev.get(keyOf(o)) !== o.metadata.revisionId)
      const removed = [...prev.keys()].filter((k) => !next.has(k))
      if (upserts.length > 0 || removed.length > 0) stream.send('change', { kind, upserts, removed })
    }
    known = r.version
    prev = next
  }
}

async function watchMembers(client: ApiCaller, stream: EventStream, opts: { membersPollMs: number; now: () => number }): Promise<void> {
  let last = ''
  let sentAt = 0
  while (!stream.closed()) {
    try {
      const r = await callRoute(client, 'members')
      const states = JSON.stringify(r.members.map((m) => [m.name, m.state, m.connected]))
      const now = opts.now()
      if (states !== last || now - sentAt >= 10_000) {
        stream.send('members', { members: r.members, now })
        last = states
        sentAt = now
      }
    } catch (err) {
      // An agent without a mesh has no members: nothing to follow.
      if (err instanceof OrcError && err.code === 'not_found') return
      stream.send('problem', { source: 'members', message: messageOf(err) })
    }
    await stream.idle(opts.membersPollMs)
  }
}

/** `orc logs -f` for the page: `lines` {container, revision, lines}, then `end` {reason} once the container ended. */
export async function followLogs(client: ApiCaller, pod: { ns: string; name: string }, container: string | undefined, stream: EventStream): Promise<void> {
  let r
  try {
    r = await callRoute(client, 'podLogs', pod, { query: { container, follow: '1', tail: '1000' } })
  } catch (err) {
    stream.send('problem', { source: 'logs', message: messageOf(err) })
    return stream.send('end', { reason: messageOf(err) })
  }
  for (;;) {
    if (r.lines.length > 0) stream.send('lines', { container: r.container, revision: r.revision, lines: r.lines })
    if (r.ended) return stream.send('end', { reason: 'the container ended' })
    if (stream.closed()) return
    try {
      r = await callRoute(client, 'podLogs', pod, {
        query: { container: r.container, revision: String(r.revision), follow: '1', cursor: String(r.cursor), waitMs: '10000' },
      })
    } catch (err) {
      stream.send('problem', { source: 'logs', message: messageOf(err) })
      r = { ...r, lines: [] } // the same cursor again, nothing sent twice
      await stream.idle(RETRY_MS)
      if (stream.closed()) return
    }
  }
}
