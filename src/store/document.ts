/**
 * The replicated document: one Y.Doc whose map `objects` holds each object as nested Y.Maps, with
 * its system metadata under `~` (docs/architecture.md, "In memory"). Reads come from a cache of
 * frozen JSON, invalidated by the document's own observer, so local and remote changes alike keep
 * it true.
 */
import * as Y from 'yjs'
import { type Change, isPlainObject, OrcError, type OrcObject } from '../model/index.ts'
import { countStructs, type PruneResult, pruneStableTombstones } from './prune.ts'
import type { StoredObject } from './types.ts'
import { applyChangesToY, compactDecoded, toY } from './ydoc.ts'

/** System metadata kept beside each object in the document (key `~`). */
export interface Sys {
  uid: string
  seq: number
  rev: string
  createdAt: string
  createdBy: string
  updatedAt: string
  updatedBy: string
  deleted?: true
}

/** A struct a peer's update would add (ObjectDocument.inspectUpdate). */
export interface NewStruct {
  client: number
  from: number
  to: number
  /**
   * Where it lands: an object key and field path; null when it builds on a struct not received
   * yet; 'outside' the objects map; 'collected' when Yjs will discard it on arrival (it builds on
   * content this document has garbage-collected: a field of an object or nested map that was
   * replaced or deleted); undefined for GC ranges.
   */
  loc: { key: string; path: string[] } | null | 'outside' | 'collected' | undefined
  /** With loc null: the struct it waits for ("client:clock"). */
  waitsFor?: string
  /** A map entry's left origin ("client:clock"; null: the first value of its field), as Yjs places it. */
  origin?: string | null
  /** Collected because it lands in a map the same update deletes or replaces: no write does that with content. */
  intoDeleted?: true
  /** values: a map entry's value(s); map: a nested map; none: no content (GC, deleted); other: anything else. */
  content: 'values' | 'map' | 'none' | 'other'
  values?: unknown[]
}

/**
 * A struct a peer's update would delete (ObjectDocument.inspectUpdate): a live struct of this
 * document, with where it is (the object key and field path) and what it holds.
 */
export interface DeletedStruct {
  client: number
  clock: number
  loc: { key: string; path: string[] } | null | 'outside'
  /** A nested map (its fields go with it). */
  map: boolean
  /** Its value as JSON (a map's whole content). */
  value(): unknown
}

/** What a peer's update would add and delete (ObjectDocument.inspectUpdate). */
export interface InspectedUpdate {
  structs: NewStruct[]
  deleted: DeletedStruct[]
  /** A struct with content that the update both brings and deletes ("client:clock"): no write does that. */
  deletesOwn?: string
  /** A deletion of content neither this document nor the update holds ("client:clock"): Yjs would hold it until that content comes. */
  deletesUnknown?: string
  /** Whether the update deletes every struct of this clock range. */
  deletes(client: number, clock: number, len: number): boolean
}

export const SYS = '~'
const LOCAL = Symbol('local')
const REMOTE = Symbol('remote')

export function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v)
    for (const x of Object.values(v)) deepFreeze(x)
  }
  return v
}

/** Content plus system metadata: the object as the store returns it. */
export function withMeta(content: Record<string, unknown>, sys: Sys): StoredObject {
  const o = content as unknown as OrcObject
  return {
    ...o,
    metadata: {
      ...o.metadata,
      uid: sys.uid,
      revision: sys.seq,
      revisionId: sys.rev,
      createdAt: sys.createdAt,
      updatedAt: sys.updatedAt,
      updatedBy: sys.updatedBy,
    },
  } as StoredObject
}

/** `Pod/default/web` → `Pod`. */
function kindOfKey(key: string): string {
  const i = key.indexOf('/')
  return i < 0 ? key : key.slice(0, i)
}

