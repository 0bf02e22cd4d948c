/**
 * A client of the OCI distribution API (v2) (docs/images.md): manifests and blobs of one registry,
 * over HTTPS (system CAs, or the registry's own CA, or — opted in — unverified) or plain HTTP
 * (loopback registries, or opted in), with basic auth and bearer-token auth (the
 * `WWW-Authenticate: Bearer realm=…,service=…,scope=…` dance), following blob redirects.
 *
 * Errors are OrcErrors with one line a user can act on: `forbidden` (unauthorized: wrong or
 * missing credentials), `not_found` (manifest unknown, blob unknown), `unavailable` (registry
 * unreachable, 5xx), `timeout`, `invalid` (an answer that is not what the API promises).
 */
import { createHash } from 'node:crypto'
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http'
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https'
import { rootCertificates } from 'node:tls'
import { type Clock, systemClock } from '../effects/index.ts'
import { isLoopbackRegistry, OrcError, registryEndpoint } from '../model/index.ts'

/** How the registry is reached. Default: `verify` (HTTPS with system CAs), `plain` for loopback registries given no `ca`. */
export type RegistryTls = 'verify' | 'insecure' | 'plain'

export interface RegistryAccess {
  tls?: RegistryTls
  /** PEM CA certificate(s) trusted for this registry in addition to the system's (tls `verify`). */
  ca?: string
  username?: string
  password?: string
}

export interface Descriptor {
  mediaType: string
  digest: string
  size: number
  platform?: { os?: string; architecture?: string; variant?: string }
  annotations?: Record<string, string>
}

export const MEDIA_TYPES = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
} as const

export interface RegistryClientOptions {
  /** Per request (connect + headers); a body stalled this long is aborted too. Default 30 s. */
  timeoutMs?: number
  /** Bearer tokens are kept until their `expires_in` on this clock. Default: the system clock. */
  clock?: Clock
}

/** The largest manifest or index accepted (distribution itself refuses more than 4 MiB). */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024
const MAX_REDIRECTS = 5
const DEFAULT_TIMEOUT_MS = 30_000
const MAX_ERROR_BODY = 64 * 1024
const MAX_TOKEN_BODY = 1024 * 1024
const ACCEPT_MANIFESTS = [MEDIA_TYPES.ociIndex, MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerList, MEDIA_TYPES.dockerManifest].join(', ')
const SHA256 = /^sha256:[a-f0-9]{64}$/
const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/
const REPOSITORY = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/
/** Node's codes for a certificate the client could not verify. */
const TLS_VERIFY_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'HOSTNAME_MISMATCH',
])

/** What a request is about, for error messages: `manifest HOST/REPO:TAG`. */
interface Target {
  kind: 'manifest' | 'blob'
  repository: string
  /** `HOST/REPO:TAG` or `HOST/REPO@DIGEST`. */
  name: string
}

interface Token {
  value: string
  expiresAt: number
}

/** A response whose headers arrived; its body is read once, through one of the methods. */
class Reply {
  constructor(
    readonly res: IncomingMessage,
    private readonly failure: (err: unknown) => unknown,
  ) {}

  get status(): number {
    return this.res.statusCode ?? 0
  }

  header(name: string): string | undefined {
    const v = this.res.headers[name.toLowerCase()]
    return Array.isArray(v) ? v.join(', ') : v
  }

  /** The body, chunk by chunk; a stalled, cut or aborted body throws an OrcError (or the abort reason). */
  async *stream(): AsyncGenerator<Uint8Array> {
    try {
      for await (const chunk of this.res) yield chunk as Buffer
    } catch (err) {
      throw this.failure(err)
    } finally {
      // A reader that stops early must not leave the connection half read.
      if (!this.res.complete) this.res.destroy()
    }
  }

  /** The whole body, refusing more than `limit` bytes (`onTooLarge` says what to throw). */
  async bytes(limit: number, onTooLarge: () => Error): Promise<Buffer> {
    const length = Number(this.header('content-length'))
    if (Number.isFinite(length) && length > limit) {
      this.res.destroy()
      throw onTooLarge()
    }
    const chunks: Buffer[] = []
    let size = 0
    for await (const chunk of this.stream()) {
      size += chunk.length
      if (size > limit) {
        this.res.destroy()
        throw onTooLarge()
      }
      chunks.push(Buffer.from(chunk))
    }
    return Buffer.concat(chunks)
  }

