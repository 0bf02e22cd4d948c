/**
 * Join tokens. A token is `orcjoin1.<base64url(JSON claims)>`; the claims (version 2) carry what a
 * new node needs to dial in — the issuer's peer id (its key fingerprint) and the addresses of its
 * join host, the cluster id — and a random secret proving the invitation. No cluster key: the PSK
 * reaches the joiner in the join response, over Noise, once the issuer has redeemed the token
 * (join.ts). The issuer stores only a hash of the secret plus expiry, uses left and a revoked flag
 * in a `TokenBook`; it trusts its own record, never the token's claimed expiry.
 *
 * Version 1 claims also held the PSK; `decodeToken` refuses them. A federation's tokens and invites
 * (`orcfed2.`, docs/federation.md) are these same version 2 claims under another prefix.
 */
import { createHash, timingSafeEqual } from 'node:crypto'
import { join } from 'node:path'
import type { Clock, Random } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import { b64url } from './cluster.ts'
import { readFileIfExists, writeFileAtomic } from './fsutil.ts'

const TOKEN_PREFIX = 'orcjoin1.'
export const TOKENS_FILE = 'tokens.json'

export interface TokenClaims {
  v: 2
  id: string
  cluster: string
  /** Issuer's peer id (the joiner's Noise handshake refuses any other key) and the addresses of its join host (multiaddrs without /p2p). */
  issuer: string
  addrs: string[]
  /** Expiry (ms since epoch) as issued; the issuer re-checks against its own record. */
  exp: number
  secret: string
}

export interface TokenRecord {
  id: string
  /** sha256 of the secret, hex. */
  secretHash: string
  createdAt: number
  expiresAt: number
  uses: number
  usesLeft: number
  revoked: boolean
  /** Peer ids admitted with this token (a retry by one of them does not consume another use). */
  usedBy: string[]
  lastUsedAt?: number
  revokedAt?: number
}

/** Where the issuing node keeps token state. The agent may later back this by the store. */
export interface TokenBook {
  list(): Promise<TokenRecord[]>
  get(id: string): Promise<TokenRecord | undefined>
  put(rec: TokenRecord): Promise<void>
}

export class MemoryTokenBook implements TokenBook {
  private recs = new Map<string, TokenRecord>()
  async list() {
    return [...this.recs.values()].map((r) => structuredClone(r))
  }
  async get(id: string) {
    const r = this.recs.get(id)
    return r === undefined ? undefined : structuredClone(r)
  }
  async put(rec: TokenRecord) {
    this.recs.set(rec.id, structuredClone(rec))
  }
}

/** JSON file (mode 0600), cached in memory, rewritten atomically on every change. */
export class JsonFileTokenBook implements TokenBook {
  private cache: Map<string, TokenRecord> | undefined
  constructor(readonly path: string) {}
  static inDataDir(dataDir: string): JsonFileTokenBook {
    return new JsonFileTokenBook(join(dataDir, TOKENS_FILE))
  }
  private async load(): Promise<Map<string, TokenRecord>> {
    if (this.cache !== undefined) return this.cache
    const buf = await readFileIfExists(this.path)
    const m = new Map<string, TokenRecord>()
    if (buf !== undefined) {
      try {
        for (const r of JSON.parse(buf.toString('utf8')).tokens as TokenRecord[]) m.set(r.id, r)
      } catch (err) {
        throw new OrcError('corrupt', `read token book ${this.path}: ${(err as Error).message}`, { path: this.path }, err)
      }
    }
    this.cache = m
    return m
  }
  async list() {
    return [...(await this.load()).values()].map((r) => structuredClone(r))
  }
  async get(id: string) {
    const r = (await this.load()).get(id)
    return r === undefined ? undefined : structuredClone(r)
  }
  async put(rec: TokenRecord) {
    const m = await this.load()
    m.set(rec.id, structuredClone(rec))
    await writeFileAtomic(this.path, JSON.stringify({ tokens: [...m.values()] }, null, 2) + '\n', 0o600)
  }
}

export function encodeToken(c: TokenClaims): string {
  return TOKEN_PREFIX + Buffer.from(JSON.stringify(c)).toString('base64url')
}

const malformed = (why: string) => new OrcError('invalid', `join token is malformed (${why})`)

