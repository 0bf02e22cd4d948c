import type { Claim, Owner } from '../model/index.ts'
import { OrcError } from '../model/index.ts'

/**
 * Controllers declare the fields they read and write (`Pod.spec`, `Node.status`, `Pod.status.node`).
 * From that we build who-feeds-whom: A → B when A writes a field B reads (a write to `Pod.status`
 * touches a read of `Pod.status.node` and the other way round). A loop of two or more controllers is
 * refused: each one's write wakes the next, so the set may never settle. A controller reading a field
 * it writes itself is not a loop on its own: a reconciler compares desired with actual and stops
 * writing once they agree, which is the normal shape of a controller. Two controllers writing the
 * same field are refused as well (nested claims such as `Pod.status` and `Pod.status.node` are fine;
 * the ownership table gives each field to its longest claimed prefix).
 */
export interface ControllerDecl {
  name: string
  description?: string
  /**
   * Kinds whose objects it creates and deletes (`Pod`): it writes their user fields as their creator,
   * which claims no field (users and other creators write them too). For the loop check a creation
   * counts as a write of `<Kind>.spec`: labels decide which controller looks at a created object
   * (`orc/job`, `orc/deployment`), so counting them would report loops that cannot happen.
   */
  creates?: string[]
  /**
   * Reads (a subset of `reads`) whose feedback settles by itself, each with why: a Job controller
   * reads `Pod.status.phase` of pods it created, but a finished pod never changes again and it creates
   * a bounded number of them. Links through these are listed in the graph and left out of the loop check.
   */
  settles?: Record<string, string>
  reads: string[]
  writes: string[]
  /**
   * Fields read only to decide *when* to write, never what: a rollout creating the next pod once the
   * last one is Ready, or a one-way latch such as an aborted rollout (set once per template, never
   * cleared by a controller). Such a read cannot make the set oscillate, so it is no edge of the
   * loop check; `orc controllers` lists it.
   */
  gates?: string[]
}

export interface ControllerLink {
  from: string
  to: string
  /** Field `from` writes … */
  written: string
  /** … that overlaps this field `to` reads. */
  read: string
}

export interface ControllerEdge {
  from: string
  to: string
  via: { written: string; read: string; settles?: boolean }[]
}

export interface ControllerLoop {
  controllers: string[]
  links: ControllerLink[]
  message: string
}

export interface WriterConflict {
  field: string
  writers: string[]
  message: string
}

export interface ControllerGraph {
  controllers: ControllerDecl[]
  edges: ControllerEdge[]
  loops: ControllerLoop[]
  conflicts: WriterConflict[]
}

const OWNER = /^controller:[a-z0-9][-a-z0-9]*$/
const FIELD = /^[A-Z][A-Za-z0-9]*(\.[A-Za-z0-9_-]+)*$/

function fieldOverlaps(a: string, b: string): boolean {
  return a === b || a.startsWith(`${b}.`) || b.startsWith(`${a}.`)
}