  /** Read and drop the body (so a keep-alive connection can be reused). */
  discard(): void {
    this.res.resume()
  }
}

const sha256 = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`
const isDigest = (reference: string): boolean => reference.includes(':')
const seconds = (ms: number): string => `${Math.round(ms / 100) / 10} s`

/** `Bearer realm="…",service="…",scope="…"` → { scheme: 'bearer', params }. Quoted values may hold commas. */
export function parseChallenge(header: string): { scheme: string; params: Record<string, string> } | undefined {
  const m = /^\s*([A-Za-z][A-Za-z0-9-]*)\s*(.*)$/s.exec(header)
  if (!m) return undefined
  const params: Record<string, string> = {}
  const re = /([A-Za-z0-9_-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?/g
  for (const p of m[2]!.matchAll(re)) params[p[1]!.toLowerCase()] = p[2] !== undefined ? p[2].replace(/\\(.)/g, '$1') : p[3]!
  return { scheme: m[1]!.toLowerCase(), params }
}

export class RegistryClient {
  private readonly base: URL
  private readonly timeoutMs: number
  private readonly clock: Clock
  private readonly httpAgent = new HttpAgent({ keepAlive: true })
  private readonly httpsAgent: HttpsAgent
  /** How the registry asked to be authenticated, once it has: later requests authenticate up front. */
  private challenge: { scheme: 'basic' } | { scheme: 'bearer'; realm: string; service?: string } | undefined
  private readonly tokens = new Map<string, Token>()
  private readonly tokenFetches = new Map<string, Promise<Token>>()
  /** The scope the registry last asked for, per repository. */
  private readonly scopes = new Map<string, string>()

  constructor(
    /** HOST[:PORT] as in the reference (docker.io is mapped to its API host). */
    readonly registry: string,
    readonly access: RegistryAccess = {},
    readonly opts: RegistryClientOptions = {},
  ) {
    const tls = defaultTls(registry, access)
    this.base = new URL(`${tls === 'plain' ? 'http' : 'https'}://${registryEndpoint(registry)}`)
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS
    this.clock = opts.clock ?? systemClock
    this.httpsAgent = new HttpsAgent({
      keepAlive: true,
      rejectUnauthorized: tls !== 'insecure',
      // Node replaces its CA store with `ca`: keep the system's and add the registry's.
      ...(access.ca ? { ca: [...rootCertificates, access.ca] } : {}),
    })
  }

  /** `http(s)://HOST[:PORT]` the API is reached at. */
  get endpoint(): string {
    return this.base.origin
  }

  /** The TLS mode in use (the default resolved). */
  get tls(): RegistryTls {
    return defaultTls(this.registry, this.access)
  }

  /** The descriptor of `reference` (a tag or a digest): HEAD, falling back to GET. */
  async resolve(repository: string, reference: string, signal?: AbortSignal): Promise<Descriptor> {
    const target = this.target('manifest', repository, reference)
    const reply = await this.request(target, 'HEAD', `/v2/${repository}/manifests/${reference}`, { accept: ACCEPT_MANIFESTS }, signal, true)
    if (reply !== undefined) {
      reply.discard()
      const digest = reply.header('docker-content-digest')
      const size = Number(reply.header('content-length'))
      const mediaType = reply.header('content-type')?.split(';')[0]?.trim()
      if (digest !== undefined && SHA256.test(digest) && Number.isFinite(size) && size > 0 && mediaType) {
        if (isDigest(reference) && digest !== reference) throw this.mismatch(target, digest)
        return { mediaType, digest, size }
      }
    }
    // No HEAD, or no digest in its answer: fetch the manifest and hash it.
    return (await this.manifest(repository, reference, signal)).descriptor
  }

  /** A manifest or index and its bytes, checked against the digest when `reference` is one. */
  async manifest(repository: string, reference: string, signal?: AbortSignal): Promise<{ descriptor: Descriptor; bytes: Buffer }> {
    const target = this.target('manifest', repository, reference)
    const reply = (await this.request(target, 'GET', `/v2/${repository}/manifests/${reference}`, { accept: ACCEPT_MANIFESTS }, signal))!
    const bytes = await reply.bytes(
      MAX_MANIFEST_BYTES,
      () => new OrcError('too_large', `${target.kind} ${target.name} is larger than ${MAX_MANIFEST_BYTES / 1024 / 1024} MiB`, { image: target.name }),
    )
    const digest = sha256(bytes)
    if (isDigest(reference) && digest !== reference) throw this.mismatch(target, digest)
    let mediaType = reply.header('content-type')?.split(';')[0]?.trim() ?? ''
    try {
      const doc = JSON.parse(bytes.toString('utf8')) as { mediaType?: unknown }
      if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new Error('not a JSON object')
      if (typeof doc.mediaType === 'string') mediaType = doc.mediaType
    } catch (err) {
      throw new OrcError('invalid', `${target.kind} ${target.name} is not a JSON manifest: ${(err as Error).message}`, { image: target.name })
    }
    return { descriptor: { mediaType, digest, size: bytes.length }, bytes }
  }

  /** A blob as a stream (the caller verifies it: BlobStore.write). `size` is -1 when the registry does not say. */
  async blob(repository: string, digest: string, signal?: AbortSignal): Promise<{ size: number; body: AsyncIterable<Uint8Array> }> {
    const target = this.target('blob', repository, digest)
    const reply = (await this.request(target, 'GET', `/v2/${repository}/blobs/${digest}`, {}, signal))!
    const length = Number(reply.header('content-length'))
    return { size: Number.isFinite(length) && reply.header('content-length') !== undefined ? length : -1, body: reply.stream() }
  }

  /** Close idle keep-alive connections (a client no longer used). */
  close(): void {
    this.httpAgent.destroy()
    this.httpsAgent.destroy()
  }

  /** What a request is about; the names are checked first, as they go into the URL (a digest may come from a manifest, which the registry wrote). */
  private target(kind: Target['kind'], repository: string, reference: string): Target {
    const bad = (what: string, value: string) =>
      new OrcError('invalid', `registry ${this.registry}: ${what} ${JSON.stringify(value)} is not valid for ${kind} requests`, { registry: this.registry })
    if (!REPOSITORY.test(repository) || repository.length > 255) throw bad('repository', repository)
    if (kind === 'blob' ? !SHA256.test(reference) : !SHA256.test(reference) && !TAG.test(reference))
      throw bad(kind === 'blob' ? 'digest' : 'reference', reference)
    return { kind, repository, name: `${this.registry}/${repository}${isDigest(reference) ? '@' : ':'}${reference}` }
  }

  private mismatch(target: Target, got: string): OrcError {
    return new OrcError('corrupt', `${target.kind} ${target.name}: the registry served content whose digest is ${got}`, { image: target.name, digest: got })
  }

  /**
   * A request to the registry, authenticated as it asks (anonymous first), redirects followed. A
   * 2xx reply is returned; anything else is thrown as an OrcError — except, with `tolerant`, a
   * status the caller can work around (HEAD unsupported), which gives undefined.
   */
  private async request(
    target: Target,
    method: 'GET' | 'HEAD',
    path: string,
    headers: OutgoingHttpHeaders,
    signal: AbortSignal | undefined,
    tolerant = false,
  ): Promise<Reply | undefined> {
    const url = new URL(path, this.base)
    const upfront = this.authorization(target.repository)
    let reply = await this.follow(target, method, url, { ...headers, ...(upfront ? { authorization: upfront } : {}) }, signal)
    if (reply.status === 401) {
      reply.discard()
      const auth = await this.authenticate(target, reply.header('www-authenticate'), signal)
      reply = await this.follow(target, method, url, { ...headers, authorization: auth }, signal)
      if (reply.status === 401) {
        reply.discard()
        // A token the server gave but that does not cover the repository: the user may not pull it,
        // or (Docker Hub answers so for anyone) there is no such repository.
        const again = parseChallenge(reply.header('www-authenticate') ?? '')
        if (again?.params.error === 'insufficient_scope' && auth.startsWith('Bearer ')) {
          const msg = this.hasCredentials()
            ? `registry ${this.registry}: unauthorized (${target.name}): user ${JSON.stringify(this.access.username)} may not pull it, or there is no such repository`
            : `registry ${this.registry}: unauthorized (${target.name}, or no such repository): give credentials (docs/images.md)`
          throw new OrcError('forbidden', msg, { registry: this.registry, image: target.name })
        }
        throw this.unauthorized(target, this.hasCredentials())
      }
    }
    if (reply.status >= 200 && reply.status < 300) return reply
    if (tolerant && reply.status !== 404 && reply.status !== 403 && reply.status !== 429 && reply.status < 500) {
      reply.discard()
      return undefined
    }
    throw await this.statusError(target, method, reply)
  }

  /** The Authorization header to send up front, once the registry has said how it authenticates. */
  private authorization(repository: string): string | undefined {
    if (this.challenge?.scheme === 'basic') return this.basic()
    if (this.challenge?.scheme === 'bearer') {
      const token = this.tokens.get(this.scopes.get(repository) ?? pullScope(repository))
      if (token && token.expiresAt > this.clock.now()) return `Bearer ${token.value}`
    }
    return undefined
  }

  private hasCredentials(): boolean {
    return this.access.username !== undefined && this.access.username !== ''
  }

  private basic(): string | undefined {
    if (!this.hasCredentials()) return undefined
    return `Basic ${Buffer.from(`${this.access.username}:${this.access.password ?? ''}`).toString('base64')}`
  }

  private unauthorized(target: Target, refused: boolean, why = ''): OrcError {
    const msg = refused
      ? `registry ${this.registry}: unauthorized (${target.name}${why}): the credentials of user ${JSON.stringify(this.access.username)} were refused`
      : `registry ${this.registry}: unauthorized (${target.name}${why}): give credentials (docs/images.md)`
    return new OrcError('forbidden', msg, { registry: this.registry, image: target.name })
  }

  /** Answer a 401's challenge: the Authorization header to resend with. */
  private async authenticate(target: Target, header: string | undefined, signal: AbortSignal | undefined): Promise<string> {
    const challenge = header !== undefined ? parseChallenge(header) : undefined
    if (challenge?.scheme === 'basic') {
      this.challenge = { scheme: 'basic' }
      const basic = this.basic()
      if (basic === undefined) throw this.unauthorized(target, false)
      return basic
    }
    if (challenge?.scheme === 'bearer' && challenge.params.realm) {
      const { realm, service } = challenge.params
      this.challenge = { scheme: 'bearer', realm, ...(service !== undefined ? { service } : {}) }
      const scope = challenge.params.scope ?? pullScope(target.repository)
      this.scopes.set(target.repository, scope)
      this.tokens.delete(scope)
      return `Bearer ${(await this.token(target, realm, service, scope, signal)).value}`
    }
    throw new OrcError(
      'forbidden',
      `registry ${this.registry}: unauthorized (${target.name}): it asks for no authentication orc knows (${header ?? 'no challenge'})`,
      {
        registry: this.registry,
        image: target.name,
      },
    )
  }

  /**
   * A bearer token for `scope` from the realm, cached until it expires. Concurrent requests share
   * one token request, which therefore runs on no caller's signal (it has its own timeout): each
   * caller stops waiting when its own signal fires.
   */
  private async token(target: Target, realm: string, service: string | undefined, scope: string, signal: AbortSignal | undefined): Promise<Token> {
    const key = `${realm} ${service ?? ''} ${scope}`
    let pending = this.tokenFetches.get(key)
    if (!pending) {
      pending = this.fetchToken(target, realm, service, scope, undefined)
        .then((token) => {
          this.tokens.set(scope, token)
          return token
        })
        .finally(() => this.tokenFetches.delete(key))
      this.tokenFetches.set(key, pending)
    }
    return await untilAborted(pending, signal)
  }

  private async fetchToken(target: Target, realm: string, service: string | undefined, scope: string, signal: AbortSignal | undefined): Promise<Token> {
    let url: URL
    try {
      url = new URL(realm)
    } catch {
      throw new OrcError('invalid', `registry ${this.registry}: its token realm ${JSON.stringify(realm)} is not a URL`, { registry: this.registry })
    }
    if (service !== undefined) url.searchParams.set('service', service)
    url.searchParams.set('scope', scope)
    const basic = this.basic()
    const issuedAt = this.clock.now()
    const reply = await this.follow(target, 'GET', url, basic ? { authorization: basic } : {}, signal, true)
    if (reply.status === 401 || reply.status === 403) {
      reply.discard()
      throw this.unauthorized(target, this.hasCredentials(), ', token refused')
    }
    if (reply.status < 200 || reply.status >= 300) {
      reply.discard()
      const code = reply.status >= 500 || reply.status === 429 ? 'unavailable' : 'invalid'
      throw new OrcError(code, `registry ${this.registry}: token server ${url.host} answered HTTP ${reply.status} (${target.name})`, {
        registry: this.registry,
        image: target.name,
      })
    }
    const body = await reply.bytes(
      MAX_TOKEN_BODY,
      () => new OrcError('too_large', `registry ${this.registry}: token server ${url.host} answered more than 1 MiB`, { registry: this.registry }),
    )
    let doc: { token?: unknown; access_token?: unknown; expires_in?: unknown }
    try {
      doc = JSON.parse(body.toString('utf8'))
    } catch {
      doc = {}
    }
    const value = typeof doc.token === 'string' && doc.token !== '' ? doc.token : typeof doc.access_token === 'string' ? doc.access_token : ''
    if (value === '') throw new OrcError('invalid', `registry ${this.registry}: token server ${url.host} gave no token`, { registry: this.registry })
    // The spec's default lifetime is 60 s; renew a little early so a token does not expire in flight.
    const lifetime = typeof doc.expires_in === 'number' && doc.expires_in > 0 ? doc.expires_in : 60
    return { value, expiresAt: issuedAt + lifetime * 1000 - Math.min(10_000, lifetime * 100) }
  }

  /**
   * Send, following up to MAX_REDIRECTS redirects; the Authorization header is not carried to
   * another host (blob storage redirects carry their own signature).
   */
  private async follow(
    target: Target,
    method: 'GET' | 'HEAD',
    url: URL,
    headers: OutgoingHttpHeaders,
    signal: AbortSignal | undefined,
    foreign = false,
  ): Promise<Reply> {
    let current = url
    let hdrs = headers
    for (let hop = 0; ; hop++) {
      const reply = await this.send(target, method, current, hdrs, signal, foreign || current.host !== this.base.host)
      const location = reply.header('location')
      if (![301, 302, 303, 307, 308].includes(reply.status) || location === undefined) return reply
      reply.discard()
      if (hop >= MAX_REDIRECTS) {
        throw new OrcError('unavailable', `registry ${this.registry}: more than ${MAX_REDIRECTS} redirects for ${target.kind} ${target.name}`, {
          registry: this.registry,
          image: target.name,
        })
      }
      const next = new URL(location, current)
      if (next.host !== this.base.host) {
        const { authorization: _dropped, ...rest } = hdrs
        hdrs = rest
      }
      current = next
    }
  }

  private send(
    target: Target,
    method: 'GET' | 'HEAD',
    url: URL,
    headers: OutgoingHttpHeaders,
    signal: AbortSignal | undefined,
    foreign: boolean,
  ): Promise<Reply> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason)
      const https = url.protocol === 'https:'
      if (!https && url.protocol !== 'http:') {
        return reject(
          new OrcError('invalid', `registry ${this.registry}: cannot follow ${url.protocol} URL for ${target.kind} ${target.name}`, { image: target.name }),
        )
      }
      let timedOut = false
      let answered = false
      const where = foreign ? `${url.host} (for registry ${this.registry})` : this.registry
      const failure = (err: unknown): unknown => {
        if (signal?.aborted) return signal.reason
        if (err instanceof OrcError) return err
        if (timedOut) {
          return new OrcError(
            'timeout',
            answered
              ? `registry ${where}: ${target.kind} ${target.name} stalled for ${seconds(this.timeoutMs)}`
              : `registry ${where} did not answer within ${seconds(this.timeoutMs)} (${method} ${target.kind} ${target.name})`,
            { registry: this.registry, image: target.name },
            err,
          )
        }
        return this.networkError(target, where, err, answered)
      }
      const req = (https ? httpsRequest : httpRequest)(url, {
        method,
        headers: { 'user-agent': 'orc', ...headers },
        agent: https ? this.httpsAgent : this.httpAgent,
        ...(signal ? { signal } : {}),
      })
      req.setTimeout(this.timeoutMs, () => {
        timedOut = true
        req.destroy(new Error('timed out'))
      })
      req.on('error', (err) => reject(failure(err)))
      req.on('response', (res) => {
        answered = true
        resolve(new Reply(res, failure))
      })
      req.end()
    })
  }

  private networkError(target: Target, where: string, err: unknown, answered: boolean): OrcError {
    const e = err as NodeJS.ErrnoException
    const code = e.code ?? ''
    const details = { registry: this.registry, image: target.name, code }
    if (answered)
      return new OrcError('unavailable', `registry ${where}: connection lost while reading ${target.kind} ${target.name} (${e.message})`, details, err)
    if (TLS_VERIFY_CODES.has(code)) {
      return new OrcError(
        'unavailable',
        `registry ${where}: its TLS certificate is not trusted (${code}): give the registry's CA certificate, or opt into insecure TLS for it (docs/images.md)`,
        details,
        err,
      )
    }
    if (code === 'EPROTO' || code.startsWith('ERR_SSL_') || /wrong version number|packet length too long/i.test(e.message)) {
      return new OrcError(
        'unavailable',
        `registry ${where}: TLS handshake failed (${e.message}); if it serves plain HTTP, opt into plain HTTP for it (docs/images.md)`,
        details,
        err,
      )
    }
    return new OrcError('unavailable', `registry ${where} unreachable: ${e.message}`, details, err)
  }

  /** A non-2xx answer as one OrcError line (the registry's own error code when it gave one). */
  private async statusError(target: Target, method: string, reply: Reply): Promise<OrcError> {
    let codes: string[] = []
    let message = ''
    if (method !== 'HEAD') {
      try {
        const body = (await reply.bytes(MAX_ERROR_BODY, () => new Error('too large'))).toString('utf8')
        message = body.trim().split('\n')[0]!.slice(0, 200)
        const doc = JSON.parse(body) as { errors?: { code?: unknown; message?: unknown }[] }
        codes = (doc.errors ?? []).map((e) => String(e.code ?? ''))
        message = String(doc.errors?.[0]?.message ?? '')
      } catch {
        // Not the API's JSON error: its first line (Go's "Client sent an HTTP request to an HTTPS server.") or the status says enough.
      }
    } else reply.discard()
    const details = { registry: this.registry, image: target.name, status: reply.status, ...(codes.length ? { errors: codes } : {}) }
    const status = reply.status
    if (status === 404 || codes.some((c) => c === 'MANIFEST_UNKNOWN' || c === 'NAME_UNKNOWN' || c === 'BLOB_UNKNOWN')) {
      const what = codes.includes('NAME_UNKNOWN') ? ' (repository unknown)' : ''
      return new OrcError('not_found', `${target.kind} unknown: ${target.name}${what}`, details)
    }
    if (status === 403 || codes.includes('DENIED')) {
      return new OrcError(
        'forbidden',
        `registry ${this.registry}: access denied to ${target.name}${this.hasCredentials() ? ` for user ${JSON.stringify(this.access.username)}` : ': give credentials (docs/images.md)'}`,
        details,
      )
    }
    if (status === 429 || codes.includes('TOOMANYREQUESTS')) {
      return new OrcError('unavailable', `registry ${this.registry}: too many requests (${target.kind} ${target.name}); try again later`, details)
    }
    if (status >= 500)
      return new OrcError('unavailable', `registry ${this.registry} unreachable: it answered HTTP ${status} to ${target.kind} ${target.name}`, details)
    if (status === 400 && /HTTP request to an HTTPS server/i.test(message)) {
      return new OrcError('unavailable', `registry ${this.registry} serves HTTPS, not plain HTTP: opt into TLS for it (docs/images.md)`, details)
    }
    return new OrcError('invalid', `registry ${this.registry}: HTTP ${status} for ${target.kind} ${target.name}${message ? `: ${message}` : ''}`, details)
  }
}

/** `access.tls`, else HTTPS verified — but plain HTTP for a loopback registry given no CA (Docker's rule). */
function defaultTls(registry: string, access: RegistryAccess): RegistryTls {
  return access.tls ?? (isLoopbackRegistry(registry) && !access.ca ? 'plain' : 'verify')
}

/** `p`, or the signal's reason as soon as it fires. */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p
  if (signal.aborted) return Promise.reject(signal.reason)
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}

/** The scope a pull needs (the distribution token spec). */
const pullScope = (repository: string): string => `repository:${repository}:pull`
