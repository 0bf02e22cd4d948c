/**
 * Cron schedules (CronJob `spec.schedule`): the five fields of cron(8) — minute, hour, day of month,
 * month, day of week — with lists, ranges, steps, month and day names, `7` for Sunday, and the
 * macros `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`. Six fields put seconds first (an orc
 * extension, for tests and short periods; docs/jobs.md). As in Vixie cron, when both day of month and
 * day of week are restricted, a day matching either runs.
 *
 * Times are matched on the wall clock of a time zone (IANA name, default UTC), through Intl. A wall
 * time skipped by a daylight-saving jump does not run; one repeated by it runs on each occurrence.
 */
import { OrcError } from './errors.ts'

export interface CronSchedule {
  source: string
  /** Allowed values per field; seconds is [0] for a five-field schedule. */
  second: ReadonlySet<number>
  minute: ReadonlySet<number>
  hour: ReadonlySet<number>
  dayOfMonth: ReadonlySet<number>
  month: ReadonlySet<number>
  dayOfWeek: ReadonlySet<number>
  /** Day of month / day of week given as `*` (then only the other one restricts days). */
  anyDayOfMonth: boolean
  anyDayOfWeek: boolean
  hasSeconds: boolean
}

const MACROS: Record<string, string> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
}

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec']
const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat']

interface FieldDef {
  name: string
  min: number
  max: number
  names?: string[]
  /** First value the names stand for (months: 1, days: 0). */
  namesFrom?: number
}

const SECOND: FieldDef = { name: 'second', min: 0, max: 59 }
const MINUTE: FieldDef = { name: 'minute', min: 0, max: 59 }
const HOUR: FieldDef = { name: 'hour', min: 0, max: 23 }
const DOM: FieldDef = { name: 'day of month', min: 1, max: 31 }
const MONTH: FieldDef = { name: 'month', min: 1, max: 12, names: MONTHS, namesFrom: 1 }
// 7 is Sunday too (folded into 0 below).
const DOW: FieldDef = { name: 'day of week', min: 0, max: 7, names: DAYS, namesFrom: 0 }

function bad(source: string, msg: string): OrcError {
  return new OrcError('invalid', `schedule ${JSON.stringify(source)}: ${msg}`, { schedule: source })
}

function value(f: FieldDef, v: string): number {
  const lower = v.toLowerCase()
  const i = f.names?.indexOf(lower) ?? -1
  if (i >= 0) return i + f.namesFrom!
  if (!/^[0-9]{1,2}$/.test(v)) return Number.NaN
  return Number(v)
}

function parseField(source: string, f: FieldDef, text: string): Set<number> {
  const out = new Set<number>()
  for (const part of text.split(',')) {
    const m = /^([^/]+)(?:\/([0-9]+))?$/.exec(part)
    if (!m) throw bad(source, `${f.name} field ${JSON.stringify(text)}: cannot read ${JSON.stringify(part)}`)
    const [, range, stepText] = m
    const step = stepText === undefined ? 1 : Number(stepText)
    if (!Number.isInteger(step) || step < 1) throw bad(source, `${f.name} field ${JSON.stringify(text)}: step must be at least 1`)
    let lo: number
    let hi: number
    if (range === '*') {
      lo = f.min
      hi = f.max === 7 ? 6 : f.max
    } else {
      const dash = range!.split('-')
      if (dash.length > 2) throw bad(source, `${f.name} field ${JSON.stringify(text)}: cannot read ${JSON.stringify(part)}`)
      lo = value(f, dash[0]!)
      // `a/n` is `a-max/n`, as in Vixie cron.
      hi = dash.length === 2 ? value(f, dash[1]!) : stepText !== undefined ? f.max : lo
      for (const [v, t] of [
        [lo, dash[0]],
        [hi, dash[1]],
      ] as const) {
        if (Number.isNaN(v) || v < f.min || v > f.max) {
          throw bad(source, `${f.name} ${JSON.stringify(t ?? part)} is not a value from ${f.min} to ${f.max}${f.names ? ` or a name (${f.names[0]}…)` : ''}`)
        }
      }
      if (lo > hi) throw bad(source, `${f.name} range ${JSON.stringify(range)} runs backwards`)
    }
    for (let v = lo; v <= hi; v += step) out.add(f === DOW && v === 7 ? 0 : v)
  }
  return out
}

