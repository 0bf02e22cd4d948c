import { userInfo } from 'node:os'
/** Text output of the CLI: kubectl-style tables, YAML, history and diff listings. Pure functions. */
import { stringify } from 'yaml'
import { type Change, type DurationFormat, formatDuration, formatPath, type KindDef, OrcError, type OrcObject } from '../model/index.ts'
import type { Revision } from '../store/index.ts'
import { criticalChain, explainWhy, formatCriticalChain, formatWhy, type WorkflowSnapshot } from '../workflow/index.ts'

/** Left-aligned columns separated by three spaces, like kubectl. */
export function formatTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)))
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('   ')
      .trimEnd()
  return [line(header), ...rows.map(line)].join('\n') + '\n'
}

export function objectTable(def: KindDef, items: OrcObject[], opts: { wide?: boolean; withNamespace?: boolean; now: number }): string {
  const cols = def.columns.filter((c) => opts.wide || !c.wide)
  const header = cols.map((c) => c.header)
  const rows = items.map((o) => cols.map((c) => c.value(o, opts.now)))
  if (opts.withNamespace && def.namespaced) {
    header.unshift('NAMESPACE')
    items.forEach((o, i) => rows[i]!.unshift(o.metadata.namespace ?? ''))
  }
  return formatTable(header, rows)
}

export function toYaml(value: unknown): string {
  return stringify(value, { lineWidth: 0, aliasDuplicateObjects: false })
}

/** Several objects as one multi-document YAML stream that `orc apply -f` takes back. */
export function objectsYaml(items: unknown[]): string {
  return items.map(toYaml).join('---\n')
}

function short(v: unknown, max = 60): string {
  const t = v === undefined ? '<none>' : typeof v === 'string' ? v : JSON.stringify(v)
  return t.length > max ? `${t.slice(0, max - 1)}…` : t
}

export function changeLines(changes: readonly Change[]): string {
  if (changes.length === 0) return 'no differences\n'
  const lines: string[] = []
  const sealed = new Map<string, Change[]>()
  for (const c of changes) {
    if (isSealedPath(c.path)) {
      for (const e of perSealedKey(c)) {
        const key = String(e.path[2])
        if (!sealed.has(key)) {
          sealed.set(key, [])
          lines.push(`\0${key}`)
        }
        sealed.get(key)!.push(e)
      }
      continue
    }
    const p = formatPath(c.path)
    if (c.op === 'unset') lines.push(`- ${p}: ${short(c.old, 200)}`)
    else if (c.old === undefined) lines.push(`+ ${p}: ${short(c.value, 200)}`)
    else lines.push(`~ ${p}: ${short(c.old, 100)} → ${short(c.value, 100)}`)
  }
  return lines.map((l) => (l.startsWith('\0') ? sealedKeyLine(l.slice(1), sealed.get(l.slice(1))!) : l)).join('\n') + '\n'
}

// A Secret's sealed values (spec.sealed.KEY = {value, hash, size, binary}): one line per key with
// its value hash and size; the ciphertext says nothing to a reader.
const isSealedPath = (p: readonly (string | number)[]): boolean => p[0] === 'spec' && p[1] === 'sealed'

/** A change of the whole `spec.sealed` map as one change per key. */
function perSealedKey(c: Change): Change[] {
  if (c.path.length >= 3) return [c]
  const rec = (v: unknown): Record<string, unknown> => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {})
  const old = rec(c.old)
  const now = c.op === 'set' ? rec(c.value) : {}
  const out: Change[] = []
  for (const k of new Set([...Object.keys(old), ...Object.keys(now)])) {
    const path = [...c.path, k]
    if (now[k] === undefined) out.push({ op: 'unset', path, old: old[k] })
    else if (JSON.stringify(old[k]) !== JSON.stringify(now[k])) out.push({ op: 'set', path, value: now[k], ...(old[k] !== undefined ? { old: old[k] } : {}) })
  }
  return out
}

function sealedKeyLine(key: string, cs: readonly Change[]): string {
  const p = `spec.sealed.${key}`
  const field = (v: unknown, f: string): unknown => (v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[f] : undefined)
  const before: Record<string, unknown> = {}
  const after: Record<string, unknown> = {}
  let added = false
  let removed = false
  for (const c of cs) {
    const f = c.path[3]
    if (f === undefined) {
      if (c.op === 'unset') removed = true
      else if (c.old === undefined) added = true
      for (const x of ['hash', 'size', 'value', 'binary']) {
        before[x] = field(c.old, x)
        after[x] = c.op === 'set' ? field(c.value, x) : undefined
      }
    } else {
      before[String(f)] = c.old
      after[String(f)] = c.op === 'set' ? c.value : undefined
    }
  }
  const size = (v: unknown) => `${String(v)} byte${v === 1 ? '' : 's'}`
  if (removed) return `- ${p}: removed (hash ${String(before.hash)}, ${size(before.size)})`
  if (added) return `+ ${p}: added (hash ${String(after.hash)}, ${size(after.size)}${after.binary ? ', binary' : ''})`
  const kind = 'binary' in after && Boolean(after.binary) !== Boolean(before.binary) ? (after.binary ? ', now binary' : ', now text') : ''
  if ('hash' in after) {
    const sizes = 'size' in after ? `${String(before.size)} → ${size(after.size)}` : 'same size'
    return `~ ${p}: value changed (hash ${String(before.hash)} → ${String(after.hash)}, ${sizes}${kind})`
  }
  return `~ ${p}: sealed again, value unchanged${kind}`
}

