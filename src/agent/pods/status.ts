/**
 * Writes a pod's status as controller:lifecycle. One write at a time; what is asked for while a
 * write is in flight is merged into the next one, so a burst of transitions costs one or two
 * revisions, and an unchanged status costs none (the store records no revision for a no-op patch).
 */
import type { Logger } from 'pino'
import type { ObjectRef } from '../../model/index.ts'
import type { ObjectStore } from '../../store/index.ts'

export const LIFECYCLE_CONTROLLER = 'controller:lifecycle'

export class StatusWriter {
  private pending: { status: Record<string, unknown>; reason: string } | undefined
  private inflight: Promise<void> | undefined

  constructor(
    private readonly store: ObjectStore,
    private readonly ref: ObjectRef,
    private readonly now: () => number,
    private readonly log: Logger,
  ) {}

  /** Desired status (every lifecycle-owned field; undefined removes one). */
  set(status: Record<string, unknown>, reason: string): void {
    this.pending = { status, reason }
    this.inflight ??= this.flush().finally(() => (this.inflight = undefined))
  }

  /** Resolves once everything asked for so far is written. */
  async settled(): Promise<void> {
    while (this.inflight) await this.inflight
  }

  private async flush(): Promise<void> {
    while (this.pending) {
      const { status, reason } = this.pending
      this.pending = undefined
      const cur = this.store.get(this.ref)
      if (!cur) return
      try {
        const fields = Object.entries(status).map(([k, v]) => ({ path: ['status', k], value: v }))
        const res = await this.store.patch(this.ref, fields, { author: LIFECYCLE_CONTROLLER, reason, now: this.now() })
        if (res.revision) this.log.debug({ kind: 'Pod', ns: this.ref.namespace, name: this.ref.name, rev: res.revision.number, reason }, 'pod status written')
      } catch (err) {
        // deleted meanwhile, or the store is closing: the controller reconciles again
        this.log.debug({ kind: 'Pod', ns: this.ref.namespace, name: this.ref.name, err: String(err) }, 'write pod status')
      }
    }
  }
}
