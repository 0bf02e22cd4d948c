import { OrcError } from '../model/index.ts'
import { UNIT_STATES, type UnitSnapshot, type WorkflowSnapshot } from './types.ts'

const MAX_UNITS = 10_000
const MAX_TEXT = 2_000

/**
 * Check that a value read back from an object's status (written by any node, so untrusted) is a
 * workflow snapshot the renderers can use. Returns it typed, or throws OrcError `invalid` naming the
 * first bad field.
 */
export function parseWorkflowSnapshot(value: unknown): WorkflowSnapshot {
  const bad = (where: string): never => {
    throw new OrcError('invalid', `workflow snapshot: ${where}`, { field: where })
  }
  if (!isObj(value)) return bad('not an object')
  if (value.version !== 1) bad(`version ${JSON.stringify(value.version)} is not supported`)
  if (!isNum(value.startedAt)) bad('startedAt must be a number')
  if (!isNum(value.at)) bad('at must be a number')
  if (!isStrList(value.targets)) bad('targets must be a list of names')
  if (value.id !== undefined && !isText(value.id)) bad('id must be a string')
  if (value.cancelled !== undefined && !isText(value.cancelled)) bad('cancelled must be a string')
  if (!Array.isArray(value.units) || value.units.length > MAX_UNITS) bad('units must be a list')
  const names = new Set<string>()
  ;(value.units as unknown[]).forEach((u, i) => {
    const at = `units[${i}]`
    if (!isObj(u)) return bad(`${at} is not an object`)
    if (!isText(u.name) || u.name === '') bad(`${at}.name must be a string`)
    if (names.has(u.name as string)) bad(`${at}.name ${u.name as string} is repeated`)
    names.add(u.name as string)
    if (u.kind !== 'unit' && u.kind !== 'target') bad(`${at}.kind must be unit or target`)
    if (!UNIT_STATES.includes(u.state as never)) bad(`${at}.state must be one of ${UNIT_STATES.join(', ')}`)
    if (!isStrList(u.after)) bad(`${at}.after must be a list of names`)
    if (!isStrList(u.requires)) bad(`${at}.requires must be a list of names`)
    if (!isNum(u.attempts) || !isNum(u.maxAttempts)) bad(`${at}.attempts must be numbers`)
    if (u.timeoutMs !== null && !isNum(u.timeoutMs)) bad(`${at}.timeoutMs must be a number or null`)
    for (const k of ['startedAt', 'endedAt', 'attemptStartedAt', 'retryAt'] as const) {
      if (u[k] !== undefined && !isNum(u[k])) bad(`${at}.${k} must be a number`)
    }
    for (const k of ['description', 'lastError', 'progress', 'reason', 'cause'] as const) {
      if (u[k] !== undefined && !isText(u[k])) bad(`${at}.${k} must be a string`)
    }
  })
  return value as unknown as WorkflowSnapshot
}

export function unitsByName(snap: WorkflowSnapshot): Map<string, UnitSnapshot> {
  return new Map(snap.units.map((u) => [u.name, u]))
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}
function isNum(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v)
}
function isText(v: unknown): v is string {
  return typeof v === 'string' && v.length <= MAX_TEXT
}
function isStrList(v: unknown): v is string[] {
  return Array.isArray(v) && v.length <= MAX_UNITS && v.every((x) => typeof x === 'string' && x.length <= 256)
}
