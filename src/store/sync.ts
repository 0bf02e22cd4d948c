/**
 * What replicas exchange (docs/architecture.md, "Merge"): sync states (Yjs state vector plus
 * revision log vector), what a peer lacks, the digest that defines "converged", and the durable
 * stability report other replicas' tombstone pruning relies on.
 */
import * as Y from 'yjs'
import { decodeSyncState, encodeSyncState, encodeUpdateMessage } from './codec.ts'
import type { ObjectDocument } from './document.ts'
import type { RevisionLog } from './revision-log.ts'

export function syncStateOf(doc: ObjectDocument, log: RevisionLog): Uint8Array {
  return encodeSyncState(doc.stateVector(), log.vector())
}

/**
 * What this replica holds for replication, canonically (both vectors sorted): two replicas return
 * the same text when they hold the same Yjs updates and the same revision records.
 */
export function syncDigestOf(doc: ObjectDocument, log: RevisionLog): string {
  const sv = [...Y.decodeStateVector(doc.stateVector())].sort((a, b) => a[0] - b[0])
  return JSON.stringify({ sv, log: log.digest() })
}

/**
 * The Yjs update and the revision records (at most `max`) a replica with `remoteState` lacks. With
 * `bound` (signed stores, whose receivers refuse Yjs content no record covers), a capped list goes
 * without the Yjs update: the records come first, the content once they all fit.
 */
export async function encodeMissingFor(
  doc: ObjectDocument,
  log: RevisionLog,
  remoteState: Uint8Array,
  max: number,
  bound = false,
  drain: () => Promise<void> = async () => {},
): Promise<Uint8Array> {
  const { sv, log: theirs } = decodeSyncState(remoteState)
  const yUpdate = doc.encodeUpdate(sv)
  // The document is ahead of the log on disk by the writes in the queue: wait for them, so the
  // records sent cover every write whose content is in yUpdate.
  if (bound) await drain()
  const records = await log.missing(theirs, max)
  return encodeUpdateMessage(bound && records.length >= max ? new Uint8Array(0) : yUpdate, records)
}

/** Other replicas' sync states as Yjs state vectors, or why they cannot be used. */
export function stateVectorsOf(reports: readonly Uint8Array[]): Map<number, number>[] | string {
  const svs: Map<number, number>[] = []
  for (const r of reports) {
    try {
      svs.push(Y.decodeStateVector(decodeSyncState(r).sv))
    } catch {
      return 'a replica state is unreadable'
    }
  }
  return svs
}

/**
 * Tracks which sync state is on disk: document writes in flight, and the state captured when none
 * was (every 32 writes at most, so a busy replica whose queue is rarely empty still has a recent
 * durable report to give).
 */
export class DurableSyncState {
  private inFlight = 0
  private durable: Uint8Array | undefined
  private writesSinceCapture = 0

  constructor(private readonly current: () => Uint8Array) {}

  /** Run a document write; when it and every other one in flight are on disk, capture the state. */
  async persist(write: () => Promise<void>): Promise<void> {
    this.inFlight++
    try {
      await write()
    } finally {
      this.writesSinceCapture++
      if (--this.inFlight === 0 && (this.durable === undefined || this.writesSinceCapture >= 32)) this.capture()
    }
  }

  /** Only what is on disk; null while writes are in flight and nothing was captured since. */
  report(): Uint8Array | null {
    if (this.inFlight > 0) return this.durable ?? null
    return this.capture()
  }

  private capture(): Uint8Array {
    this.durable = this.current()
    this.writesSinceCapture = 0
    return this.durable
  }
}
