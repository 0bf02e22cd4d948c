import * as Y from 'yjs'

/**
 * Tombstone pruning for the object document.
 *
 * Yjs keeps one deleted Item for every overwritten map entry (~200 bytes of heap each, for ever):
 * a field written 50 times leaves 49 tombstones. They exist so a concurrent write that was made
 * against an older value can still find its origin and be ordered. Once every replica has seen
 * the current value of a key (it is *stable*) and this replica holds everything any replica has
 * reported, no write against an older value can still arrive: the chain left of the live entry
 * is dead weight. Pruning replaces that chain with GC ranges (which Yjs merges into a few
 * structs) and makes the live entry the key's first entry (origin null), which is also how a
 * replica that never saw the chain receives it. Memory becomes proportional to live data instead
 * of to history.
 *
 * The safety argument is in docs/architecture.md ("Tombstone pruning"). The caller vouches that
 * `reports` holds the latest state vector of every other replica that holds, or was ever sent, a
 * copy of this document.
 */

type StructArray = Array<Y.Item | Y.GC>

interface ItemInternals {
  id: Y.ID
  length: number
  left: Y.Item | null
  right: Y.Item | null
  origin: Y.ID | null
  deleted: boolean
  content: unknown
}

interface MapInternals {
  _map: Map<string, Y.Item>
}

function stateVectorOf(doc: Y.Doc): Map<number, number> {
  const out = new Map<number, number>()
  for (const [client, structs] of (doc.store as unknown as { clients: Map<number, StructArray> }).clients) {
    const last = structs[structs.length - 1]
    if (last) out.set(client, last.id.clock + last.length)
  }
  return out
}

export interface PruneResult {
  /** Tombstone items replaced by GC ranges. */
  pruned: number
  /** Why nothing was pruned, when that is so for a reason other than "nothing to prune". */
  skipped?: string
}

/**
 * Prune the stable tombstone chains of every Y.Map reachable from `root`. `reports` are the
 * other replicas' state vectors (decoded: client → next clock); [] when this is the only replica.
 */
export function pruneStableTombstones(doc: Y.Doc, root: Y.Map<unknown>, reports: readonly Map<number, number>[]): PruneResult {
  const store = doc.store as unknown as { clients: Map<number, StructArray>; pendingStructs: unknown; pendingDs: unknown }
  if (store.pendingStructs !== null || store.pendingDs !== null) return { pruned: 0, skipped: 'updates are waiting for missing dependencies' }
  const ours = stateVectorOf(doc)
  for (const sv of reports) {
    for (const [client, clock] of sv) {
      if ((ours.get(client) ?? 0) < clock) return { pruned: 0, skipped: 'a replica holds updates this one does not have yet' }
    }
  }
  // Everything below stable(client) is held by every replica.
  const stable = (client: number): number => {
    let s = ours.get(client) ?? 0
    for (const sv of reports) s = Math.min(s, sv.get(client) ?? 0)
    return s
  }

  const dead: Y.Item[] = []
  const maps: Y.Map<unknown>[] = [root]
  while (maps.length > 0) {
    const m = maps.pop()! as unknown as MapInternals
    for (const live of m._map.values()) {
      const it = live as unknown as ItemInternals
      if (it.deleted) continue // a deleted key: its chain is kept (a delete has no clock to be stable by)
      const content = it.content as { type?: unknown }
      if (content && content.type instanceof Y.Map) maps.push(content.type as Y.Map<unknown>)
      if (it.left === null || it.id.clock >= stable(it.id.client)) continue
      const chain: Y.Item[] = []
      let ok = true
      for (let t: Y.Item | null = it.left; t !== null; t = (t as unknown as ItemInternals).left) {
        if (!(t as unknown as ItemInternals).deleted) {
          ok = false
          break
        }
        chain.push(t)
      }
      if (!ok) continue
      dead.push(...chain)
      it.left = null
      it.origin = null
    }
  }
  if (dead.length === 0) return { pruned: 0 }

  const dirty = new Set<number>()
  for (const t of dead) {
    const ti = t as unknown as ItemInternals
    const structs = store.clients.get(ti.id.client)!
    const i = Y.findIndexSS(structs as never, ti.id.clock)
    if (structs[i] !== t) throw new Error(`prune: struct store out of step at ${ti.id.client}:${ti.id.clock}`)
    structs[i] = new Y.GC(ti.id, ti.length)
    ti.left = null
    ti.right = null
    dirty.add(ti.id.client)
  }
  // Adjacent GC ranges of one client collapse into one struct: that is where the memory goes.
  for (const client of dirty) {
    const structs = store.clients.get(client)!
    const merged: StructArray = []
    for (const s of structs) {
      const prev = merged[merged.length - 1]
      if (prev && prev.constructor === Y.GC && s.constructor === Y.GC) (prev as Y.GC).length += s.length
      else merged.push(s)
    }
    store.clients.set(client, merged)
  }
  return { pruned: dead.length }
}

/** Structs held in memory (items + GC ranges): what pruning shrinks. */
export function countStructs(doc: Y.Doc): number {
  let n = 0
  for (const structs of (doc.store as unknown as { clients: Map<number, StructArray> }).clients.values()) n += structs.length
  return n
}
