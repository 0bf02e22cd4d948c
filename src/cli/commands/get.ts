/**
 * The parts of `orc get` beyond one list: `orc get all` (every namespaced kind, grouped) and
 * `orc get KIND -w` (the list, then each change as it happens, from the agent's watch long poll).
 */
import { KINDS, type KindDef, OrcError } from '../../model/index.ts'
import type { StoredObject } from '../../store/index.ts'
import { callRoute } from '../call.ts'
import { formatTable, objectsYaml, toYaml } from '../format.ts'
import type { OutputFormat } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'
import { eventsTable } from './ops.ts'

export interface GetCliIO {
  out(text: string): void
  err(text: string): void
  now(): number
}

function rowsOf(def: KindDef, items: readonly StoredObject[], o: { wide: boolean; withNamespace: boolean; now: number; kindPrefix?: boolean }) {
  const cols = def.columns.filter((c) => o.wide || !c.wide)
  const header = cols.map((c) => c.header)
  const rows = items.map((it) =>
    cols.map((c, i) => {
      const v = c.value(it, o.now)
      return i === 0 && o.kindPrefix ? `${def.kind.toLowerCase()}/${v}` : v
    }),
  )
  if (o.withNamespace && def.namespaced) {
    header.unshift('NAMESPACE')
    items.forEach((it, i) => rows[i]!.unshift(it.metadata.namespace ?? ''))
  }
  return { header, rows }
}

/** `orc get all`: each namespaced kind with objects, a table each (names as kind/name), like kubectl. */
export async function getAll(c: ApiCaller, io: GetCliIO, o: { namespace?: string; all: boolean; output: OutputFormat }): Promise<void> {
  const kinds = KINDS.filter((k) => k.namespaced)
  const lists = await Promise.all(
    kinds.map(async (def) => {
      try {
        return { def, items: (await callRoute(c, 'listObjects', { kind: def.kind }, { query: { namespace: o.namespace, all: o.all ? 1 : undefined } })).items }
      } catch (err) {
        // A role may not list every kind (Secrets): show what it may.
        if (err instanceof OrcError && err.code === 'forbidden') return { def, items: [] as StoredObject[] }
        throw err
      }
    }),
  )
  const found = lists.filter((l) => l.items.length > 0)
  const items = found.flatMap((l) => l.items)
  switch (o.output) {
    case 'json':
      return io.out(JSON.stringify({ apiVersion: 'orc/v1', kind: 'List', items }, null, 2) + '\n')
    case 'yaml':
      return io.out(objectsYaml(items))
    case 'name':
      return io.out(items.map((i) => `${i.kind.toLowerCase()}/${i.metadata.name}\n`).join(''))
  }
  if (found.length === 0) return io.err(o.all ? 'No resources found.\n' : `No resources found in ${o.namespace || 'default'} namespace.\n`)
  const now = io.now()
  io.out(
    found
      .map(({ def, items }) => {
        const t = rowsOf(def, items, { wide: o.output === 'wide', withNamespace: o.all, now, kindPrefix: true })
        return formatTable(t.header, t.rows)
      })
      .join('\n'),
  )
}

/** `orc get events`: the last hour's events of the namespace (or every one with -A), as `orc events` shows them. */
export async function getEvents(c: ApiCaller, io: GetCliIO, o: { namespace?: string; all: boolean; output: OutputFormat }): Promise<void> {
  const namespace = o.all ? undefined : o.namespace || 'default'
  const r = await callRoute(c, 'events', {}, { query: { namespace, since: io.now() - 3600_000, limit: 500 } })
  if (o.output === 'json') return io.out(JSON.stringify(r.events, null, 2) + '\n')
  if (o.output === 'yaml') return io.out(toYaml(r.events))
  if (o.output === 'name') return io.out([...new Set(r.events.map((e) => e.object))].map((x) => `${x}\n`).join(''))
  if (r.events.length === 0) return io.err(namespace ? `No events in ${namespace} namespace in the last hour.\n` : 'No events in the last hour.\n')
  io.out(eventsTable(r.events))
}