/** The graph of declared controllers. Throws only for malformed declarations; problems are listed. */
export function buildControllerGraph(decls: readonly ControllerDecl[]): ControllerGraph {
  const controllers: ControllerDecl[] = []
  const names = new Set<string>()
  for (const d of decls) {
    if (typeof d.name !== 'string' || !OWNER.test(d.name)) {
      throw new OrcError('invalid', `controller name ${JSON.stringify(d.name)}: must be controller:<name>`)
    }
    if (names.has(d.name)) throw new OrcError('conflict', `controller ${d.name} is declared twice`, { controller: d.name })
    names.add(d.name)
    const fields = (key: 'reads' | 'writes' | 'gates'): string[] => {
      const v = key === 'gates' ? (d.gates ?? []) : d[key]
      if (!Array.isArray(v)) throw new OrcError('invalid', `${d.name}: ${key} must be a list of fields`, { controller: d.name })
      for (const f of v) {
        if (typeof f !== 'string' || !FIELD.test(f) || (key === 'writes' && !f.includes('.'))) {
          const want = key === 'writes' ? 'Kind.path (a whole kind cannot be owned)' : 'Kind or Kind.path'
          throw new OrcError('invalid', `${d.name}: ${key} field ${JSON.stringify(f)} must be ${want}`, {
            controller: d.name,
            field: f,
          })
        }
      }
      return [...new Set(v)]
    }
    const c: ControllerDecl = { name: d.name, reads: fields('reads'), writes: fields('writes') }
    const gates = fields('gates')
    if (gates.length > 0) c.gates = gates
    if (d.description !== undefined) c.description = d.description
    if (d.creates !== undefined) {
      for (const k of d.creates)
        if (!/^[A-Z][A-Za-z0-9]*$/.test(k)) throw new OrcError('invalid', `${d.name}: creates ${JSON.stringify(k)} must be a kind`, { controller: d.name })
      c.creates = [...new Set(d.creates)]
    }
    if (d.settles !== undefined) {
      for (const f of Object.keys(d.settles))
        if (!c.reads.includes(f))
          throw new OrcError('invalid', `${d.name}: settles ${JSON.stringify(f)} is not one of its reads`, { controller: d.name, field: f })
      c.settles = { ...d.settles }
    }
    controllers.push(c)
  }

  const conflicts: WriterConflict[] = []
  const writers = new Map<string, string[]>()
  for (const c of controllers) for (const f of c.writes) writers.set(f, [...(writers.get(f) ?? []), c.name])
  for (const [field, ws] of writers) {
    if (ws.length > 1) {
      conflicts.push({ field, writers: ws, message: `${field} is written by both ${ws.slice(0, -1).join(', ')} and ${ws[ws.length - 1]}` })
    }
  }

  const edges: ControllerEdge[] = []
  for (const a of controllers) {
    for (const b of controllers) {
      if (a === b) continue
      const via: ControllerEdge['via'] = []
      const written = [...a.writes, ...(a.creates ?? []).map((k) => `${k}.spec`)]
      for (const w of written)
        for (const r of b.reads) if (fieldOverlaps(w, r)) via.push({ written: w, read: r, ...(b.settles?.[r] !== undefined ? { settles: true } : {}) })
      if (via.length > 0) edges.push({ from: a.name, to: b.name, via })
    }
  }

  // Links through a read that settles by itself make no loop.
  const looping = edges.map((e) => ({ ...e, via: e.via.filter((v) => v.settles !== true) })).filter((e) => e.via.length > 0)
  return { controllers, edges, loops: findLoops(controllers, looping), conflicts }
}

/** Build the graph and refuse a set with duplicate writers or a read/write loop (OrcError `conflict`). */
export function checkControllers(decls: readonly ControllerDecl[]): ControllerGraph {
  const g = buildControllerGraph(decls)
  const problems = [...g.conflicts.map((c) => c.message), ...g.loops.map((l) => `read/write loop that may never settle: ${l.message}`)]
  if (problems.length > 0) {
    const more = problems.length > 1 ? ` (and ${problems.length - 1} more problem${problems.length > 2 ? 's' : ''})` : ''
    throw new OrcError('conflict', `${problems[0]}${more}`, { problems, conflicts: g.conflicts, loops: g.loops })
  }
  return g
}

/** The fields controllers write, as ownership claims (`Pod.status.node` → kind Pod, path status.node). */
export function controllerClaims(decls: readonly ControllerDecl[]): Claim[] {
  const out: Claim[] = []
  for (const d of decls) {
    for (const w of d.writes) {
      const dot = w.indexOf('.')
      if (dot < 0) throw new OrcError('invalid', `${d.name}: writes field ${w} must be Kind.path`, { controller: d.name })
      out.push({ kind: w.slice(0, dot), path: w.slice(dot + 1), owner: d.name as Owner })
    }
  }
  return out
}