function changedPaths(r: Revision): string {
  if (r.compacted && !r.changes) return '(compacted)'
  if (!r.changes || r.changes.length === 0) return ''
  const paths = [...new Set(r.changes.map((c) => formatPath(c.path.slice(0, 3))))]
  return short(paths.join(', '), 60)
}

function opText(r: Revision, numbers: Map<string, number>): string {
  if (r.op === 'rollback' && r.rollbackTo) return `rollback to ${numbers.get(r.rollbackTo) ?? r.rollbackTo}`
  return r.op
}

export function historyTable(revs: readonly Revision[]): string {
  const numbers = new Map(revs.map((r) => [r.id, r.number]))
  return formatTable(
    ['REV', 'TIME', 'AUTHOR', 'OP', 'REASON', 'CHANGES'],
    revs.map((r) => [
      String(r.number),
      new Date(r.time).toISOString().replace(/\.\d{3}Z$/, 'Z'),
      r.author,
      opText(r, numbers),
      short(r.reason || '', 50),
      changedPaths(r),
    ]),
  )
}

/** `--since`: a duration back from now (`90s`, `15m`, `2h`, `7d`) or a date/time (`2024-05-01T10:00Z`). */
export function parseSince(text: string, now: number): number {
  const m = /^(\d+(?:\.\d+)?)(s|m|h|d|w)$/.exec(text.trim())
  if (m) {
    const unit = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 7 * 86400e3 }[m[2] as 's' | 'm' | 'h' | 'd' | 'w']
    return now - Number(m[1]) * unit
  }
  const t = Date.parse(text)
  if (Number.isNaN(t)) {
    throw new OrcError('invalid', `--since ${JSON.stringify(text)}: expected a duration like 30m, 2h, 7d or a time like 2024-05-01T10:00:00Z`)
  }
  return t
}

/** `--labels a=b,c=d` */
export function parseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const eq = part.indexOf('=')
    if (eq <= 0) throw new OrcError('invalid', `--labels ${JSON.stringify(part)}: expected key=value`)
    out[part.slice(0, eq)] = part.slice(eq + 1)
  }
  return out
}

/** The Examples section of a command's help. */
export function examples(lines: string): string {
  return `\nExamples:\n${lines.replace(/^\n/, '').replace(/\s+$/, '')}\n`
}

/**
 * How long ago, in the largest unit that keeps it short (`90s ago`, `3h ago`): to the nearest
 * second, then down, unless the caller's table says otherwise.
 */
export function ago(ms: number, f: DurationFormat = { rounding: 'seconds' }): string {
  return `${formatDuration(ms, f)} ago`
}

/** `user:$USER` (or the login name), made safe as an author. */
export function defaultAuthor(env: NodeJS.ProcessEnv): string {
  let name = env.USER || env.LOGNAME
  if (!name) {
    try {
      name = userInfo().username
    } catch {
      name = 'unknown'
    }
  }
  return `user:${name.replace(/[^-A-Za-z0-9_.@]/g, '_') || 'unknown'}`
}

/** `alice` means `user:alice`; `controller:x` and `user:x` are taken as given. */
export function normalizeAuthor(a: string): string {
  return /^(user|controller):/.test(a) ? a : `user:${a}`
}

/**
 * A write names no author: the agent derives it from the credential (the socket's user, or the
 * remote key's). `--author` is refused with a pointer, so an old script fails loudly.
 */
export function authorFrom(_env: NodeJS.ProcessEnv, flag: string | undefined): undefined {
  if (flag !== undefined) {
    throw new OrcError(
      'invalid',
      `--author is no longer accepted: the author of a change is the user of your credential (see 'orc whoami'); say why with --reason`,
    )
  }
  return undefined
}

/**
 * `orc why` of a lifecycle run (a pod's, a VM's): what holds `target` up, or with `critical` the
 * critical chain. Durations of what still runs are measured up to now, not to when the status was written.
 */
export function runSnapshotText(snap: WorkflowSnapshot, target: string, subject: string, now: number, critical: boolean): string {
  const running = snap.units.some((u) => u.state === 'running' || u.state === 'waiting') && snap.cancelled === undefined
  const at = running ? Math.max(now, snap.at) : snap.at
  return critical ? formatCriticalChain(criticalChain(snap, target, { subject, now: at })) : formatWhy(explainWhy(snap, target, { subject, now: at }))
}
