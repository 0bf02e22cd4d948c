/**
 * This node's copy of the cluster keyring (src/secrets): `<dataDir>/secrets.keyring`, mode 0600.
 * The node that creates the cluster generates it; a joiner receives it from a member after
 * admission; a rotation replaces it everywhere (docs/secrets.md).
 */
import { join } from 'node:path'
import type { Logger } from 'pino'
import type { Random } from '../effects/index.ts'
import { readFileIfExists, writeFileAtomic } from '../mesh/index.ts'
import { OrcError } from '../model/index.ts'
import { Keyring } from '../secrets/index.ts'

export const KEYRING_FILE = 'secrets.keyring'

/** Write a new cluster's keyring (`orc up`); refuses to replace one. */
export async function createKeyringFile(dataDir: string, random: Random, now: number): Promise<Keyring> {
  const path = join(dataDir, KEYRING_FILE)
  if ((await readFileIfExists(path)) !== undefined) throw new OrcError('conflict', `${path} exists: this data dir already holds a cluster keyring`)
  const ring = Keyring.generate(random, now)
  await writeFileAtomic(path, JSON.stringify(ring.toJSON()) + '\n', 0o600)
  return ring
}

export class ClusterKeyring {
  private ring: Keyring | undefined
  private readonly listeners = new Set<(ring: Keyring) => void>()
  private writing: Promise<void> = Promise.resolve()

  constructor(
    private readonly dataDir: string,
    private readonly log: Logger,
  ) {}

  get path(): string {
    return join(this.dataDir, KEYRING_FILE)
  }

  /** Read the file (absent: this node has not received the keyring yet). */
  async load(): Promise<Keyring | undefined> {
    const buf = await readFileIfExists(this.path)
    if (buf === undefined) return undefined
    try {
      this.ring = Keyring.fromJSON(JSON.parse(buf.toString('utf8')))
    } catch (err) {
      throw new OrcError('corrupt', `${this.path}: ${(err as Error).message}`, { path: this.path }, err)
    }
    return this.ring
  }

  get(): Keyring | undefined {
    return this.ring
  }

  /** The keyring, or a clear error when this node has none yet. */
  require(): Keyring {
    if (this.ring === undefined) {
      throw new OrcError('unavailable', 'this node does not hold the cluster data key yet (a joining node receives it from a member after admission)')
    }
    return this.ring
  }

  /** Keep `ring` (a delivered, rotated or merged keyring): on disk before it resolves, then listeners. */
  async save(ring: Keyring): Promise<void> {
    const text = JSON.stringify(ring.toJSON()) + '\n'
    const run = this.writing.then(() => writeFileAtomic(this.path, text, 0o600))
    this.writing = run.catch(() => {})
    await run
    this.ring = ring
    this.log.info({ keys: ring.ids().length, current: ring.current().id }, 'cluster keyring saved')
    for (const fn of this.listeners) fn(ring)
  }

  onChange(fn: (ring: Keyring) => void): () => void {
    this.listeners.add(fn)
    return () => this.listeners.delete(fn)
  }
}
