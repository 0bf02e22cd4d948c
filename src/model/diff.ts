import { isPlainObject } from './schema.ts'

/**
 * Structural diff of JSON values. Objects are compared key by key; arrays and scalars are atomic
 * (a changed list is one `set` of the whole list), matching how the store replicates them.
 */
export type Path = string[]
export type Change = { op: 'set'; path: Path; value: unknown; old?: unknown } | { op: 'unset'; path: Path; old: unknown }

export function diffValues(a: unknown, b: unknown, path: Path = [], out: Change[] = []): Change[] {
  if (isPlainObject(a) && isPlainObject(b)) {
    for (const k of Object.keys(a)) {
      if (!(k in b) || b[k] === undefined) {
        if (a[k] !== undefined) out.push({ op: 'unset', path: [...path, k], old: a[k] })
      }
    }
    for (const k of Object.keys(b)) {
      if (b[k] === undefined) continue
      if (!(k in a) || a[k] === undefined) out.push({ op: 'set', path: [...path, k], value: b[k] })
      else diffValues(a[k], b[k], [...path, k], out)
    }
    return out
  }
  if (!deepEqual(a, b)) out.push({ op: 'set', path, value: b, old: a })
  return out
}

export function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!deepEqual(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  const ka = Object.keys(a as object).filter((k) => (a as Record<string, unknown>)[k] !== undefined)
  const kb = Object.keys(b as object).filter((k) => (b as Record<string, unknown>)[k] !== undefined)
  if (ka.length !== kb.length) return false
  for (const k of ka) if (!deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false
  return true
}

/** Apply changes to a deep copy of `base`. Missing intermediate objects are created. */
export function applyChanges<T>(base: T, changes: readonly Change[]): T {
  let root: unknown = structuredClone(base)
  for (const c of changes) {
    if (c.path.length === 0) {
      root = c.op === 'set' ? structuredClone(c.value) : undefined
      continue
    }
    if (!isPlainObject(root)) root = {}
    let cur = root as Record<string, unknown>
    for (const seg of c.path.slice(0, -1)) {
      if (!isPlainObject(cur[seg])) {
        if (c.op === 'unset') {
          cur = undefined as never
          break
        }
        cur[seg] = {}
      }
      cur = cur[seg] as Record<string, unknown>
    }
    if (!cur) continue
    const last = c.path[c.path.length - 1]!
    if (c.op === 'set') cur[last] = structuredClone(c.value)
    else delete cur[last]
  }
  return root as T
}

export function formatPath(path: Path): string {
  return path.length === 0 ? '(root)' : path.join('.')
}

/** The value at `path` inside plain objects; undefined where the path leaves them. */
export function valueAtPath(obj: unknown, path: readonly string[]): unknown {
  let cur = obj
  for (const seg of path) {
    if (!isPlainObject(cur)) return undefined
    cur = cur[seg]
  }
  return cur
}

/**
 * The field paths a set of changes touches, down to the leaves: setting `status: {phase: x}` on
 * an object without status touches `status.phase`, so ownership is judged (and reported) per leaf.
 * An unset whose old value is not known touches its own path.
 */
export function touchedPaths(changes: readonly Change[]): string[][] {
  const out: string[][] = []
  const leaves = (v: unknown, path: string[]) => {
    if (isPlainObject(v) && Object.keys(v).length > 0) for (const [k, x] of Object.entries(v)) leaves(x, [...path, k])
    else out.push(path)
  }
  const walk = (a: unknown, b: unknown, path: string[]) => {
    if (isPlainObject(a) && isPlainObject(b)) {
      for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) walk(a[k], b[k], [...path, k])
    } else if (!deepEqual(a, b)) {
      if (a !== undefined) leaves(a, path)
      if (b !== undefined) leaves(b, path)
    }
  }
  for (const c of changes) {
    if (c.op === 'unset' && c.old === undefined) out.push([...c.path])
    else walk(c.old, c.op === 'set' ? c.value : undefined, [...c.path])
  }
  return out
}
