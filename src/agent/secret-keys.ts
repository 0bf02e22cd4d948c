/**
 * The cluster data keyring across members (docs/secrets.md, "Keys, rotation and federation"):
 *
 * - **Delivery.** A node without the keyring (it joined), or lacking a key id that a stored Secret
 *   names (it was offline during a rotation), asks members for theirs over `/orc/keyring/1.0.0`
 *   (mesh/keyring.ts, members only) and merges what they give (`Keyring.merge`), retrying until it
 *   has what it needs: a member may be offline.
 * - **Rotation** (`orc secret rotate-key`, admin only): a new current key, every stored Secret
 *   re-sealed under it (written by the calling user, reason "data key rotated"), keys no Secret
 *   uses any more retired, and the new keyring offered to every member.
 * - **Retirement** on every node: a key that is not current and that no Secret of this node's store
 *   uses is dropped. It is safe for a node that was offline: it keeps its own keys until its store
 *   no longer uses them, and fetches the new ones from any member.
 */
import type { Logger } from 'pino'
import type { Clock, Random, TimerHandle } from '../effects/index.ts'
import type { MemberView } from '../mesh/index.ts'
import { authorOf, OrcError, type Secret } from '../model/index.ts'
import { Keyring, keyIdsOf, resealSecret } from '../secrets/index.ts'
import type { ObjectStore } from '../store/index.ts'
import type { RotateKeyAnswer } from './api-types.ts'
import type { RouteHandlers } from './router.ts'
import type { ClusterKeyring } from './secrets.ts'

/** What delivery needs of the mesh (a Mesh). */
export interface KeyringPeers {
  readonly peerId: string
  members(): MemberView[]
  fetchKeyring(peerId: string): Promise<unknown>
  offerKeyring(peerId: string, keyring: unknown): Promise<void>
}

export interface KeyringDeliveryComponents {
  keyring: ClusterKeyring
  /** The cluster's own store: its Secrets are sealed with this cluster's keys. */
  store: Pick<ObjectStore, 'list' | 'onChange' | 'get' | 'patch'>
  /** The mesh; read at each use (it starts after the delivery is built). */
  peers: () => KeyringPeers | undefined
  clock: Clock
  log: Logger
  /** First retry after a failed round; doubles up to `maxRetryMs`. */
  retryMs?: number
  maxRetryMs?: number
}

/** How far in the future a delivered key's date may be (clocks of members differ). */
export const MAX_KEY_CLOCK_SKEW_MS = 10 * 60_000

/** An independent copy: a keyring is changed only on a copy, then saved (disk first). */
function copyOf(ring: Keyring): Keyring {
  return Keyring.fromJSON(ring.toJSON())
}

/** Key ids the stored Secrets are sealed with. */
export function keyIdsInUse(store: Pick<ObjectStore, 'list'>): Set<string> {
  const out = new Set<string>()
  for (const s of store.list('Secret') as Secret[]) for (const id of keyIdsOf(s)) out.add(id)
  return out
}

export class KeyringDelivery {
  private readonly log: Logger
  private timer: TimerHandle | undefined
  private running: Promise<void> | undefined
  private retryMs: number
  private stopped = true
  private unsubscribe: (() => void) | undefined
  /** Every change of this node's keyring goes through here, one at a time. */
  private queue: Promise<unknown> = Promise.resolve()
  /** Where rotation and retirement see Secrets: the API's store (federation scopes included) once `useStore` gave it. */
  private secrets: Pick<ObjectStore, 'list' | 'patch'>

  constructor(private readonly c: KeyringDeliveryComponents) {
    this.log = c.log.child({ module: 'keyring' })
    this.retryMs = c.retryMs ?? 500
    this.secrets = c.store
  }

  /**
   * Rotation and retirement also see the Secrets of the federations' shared namespaces (the API's
   * routed store): a key that seals a shared Secret of this cluster is not retired, and a rotation
   * re-seals those too. Fetching does not: a shared Secret another cluster wrote is sealed with
   * that cluster's key, which no member here has (docs/secrets.md).
   */
  useStore(store: Pick<ObjectStore, 'list' | 'patch'>): void {
    this.secrets = store
  }

  /** The store rotation re-seals in (useStore). */
  secretStore(): Pick<ObjectStore, 'list' | 'patch'> {
    return this.secrets
  }

  /** Whether a Secret is in the cluster's own scope (not a federation's). */
  isOwn(ref: { namespace: string; name: string }): boolean {
    return this.c.store.get({ kind: 'Secret', ...ref }) !== undefined
  }

  /** Watch the Secrets and fetch what is missing. Safe to repeat. */
  start(): void {
    if (!this.stopped) return
    this.stopped = false
    this.unsubscribe = this.c.store.onChange((keys) => {
      if (!keys.some((k) => k.startsWith('Secret/'))) return
      this.wanted()
      void this.retireUnused().catch((err) => this.log.warn({ err }, 'retire unused data keys'))
    })
    this.wanted()
  }