/** A node join token (`orc join`). A token of an older orc (version 1, the PSK inside) is refused. */
export function decodeToken(token: string): TokenClaims {
  const s = token.trim()
  if (!s.startsWith(TOKEN_PREFIX)) throw malformed('expected orcjoin1.…')
  let c: any
  try {
    c = JSON.parse(Buffer.from(s.slice(TOKEN_PREFIX.length), 'base64url').toString('utf8'))
  } catch {
    throw malformed('not base64url JSON')
  }
  const str = (v: unknown) => typeof v === 'string' && v.length > 0 && v.length < 512
  if (c === null || typeof c !== 'object' || (c.v !== 1 && c.v !== 2)) throw malformed('unknown version')
  if (!str(c.id) || !str(c.cluster) || !str(c.issuer) || !str(c.secret)) throw malformed('missing fields')
  if (typeof c.exp !== 'number' || !Number.isFinite(c.exp)) throw malformed('bad expiry')
  if (!Array.isArray(c.addrs) || c.addrs.length > 64 || !c.addrs.every(str)) throw malformed('bad addresses')
  if (c.v === 1) {
    throw new OrcError('invalid', 'join token from an older orc (it carries the cluster key): create a new one with orc token create on a member', {
      reason: 'old_token',
    })
  }
  return { v: 2, id: c.id, cluster: c.cluster, issuer: c.issuer, addrs: c.addrs, exp: c.exp, secret: c.secret }
}

/** "45s", "3m", "2h", "4d": how users read an age. */
export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000))
  if (s < 60) return `${s}s`
  const m = Math.round(s / 60)
  if (m < 60) return `${m}m`
  const h = Math.round(m / 60)
  if (h < 48) return `${h}h`
  return `${Math.round(h / 24)}d`
}

export function expiredError(expiresAt: number, now: number): OrcError {
  return new OrcError('forbidden', `token expired ${formatDuration(now - expiresAt)} ago`, { reason: 'expired', expiresAt })
}

/** Joiner-side check before dialing: refuse a token that is already past its expiry. */
export function checkTokenFresh(c: Pick<TokenClaims, 'exp'>, now: number): void {
  if (now >= c.exp) throw expiredError(c.exp, now)
}

function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex')
}

/** Longest a token may live (`orc token create --ttl`): a week. */
export const MAX_TOKEN_TTL_MS = 7 * 24 * 3_600_000
/** Most nodes one token may admit (`orc token create --uses`). */
export const MAX_TOKEN_USES = 1_000

/**
 * Refuse a TTL or a number of uses beyond the caps, naming the flag the user set. Checked by the
 * issuer (TokenAuthority.issue), whoever asks: the CLI, the API, a federation.
 */
export function checkTokenLimits(opts: IssueTokenOptions): void {
  if (!(opts.ttlMs > 0) || !Number.isFinite(opts.ttlMs)) {
    throw new OrcError('invalid', `--ttl: a token's lifetime must be positive, got ${opts.ttlMs}ms`, { flag: '--ttl', ttlMs: opts.ttlMs })
  }
  if (opts.ttlMs > MAX_TOKEN_TTL_MS) {
    throw new OrcError(
      'invalid',
      `--ttl: a token may live at most ${formatDuration(MAX_TOKEN_TTL_MS)} (${MAX_TOKEN_TTL_MS}ms), got ${formatDuration(opts.ttlMs)}`,
      {
        flag: '--ttl',
        ttlMs: opts.ttlMs,
        max: MAX_TOKEN_TTL_MS,
      },
    )
  }
  if (!Number.isInteger(opts.uses) || opts.uses < 1) {
    throw new OrcError('invalid', `--uses: must be a positive whole number, got ${opts.uses}`, { flag: '--uses', uses: opts.uses })
  }
  if (opts.uses > MAX_TOKEN_USES) {
    throw new OrcError('invalid', `--uses: a token may admit at most ${MAX_TOKEN_USES} nodes, got ${opts.uses}`, {
      flag: '--uses',
      uses: opts.uses,
      max: MAX_TOKEN_USES,
    })
  }
}

export interface IssueTokenOptions {
  ttlMs: number
  uses: number
}

export interface TokenContext {
  clusterId: string
  issuer: string
  addrs: string[]
}

/**
 * Issues, redeems and revokes tokens against a TokenBook. Redemption is serialised so two joiners
 * racing for the last use cannot both win.
 */
