import { OrcError } from '../model/index.ts'
import type { RetryPolicy, TargetSpec, UnitKind, UnitSpec } from './types.ts'

/** A registered unit or target, normalised (arrays always present, copied). */
export interface UnitDef {
  name: string
  kind: UnitKind
  description?: string
  after: readonly string[]
  before: readonly string[]
  requires: readonly string[]
  wantedBy: readonly string[]
  timeoutMs?: number
  retry?: RetryPolicy
  run?: UnitSpec['run']
}

const NAME = /^[a-z0-9][a-z0-9._:@/-]{0,127}$/

/**
 * The unit/target graph controllers register into. Registration refuses what can never run: a bad
 * name, a duplicate, a bad retry policy, and any ordering cycle (the error names the cycle and the
 * declarations that form it). Names may be referenced before they are registered, so controllers
 * can register in any order; a hard dependency that is still missing when a run needs it skips the
 * units that require it.
 */
export class WorkflowGraph {
  private readonly defs = new Map<string, UnitDef>()

  addUnit(spec: UnitSpec): this {
    if (typeof spec.run !== 'function') {
      throw new OrcError('invalid', `unit ${spec.name}: run must be a function (use addTarget for a target)`, {
        unit: spec.name,
      })
    }
    return this.add(spec, 'unit')
  }

  addTarget(spec: TargetSpec): this {
    return this.add(spec, 'target')
  }

  has(name: string): boolean {
    return this.defs.has(name)
  }

  get(name: string): UnitDef | undefined {
    return this.defs.get(name)
  }

  /** All definitions in registration order. */
  list(): UnitDef[] {
    return [...this.defs.values()]
  }

  /** Everything `name` waits for before it may start: its after and requires, others' before/wantedBy. */
  orderingDeps(name: string): string[] {
    return orderingDeps(this.defs, name)
  }

  /** What `name` hard-depends on: its requires, and the units that are wantedBy it. */
  hardDeps(name: string): string[] {
    return hardDeps(this.defs, name)
  }

  private add(spec: UnitSpec | TargetSpec, kind: UnitKind): this {
    const name = spec.name
    if (typeof name !== 'string' || !NAME.test(name)) {
      throw new OrcError('invalid', `${kind} name ${JSON.stringify(name)}: use lowercase letters, digits and . _ : @ / -`)
    }
    if (this.defs.has(name)) {
      throw new OrcError('conflict', `${kind} ${name} is already registered`, { unit: name })
    }
    const list = (field: 'after' | 'before' | 'requires' | 'wantedBy'): string[] => {
      const v = spec[field] ?? []
      if (!Array.isArray(v) || v.some((x) => typeof x !== 'string' || !NAME.test(x))) {
        throw new OrcError('invalid', `${kind} ${name}: ${field} must be a list of unit names`, { unit: name, field })
      }
      return [...new Set(v)]
    }
    const def: UnitDef = {
      name,
      kind,
      after: list('after'),
      before: list('before'),
      requires: list('requires'),
      wantedBy: list('wantedBy'),
    }
    if (spec.description !== undefined) def.description = spec.description
    if (kind === 'unit') {
      const u = spec as UnitSpec
      def.run = u.run
      if (u.timeoutMs !== undefined) {
        if (typeof u.timeoutMs !== 'number' || !(u.timeoutMs > 0)) {
          throw new OrcError('invalid', `unit ${name}: timeoutMs must be a positive number (Infinity for none)`, { unit: name })
        }
        def.timeoutMs = u.timeoutMs
      }
      if (u.retry !== undefined) def.retry = checkRetry(name, u.retry)
    }
    this.defs.set(name, def)
    const cycle = findCycleThrough(this.defs, name)
    if (cycle) {
      this.defs.delete(name)
      throw new OrcError('invalid', `${kind} ${name} would close an ordering cycle: ${formatCycle(this.defs, def, cycle)}`, {
        unit: name,
        cycle,
      })
    }
    return this
  }
}

function checkRetry(name: string, r: RetryPolicy): RetryPolicy {
  const ok =
    Number.isInteger(r.attempts) &&
    r.attempts >= 1 &&
    typeof r.backoffMs === 'number' &&
    r.backoffMs >= 0 &&
    Number.isFinite(r.backoffMs) &&
    (r.maxBackoffMs === undefined || (typeof r.maxBackoffMs === 'number' && r.maxBackoffMs >= 0))
  if (!ok) {
    throw new OrcError('invalid', `unit ${name}: retry needs attempts >= 1 and backoffMs >= 0`, { unit: name })
  }
  return { ...r }
}