  stop(): void {
    this.stopped = true
    this.unsubscribe?.()
    if (this.timer !== undefined) this.c.clock.clearTimeout(this.timer)
    this.timer = undefined
  }

  /** This node's keyring (undefined until it has one). */
  current(): Keyring | undefined {
    return this.c.keyring.get()
  }

  /** Key ids a stored Secret names that this node does not hold (all of them when it holds no keyring). */
  missing(): string[] {
    const ring = this.c.keyring.get()
    return [...keyIdsInUse(this.c.store)].filter((id) => ring?.get(id) === undefined)
  }

  /** Whether this node must fetch: no keyring at all, or a key a Secret names is missing. */
  needs(): boolean {
    return this.c.keyring.get() === undefined || this.missing().length > 0
  }

  /** What the mesh serves (`MeshOptions.keyring`). */
  provider() {
    return {
      current: () => this.c.keyring.get()?.toJSON(),
      offered: async (json: unknown, from: string) => {
        const changed = await this.take(json)
        this.log.info({ peer: from, changed }, 'keyring offered by a member')
      },
    }
  }

  /**
   * Take in a keyring a member gave (checked: every key matches its id; the same cluster's hash
   * key). True when this node's keyring changed (saved to disk before this resolves).
   */
  take(json: unknown): Promise<boolean> {
    return this.serially(async () => {
      const theirs = Keyring.fromJSON(json)
      // The newest key becomes current everywhere: a key dated in the future would stay current
      // through every later rotation (a member could keep the cluster on a key it chose).
      const limit = this.c.clock.now() + MAX_KEY_CLOCK_SKEW_MS
      for (const id of theirs.ids()) {
        const at = theirs.get(id)!.createdAt
        if (at > limit) throw new OrcError('invalid', `keyring: key ${id} is dated ${new Date(at).toISOString()}, in the future: refused`)
      }
      const mine = this.c.keyring.get()
      if (mine === undefined) {
        await this.c.keyring.save(theirs)
        return true
      }
      const next = copyOf(mine)
      if (!next.merge(theirs)) return false
      await this.c.keyring.save(next)
      return true
    })
  }

  /** Change the keyring with `fn` on a copy and save it, after every earlier change. */
  update<T>(fn: (ring: Keyring) => T): Promise<{ ring: Keyring; result: T }> {
    return this.serially(async () => {
      const next = copyOf(this.c.keyring.require())
      const result = fn(next)
      await this.c.keyring.save(next)
      return { ring: next, result }
    })
  }

  private serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn)
    this.queue = run.catch(() => undefined)
    return run
  }

  /** Drop keys that are not current and that no Secret of this node's store uses. The ids dropped. */
  async retireUnused(): Promise<string[]> {
    const ring = this.c.keyring.get()
    if (ring === undefined) return []
    const inUse = keyIdsInUse(this.secrets)
    if (!ring.ids().some((id) => id !== ring.current().id && !inUse.has(id))) return []
    const { result } = await this.update((r) => r.retire(keyIdsInUse(this.secrets)))
    if (result.length > 0) this.log.info({ retired: result }, 'data keys retired (no Secret uses them)')
    return result
  }

  /** Fetch from members until this node has what it needs (or `stop`). Wakes a waiting retry at once. */
  wanted(): void {
    if (this.stopped || !this.needs()) return
    if (this.timer !== undefined) {
      this.c.clock.clearTimeout(this.timer)
      this.timer = undefined
    }
    this.running ??= this.round().finally(() => (this.running = undefined))
  }

  /** Resolves once this node holds a keyring with every key its Secrets name, or rejects after `timeoutMs`. */
  async ready(timeoutMs: number): Promise<void> {
    const deadline = this.c.clock.now() + timeoutMs
    // The rounds and their backoff are the background loop's; this only watches.
    this.wanted()
    while (this.needs()) {
      if (this.c.clock.now() > deadline) {
        throw new OrcError('unavailable', `no member gave the cluster keyring within ${timeoutMs} ms (missing: ${this.missing().join(', ') || 'the keyring'})`)
      }
      await new Promise<void>((r) => this.c.clock.setTimeout(r, 100))
    }
  }

  /** One round: ask each member (alive ones first) until one gives what is missing. */
  private async round(): Promise<void> {
    const peers = this.c.peers()
    if (peers !== undefined) {
      const rank = (m: MemberView) => (m.state === 'alive' ? 0 : m.state === 'suspect' ? 1 : 2)
      const others = peers
        .members()
        .filter((m) => !m.self && m.peerId !== peers.peerId)
        .sort((a, b) => rank(a) - rank(b))
      for (const m of others) {
        if (this.stopped || !this.needs()) break
        try {
          const changed = await this.take(await peers.fetchKeyring(m.peerId))
          this.log.info({ peer: m.peerId, changed, missing: this.missing().length }, 'keyring fetched from a member')
        } catch (err) {
          this.log.debug({ peer: m.peerId, err: (err as Error).message }, 'keyring fetch failed')
        }
      }
    }
    if (this.stopped) return
    if (!this.needs()) {
      this.retryMs = this.c.retryMs ?? 500
      void this.retireUnused().catch((err) => this.log.warn({ err }, 'retire unused data keys'))
      return
    }
    // Nobody had it (offline, or not holding the key yet): again later.
    const wait = this.retryMs
    this.retryMs = Math.min(this.retryMs * 2, this.c.maxRetryMs ?? 10_000)
    // Said at info while the wait grows, then quietly: a Secret sealed with a key no member holds
    // (restored from an old revision, say) would otherwise log every 10 s forever.
    const level = wait < (this.c.maxRetryMs ?? 10_000) ? 'info' : 'debug'
    this.log[level]({ missing: this.missing(), retryMs: wait }, 'waiting for the cluster keyring from a member')
    this.timer = this.c.clock.setTimeout(() => {
      this.timer = undefined
      this.wanted()
    }, wait)
  }

  /** Offer this node's keyring to every member (after a rotation). How many took it. */
  async spread(): Promise<{ offered: number; reached: number }> {
    const peers = this.c.peers()
    const ring = this.c.keyring.get()
    if (peers === undefined || ring === undefined) return { offered: 0, reached: 0 }
    const others = peers.members().filter((m) => !m.self && m.peerId !== peers.peerId && m.state !== 'dead')
    const results = await Promise.allSettled(others.map((m) => peers.offerKeyring(m.peerId, ring.toJSON())))
    results.forEach((r, i) => {
      if (r.status === 'rejected') this.log.info({ peer: others[i]!.peerId, err: (r.reason as Error).message }, 'keyring offer failed (it fetches it later)')
    })
    return { offered: others.length, reached: results.filter((r) => r.status === 'fulfilled').length }
  }
}

