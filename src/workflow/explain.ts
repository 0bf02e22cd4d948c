import { byCodeUnits, OrcError } from '../model/index.ts'
import { formatDuration, formatSeconds } from './format.ts'
import { unitsByName } from './snapshot.ts'
import type { UnitKind, UnitSnapshot, UnitState, WorkflowSnapshot } from './types.ts'

/**
 * `orc why` and `orc why --critical-chain`: pure functions of a run's JSON snapshot, so any node
 * can render them from the replicated status without the engine that produced it.
 */

export interface ExplainOptions {
  /** Measure running durations up to this time instead of the snapshot's `at`. */
  now?: number
  /** What the workflow belongs to, shown first in the text (e.g. `pod/web`). */
  subject?: string
}

export interface WhyUnit {
  name: string
  kind: UnitKind
  state: UnitState
  /** One phrase a person reads: `done in 300ms`, `running 12.3s (attempt 2/5, timeout 30s)`. */
  status: string
  description?: string
  /** Start, relative to the run start. */
  startedAtMs?: number
  /** Done/failed: how long it took; running: how long the current attempt has run. */
  durationMs?: number
  attempts: number
  maxAttempts: number
  timeoutMs: number | null
  lastError?: string
  reason?: string
  /** Running but between attempts: time left before the next one. */
  retryInMs?: number
  /** Waiting: what it still waits for. */
  waitsFor?: string[]
}

export interface WhyStep {
  unit: string
  state: UnitState | 'undefined'
  /** Dependencies not yet finished (waiting units). */
  waitsFor: string[]
  line: string
}

export interface WhyExplanation {
  subject?: string
  runId?: string
  target: string
  state: UnitState
  reached: boolean
  /** The first line of the text: the target's state and the one thing that holds it up. */
  summary: string
  cancelled?: string
  /** From the target down to the unit that holds it up; empty once reached. */
  blockedBy: WhyStep[]
  done: WhyUnit[]
  running: WhyUnit[]
  failed: WhyUnit[]
  skipped: WhyUnit[]
  waiting: WhyUnit[]
}

export interface CriticalStep {
  unit: string
  kind: UnitKind
  state: UnitState
  depth: number
  /** When it started (a target: when reached), relative to the run start. */
  atMs?: number
  /** How long it took (units only; running: so far). */
  durationMs?: number
}

export interface CriticalChain {
  subject?: string
  target: string
  reached: boolean
  /** Time from the run start until the target was reached (or until now, if it is not). */
  totalMs: number
  steps: CriticalStep[]
}

const SETTLED: ReadonlySet<UnitState> = new Set(['done', 'failed', 'skipped'])

function targetOf(snap: WorkflowSnapshot, target: string): Map<string, UnitSnapshot> {
  const units = unitsByName(snap)
  if (!units.has(target)) {
    const known = snap.targets.length > 0 ? ` (this run was asked for ${snap.targets.join(', ')})` : ''
    throw new OrcError('not_found', `${target} is not part of this workflow run${known}`, { unit: target })
  }
  return units
}

/** Names `target` depends on, transitively, plus itself. */
function closure(units: Map<string, UnitSnapshot>, target: string): Set<string> {
  const out = new Set<string>()
  const stack = [target]
  while (stack.length > 0) {
    const n = stack.pop()!
    if (out.has(n)) continue
    out.add(n)
    for (const d of units.get(n)?.after ?? []) if (units.has(d)) stack.push(d)
  }
  return out
}

/** Dependencies that still hold `u` back: unfinished ones, and required ones not done. */
function pendingDeps(units: Map<string, UnitSnapshot>, u: UnitSnapshot): string[] {
  const out: string[] = []
  for (const d of u.after) {
    const dep = units.get(d)
    if (!dep) {
      if (u.requires.includes(d)) out.push(d)
    } else if (!SETTLED.has(dep.state)) out.push(d)
  }
  return out
}

