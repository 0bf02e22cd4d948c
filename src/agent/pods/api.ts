/**
 * Pod routes of the local API (the same handler serves the unix socket and `orc --node`):
 *   GET /v1/pods/{ns}/{name}/logs?container=&revision=&tail=   → { lines, container, revision }
 *   GET …/logs?follow=1[&cursor=N][&waitMs=]                    → long-poll: { lines, cursor, ended }
 *   GET /v1/controllers                                          → the controller read/write graph
 * Long-polling instead of a streaming response keeps the handler transport-independent.
 */
import { readFileSync, statSync } from 'node:fs'
import { type Clock, sleep, systemClock } from '../../effects/index.ts'
import { type ObjectRef, OrcError, type Pod, type Query } from '../../model/index.ts'
import { listLogRevisions, logFilePath, readLogLines } from '../../runtime/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { buildControllerGraph, type ControllerDecl, formatControllerGraph } from '../../workflow/index.ts'
import type { RouteHandlers } from '../router.ts'
import type { LogsAnswer } from '../routes.ts'

export interface PodApiComponents {
  store: ObjectStore
  nodeName: string
  logDirOf(ref: ObjectRef, uid: string, container: string): string
  controllers: readonly ControllerDecl[]
  /**
   * Where a pod of a federation's shared namespace runs (`node@cluster`) and this node's name there;
   * undefined for the cluster's own pods (their node is the pin, else the binding).
   */
  sharedNode?(pod: Stored<Pod>): { node: string | undefined; self: string } | undefined
  /** Time of the log-follow deadline (the system clock unless given). */
  clock?: Clock
  /** Injected wait (tests); default a timer on `clock`. */
  sleep?: (ms: number) => Promise<void>
}

const MAX_WAIT_MS = 30_000
const MAX_LINES = 100_000

function one(q: Query, key: string): string | undefined {
  const v = q[key]
  return Array.isArray(v) ? v[v.length - 1] : v
}

function intParam(q: Query, key: string, min: number): number | undefined {
  const v = one(q, key)
  if (v === undefined || v === '') return undefined
  const n = Number(v)
  if (!Number.isInteger(n) || n < min) throw new OrcError('invalid', `${key}: must be an integer ≥ ${min}; got ${JSON.stringify(v)}`)
  return n
}

function readFrom(path: string, from: number): Buffer {
  try {
    const buf = readFileSync(path)
    return from >= buf.length ? Buffer.alloc(0) : buf.subarray(from)
  } catch {
    return Buffer.alloc(0)
  }
}

function sizeOf(path: string): number {
  try {
    return statSync(path).size
  } catch {
    return 0
  }
}

/** Complete lines of `buf` and how many bytes they span (a partial last line waits). */
function completeLines(buf: Buffer): { lines: string[]; bytes: number } {
  const end = buf.lastIndexOf(0x0a)
  if (end < 0) return { lines: [], bytes: 0 }
  return { lines: buf.subarray(0, end).toString('utf8').split('\n'), bytes: end + 1 }
}

/**
 * A logs answer from the per-revision files in `t.dir` (pods' containers, VMs' consoles): the lines
 * (or the last `tail`), or with `follow` a long-poll from `cursor` that ends once `ended()` says so.
 */
export async function answerLogs(
  t: { dir: string; container: string; revision: number | undefined },
  q: Query,
  clock: Clock,
  wait: (ms: number) => Promise<void>,
  ended: () => boolean,
): Promise<LogsAnswer> {
  const tail = intParam(q, 'tail', 0)
  const follow = one(q, 'follow') === '1' || one(q, 'follow') === 'true'
  if (!follow) {
    const lines = t.revision === undefined ? [] : readLogLines(t.dir, { revision: t.revision, ...(tail !== undefined ? { tail } : {}) })
    return { container: t.container, revision: t.revision ?? null, lines: lines.slice(-MAX_LINES) }
  }
  const rev = t.revision ?? 0
  const live = logFilePath(t.dir, rev)
  const cursorParam = intParam(q, 'cursor', 0)
  if (cursorParam === undefined) {
    // first call: the retained lines (or the last `tail`), and where to continue from
    const head = completeLines(readFrom(live, 0))
    const all = readLogLines(t.dir, { revision: rev })
    const partial = sizeOf(live) > head.bytes ? 1 : 0
    const lines = all.slice(0, all.length - partial)
    return {
      container: t.container,
      revision: rev,
      lines: tail !== undefined ? (tail === 0 ? [] : lines.slice(-tail)) : lines.slice(-MAX_LINES),
      cursor: head.bytes,
      ended: false,
    }
  }
  const waitMs = Math.min(intParam(q, 'waitMs', 0) ?? 10_000, MAX_WAIT_MS)
  const deadline = clock.now() + waitMs
  let cursor = cursorParam
  for (;;) {
    const size = sizeOf(live)
    let data: Buffer
    if (size < cursor) {
      // rotated (copy, then truncate): the unread end is in N.log.1
      data = Buffer.concat([readFrom(`${live}.1`, cursor), readFrom(live, 0)])
      cursor = 0
      const got = completeLines(data)
      const fromLive = Math.max(0, got.bytes - Math.max(0, data.length - sizeOf(live)))
      return { container: t.container, revision: rev, lines: got.lines, cursor: fromLive, ended: false }
    }
    data = readFrom(live, cursor)
    const got = completeLines(data)
    if (got.lines.length > 0) return { container: t.container, revision: rev, lines: got.lines, cursor: cursor + got.bytes, ended: false }
    const done = ended()
    if (done || clock.now() >= deadline) return { container: t.container, revision: rev, lines: [], cursor, ended: done }
    await wait(100)
  }
}

