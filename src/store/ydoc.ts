import * as Y from 'yjs'
import { type Change, isPlainObject } from '../model/index.ts'

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

/**
 * Yjs decodes every value into an array grown by `push` (V8 reserves 17 slots, ~150 bytes, for
 * one element) and every map key into a string of its own. After a large decode (a cold start, a
 * joining node's first sync) this copies those arrays to their exact size and makes equal keys and
 * short string values share one string: ~20 MB less heap for 10k pods (docs/benchmarks.md).
 * Only structs at or after `since` (a state vector taken before the decode) are visited; they are
 * fresh from the decoder, so nothing has been handed out or frozen yet.
 */
export function compactDecoded(doc: Y.Doc, since: Map<number, number> = new Map()): number {
  const strings = new Map<string, string>()
  const intern = (s: string): string => {
    if (s.length > 40) return s
    const x = strings.get(s)
    if (x !== undefined) return x
    strings.set(s, s)
    return s
  }
  const trim = (v: unknown): unknown => {
    if (typeof v === 'string') return intern(v)
    if (Array.isArray(v)) return v.map(trim)
    if (isPlainObject(v)) for (const k of Object.keys(v)) v[k] = trim(v[k])
    return v
  }
  let visited = 0
  for (const [client, structs] of doc.store.clients) {
    const from = since.get(client) ?? 0
    // Structs are sorted by clock: find the first one that ends after `from`.
    let lo = 0
    let hi = structs.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      const s = structs[mid]!
      if (s.id.clock + s.length <= from) lo = mid + 1
      else hi = mid
    }
    for (let i = lo; i < structs.length; i++) {
      const s = structs[i]
      if (!(s instanceof Y.Item)) continue
      visited++
      if (s.parentSub !== null) s.parentSub = intern(s.parentSub)
      if (s.content instanceof Y.ContentAny) s.content.arr = s.content.arr.map(trim)
    }
  }
  return visited
}
