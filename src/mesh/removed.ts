/**
 * Peers removed from the cluster, refused forever: by the gater before any protocol, and by every
 * handler (they are never members again). The agent feeds it from the replicated tombstones
 * (`Cluster.status.removedPeers`); this node keeps its own copy in `removed.json` so that after a
 * restart it refuses them before its store has synced with anyone. It only grows.
 */
import { join } from 'node:path'
import { OrcError } from '../model/index.ts'
import { readFileIfExists, writeFileAtomic } from './fsutil.ts'

export const REMOVED_FILE = 'removed.json'

export class RemovedPeers {
  private readonly peers = new Set<string>()
  private writing: Promise<void> = Promise.resolve()

  /** `path` undefined: kept in memory only. */
  constructor(readonly path?: string) {}

  static inDataDir(dataDir: string): RemovedPeers {
    return new RemovedPeers(join(dataDir, REMOVED_FILE))
  }

  async load(): Promise<this> {
    if (this.path === undefined) return this
    const buf = await readFileIfExists(this.path)
    if (buf === undefined) return this
    try {
      const v = JSON.parse(buf.toString('utf8')) as { removed?: unknown }
      if (!Array.isArray(v.removed)) throw new Error('no removed list')
      for (const p of v.removed) if (typeof p === 'string' && p !== '') this.peers.add(p)
    } catch (err) {
      throw new OrcError('corrupt', `read removed peers ${this.path}: ${(err as Error).message}`, { path: this.path }, err)
    }
    return this
  }

  has(peerId: string): boolean {
    return this.peers.has(peerId)
  }

  list(): string[] {
    return [...this.peers]
  }

  /** Record a removal (persisted before it resolves). True when it was new. */
  async add(peerId: string): Promise<boolean> {
    if (this.peers.has(peerId)) return false
    this.peers.add(peerId)
    const path = this.path
    if (path !== undefined) {
      const text = JSON.stringify({ removed: [...this.peers] }, null, 2) + '\n'
      this.writing = this.writing.catch(() => undefined).then(() => writeFileAtomic(path, text, 0o600))
      await this.writing
    }
    return true
  }
}