export class ObjectDocument {
  readonly doc: Y.Doc
  private readonly objects: Y.Map<Y.Map<unknown>>
  /** Cached JSON content of objects (without `~`), invalidated on every document change. */
  private readonly cache = new Map<string, Record<string, unknown>>()
  private pending: Uint8Array[] = []
  /** Keys changed in the document and not yet announced to change listeners. */
  private readonly changed = new Set<string>()
  private capture: Set<string> | undefined
  /**
   * The document's keys by kind (`Pod` → `Pod/default/web`, …), built on the first list() once the
   * document is observed and kept by the observer: a list of one kind (RoleBindings for every API
   * request's RBAC check) no longer walks every object of the cluster.
   */
  private byKind: Map<string, Set<string>> | undefined
  private observing = false
  /** The structs the last local write (writeLocal) deleted: [client, clock, length] ranges. */
  lastDeleted: Array<[number, number, number]> = []

  constructor(clientId: number) {
    this.doc = new Y.Doc({ gc: true })
    this.doc.clientID = clientId
    this.objects = this.doc.getMap('objects')
  }

  /** Cold start: the snapshot on its own, then the log merged; then follow changes. */
  load(snapshot: Uint8Array | undefined, log: Uint8Array[]): void {
    if (snapshot !== undefined || log.length > 0) {
      // No re-encoded copy of the whole document at the peak of a cold start.
      if (snapshot !== undefined) Y.applyUpdate(this.doc, snapshot)
      if (log.length > 0) Y.applyUpdate(this.doc, log.length === 1 ? log[0]! : Y.mergeUpdates(log))
      log.length = 0
      compactDecoded(this.doc)
    }
  }

  /** Start recording what changes: the Yjs updates of a write, and the keys it touched. */
  observe(): void {
    this.observing = true
    this.doc.on('update', (u: Uint8Array) => this.pending.push(u))
    this.objects.observeDeep((events) => {
      const keys = new Set<string>()
      for (const e of events) {
        if (e.target === this.objects)
          for (const [k, change] of e.keys) {
            keys.add(k)
            if (this.byKind === undefined) continue
            const kind = kindOfKey(k)
            if (change.action === 'delete') this.byKind.get(kind)?.delete(k)
            else {
              let set = this.byKind.get(kind)
              if (set === undefined) this.byKind.set(kind, (set = new Set()))
              set.add(k)
            }
          }
        else keys.add(String(e.path[0]))
      }
      for (const k of keys) {
        this.cache.delete(k)
        this.changed.add(k)
        this.capture?.add(k)
      }
    })
  }

  destroy(): void {
    this.doc.destroy()
  }

  sysOf(key: string): Sys | undefined {
    return this.objects.get(key)?.get(SYS) as Sys | undefined
  }

  /** Current content (without system metadata), frozen; undefined when absent or deleted. */
  content(key: string): Record<string, unknown> | undefined {
    const cached = this.cache.get(key)
    if (cached) return cached
    const m = this.objects.get(key)
    if (!m) return undefined
    const sys = m.get(SYS) as Sys | undefined
    if (!sys || sys.deleted) return undefined
    const obj = m.toJSON() as Record<string, unknown>
    delete obj[SYS]
    deepFreeze(obj)
    this.cache.set(key, obj)
    return obj
  }

  get(key: string): StoredObject | undefined {
    const c = this.content(key)
    return c ? withMeta(c, this.sysOf(key)!) : undefined
  }

  /** The keys of one kind (every key while the document is not observed yet: no index to trust). */
  private keysOf(kind: string): Iterable<string> {
    if (!this.observing) return this.objects.keys()
    if (this.byKind === undefined) {
      this.byKind = new Map()
      for (const k of this.objects.keys()) {
        const kk = kindOfKey(k)
        let set = this.byKind.get(kk)
        if (set === undefined) this.byKind.set(kk, (set = new Set()))
        set.add(k)
      }
    }
    return this.byKind.get(kind) ?? []
  }

  list(kind: string, namespace?: string): StoredObject[] {
    const prefix = namespace === undefined ? `${kind}/` : `${kind}/${namespace}/`
    const out: StoredObject[] = []
    for (const key of this.keysOf(kind)) {
      if (!key.startsWith(prefix)) continue
      const c = this.content(key)
      if (c) out.push(withMeta(c, this.sysOf(key)!))
    }
    return out.sort(byNamespaceAndName)
  }