function attemptText(u: UnitSnapshot): string | undefined {
  return u.maxAttempts > 1 ? `attempt ${u.attempts}/${u.maxAttempts}` : undefined
}

/** One phrase for a unit's state. */
export function describeUnit(u: UnitSnapshot, snap: WorkflowSnapshot, now = snap.at): string {
  const rel = (t: number) => `+${formatSeconds(t - snap.startedAt)}`
  switch (u.state) {
    case 'done':
      if (u.kind === 'target') return `reached at ${rel(u.endedAt ?? snap.startedAt)}`
      return `done in ${formatDuration((u.endedAt ?? now) - (u.startedAt ?? now))}${u.attempts > 1 ? ` after ${u.attempts} attempts` : ''}`
    case 'running': {
      if (u.retryAt !== undefined) {
        return `retrying in ${formatDuration(u.retryAt - now)} (attempt ${u.attempts}/${u.maxAttempts} failed: ${u.lastError ?? 'unknown error'})`
      }
      const parts: string[] = []
      const a = attemptText(u)
      if (a) parts.push(a)
      if (u.progress !== undefined) parts.push(u.progress)
      if (u.timeoutMs !== null) parts.push(`timeout ${formatDuration(u.timeoutMs)}`)
      if (u.lastError !== undefined) parts.push(`last error: ${u.lastError}`)
      const elapsed = formatDuration(now - (u.attemptStartedAt ?? u.startedAt ?? now))
      return `running ${elapsed}${parts.length > 0 ? ` (${parts.join(', ')})` : ''}`
    }
    case 'failed':
      return `failed${u.attempts > 1 ? ` after ${u.attempts} attempts` : ''}: ${u.lastError ?? 'unknown error'}`
    case 'skipped':
      return `skipped: ${u.reason ?? 'a dependency did not finish'}`
    case 'waiting':
      return 'waiting'
  }
}

function whyUnit(u: UnitSnapshot, snap: WorkflowSnapshot, units: Map<string, UnitSnapshot>, now: number): WhyUnit {
  const w: WhyUnit = {
    name: u.name,
    kind: u.kind,
    state: u.state,
    status: describeUnit(u, snap, now),
    attempts: u.attempts,
    maxAttempts: u.maxAttempts,
    timeoutMs: u.timeoutMs,
  }
  if (u.description !== undefined) w.description = u.description
  if (u.startedAt !== undefined) w.startedAtMs = u.startedAt - snap.startedAt
  if (u.state === 'running' && u.retryAt === undefined) w.durationMs = now - (u.attemptStartedAt ?? u.startedAt ?? now)
  else if (u.startedAt !== undefined && u.endedAt !== undefined && u.kind === 'unit') w.durationMs = u.endedAt - u.startedAt
  if (u.lastError !== undefined) w.lastError = u.lastError
  if (u.reason !== undefined) w.reason = u.reason
  if (u.retryAt !== undefined) w.retryInMs = Math.max(0, u.retryAt - now)
  if (u.state === 'waiting') {
    w.waitsFor = pendingDeps(units, u)
    w.status = w.waitsFor.length > 0 ? `waits for ${w.waitsFor.join(', ')}` : 'waiting to start'
  }
  return w
}

const PRIORITY: Record<UnitState | 'undefined', number> = { failed: 0, undefined: 1, skipped: 2, running: 3, waiting: 4, done: 5 }