/** Strongly connected groups of two or more controllers, each reported with one concrete loop. */
function findLoops(controllers: ControllerDecl[], edges: ControllerEdge[]): ControllerLoop[] {
  const succ = new Map<string, ControllerEdge[]>()
  for (const e of edges) succ.set(e.from, [...(succ.get(e.from) ?? []), e])
  // Tarjan's algorithm.
  let index = 0
  const idx = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const on = new Set<string>()
  const sccs: string[][] = []
  const strong = (v: string) => {
    idx.set(v, index)
    low.set(v, index++)
    stack.push(v)
    on.add(v)
    for (const e of succ.get(v) ?? []) {
      if (!idx.has(e.to)) {
        strong(e.to)
        low.set(v, Math.min(low.get(v)!, low.get(e.to)!))
      } else if (on.has(e.to)) low.set(v, Math.min(low.get(v)!, idx.get(e.to)!))
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = []
      let w: string
      do {
        w = stack.pop()!
        on.delete(w)
        scc.push(w)
      } while (w !== v)
      if (scc.length > 1) sccs.push(scc)
    }
  }
  for (const c of controllers) if (!idx.has(c.name)) strong(c.name)

  const loops: ControllerLoop[] = []
  for (const scc of sccs) {
    const members = new Set(scc)
    const start = [...scc].sort()[0]!
    // Shortest loop through `start` inside the group (BFS), so the message is as short as it can be.
    const prev = new Map<string, ControllerEdge>()
    const queue = [start]
    let closing: ControllerEdge | undefined
    while (queue.length > 0 && !closing) {
      const v = queue.shift()!
      for (const e of succ.get(v) ?? []) {
        if (!members.has(e.to)) continue
        if (e.to === start) {
          closing = e
          break
        }
        if (!prev.has(e.to)) {
          prev.set(e.to, e)
          queue.push(e.to)
        }
      }
    }
    const path: ControllerEdge[] = [closing!]
    for (let at = closing!.from; at !== start; at = prev.get(at)!.from) path.unshift(prev.get(at)!)
    const links = path.map((e) => ({ from: e.from, to: e.to, written: e.via[0]!.written, read: e.via[0]!.read }))
    const readPart = (l: ControllerLink) => (l.read === l.written ? `read by ${l.to}` : `read (as ${l.read}) by ${l.to}`)
    const message =
      `${links[0]!.from} writes ${links[0]!.written} ${readPart(links[0]!)}` +
      links
        .slice(1)
        .map((l) => `, which writes ${l.written} ${readPart(l)}`)
        .join('')
    loops.push({ controllers: links.map((l) => l.from), links, message })
  }
  return loops
}

/** The text of `orc controllers`. */
export function formatControllerGraph(g: ControllerGraph): string {
  const lines: string[] = []
  for (const c of g.controllers) {
    lines.push(c.description !== undefined ? `${c.name}  ${c.description}` : c.name)
    lines.push(`  reads   ${c.reads.length > 0 ? c.reads.join(', ') : '-'}`)
    lines.push(`  writes  ${c.writes.length > 0 ? c.writes.join(', ') : '-'}`)
    if (c.gates !== undefined) lines.push(`  waits on ${c.gates.join(', ')} (when to write, not what: no loop)`)
    const out = g.edges.filter((e) => e.from === c.name)
    for (const e of out) {
      const via = e.via.map((v) => (v.read === v.written ? v.written : `${v.written} (read as ${v.read})`) + (v.settles ? ' (settles)' : '')).join(', ')
      lines.push(`  feeds   ${e.to} via ${via}`)
    }
    if (c.creates !== undefined && c.creates.length > 0) lines.push(`  creates ${c.creates.join(', ')}`)
    for (const [f, why] of Object.entries(c.settles ?? {})) lines.push(`  settles ${f}: ${why}`)
  }
  if (g.conflicts.length > 0 || g.loops.length > 0) {
    lines.push('', 'problems:')
    for (const c of g.conflicts) lines.push(`  conflict: ${c.message}`)
    for (const l of g.loops) lines.push(`  loop: ${l.message}`)
  }
  return lines.join('\n')
}