  count(): number {
    let n = 0
    for (const m of this.objects.values()) if (!(m.get(SYS) as Sys | undefined)?.deleted) n++
    return n
  }

  /**
   * One local write in one transaction: a tombstone for a delete, a new map on (re-)create, the
   * changes in place otherwise. Returns the write's Yjs update; a given `content` becomes the
   * cached value (it is exactly what the write produced).
   */
  writeLocal(key: string, w: { op: 'delete' | 'create' | 'update'; sys: Sys; content?: Record<string, unknown>; changes: readonly Change[] }): Uint8Array {
    this.pending = []
    let transaction: Y.Transaction | undefined
    this.doc.transact((tr) => {
      transaction = tr
      if (w.op === 'delete') {
        const tomb = new Y.Map<unknown>()
        tomb.set(SYS, w.sys)
        this.objects.set(key, tomb)
      } else if (w.op === 'create') {
        const m = toY(w.content) as Y.Map<unknown>
        m.set(SYS, w.sys)
        this.objects.set(key, m)
      } else {
        const m = this.objects.get(key)!
        applyChangesToY(m, w.changes)
        m.set(SYS, w.sys)
      }
    }, LOCAL)
    const update = this.pending.length === 1 ? this.pending[0]! : Y.mergeUpdates(this.pending)
    this.pending = []
    // What the write deleted (its transaction's delete set, sorted and merged by Yjs at its end).
    this.lastDeleted = [...transaction!.deleteSet.clients].flatMap(([client, items]) => items.map((d): [number, number, number] => [client, d.clock, d.len]))
    // The observer has just invalidated the key: no need to read the document back.
    if (w.content !== undefined) this.cache.set(key, deepFreeze(w.content))
    return update
  }

  /**
   * Merge a peer's Yjs update. Returns the updates it effectively added (empty when it held
   * nothing new) and the keys it touched.
   */
  applyRemote(yUpdate: Uint8Array): { effective: Uint8Array[]; touched: Set<string> } {
    this.pending = []
    const touched = new Set<string>()
    this.capture = touched
    try {
      if (yUpdate.byteLength > 0) {
        // A large update (a joining node's first sync) gets the same compaction as a cold start.
        const before = yUpdate.byteLength > 64 * 1024 ? Y.decodeStateVector(Y.encodeStateVector(this.doc)) : undefined
        Y.applyUpdate(this.doc, yUpdate, REMOTE)
        if (before !== undefined) compactDecoded(this.doc, before)
      }
    } catch (err) {
      throw new OrcError('invalid', `replication message: Yjs update rejected: ${(err as Error).message}`)
    } finally {
      this.capture = undefined
    }
    const effective = this.pending
    this.pending = []
    return { effective, touched }
  }