/** From `target` down to what holds it up, following at each step the most telling dependency. */
function blockingChain(units: Map<string, UnitSnapshot>, snap: WorkflowSnapshot, target: string, now: number): WhyStep[] {
  const steps: WhyStep[] = []
  const seen = new Set<string>()
  let name: string | undefined = target
  while (name !== undefined && !seen.has(name)) {
    seen.add(name)
    const u = units.get(name)
    if (!u) {
      steps.push({ unit: name, state: 'undefined', waitsFor: [], line: `${name} is not defined (no controller registered it)` })
      break
    }
    if (u.state === 'done') break
    let next: string | undefined
    let waitsFor: string[] = []
    let line: string
    if (u.state === 'waiting') {
      waitsFor = pendingDeps(units, u)
      line = waitsFor.length > 0 ? `${u.name} waits for ${waitsFor.join(', ')}` : `${u.name} is waiting to start`
      next = [...waitsFor].sort((a, b) => PRIORITY[units.get(a)?.state ?? 'undefined'] - PRIORITY[units.get(b)?.state ?? 'undefined'])[0]
    } else if (u.state === 'skipped') {
      line = `${u.name} ${describeUnit(u, snap, now)}`
      // Follow the required unit that did not finish (the root cause is at the end of the chain).
      next = u.requires.find((d) => {
        const s = units.get(d)?.state
        return s === undefined || s === 'failed' || s === 'skipped'
      })
    } else {
      line = `${u.name} ${describeUnit(u, snap, now)}`
    }
    steps.push({ unit: u.name, state: u.state, waitsFor, line })
    name = next
  }
  return steps
}

/** What `orc why <object>` shows, as data. */
export function explainWhy(snap: WorkflowSnapshot, target: string, opts: ExplainOptions = {}): WhyExplanation {
  const units = targetOf(snap, target)
  const now = opts.now ?? snap.at
  const t = units.get(target)!
  const relevant = closure(units, target)
  const out: WhyExplanation = {
    target,
    state: t.state,
    reached: t.state === 'done',
    summary: '',
    blockedBy: t.state === 'done' ? [] : blockingChain(units, snap, target, now),
    done: [],
    running: [],
    failed: [],
    skipped: [],
    waiting: [],
  }
  if (opts.subject !== undefined) out.subject = opts.subject
  if (snap.id !== undefined) out.runId = snap.id
  if (snap.cancelled !== undefined) out.cancelled = snap.cancelled
  const order = snap.units.filter((u) => relevant.has(u.name))
  order.sort((a, b) => (a.startedAt ?? Infinity) - (b.startedAt ?? Infinity) || byCodeUnits(a.name, b.name))
  for (const u of order) out[u.state].push(whyUnit(u, snap, units, now))

  const prefix = opts.subject !== undefined ? `${opts.subject}: ` : ''
  const what = t.kind === 'target' ? `target ${target}` : `unit ${target}`
  if (out.reached) {
    out.summary = `${prefix}${what} ${t.kind === 'target' ? 'reached' : 'done'} at +${formatSeconds((t.endedAt ?? snap.at) - snap.startedAt)}`
  } else {
    const last = out.blockedBy[out.blockedBy.length - 1]
    const lastUnit = last ? units.get(last.unit) : undefined
    let cause: string
    if (last === undefined) cause = t.state
    else if (last.state === 'undefined') cause = `${last.unit} is not defined`
    else if (last.unit === target) cause = describeUnit(t, snap, now)
    else if (lastUnit && (lastUnit.state === 'running' || lastUnit.state === 'waiting'))
      cause = `waiting for ${last.unit}, ${describeUnit(lastUnit, snap, now)}`
    else cause = last.line
    out.summary = `${prefix}${what} not reached: ${cause}`
    if (snap.cancelled !== undefined) out.summary += ` [run cancelled: ${snap.cancelled}]`
  }
  return out
}

/** The text of `orc why`. */
export function formatWhy(e: WhyExplanation): string {
  const lines = [e.summary]
  if (e.blockedBy.length > 0) {
    lines.push('')
    e.blockedBy.forEach((s, i) => lines.push(`  ${i === 0 ? '' : `${'  '.repeat(i - 1)}└─`}${s.line}`))
  }
  const section = (title: string, list: WhyUnit[]) => {
    if (list.length === 0) return
    lines.push('', `${title}:`)
    const width = Math.max(...list.map((u) => u.name.length))
    for (const u of list) lines.push(`  ${u.name.padEnd(width)}  ${u.status}`)
  }
  section('failed', e.failed)
  section('skipped', e.skipped)
  section('running', e.running)
  section('waiting', e.waiting)
  section('done', e.done)
  return lines.join('\n')
}

