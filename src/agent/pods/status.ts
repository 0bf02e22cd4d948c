/**
 * Writes a pod's status as controller:lifecycle. One write at a time; what is asked for while a
 * write is in flight is merged into the next one, so a burst of transitions costs one or two
 * revisions, and an unchanged status costs none (the store records no revision for a no-op patch).
 *
 * Progress (a run starting, a unit done) is deferred: written `deferMs` after it was first asked
 * for, unless a settling write (running, failed, a container exiting, fenced…) comes first and
 * carries it. A pod that starts within that window costs one lifecycle revision — `running revision
 * N` — instead of one per unit transition (five on a plain start: issue #23), and history keeps what
 * a person looks for. A slow start still shows its progress on every node, at most once per window.
 *
 * One writer per copy: only the node the pod is bound to (or pinned to) writes its status. A node
 * stopping a copy of a pod bound elsewhere writes nothing here (it reports that in its own Node,
 * see PodLifecycle.reportStoppedCopy). And the bound node re-asserts what it wrote when a merge brought
 * in a concurrent write of another node (one that ran the pod before it learned of the move).
 */
import { isDeepStrictEqual } from 'node:util'
import type { Logger } from 'pino'
import type { Clock, TimerHandle } from '../../effects/index.ts'
import type { ObjectOf, ObjectRef } from '../../model/index.ts'
import type { ObjectStore } from '../../store/index.ts'

export const LIFECYCLE_CONTROLLER = 'controller:lifecycle'

/** Also writes a VirtualMachine's status (src/agent/vms), as its own controller (`author`). */
export class StatusWriter<K extends 'Pod' | 'VirtualMachine' = 'Pod'> {
  private pending: { status: Record<string, unknown>; reason: string } | undefined
  private inflight: Promise<void> | undefined
  /** The last status asked for. */
  private last: Record<string, unknown> | undefined
  /** Asked for while the pod was not ours to write (yet): written by reassert() once it is. */
  private held: { status: Record<string, unknown>; reason: string } | undefined
  /** A deferred write waiting for its window (`set(…, { defer: true })`). */
  private deferTimer: TimerHandle | undefined
  /** The pending write is progress only: it may wait for its window (or a settling write). */
  private pendingMayWait = false

  constructor(
    private readonly store: ObjectStore,
    private readonly ref: ObjectRef<K>,
    private readonly clock: Clock,
    private readonly log: Logger,
    /** Whether this node runs the pod (bound or pinned here): only then is its status ours. */
    private readonly mine: (obj: ObjectOf<K>) => boolean,
    /** How long progress may wait for a settling write to carry it (0: written at once). */
    private readonly deferMs = 0,
    private readonly author: string = LIFECYCLE_CONTROLLER,
  ) {}

  /**
   * Desired status (every lifecycle-owned field; undefined removes one). `defer`: progress, written
   * within `deferMs` or with the next write that is not deferred. A deferred write keeps the reason
   * of the write already waiting ("start revision 2"); a settling write says its own.
   */
  set(status: Record<string, unknown>, reason: string, opts: { defer?: boolean } = {}): void {
    const prev = this.pending
    const wasPending = prev !== undefined
    // Progress never renames a write already waiting: that one says what happened.
    this.pending = { status, reason: opts.defer && prev !== undefined ? prev.reason : reason }
    this.last = status
    this.held = undefined
    // What waits may wait only while everything asked for since the last write was progress.
    this.pendingMayWait = opts.defer === true && this.deferMs > 0 && (!wasPending || this.pendingMayWait)
    if (this.pendingMayWait) {
      // A write in flight arms the window when it is done (flush), so progress that arrives during
      // a slow write waits its turn too instead of following it at once.
      if (this.inflight === undefined) this.armDefer()
      return
    }
    this.startFlush()
  }

  private armDefer(): void {
    this.deferTimer ??= this.clock.setTimeout(() => {
      this.deferTimer = undefined
      this.pendingMayWait = false
      this.startFlush()
    }, this.deferMs)
  }

  private startFlush(): void {
    if (this.deferTimer !== undefined) {
      this.clock.clearTimeout(this.deferTimer)
      this.deferTimer = undefined
    }
    this.inflight ??= this.flush().finally(() => (this.inflight = undefined))
  }

  private current(): ObjectOf<K> | undefined {
    return this.store.get(this.ref as ObjectRef) as ObjectOf<K> | undefined
  }

  /** Drops a deferred write (the worker is going away; what it would say no longer matters). */
  cancelDeferred(): void {
    if (this.deferTimer !== undefined) this.clock.clearTimeout(this.deferTimer)
    this.deferTimer = undefined
    if (this.pendingMayWait) this.pending = undefined
    this.pendingMayWait = false
  }

  /**
   * The stored status differs from what this node last wrote (a merge of another node's concurrent
   * write won a field): write ours again. Only while the pod is ours; a no-op otherwise.
   * `onlyHeld`: just write a status held back while the pod was not ours yet (cheap: no compare).
   */
  reassert(onlyHeld = false): void {
    if (this.last === undefined || this.pending !== undefined || this.inflight !== undefined) return
    if (onlyHeld && this.held === undefined) return
    const cur = this.current()
    if (!cur || !this.mine(cur)) return
    if (this.held !== undefined) {
      this.set(this.held.status, this.held.reason)
      return
    }
    if (onlyHeld) return
    const st = (cur.status ?? {}) as Record<string, unknown>
    const drift = Object.entries(this.last).filter(([k, v]) => !isDeepStrictEqual(st[k], v === undefined ? undefined : JSON.parse(JSON.stringify(v))))
    if (drift.length === 0) return
    this.log.info(
      { kind: this.ref.kind, ns: this.ref.namespace, name: this.ref.name, fields: drift.map(([k]) => k) },
      'pod status overwritten by a concurrent write; writing it again',
    )
    this.set(this.last, `status of the running copy restored (${drift.map(([k]) => k).join(', ')} had a concurrent write)`)
  }

  /** Resolves once everything asked for so far is written (a deferred write is written now). */
  async settled(): Promise<void> {
    if (this.pendingMayWait || this.deferTimer !== undefined) {
      this.pendingMayWait = false
      this.startFlush()
    }
    while (this.inflight) await this.inflight
  }

  private async flush(): Promise<void> {
    while (this.pending) {
      if (this.pendingMayWait) {
        this.armDefer()
        return
      }
      const { status, reason } = this.pending
      this.pending = undefined
      const cur = this.current()
      if (!cur) return
      if (!this.mine(cur)) {
        this.held = { status, reason }
        this.log.debug(
          { kind: this.ref.kind, ns: this.ref.namespace, name: this.ref.name, reason },
          'pod status held back: the pod is bound to another node, or this agent has not caught up with its cluster',
        )
        continue
      }
      try {
        const fields = Object.entries(status).map(([k, v]) => ({ path: ['status', k], value: v }))
        const res = await this.store.patch(this.ref, fields, { author: this.author, reason, now: this.clock.now() })
        if (res.revision)
          this.log.debug({ kind: this.ref.kind, ns: this.ref.namespace, name: this.ref.name, rev: res.revision.number, reason }, 'pod status written')
      } catch (err) {
        // deleted meanwhile, or the store is closing: the controller reconciles again
        this.log.debug({ kind: this.ref.kind, ns: this.ref.namespace, name: this.ref.name, err: String(err) }, 'write pod status')
      }
    }
  }
}