/** The pod routes this node answers itself: logs of the pods it runs, the controller graph. */
export function podRoutes(c: PodApiComponents) {
  const clock = c.clock ?? systemClock
  const wait = c.sleep ?? ((ms: number) => sleep(clock, ms))

  function podOf(ns: string, name: string): Stored<Pod> {
    const ref = { kind: 'Pod' as const, namespace: ns, name }
    const pod = c.store.get(ref)
    if (!pod) throw new OrcError('not_found', `pod/${name} in namespace ${ns} not found`, { ...ref })
    return pod
  }

  function target(pod: Stored<Pod>, q: Query): { dir: string; container: string; revision: number | undefined; ref: ObjectRef } {
    const ref = { kind: 'Pod', namespace: pod.metadata.namespace ?? 'default', name: pod.metadata.name }
    const shared = c.sharedNode?.(pod)
    const node = shared !== undefined ? shared.node : (pod.spec?.placement?.node ?? pod.status?.node)
    if (node === undefined) throw new OrcError('unavailable', `pod/${ref.name} is not bound to a node yet, so it has no logs`, { ...ref })
    if (node !== (shared?.self ?? c.nodeName)) {
      throw new OrcError('unavailable', `pod/${ref.name} runs on node ${node}; its logs are there (orc --node ${node} logs pod/${ref.name})`, { ...ref, node })
    }
    const names = (pod.spec?.containers ?? []).map((x) => x.name)
    let container = one(q, 'container')
    if (container === undefined || container === '') {
      if (names.length !== 1)
        throw new OrcError('invalid', `pod/${ref.name} has containers ${names.join(', ')}: choose one with -c`, { ...ref, containers: names })
      container = names[0]!
    } else if (!names.includes(container)) {
      throw new OrcError('not_found', `pod/${ref.name} has no container ${container} (it has ${names.join(', ')})`, { ...ref, containers: names })
    }
    const dir = c.logDirOf(ref, pod.metadata.uid, container)
    let revision = intParam(q, 'revision', 1)
    if (revision === undefined) {
      const running = pod.status?.runningRevision ?? pod.status?.targetRevision
      const revs = listLogRevisions(dir)
      revision = typeof running === 'number' && revs.includes(running) ? running : revs[revs.length - 1]
    } else if (!listLogRevisions(dir).includes(revision)) {
      const revs = listLogRevisions(dir)
      throw new OrcError(
        'not_found',
        `pod/${ref.name} container ${container} has no logs of revision ${revision} on this node (revisions with logs: ${revs.join(', ') || 'none'})`,
        { ...ref, revision },
      )
    }
    return { dir, container, revision, ref }
  }

  function ended(pod: Stored<Pod> | undefined, container: string): boolean {
    if (!pod) return true
    const phase = pod.status?.phase
    if (phase === 'Succeeded' || phase === 'Failed') return true
    const cs = (pod.status?.containers ?? []).find((x) => x.name === container)
    return cs?.state === 'exited'
  }

  async function logs(ns: string, name: string, q: Query): Promise<LogsAnswer> {
    const pod = podOf(ns, name)
    const t = target(pod, q)
    return answerLogs(t, q, clock, wait, () => {
      const now = c.store.get({ kind: 'Pod', namespace: ns, name })
      return !now || now.metadata.uid !== pod.metadata.uid || ended(now, t.container)
    })
  }

  return {
    podLogs: ({ params, query }) => logs(params.ns, params.name, query),
    controllers: () => {
      const g = buildControllerGraph(c.controllers)
      return { ...g, text: formatControllerGraph(g) }
    },
  } satisfies RouteHandlers
}
