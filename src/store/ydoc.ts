import * as Y from 'yjs'
import { isPlainObject, type Change } from '../model/index.ts'

/**
 * How objects live in the Yjs document: every JSON object is a nested Y.Map, so a one-field change
 * is a one-key update (~40 bytes) and concurrent edits of different fields merge; arrays and
 * scalars are stored as plain values (a changed list is replaced whole).
 */
export function toY(value: unknown): unknown {
  if (isPlainObject(value)) {
    const m = new Y.Map<unknown>()
    for (const [k, v] of Object.entries(value)) if (v !== undefined) m.set(k, toY(v))
    return m
  }
  return value
}

export function fromY(value: unknown): unknown {
  if (value instanceof Y.Map) return value.toJSON()
  return value
}

/** Apply structural changes to a Y.Map in place (inside the caller's transaction). */
export function applyChangesToY(root: Y.Map<unknown>, changes: readonly Change[]): void {
  for (const c of changes) {
    if (c.path.length === 0) continue
    let cur = root
    let ok = true
    for (const seg of c.path.slice(0, -1)) {
      const next = cur.get(seg)
      if (next instanceof Y.Map) {
        cur = next
      } else if (c.op === 'unset') {
        ok = false
        break
      } else {
        const m = new Y.Map<unknown>()
        cur.set(seg, m)
        cur = m
      }
    }
    if (!ok) continue
    const last = c.path[c.path.length - 1]!
    if (c.op === 'set') cur.set(last, toY(c.value))
    else cur.delete(last)
  }
}