  /**
   * What a peer's Yjs update would add, without applying it: each new struct (its client and clock
   * range beyond this document's state vector) with where it lands — the object key and the field
   * path inside it — and what it holds; and the keys whose content its deletions would remove.
   * `loc` is null when a struct cannot be placed yet (it builds on one this document has not
   * received), 'outside' when it lands outside the `objects` map, undefined for GC ranges (no
   * content).
   */
  inspectUpdate(yUpdate: Uint8Array): InspectedUpdate {
    const { structs, ds } = Y.decodeUpdate(yUpdate)
    const store = this.doc.store
    const byClient = new Map<number, Array<Y.Item | Y.GC | Y.Skip>>()
    for (const st of structs) {
      let l = byClient.get(st.id.client)
      if (!l) byClient.set(st.id.client, (l = []))
      l.push(st)
    }
    const findInUpdate = (id: Y.ID): Y.Item | Y.GC | Y.Skip | undefined => {
      const l = byClient.get(id.client)
      if (!l) return undefined
      let lo = 0
      let hi = l.length - 1
      while (lo <= hi) {
        const mid = (lo + hi) >>> 1
        const x = l[mid]!
        if (id.clock < x.id.clock) hi = mid - 1
        else if (id.clock >= x.id.clock + x.length) lo = mid + 1
        else return x
      }
      return undefined
    }
    type Loc = { key: string; path: string[] } | null | 'outside' | 'collected'
    const merged = new Map<number, Array<[number, number]>>()
    const deletes = (client: number, clock: number, len: number): boolean => {
      let ranges = merged.get(client)
      if (ranges === undefined) merged.set(client, (ranges = mergeRanges((ds.clients.get(client) ?? []).map((d) => [d.clock, d.clock + d.len]))))
      return rangesCover(ranges, clock, clock + len)
    }
    // Doc items this update replaces as a map entry's value (a new item after them at their key):
    // Yjs deletes them whatever its delete set says.
    const replaced = new Set<Y.Item | Y.GC>()
    for (const st of structs) {
      if (!(st instanceof Y.Item) || st.origin === null || st.origin.clock >= Y.getState(store, st.origin.client)) continue
      const it = Y.getItem(store, st.origin)
      if (it instanceof Y.Item && it.parentSub !== null) replaced.add(it)
    }
    /** Whether the map this doc item holds, or one it lies in, goes with this update (its content is discarded). */
    const goes = (it: Y.Item): boolean => {
      let cur: Y.Item | null = it
      for (let depth = 0; cur !== null && depth < 64; depth++) {
        if (replaced.has(cur) || deletes(cur.id.client, cur.id.clock, 1)) return true
        cur = (cur.parent as Y.AbstractType<unknown> | null)?._item ?? null
      }
      return false
    }
    let intoGoing = false
    const locOfDocItem = (it: Y.Item): Exclude<Loc, 'collected'> => {
      const path: string[] = []
      let cur: Y.Item = it
      for (let depth = 0; depth < 64; depth++) {
        const parent = cur.parent as Y.AbstractType<unknown> | null
        if (parent === null || cur.parentSub === null) return parent === null ? null : 'outside'
        if (parent._item === null) return parent === (this.objects as unknown) ? { key: cur.parentSub, path: path.reverse() } : 'outside'
        path.push(cur.parentSub)
        cur = parent._item
      }
      return 'outside'
    }
    let waitsFor: string | undefined
    const memo = new Map<Y.Item, Loc>()
    // `parent`: the struct is the parent named by an item; Yjs places the item in it only while it
    // holds a type (a map) — a parent whose content is gone (deleted) or a value discards the item.
    const locOfId = (id: Y.ID, depth: number, parent = false): Loc => {
      if (id.clock < Y.getState(store, id.client)) {
        const it = Y.getItem(store, id)
        // A GC struct: Yjs turns whatever builds on it into GC too (Item.getMissing, integrate).
        if (!(it instanceof Y.Item)) return 'collected'
        if (parent && !(it.content instanceof Y.ContentType)) return 'collected'
        if (parent && goes(it)) {
          intoGoing = true
          return 'collected'
        }
        return locOfDocItem(it)
      }
      const x = findInUpdate(id)
      if (x instanceof Y.Item && parent && !(x.content instanceof Y.ContentType)) return 'collected'
      if (x instanceof Y.Item) return locOfStruct(x, depth + 1)
      if (x instanceof Y.GC) return 'collected'
      waitsFor ??= `${id.client}:${id.clock}`
      return null
    }
    // Where an item of the update lands, as Yjs integrates it (Item.getMissing): discarded when its
    // left or right neighbour or its parent is garbage-collected; otherwise its parent's place plus
    // its own field name, or (no parent info) its origin's place — same map, same field.
    const locOfStruct = (x: Y.Item, depth: number): Loc => {
      const known = memo.get(x)
      if (known !== undefined) return known
      let loc: Loc
      const parent = x.parent as unknown
      const deep = depth > 10000
      const left = x.origin !== null && !deep ? locOfId(x.origin, depth) : undefined
      const right = x.rightOrigin !== null && !deep ? locOfId(x.rightOrigin, depth) : undefined
      if (deep) loc = null
      else if (left === 'collected' || right === 'collected') loc = 'collected'
      else if (typeof parent === 'string') loc = parent === 'objects' && x.parentSub !== null ? { key: x.parentSub, path: [] } : 'outside'
      else if (parent !== null && typeof parent === 'object') {
        const up = locOfId(parent as Y.ID, depth, true)
        loc = up === null || up === 'outside' || up === 'collected' ? up : x.parentSub === null ? 'outside' : { key: up.key, path: [...up.path, x.parentSub] }
      } else if (left !== undefined) loc = left
      else if (right !== undefined) loc = right
      else loc = 'outside'
      memo.set(x, loc)
      return loc
    }
    const out: NewStruct[] = []
    // Per client, the clock up to which this document and the update's structs so far reach: a
    // struct that starts beyond it (a gap, or a Skip of the update) cannot be integrated yet — Yjs
    // would hold it back while applying the update's deletions at once.
    const next = new Map<number, number>()
    for (const st of structs) {
      const client = st.id.client
      const have = Y.getState(store, client)
      const end = st.id.clock + st.length
      const reach = next.get(client) ?? have
      if (end <= have) continue
      if (st instanceof Y.Skip) {
        next.set(client, reach)
        continue
      }
      const n: NewStruct = { client, from: Math.max(st.id.clock, have), to: end, loc: undefined, content: 'none' }
      next.set(client, st.id.clock > reach ? reach : Math.max(reach, end))
      if (st.id.clock > reach) {
        n.loc = null
        n.waitsFor = `${client}:${reach}`
        out.push(n)
        continue
      }
      if (st instanceof Y.Item) {
        waitsFor = undefined
        intoGoing = false
        n.loc = locOfStruct(st, 0)
        if (st.parentSub !== null || st.origin !== null) n.origin = st.origin === null ? null : `${st.origin.client}:${st.origin.clock}`
        if (n.loc === null && waitsFor !== undefined) n.waitsFor = waitsFor
        if (intoGoing && n.loc === 'collected') n.intoDeleted = true
        const c = st.content
        if (c instanceof Y.ContentAny) {
          n.content = 'values'
          n.values = c.arr
        } else if (c instanceof Y.ContentType) n.content = c.type.constructor === Y.Map ? 'map' : 'other'
        else if (c instanceof Y.ContentDeleted) n.content = 'none'
        else n.content = 'other'
      }
      out.push(n)
    }
    // Deletions: of live structs of this document (where they are, what they hold: the store checks
    // each against the signed records of the message); of the update's own structs (allowed only
    // where their content is gone already: a sync's overwritten entries); of anything else (content
    // not here yet).
    const deleted: DeletedStruct[] = []
    let deletesOwn: string | undefined
    let deletesUnknown: string | undefined
    for (const [client, items] of ds.clients) {
      const have = Y.getState(store, client)
      const local = store.clients.get(client)
      for (const d of items) {
        const dEnd = d.clock + d.len
        if (d.clock < have && local !== undefined) {
          for (let i = Y.findIndexSS(local, d.clock); i < local.length; i++) {
            const x = local[i]!
            if (x.id.clock >= dEnd) break
            if (x instanceof Y.Item && !x.deleted) {
              const loc = locOfDocItem(x)
              const c = x.content
              deleted.push({
                client,
                clock: x.id.clock,
                loc,
                map: c instanceof Y.ContentType,
                value: () => (c instanceof Y.ContentType ? (c.type as Y.Map<unknown>).toJSON() : c.getContent()[c.getLength() - 1]),
              })
            }
          }
        }
        // The part beyond this document's state: the update's own structs, or nothing known.
        let clock = Math.max(d.clock, have)
        while (clock < dEnd) {
          const x = findInUpdate({ client, clock } as Y.ID)
          if (x === undefined || x instanceof Y.Skip) {
            deletesUnknown ??= `${client}:${clock}`
            break
          }
          if (x instanceof Y.Item && !(x.content instanceof Y.ContentDeleted)) deletesOwn ??= `${client}:${clock}`
          clock = x.id.clock + x.length
        }
      }
    }
    return {
      structs: out,
      deleted,
      deletes,
      ...(deletesOwn !== undefined ? { deletesOwn } : {}),
      ...(deletesUnknown !== undefined ? { deletesUnknown } : {}),
    }
  }

