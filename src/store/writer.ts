import type { AbstractLevel } from 'abstract-level'

export type BatchOp = { type: 'put'; key: string; value: Uint8Array } | { type: 'del'; key: string }

/**
 * Group commit: writes queue up while one synced batch is in flight, then go to disk together in
 * the next batch. Every caller's promise resolves only after its ops are on disk (fsync'd when
 * `sync`), so concurrent writers share one sync instead of paying one each. Batches are applied in
 * queue order, and a LevelDB batch is atomic, so a crash leaves a prefix of the acknowledged
 * writes plus possibly more — never a torn write.
 */
export class GroupCommitWriter {
  private queue: { ops: BatchOp[]; resolve: () => void; reject: (e: unknown) => void }[] = []
  private flushing = false
  private failed: unknown = undefined

  /**
   * `tail` returns ops appended once to every batch (bookkeeping such as the revision log vector
   * that only its latest value matters for), instead of once per write.
   */
  constructor(
    private readonly db: AbstractLevel<any, string, Uint8Array>,
    private readonly sync: boolean,
    private readonly tail: () => BatchOp[] = () => [],
  ) {}

  write(ops: BatchOp[]): Promise<void> {
    if (this.failed !== undefined) return Promise.reject(this.failed)
    return new Promise((resolve, reject) => {
      this.queue.push({ ops, resolve, reject })
      if (!this.flushing) void this.flush()
    })
  }

  /** Resolves when everything queued so far is on disk. */
  async drain(): Promise<void> {
    if (this.queue.length === 0 && !this.flushing) return
    await this.write([])
  }

  get error(): unknown {
    return this.failed
  }

  private async flush(): Promise<void> {
    this.flushing = true
    while (this.queue.length > 0) {
      const group = this.queue
      this.queue = []
      const ops = group.flatMap((g) => g.ops)
      if (ops.length > 0) ops.push(...this.tail())
      try {
        if (ops.length > 0) await this.db.batch(ops, { sync: this.sync } as never)
        for (const g of group) g.resolve()
      } catch (err) {
        // The in-memory document already holds these writes; memory and disk disagree now, so
        // the store refuses further writes. A restart rebuilds from disk (acknowledged state).
        this.failed = err
        for (const g of group) g.reject(err)
        for (const g of this.queue) g.reject(err)
        this.queue = []
      }
    }
    this.flushing = false
  }
}
