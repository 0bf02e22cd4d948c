/**
 * What a plan asks the agent to do. Operations are data (compare them, store them, send them) with a
 * `format()` for dry runs; the agent executes them by writing `status.node` through the store.
 */

/** Set `status.node` of `pod` to `node`. `from` is the node it leaves, when this is a move. */
export class BindOp {
  readonly type = 'bind' as const
  constructor(
    readonly pod: string,
    readonly node: string,
    readonly reason: string,
    readonly from?: string,
  ) {}
  format(): string {
    return `bind pod/${this.pod} to ${this.node}${this.from === undefined ? '' : ` (from ${this.from})`}: ${this.reason}`
  }
  toJSON() {
    return { type: this.type, pod: this.pod, node: this.node, reason: this.reason, ...(this.from === undefined ? {} : { from: this.from }) }
  }
}

/** Clear `status.node`: the pod's node is lost for it (policy decided); the pod becomes pending. */
export class UnbindOp {
  readonly type = 'unbind' as const
  constructor(
    readonly pod: string,
    readonly node: string,
    readonly reason: string,
  ) {}
  format(): string {
    return `unbind pod/${this.pod} from ${this.node}: ${this.reason}`
  }
  toJSON() {
    return { type: this.type, pod: this.pod, node: this.node, reason: this.reason }
  }
}

/** Stop the pod on a node that is still up (NoExecute taint, pin moved); the pod becomes pending. */
export class EvictOp {
  readonly type = 'evict' as const
  constructor(
    readonly pod: string,
    readonly node: string,
    readonly reason: string,
  ) {}
  format(): string {
    return `evict pod/${this.pod} from ${this.node}: ${this.reason}`
  }
  toJSON() {
    return { type: this.type, pod: this.pod, node: this.node, reason: this.reason }
  }
}

export type Operation = BindOp | UnbindOp | EvictOp

/** One line per operation, for `--dry-run`. */
export function formatPlan(ops: readonly Operation[]): string {
  return ops.length === 0 ? 'nothing to do' : ops.map((o) => o.format()).join('\n')
}