  /**
   * The last Yjs id ("client:clock") of the newest entry this document holds for a field (live or
   * deleted; `path` [] is the object itself), or undefined when it holds none: what a new value of
   * the field builds on, if written here now.
   */
  lastEntryAt(key: string, path: readonly string[]): string | undefined {
    let map = this.objects as unknown as { _map: Map<string, Y.Item> }
    let sub = key
    for (const seg of path) {
      const it = map._map.get(sub)
      if (it === undefined || it.deleted || !(it.content instanceof Y.ContentType)) return undefined
      map = it.content.type as unknown as { _map: Map<string, Y.Item> }
      sub = seg
    }
    const it = map._map.get(sub)
    return it === undefined ? undefined : `${it.id.client}:${it.id.clock + it.length - 1}`
  }

  /** This document's Yjs clock of a client (0 when unknown). */
  clockOf(client: number): number {
    return Y.getState(this.doc.store, client)
  }

  /** The keys changed since the last call. */
  takeChanged(): string[] {
    const list = [...this.changed]
    this.changed.clear()
    return list
  }

  hasChanges(): boolean {
    return this.changed.size > 0
  }

  /** Yjs holds updates (or deletions) back until the ones they build on arrive. */
  incomplete(): boolean {
    return this.doc.store.pendingStructs !== null || this.doc.store.pendingDs !== null
  }

