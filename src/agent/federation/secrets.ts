/**
 * Secrets and federations (docs/secrets.md, "Keys, rotation and federation"): a Secret goes into a
 * federation's document only when its namespace is shared with the federation *and* the Secret
 * says `spec.shareable: true`. Anything else stays in the cluster's own scope, even in a shared
 * namespace. Enforced where this cluster writes (routed-store.ts: the Secret is written to the
 * cluster's own store, and a Secret cannot silently move between the two) and where it receives
 * (replica.ts: a federation update whose records would make a Secret that is not shareable is
 * refused before the store sees it).
 */
import { type Change, OrcError, valueAtPath } from '../../model/index.ts'

const SHAREABLE = ['spec', 'shareable'] as const

/** Whether an object may live in a federation's document: anything but a Secret not marked shareable. */
export function mayFederate(obj: { kind: string; spec?: unknown }): boolean {
  return obj.kind !== 'Secret' || valueAtPath(obj.spec, ['shareable']) === true
}

/** A record's encoded changes (`['s', path, value]` / `['u', path]`, store/codec.ts); malformed entries are skipped (the store refuses them). */
function changesOf(enc: readonly unknown[]): Change[] {
  const out: Change[] = []
  for (const e of enc) {
    if (!Array.isArray(e) || !Array.isArray(e[1]) || !e[1].every((p) => typeof p === 'string')) continue
    if (e[0] === 's') out.push({ op: 'set', path: e[1], value: e[2] })
    else if (e[0] === 'u') out.push({ op: 'unset', path: e[1], old: undefined })
  }
  return out
}

/** What `changes` make of `spec.shareable`: its value when they touch it, else `unchanged`. */
function shareableAfter(changes: readonly Change[]): { touched: false } | { touched: true; value: unknown } {
  let out: { touched: false } | { touched: true; value: unknown } = { touched: false }
  for (const c of changes) {
    const n = Math.min(c.path.length, SHAREABLE.length)
    if (c.path.slice(0, n).some((seg, i) => seg !== SHAREABLE[i])) continue
    if (c.op === 'unset') out = { touched: true, value: undefined }
    else out = { touched: true, value: c.path.length >= SHAREABLE.length ? c.value : valueAtPath(c.value, SHAREABLE.slice(c.path.length)) }
  }
  return out
}

/** A federation revision record, as much of it as this check reads (store/codec.ts RevisionRecord). */
export interface FederatedRecord {
  i: string
  k: string
  o: string
  c?: unknown
  f?: Record<string, unknown>
}

/**
 * Throws `forbidden` when a record would put into the federation's document a Secret that is not
 * shareable: a full copy without `spec.shareable: true`, a creation whose changes do not set it, or
 * changes that set it to anything but true. Deletions pass; a compacted record without content
 * cannot be judged here.
 */
export function checkFederatedSecrets(records: readonly FederatedRecord[]): void {
  for (const r of records) {
    if (!r.k.startsWith('Secret/') || r.o === 'delete') continue
    const refuse = () =>
      new OrcError('forbidden', `federation update: revision ${r.i} would share ${r.k}, which is not marked spec.shareable: true`, { revision: r.i, key: r.k })
    if (r.f !== undefined) {
      if (valueAtPath(r.f, [...SHAREABLE]) !== true) throw refuse()
      continue
    }
    if (!Array.isArray(r.c)) continue
    const after = shareableAfter(changesOf(r.c))
    if (r.o === 'create' ? !after.touched || after.value !== true : after.touched && after.value !== true) throw refuse()
  }
}