export interface WatchOptions {
  namespace?: string
  all: boolean
  output: OutputFormat
  /** Only this object. */
  name?: string
}

/**
 * `orc get KIND -w`: the current list, then one line (table), document (yaml) or event (json, one
 * per line: `{"type":"MODIFIED","object":…}`) per object that changed, until interrupted. Table rows
 * print only when their text changed, aligned to the first table's columns.
 */
export async function watchObjects(c: ApiCaller, io: GetCliIO, def: KindDef, o: WatchOptions): Promise<void> {
  const query = { namespace: o.namespace, all: o.all ? 1 : undefined }
  const pick = (items: readonly StoredObject[]) => (o.name === undefined ? items : items.filter((i) => i.metadata.name === o.name))
  const keyOf = (i: StoredObject) => `${i.metadata.namespace ?? ''}/${i.metadata.name}`
  const revOf = (i: StoredObject) => String((i.metadata as { revisionId?: string }).revisionId)
  let r = await callRoute(c, 'watchObjects', { kind: def.kind }, { query })
  let items = pick(r.items ?? [])
  const table = o.output === 'table' || o.output === 'wide'
  const tableOf = (list: readonly StoredObject[], now = io.now()) => rowsOf(def, list, { wide: o.output === 'wide', withNamespace: o.all, now })
  // Rows are compared as of the first table's time, so an AGE that moved on is not a change.
  const since = io.now()
  const first = tableOf(items, since)
  // Rows printed later keep the first table's column widths (wider cells push only their own line).
  const widthRows = [...first.rows]
  const lineOf = (row: string[]) =>
    formatTable(first.header, [...widthRows, row])
      .split('\n')
      .at(-2)!
  const printed = new Map<string, string>()
  const revs = new Map(items.map((i) => [keyOf(i), revOf(i)]))
  if (table) {
    if (items.length === 0)
      io.err(o.name === undefined ? 'No resources found yet; watching.\n' : `${def.kind.toLowerCase()}/${o.name} not found yet; watching.\n`)
    else io.out(formatTable(first.header, first.rows))
    items.forEach((i, n) => printed.set(keyOf(i), first.rows[n]!.join('\0')))
  } else {
    for (const i of items) emit(io, def, o.output, 'ADDED', i)
  }
  for (;;) {
    r = await callRoute(c, 'watchObjects', { kind: def.kind }, { query: { ...query, known: r.version, waitMs: 10_000 } })
    if (r.items === undefined) continue
    const next = pick(r.items)
    const nextKeys = new Set(next.map(keyOf))
    if (table) {
      const t = tableOf(next)
      const same = tableOf(next, since)
      next.forEach((i, n) => {
        const key = same.rows[n]!.join('\0')
        if (printed.get(keyOf(i)) === key) return
        printed.set(keyOf(i), key)
        io.out(`${lineOf(t.rows[n]!)}\n`)
      })
      for (const k of [...printed.keys()]) {
        if (nextKeys.has(k)) continue
        printed.delete(k)
        io.out(`${def.kind.toLowerCase()}/${k.slice(k.indexOf('/') + 1)} deleted\n`)
      }
    } else {
      for (const i of next) {
        const before = revs.get(keyOf(i))
        if (before === revOf(i)) continue
        emit(io, def, o.output, before === undefined ? 'ADDED' : 'MODIFIED', i)
      }
      for (const i of items) if (!nextKeys.has(keyOf(i))) emit(io, def, o.output, 'DELETED', i)
      revs.clear()
      for (const i of next) revs.set(keyOf(i), revOf(i))
    }
    items = next
  }
}

function emit(io: GetCliIO, def: KindDef, output: OutputFormat, type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: StoredObject): void {
  if (output === 'json') io.out(JSON.stringify({ type, object: obj }) + '\n')
  else if (output === 'yaml') io.out(`---\n${toYaml({ type, object: obj })}`)
  else io.out(`${def.kind.toLowerCase()}/${obj.metadata.name}${type === 'DELETED' ? ' deleted' : ''}\n`)
}