/** Shorthand: the `orc why` text straight from a snapshot. */
export function renderWhy(snap: WorkflowSnapshot, target: string, opts: ExplainOptions = {}): string {
  return formatWhy(explainWhy(snap, target, opts))
}

/**
 * The chain of units that decided when `target` was reached: from the target, repeatedly the
 * dependency that finished last (like `systemd-analyze critical-chain`). For a target not reached
 * yet, unfinished dependencies count as finishing now.
 */
export function criticalChain(snap: WorkflowSnapshot, target: string, opts: ExplainOptions = {}): CriticalChain {
  const units = targetOf(snap, target)
  const now = opts.now ?? snap.at
  const t = units.get(target)!
  const steps: CriticalStep[] = []
  const seen = new Set<string>()
  let u: UnitSnapshot | undefined = t
  let depth = 0
  while (u && !seen.has(u.name)) {
    seen.add(u.name)
    const step: CriticalStep = { unit: u.name, kind: u.kind, state: u.state, depth }
    if (u.startedAt !== undefined) step.atMs = u.startedAt - snap.startedAt
    if (u.kind === 'unit' && u.startedAt !== undefined) step.durationMs = (u.endedAt ?? now) - u.startedAt
    steps.push(step)
    let best: UnitSnapshot | undefined
    let bestEnd = -Infinity
    // A skipped unit was decided by the requirement that did not finish: follow that one.
    const candidates =
      u.state === 'skipped' ? u.requires.filter((d) => units.get(d)?.state === 'failed' || units.get(d)?.state === 'skipped').slice(0, 1) : u.after
    for (const d of candidates) {
      const dep = units.get(d)
      if (!dep) continue
      // Unfinished dependencies (waiting ones too) count as ending now: they are what holds it up.
      const end = dep.endedAt ?? now
      if (end > bestEnd || (end === bestEnd && best !== undefined && dep.name < best.name)) {
        best = dep
        bestEnd = end
      }
    }
    u = best
    depth++
  }
  const out: CriticalChain = {
    target,
    reached: t.state === 'done',
    totalMs: (t.state === 'done' ? (t.endedAt ?? now) : now) - snap.startedAt,
    steps,
  }
  if (opts.subject !== undefined) out.subject = opts.subject
  return out
}

/** The text of `orc why --critical-chain`. */
export function formatCriticalChain(c: CriticalChain): string {
  const lines = ['The time when a unit started (a target: was reached) is printed after "@", the time it took after "+".', '']
  for (const s of c.steps) {
    let line = s.unit
    if (s.atMs !== undefined) line += ` @${formatSeconds(s.atMs)}`
    if (s.durationMs !== undefined) line += ` +${formatSeconds(s.durationMs)}`
    if (s.state === 'running') line += ' (running)'
    else if (s.state === 'failed') line += ' (failed)'
    else if (s.state === 'skipped') line += ' (skipped)'
    else if (s.state === 'waiting') line += s.kind === 'target' ? ' (not reached)' : ' (waiting)'
    lines.push(s.depth === 0 ? line : `${'  '.repeat(s.depth - 1)}└─${line}`)
  }
  if (c.subject !== undefined) lines.unshift(`${c.subject}: ${c.target} ${c.reached ? 'reached' : 'not reached'} after ${formatSeconds(c.totalMs)}`)
  return lines.join('\n')
}

export function renderCriticalChain(snap: WorkflowSnapshot, target: string, opts: ExplainOptions = {}): string {
  return formatCriticalChain(criticalChain(snap, target, opts))
}