/** Parse a schedule; throws OrcError `invalid` naming the field that is wrong. */
export function parseCron(source: string): CronSchedule {
  const text = source.trim()
  const expanded = text.startsWith('@') ? MACROS[text.toLowerCase()] : text
  if (expanded === undefined) throw bad(source, `unknown macro (known: ${Object.keys(MACROS).join(', ')})`)
  const fields = expanded.split(/\s+/).filter((x) => x !== '')
  if (fields.length !== 5 && fields.length !== 6) {
    throw bad(source, `needs 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, got ${fields.length}`)
  }
  const hasSeconds = fields.length === 6
  const [sec, min, hour, dom, month, dow] = hasSeconds ? fields : ['0', ...fields]
  return {
    source,
    second: parseField(source, SECOND, sec!),
    minute: parseField(source, MINUTE, min!),
    hour: parseField(source, HOUR, hour!),
    dayOfMonth: parseField(source, DOM, dom!),
    month: parseField(source, MONTH, month!),
    dayOfWeek: parseField(source, DOW, dow!),
    anyDayOfMonth: dom!.startsWith('*'),
    anyDayOfWeek: dow!.startsWith('*'),
    hasSeconds,
  }
}

/** Whether `zone` is an IANA time zone name this runtime knows. */
export function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone })
    return true
  } catch {
    return false
  }
}

export interface WallClock {
  year: number
  month: number
  day: number
  hour: number
  minute: number
  second: number
  /** 0 = Sunday. */
  weekday: number
}

const formatters = new Map<string, Intl.DateTimeFormat>()
const WEEKDAYS: Record<string, number> = { Sun: 0, Mon: 1, Tue: 2, Wed: 3, Thu: 4, Fri: 5, Sat: 6 }

/** The wall clock at instant `t` (ms) in `zone` (UTC when absent). */
export function wallClock(t: number, zone?: string): WallClock {
  if (zone === undefined || zone === 'UTC' || zone === 'Etc/UTC') {
    const d = new Date(t)
    return {
      year: d.getUTCFullYear(),
      month: d.getUTCMonth() + 1,
      day: d.getUTCDate(),
      hour: d.getUTCHours(),
      minute: d.getUTCMinutes(),
      second: d.getUTCSeconds(),
      weekday: d.getUTCDay(),
    }
  }
  let f = formatters.get(zone)
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
      weekday: 'short',
    })
    formatters.set(zone, f)
  }
  const out: WallClock = { year: 0, month: 0, day: 0, hour: 0, minute: 0, second: 0, weekday: 0 }
  for (const p of f.formatToParts(new Date(t))) {
    if (p.type === 'weekday') out.weekday = WEEKDAYS[p.value] ?? 0
    else if (p.type === 'year' || p.type === 'month' || p.type === 'day' || p.type === 'hour' || p.type === 'minute' || p.type === 'second')
      out[p.type] = Number(p.value)
  }
  return out
}

function dayMatches(s: CronSchedule, w: WallClock): boolean {
  if (!s.month.has(w.month)) return false
  const dom = s.dayOfMonth.has(w.day)
  const dow = s.dayOfWeek.has(w.weekday)
  if (s.anyDayOfMonth || s.anyDayOfWeek) return dom && dow
  return dom || dow
}

/** Steps searched before giving up (a date that never comes, such as 30 February). */
const MAX_STEPS = 60_000

/**
 * The first scheduled instant strictly after `after` (ms), or undefined when none comes within
 * about five years. Walks the wall clock: a wrong day skips an hour at a time, a wrong hour to the
 * next hour, a wrong minute to the next minute.
 */
export function nextRun(s: CronSchedule, after: number, zone?: string): number | undefined {
  let t = Math.floor(after / 1000) * 1000 + 1000
  if (!s.hasSeconds) t = Math.ceil(t / 60_000) * 60_000
  for (let i = 0; i < MAX_STEPS; i++) {
    const w = wallClock(t, zone)
    const toNextMinute = (60 - w.second) * 1000
    if (!dayMatches(s, w) || !s.hour.has(w.hour)) t += (59 - w.minute) * 60_000 + toNextMinute
    else if (!s.minute.has(w.minute)) t += toNextMinute
    else if (!s.second.has(w.second)) t += 1000
    else return t
  }
  return undefined
}

/**
 * The latest scheduled instant `t` with `from < t <= now`, or undefined. Looks back a minute, an
 * hour, a day and then a year (never before `from`), so a frequent schedule far behind costs little.
 */
export function lastRunBetween(s: CronSchedule, from: number, now: number, zone?: string): number | undefined {
  for (const window of [60_000, 3_600_000, 86_400_000, 400 * 86_400_000]) {
    const start = Math.max(from, now - window)
    let last: number | undefined
    for (let t = nextRun(s, start, zone); t !== undefined && t <= now; t = nextRun(s, t, zone)) last = t
    if (last !== undefined) return last
    if (start === from) return undefined
  }
  return undefined
}