export interface RotateKeyComponents {
  delivery: KeyringDelivery
  random: Random
  now(): number
}

/**
 * Rotate the data key: the new keyring is on disk before anything is sealed with it; each Secret
 * is then re-sealed (values already under the new key are kept) and written by `author`.
 */
export async function rotateDataKey(c: RotateKeyComponents, author: string, reason = 'data key rotated'): Promise<RotateKeyAnswer> {
  // Dated after every key the ring holds, so the new key wins every merge (Keyring.merge: the newest current key wins).
  const { ring, result: key } = await c.delivery.update((r) => r.rotate(c.random, Math.max(c.now(), ...r.ids().map((id) => r.get(id)!.createdAt + 1))))
  const resealed: string[] = []
  const failed: RotateKeyAnswer['failed'] = []
  const store = c.delivery.secretStore()
  for (const s of store.list('Secret') as Secret[]) {
    const ns = s.metadata.namespace ?? 'default'
    const name = `${ns}/${s.metadata.name}`
    const ids = [...keyIdsOf(s)]
    if (ids.every((id) => id === key)) continue
    // A shared Secret another cluster of a federation sealed: its key is that cluster's, not ours.
    if (!c.delivery.isOwn({ namespace: ns, name: s.metadata.name }) && ids.every((id) => ring.get(id) === undefined)) continue
    try {
      const next = resealSecret(ring, c.random, s)
      await store.patch({ kind: 'Secret', namespace: ns, name: s.metadata.name }, [{ path: ['spec', 'sealed'], value: next.spec?.sealed ?? {} }], {
        author,
        reason,
        now: c.now(),
      })
      resealed.push(name)
    } catch (err) {
      failed.push({ secret: name, error: (err as Error).message })
    }
  }
  // Retired here, or already by the store watch that saw the last Secret re-sealed.
  await c.delivery.retireUnused()
  const now = c.delivery.current()
  const retired = ring.ids().filter((id) => now?.get(id) === undefined)
  const members = await c.delivery.spread()
  return { key, resealed, failed, retired, members }
}

/** The route of `orc secret rotate-key` (routes.ts `rotateSecretKey`, admin only). */
export function secretKeyRoutes(c: RotateKeyComponents) {
  return {
    rotateSecretKey: async ({ body, principal }) => {
      if (principal === undefined || principal.kind !== 'user') throw new OrcError('forbidden', 'rotating the data key needs a user (an admin)')
      const b = (typeof body === 'object' && body !== null ? body : {}) as { reason?: unknown }
      const reason = typeof b.reason === 'string' && b.reason !== '' ? b.reason.slice(0, 1024) : undefined
      return rotateDataKey(c, authorOf(principal), reason)
    },
  } satisfies RouteHandlers
}
