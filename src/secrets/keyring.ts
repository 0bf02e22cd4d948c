/**
 * The cluster's data keys: every member holds the same keyring (in its data dir, 0600; see
 * agent/secrets.ts for the file and its delivery to joiners). Sealed values name the key that
 * sealed them; the current key seals new ones; older keys stay to open what they sealed until a
 * rotation has re-sealed everything (docs/secrets.md).
 */
import { createHash } from 'node:crypto'
import type { Random } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'

export interface DataKey {
  /** First 16 hex digits of SHA-256 of the key: a receiver checks a delivered key against it. */
  id: string
  key: Uint8Array
  /** ms since the epoch. */
  createdAt: number
}

/** The keyring as stored in the data dir and handed to a joiner (base64 keys). */
export interface KeyringJson {
  version: 1
  current: string
  /** HMAC key of value hashes (history shows them): the same across rotations, so an unchanged value keeps its hash. */
  hashKey: string
  keys: Array<{ id: string; key: string; createdAt: number }>
}

export const KEY_BYTES = 32

export function keyIdOf(key: Uint8Array): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 16)
}

export class Keyring {
  private readonly keys = new Map<string, DataKey>()

  private constructor(
    private currentId: string,
    readonly hashKey: Uint8Array,
    keys: readonly DataKey[],
  ) {
    for (const k of keys) this.keys.set(k.id, k)
  }

  /** A new cluster's keyring: one data key and the hash key. */
  static generate(random: Random, now: number): Keyring {
    const key = random(KEY_BYTES)
    const id = keyIdOf(key)
    return new Keyring(id, random(KEY_BYTES), [{ id, key, createdAt: now }])
  }

  /** Parse and check a keyring (from the data dir, or delivered by a member): every key matches its id. */
  static fromJSON(j: unknown): Keyring {
    const bad = (why: string) => new OrcError('invalid', `keyring: ${why}`)
    if (typeof j !== 'object' || j === null) throw bad('not an object')
    const o = j as Partial<KeyringJson>
    if (o.version !== 1) throw bad(`unknown version ${String(o.version)}`)
    if (typeof o.hashKey !== 'string' || Buffer.from(o.hashKey, 'base64').byteLength !== KEY_BYTES) throw bad('hashKey is not 32 bytes of base64')
    if (!Array.isArray(o.keys) || o.keys.length === 0) throw bad('no keys')
    const keys: DataKey[] = []
    for (const k of o.keys) {
      const key = typeof k?.key === 'string' ? new Uint8Array(Buffer.from(k.key, 'base64')) : undefined
      if (key === undefined || key.byteLength !== KEY_BYTES) throw bad(`key ${String(k?.id)} is not 32 bytes of base64`)
      if (k.id !== keyIdOf(key)) throw bad(`key ${String(k.id)} does not match its id`)
      if (typeof k.createdAt !== 'number') throw bad(`key ${k.id} has no createdAt`)
      keys.push({ id: k.id, key, createdAt: k.createdAt })
    }
    if (typeof o.current !== 'string' || !keys.some((k) => k.id === o.current)) throw bad(`current key ${String(o.current)} is not in the keyring`)
    return new Keyring(o.current, new Uint8Array(Buffer.from(o.hashKey, 'base64')), keys)
  }

  toJSON(): KeyringJson {
    return {
      version: 1,
      current: this.currentId,
      hashKey: Buffer.from(this.hashKey).toString('base64'),
      keys: [...this.keys.values()].map((k) => ({ id: k.id, key: Buffer.from(k.key).toString('base64'), createdAt: k.createdAt })),
    }
  }

  /** The key that seals new values. */
  current(): DataKey {
    return this.keys.get(this.currentId)!
  }

  get(id: string): DataKey | undefined {
    return this.keys.get(id)
  }

  ids(): string[] {
    return [...this.keys.keys()]
  }

  /** A new current key (older ones kept to open what they sealed). Returns its id. */
  rotate(random: Random, now: number): string {
    const key = random(KEY_BYTES)
    const id = keyIdOf(key)
    this.keys.set(id, { id, key, createdAt: now })
    this.currentId = id
    return id
  }

  /**
   * Take in the keys of another member's keyring (a node that was offline during a rotation):
   * keys it lacks are added; the newer current key wins. False when nothing changed. The hash keys
   * must be the same (one cluster).
   */
  merge(other: Keyring): boolean {
    if (Buffer.compare(Buffer.from(other.hashKey), Buffer.from(this.hashKey)) !== 0) {
      throw new OrcError('invalid', 'keyring: another cluster (its hash key differs)')
    }
    let changed = false
    for (const k of other.keys.values()) {
      if (!this.keys.has(k.id)) {
        this.keys.set(k.id, k)
        changed = true
      }
    }
    const theirs = other.current()
    const mine = this.current()
    if (theirs.id !== mine.id && (theirs.createdAt > mine.createdAt || (theirs.createdAt === mine.createdAt && theirs.id > mine.id))) {
      this.currentId = theirs.id
      changed = true
    }
    return changed
  }

  /** Forget keys no sealed value uses any more (after a rotation re-sealed everything). Never the current one. */
  retire(inUse: ReadonlySet<string>): string[] {
    const gone: string[] = []
    for (const id of this.keys.keys()) {
      if (id !== this.currentId && !inUse.has(id)) {
        this.keys.delete(id)
        gone.push(id)
      }
    }
    return gone
  }
}