  stateVector(): Uint8Array {
    return Y.encodeStateVector(this.doc)
  }

  /** What a replica with state vector `sv` lacks (everything without one). */
  encodeUpdate(sv?: Uint8Array): Uint8Array {
    return sv === undefined ? Y.encodeStateAsUpdate(this.doc) : Y.encodeStateAsUpdate(this.doc, sv)
  }

  structs(): number {
    return countStructs(this.doc)
  }

  /** Drop the tombstones every replica in `reports` (state vectors) is past (prune.ts). */
  prune(reports: readonly Map<number, number>[]): PruneResult {
    return pruneStableTombstones(this.doc, this.objects as Y.Map<unknown>, reports)
  }

  /**
   * A canonical JSON of the whole current state, for convergence checks: keys sorted at every
   * level (Y.Map iteration order depends on the order a replica integrated updates).
   */
  stateDigest(): string {
    const canon = (v: unknown): unknown =>
      isPlainObject(v)
        ? Object.fromEntries(
            Object.keys(v)
              .sort()
              .map((k) => [k, canon(v[k])]),
          )
        : Array.isArray(v)
          ? v.map(canon)
          : v
    const keys = [...this.objects.keys()].sort()
    return JSON.stringify(keys.map((k) => [k, canon(this.objects.get(k)!.toJSON())]))
  }
}

/** Clock ranges [from, to) as their union: sorted, disjoint (a crafted delete set need not be either). */
export function mergeRanges(ranges: Array<[number, number]>): Array<[number, number]> {
  ranges.sort((a, b) => a[0] - b[0])
  const out: Array<[number, number]> = []
  for (const [from, to] of ranges) {
    const last = out.at(-1)
    if (last !== undefined && from <= last[1]) last[1] = Math.max(last[1], to)
    else out.push([from, to])
  }
  return out
}

/** Whether merged ranges (mergeRanges) hold all of [from, to). */
export function rangesCover(merged: ReadonlyArray<readonly [number, number]>, from: number, to: number): boolean {
  let lo = 0
  let hi = merged.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (merged[mid]![0] <= from) lo = mid + 1
    else hi = mid
  }
  return lo > 0 && merged[lo - 1]![1] >= to
}

/**
 * Namespace, then name, by UTF-16 code unit: names are lowercase DNS labels, for which this is the
 * order localeCompare gave, at a fraction of its cost (ICU collation was a hot spot of every list).
 */
function byNamespaceAndName(a: StoredObject, b: StoredObject): number {
  const na = a.metadata.namespace ?? ''
  const nb = b.metadata.namespace ?? ''
  if (na !== nb) return na < nb ? -1 : 1
  const x = a.metadata.name
  const y = b.metadata.name
  return x < y ? -1 : x > y ? 1 : 0
}