export function orderingDeps(defs: ReadonlyMap<string, UnitDef>, name: string): string[] {
  const out = new Set<string>()
  const own = defs.get(name)
  if (own) {
    for (const d of own.after) out.add(d)
    for (const d of own.requires) out.add(d)
  }
  for (const other of defs.values()) {
    if (other.before.includes(name) || other.wantedBy.includes(name)) out.add(other.name)
  }
  return [...out]
}

export function hardDeps(defs: ReadonlyMap<string, UnitDef>, name: string): string[] {
  const out = new Set<string>()
  const own = defs.get(name)
  if (own) for (const d of own.requires) out.add(d)
  for (const other of defs.values()) if (other.wantedBy.includes(name)) out.add(other.name)
  return [...out]
}

/** `orderingDeps` and `hardDeps` of every registered name in one pass (O(units + links)). */
export function dependencyMaps(defs: ReadonlyMap<string, UnitDef>): { order: Map<string, string[]>; hard: Map<string, string[]> } {
  const order = new Map<string, Set<string>>()
  const hard = new Map<string, Set<string>>()
  const add = (m: Map<string, Set<string>>, k: string, v: string) => {
    if (!defs.has(k)) return
    let set = m.get(k)
    if (!set) m.set(k, (set = new Set()))
    set.add(v)
  }
  for (const d of defs.values()) {
    order.set(d.name, order.get(d.name) ?? new Set())
    hard.set(d.name, hard.get(d.name) ?? new Set())
    for (const a of d.after) add(order, d.name, a)
    for (const r of d.requires) {
      add(order, d.name, r)
      add(hard, d.name, r)
    }
    for (const b of d.before) add(order, b, d.name)
    for (const t of d.wantedBy) {
      add(order, t, d.name)
      add(hard, t, d.name)
    }
  }
  const lists = (m: Map<string, Set<string>>) => new Map([...m].map(([k, v]) => [k, [...v]]))
  return { order: lists(order), hard: lists(hard) }
}

/** A path [start, …, start] along "must finish before" edges, or undefined. */
function findCycleThrough(defs: ReadonlyMap<string, UnitDef>, start: string): string[] | undefined {
  // Successors: names that must wait for a given name. Built over registered and referenced names.
  const succ = new Map<string, Set<string>>()
  const edge = (from: string, to: string) => {
    let s = succ.get(from)
    if (!s) succ.set(from, (s = new Set()))
    s.add(to)
  }
  for (const d of defs.values()) {
    for (const a of d.after) edge(a, d.name)
    for (const r of d.requires) edge(r, d.name)
    for (const b of d.before) edge(d.name, b)
    for (const t of d.wantedBy) edge(d.name, t)
  }
  const path: string[] = [start]
  const seen = new Set<string>()
  const dfs = (n: string): boolean => {
    for (const m of succ.get(n) ?? []) {
      if (m === start) {
        path.push(m)
        return true
      }
      if (seen.has(m)) continue
      seen.add(m)
      path.push(m)
      if (dfs(m)) return true
      path.pop()
    }
    return false
  }
  return dfs(start) ? path : undefined
}

/** `a → b → a (b after a; a requires b)`: the chain, then which declaration made each link. */
function formatCycle(defs: ReadonlyMap<string, UnitDef>, added: UnitDef, cycle: string[]): string {
  const all = new Map(defs)
  all.set(added.name, added)
  const why: string[] = []
  for (let i = 0; i + 1 < cycle.length; i++) {
    const from = cycle[i]!
    const to = cycle[i + 1]!
    const f = all.get(from)
    const t = all.get(to)
    if (t?.requires.includes(from)) why.push(`${to} requires ${from}`)
    else if (t?.after.includes(from)) why.push(`${to} after ${from}`)
    else if (f?.before.includes(to)) why.push(`${from} before ${to}`)
    else if (f?.wantedBy.includes(to)) why.push(`${from} wantedBy ${to}`)
  }
  return `${cycle.join(' → ')} (${why.join('; ')})`
}