export class TokenAuthority {
  private lock: Promise<unknown> = Promise.resolve()
  constructor(
    readonly book: TokenBook,
    private readonly clock: Clock,
    private readonly random: Random,
  ) {}

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn)
    this.lock = run.catch(() => undefined)
    return run
  }

  async issue(opts: IssueTokenOptions, ctx: TokenContext): Promise<{ token: string; record: TokenRecord }> {
    checkTokenLimits(opts)
    const now = this.clock.now()
    // hex, not base64url: an id starting with '-' would read as a flag in `orc token revoke ID`
    const id = Buffer.from(this.random(9)).toString('hex')
    const secret = b64url(this.random(32))
    const record: TokenRecord = {
      id,
      secretHash: hashSecret(secret),
      createdAt: now,
      expiresAt: now + opts.ttlMs,
      uses: opts.uses,
      usesLeft: opts.uses,
      revoked: false,
      usedBy: [],
    }
    await this.serial(() => this.book.put(record))
    const claims: TokenClaims = { v: 2, id, cluster: ctx.clusterId, issuer: ctx.issuer, addrs: ctx.addrs, exp: record.expiresAt, secret }
    return { token: encodeToken(claims), record }
  }

  /** Verify a presented token without consuming it. Throws OrcError('forbidden'). */
  check(presented: { id: string; secret: string; cluster: string }, clusterId: string, peerId: string): Promise<TokenRecord> {
    return this.serial(() => this.verify(presented, clusterId, peerId))
  }

  /** Verify a presented token and consume one use for `peerId`. Throws OrcError('forbidden'). */
  redeem(presented: { id: string; secret: string; cluster: string }, clusterId: string, peerId: string): Promise<TokenRecord> {
    return this.serial(async () => {
      const rec = await this.verify(presented, clusterId, peerId)
      if (rec.usedBy.includes(peerId)) return rec // a retry after a lost response
      rec.usesLeft -= 1
      rec.usedBy.push(peerId)
      rec.lastUsedAt = this.clock.now()
      await this.book.put(rec)
      return rec
    })
  }

  private async verify(presented: { id: string; secret: string; cluster: string }, clusterId: string, peerId: string): Promise<TokenRecord> {
    const notRecognised = () => new OrcError('forbidden', 'token not recognised (forged, or issued by another node or cluster)', { reason: 'unknown' })
    if (presented.cluster !== clusterId) throw notRecognised()
    const rec = await this.book.get(presented.id)
    if (rec === undefined) throw notRecognised()
    const a = Buffer.from(rec.secretHash, 'hex')
    const b = Buffer.from(hashSecret(presented.secret), 'hex')
    if (a.length !== b.length || !timingSafeEqual(a, b)) throw notRecognised()
    // Revocation and expiry before anything else: a peer that used the token before (in usedBy)
    // gets no retry once it is revoked or expired — a removed node replayed its token that way.
    if (rec.revoked) throw new OrcError('forbidden', 'token revoked', { reason: 'revoked', id: rec.id })
    const now = this.clock.now()
    if (now >= rec.expiresAt) throw expiredError(rec.expiresAt, now)
    if (rec.usedBy.includes(peerId)) return rec // a retry after a lost response
    if (rec.usesLeft <= 0) throw new OrcError('forbidden', 'token already used', { reason: 'used', id: rec.id })
    return rec
  }

  revoke(id: string): Promise<TokenRecord> {
    return this.serial(async () => {
      const rec = await this.book.get(id)
      if (rec === undefined) throw new OrcError('not_found', `token ${id} not found`, { id })
      rec.revoked = true
      rec.revokedAt = this.clock.now()
      await this.book.put(rec)
      return rec
    })
  }

  /**
   * Revoke every token `peerId` was admitted with (its removal from the cluster: a token a removed
   * node held may have leaked with it). Returns the ids revoked.
   */
  revokeUsedBy(peerId: string): Promise<string[]> {
    return this.serial(async () => {
      const out: string[] = []
      for (const rec of await this.book.list()) {
        if (rec.revoked || !rec.usedBy.includes(peerId)) continue
        rec.revoked = true
        rec.revokedAt = this.clock.now()
        await this.book.put(rec)
        out.push(rec.id)
      }
      return out
    })
  }

  /**
   * True while some token could still admit someone, or stopped being able to less than `graceMs`
   * ago: only then are strangers let in on probation. The grace lets a late joiner hear the exact
   * reason ("token expired 3m ago", "token already used") instead of a refused connection.
   */
  async joinWindowOpen(graceMs: number): Promise<boolean> {
    const now = this.clock.now()
    return (await this.book.list()).some((r) => {
      const live = !r.revoked && r.usesLeft > 0 && r.expiresAt > now
      if (live) return true
      const closedAt = r.revoked ? (r.revokedAt ?? 0) : r.usesLeft <= 0 ? (r.lastUsedAt ?? r.expiresAt) : r.expiresAt
      return Math.min(closedAt, r.expiresAt) + graceMs > now
    })
  }

  list(): Promise<TokenRecord[]> {
    return this.book.list()
  }
}
