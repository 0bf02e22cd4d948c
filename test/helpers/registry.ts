/**
 * A real OCI registry for tests: Debian's `docker-registry` (distribution 2.8) on a free port with
 * its own temporary storage, optionally with basic auth (htpasswd, bcrypt) and self-signed TLS; and
 * images pushed into it with `skopeo copy` from OCI layouts built by `writeOciLayout`.
 *
 *   const why = registryMissing(); if (why) return t.skip(why)
 *   const reg = await startRegistry({ basicAuth: { username: 'u', password: 'p' }, tls: true })
 *   const digest = await pushImage(reg, 'team/app:1.0', { layers: [busyboxLayerEntries()] })
 *   …
 *   await reg.stop()
 */
import { spawn, spawnSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer as createHttpServer, request as httpRequest, type Server } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { gunzipSync } from 'node:zlib'
import { type LayoutImage, writeOciLayout } from '../../src/runtime/index.ts'

export const REGISTRY_BIN = '/usr/bin/docker-registry'

export interface RegistryOptions {
  /** Require these credentials (htpasswd with a bcrypt hash, as distribution wants). */
  basicAuth?: { username: string; password: string }
  /** Serve HTTPS with a self-signed certificate for 127.0.0.1, ::1, localhost and the listen address. */
  tls?: boolean
  /**
   * Address to listen on (default 127.0.0.1), e.g. a bridge address network namespaces reach;
   * `0.0.0.0` / `::` listen everywhere (host then names 127.0.0.1). skopeo cannot push to an IPv6
   * literal, so pushImage needs an IPv4 (or wildcard) listener.
   */
  listen?: string
  /** More names (IP addresses or DNS names) the TLS certificate is valid for. */
  certNames?: string[]
  /** Port (default: a free one). */
  port?: number
}

export interface TestRegistry {
  /** HOST:PORT as an image reference names it (`127.0.0.1:41234`). */
  host: string
  /** `http://HOST:PORT` or `https://…`. */
  url: string
  /** The registry's filesystem storage root (blobs under docker/registry/v2/blobs). */
  storageDir: string
  /** The CA to trust (the self-signed certificate itself), with `tls`. */
  ca?: string
  basicAuth?: { username: string; password: string }
  /** Stop the process, keeping the storage (`start` serves it again on the same port). */
  kill(): Promise<void>
  /** Start again after `kill`. */
  start(): Promise<void>
  /** Stop and remove everything. */
  stop(): Promise<void>
}

const has = (cmd: string, args: string[]): boolean => spawnSync(cmd, args, { stdio: 'ignore' }).status === 0

/** Why a real registry cannot run here (a skip reason), or undefined. */
export function registryMissing(): string | undefined {
  if (!existsSync(REGISTRY_BIN)) return `skipped: ${REGISTRY_BIN} is not installed (apt install docker-registry)`
  if (!has('skopeo', ['--version'])) return 'skipped: skopeo is not installed (apt install skopeo)'
  return undefined
}

/** Why zstd-layer images cannot be pushed here (pushImage `compression: 'zstd'`), or undefined. */
export function zstdMissing(): string | undefined {
  return registryMissing() ?? (has('zstd', ['--version']) ? undefined : 'skipped: zstd is not installed (apt install zstd)')
}

/** Why a registry with basic auth or TLS cannot run here (perl's crypt for bcrypt, openssl), or undefined. */
export function secureRegistryMissing(): string | undefined {
  const base = registryMissing()
  if (base) return base
  if (!has('openssl', ['version'])) return 'skipped: openssl is not installed (apt install openssl)'
  if (bcrypt('x') === undefined) return "skipped: perl's crypt() has no bcrypt here (needs libxcrypt, Debian's libcrypt1)"
  return undefined
}

/**
 * An htpasswd bcrypt line's hash, through perl's crypt() (libxcrypt's `$2b$`, which distribution's
 * Go bcrypt reads): perl-base is essential on Debian, so no apache2-utils and no npm bcrypt.
 */
function bcrypt(password: string): string | undefined {
  const salt = randomBytes(16).toString('base64').replace(/[+=]/g, '.').slice(0, 22)
  const r = spawnSync('perl', ['-e', 'print crypt($ARGV[0], $ARGV[1])', password, `$2b$05$${salt}`], { encoding: 'utf8' })
  return r.status === 0 && r.stdout.startsWith('$2b$') ? r.stdout : undefined
}

async function freePort(host: string): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once('error', reject)
    srv.listen(0, host, () => {
      const port = (srv.address() as { port: number }).port
      srv.close(() => resolve(port))
    })
  })
}

const bracket = (addr: string): string => (addr.includes(':') ? `[${addr}]` : addr)

function selfSignedCert(dir: string, names: string[]): { cert: string; key: string; pem: string } {
  const cert = join(dir, 'cert.pem')
  const key = join(dir, 'key.pem')
  const isIp = (n: string) => /^[\d.]+$|:/.test(n)
  const all = new Set(['127.0.0.1', '::1', 'localhost', ...names.filter((n) => n !== '0.0.0.0' && n !== '::')])
  const san = [...all].map((n) => (isIp(n) ? `IP:${n}` : `DNS:${n}`)).join(',')
  const r = spawnSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '2',
      '-subj',
      '/CN=orc-test-registry',
      '-addext',
      `subjectAltName=${san}`,
      '-keyout',
      key,
      '-out',
      cert,
    ],
    { encoding: 'utf8' },
  )
  if (r.status !== 0) throw new Error(`openssl req: ${r.stderr}`)
  return { cert, key, pem: readFileSync(cert, 'utf8') }
}

/** GET `url` (any certificate accepted): the status, or undefined when nothing answers. */
function probe(url: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const req = (url.startsWith('https:') ? httpsRequest : httpRequest)(url, { rejectUnauthorized: false, agent: false, timeout: 2000 }, (res) => {
      res.resume()
      resolve(res.statusCode)
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(undefined))
    req.end()
  })
}

/** Start a registry; resolves once `/v2/` answers (200, or 401 with auth). */
export async function startRegistry(opts: RegistryOptions = {}): Promise<TestRegistry> {
  const root = mkdtempSync(join(tmpdir(), 'orc-registry-'))
  const storageDir = join(root, 'storage')
  mkdirSync(storageDir)
  const listen = opts.listen ?? '127.0.0.1'
  const wildcard = listen === '0.0.0.0' || listen === '::'
  const port = opts.port ?? (await freePort(wildcard ? '127.0.0.1' : listen))
  const host = `${wildcard ? '127.0.0.1' : bracket(listen)}:${port}`
  const tls = opts.tls ? selfSignedCert(root, [listen, ...(opts.certNames ?? [])]) : undefined
  const lines = [
    'version: 0.1',
    'log:',
    '  level: warn',
    '  accesslog:',
    '    disabled: true',
    'storage:',
    '  filesystem:',
    `    rootdirectory: ${JSON.stringify(storageDir)}`,
    '  delete:',
    '    enabled: true',
    'health:',
    '  storagedriver:',
    '    enabled: false',
    'http:',
    `  addr: ${JSON.stringify(`${bracket(listen)}:${port}`)}`,
    `  secret: ${randomBytes(16).toString('hex')}`,
  ]
  if (tls) lines.push('  tls:', `    certificate: ${JSON.stringify(tls.cert)}`, `    key: ${JSON.stringify(tls.key)}`)
  if (opts.basicAuth) {
    const hash = bcrypt(opts.basicAuth.password)
    if (hash === undefined) throw new Error("startRegistry: perl's crypt() gives no bcrypt hash here (see secureRegistryMissing)")
    writeFileSync(join(root, 'htpasswd'), `${opts.basicAuth.username}:${hash}\n`)
    lines.push('auth:', '  htpasswd:', '    realm: orc-test', `    path: ${JSON.stringify(join(root, 'htpasswd'))}`)
  }
  const config = join(root, 'config.yml')
  writeFileSync(config, `${lines.join('\n')}\n`)
  const url = `${tls ? 'https' : 'http'}://${host}`
  const removeRoot = () => rmSync(root, { recursive: true, force: true })
  process.once('exit', removeRoot)

  let child: ReturnType<typeof spawn> | undefined
  let exited: Promise<void> = Promise.resolve()
  const start = async (): Promise<void> => {
    let output = ''
    const proc = spawn(REGISTRY_BIN, ['serve', config], { stdio: ['ignore', 'pipe', 'pipe'] })
    child = proc
    let gone = false
    // A test process that dies (or is force-exited) must not leave its registry behind.
    const reap = () => proc.kill('SIGKILL')
    process.once('exit', reap)
    exited = new Promise((resolve) =>
      proc.once('exit', () => {
        gone = true
        process.off('exit', reap)
        resolve()
      }),
    )
    const keep = (d: Buffer) => {
      if (output.length < 64 * 1024) output += d.toString()
    }
    proc.stdout!.on('data', keep)
    proc.stderr!.on('data', keep)
    const deadline = Date.now() + 20_000
    for (;;) {
      if (gone) throw new Error(`docker-registry exited at start: ${output.trim().slice(-2000)}`)
      const status = await probe(`${url}/v2/`)
      if (status === 200 || status === 401) return
      if (Date.now() > deadline) {
        proc.kill('SIGKILL')
        throw new Error(`docker-registry did not answer on ${url}/v2/ within 20 s: ${output.trim().slice(-2000)}`)
      }
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  const kill = async (): Promise<void> => {
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      const t = setTimeout(() => child?.kill('SIGKILL'), 5000)
      await exited
      clearTimeout(t)
    }
    child = undefined
  }
  try {
    await start()
  } catch (err) {
    await kill()
    removeRoot()
    process.off('exit', removeRoot)
    throw err
  }
  return {
    host,
    url,
    storageDir,
    ...(tls ? { ca: tls.pem } : {}),
    ...(opts.basicAuth ? { basicAuth: opts.basicAuth } : {}),
    kill,
    start,
    stop: async () => {
      await kill()
      removeRoot()
      process.off('exit', removeRoot)
    },
  }
}

/** Where the registry keeps a blob's bytes (tests tamper with it to serve a corrupted blob). */
export function registryBlobPath(reg: Pick<TestRegistry, 'storageDir'>, digest: string): string {
  const hex = digest.replace(/^sha256:/, '')
  return join(reg.storageDir, 'docker', 'registry', 'v2', 'blobs', 'sha256', hex.slice(0, 2), hex, 'data')
}

async function skopeo(args: string[]): Promise<string> {
  return await new Promise((resolve, reject) => {
    const proc = spawn('skopeo', args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    proc.stdout.on('data', (d: Buffer) => (out += d.toString()))
    proc.stderr.on('data', (d: Buffer) => (err += d.toString()))
    proc.on('error', reject)
    proc.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`skopeo ${args[0]} exited ${code}: ${err.trim()}`))))
  })
}

const destArgs = (reg: TestRegistry): string[] => [
  '--dest-tls-verify=false',
  ...(reg.basicAuth ? ['--dest-creds', `${reg.basicAuth.username}:${reg.basicAuth.password}`] : []),
]

export interface PushOptions {
  /** Push every image of an index (`skopeo copy --all`). */
  all?: boolean
  /** Manifest format in the registry: `oci` (default, as the layout is) or Docker's `v2s2` (manifest v2, list v2). */
  format?: 'oci' | 'v2s2'
}

export interface PushImageOptions extends Omit<PushOptions, 'all'> {
  /** Layers as zstd (`…tar+zstd`, through Debian's `zstd`) instead of gzip; OCI format only. */
  compression?: 'gzip' | 'zstd'
}

/** Push an OCI layout directory (its one image or index in index.json) to `reg` as `repoTag`; the manifest digest the registry reports. */
export async function pushLayout(reg: TestRegistry, repoTag: string, layoutDir: string, opts: PushOptions = {}): Promise<string> {
  // containers/image's reference grammar has no IPv6 literals.
  if (reg.host.startsWith('[')) throw new Error(`pushLayout: skopeo cannot name the registry ${reg.host} (IPv6 literal): listen on '::' or an IPv4 address`)
  const tmp = mkdtempSync(join(tmpdir(), 'orc-push-'))
  try {
    const digestFile = join(tmp, 'digest')
    await skopeo([
      '--insecure-policy',
      'copy',
      '--quiet',
      ...(opts.all ? ['--all'] : []),
      ...(opts.format ? ['--format', opts.format] : []),
      ...destArgs(reg),
      '--digestfile',
      digestFile,
      `oci:${layoutDir}`,
      `docker://${reg.host}/${repoTag}`,
    ])
    return readFileSync(digestFile, 'utf8').trim()
  } finally {
    rmSync(tmp, { recursive: true, force: true })
  }
}

/** Build `layout` as an OCI layout (gzip layers, this machine's platform) and push it as `repoTag` (`team/app:1.0`). The manifest digest. */
export async function pushImage(reg: TestRegistry, repoTag: string, layout: LayoutImage, opts: PushImageOptions = {}): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'orc-push-'))
  try {
    writeOciLayout(join(dir, 'layout'), layout)
    if (opts.compression === 'zstd') zstdLayers(join(dir, 'layout'))
    const { compression: _, ...push } = opts
    return await pushLayout(reg, repoTag, join(dir, 'layout'), push)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * Rewrite a one-image layout's gzip layers as zstd (skopeo 1.9 does not recompress compressed
 * layers): new layer blobs and manifest, the config (diff ids of the uncompressed tars) unchanged.
 */
function zstdLayers(layoutDir: string): void {
  const blob = (digest: string) => join(layoutDir, 'blobs', 'sha256', digest.replace(/^sha256:/, ''))
  const put = (buf: Buffer) => {
    const digest = `sha256:${createHash('sha256').update(buf).digest('hex')}`
    writeFileSync(blob(digest), buf)
    return { digest, size: buf.length }
  }
  const index = JSON.parse(readFileSync(join(layoutDir, 'index.json'), 'utf8'))
  const entry = index.manifests[0]
  const manifest = JSON.parse(readFileSync(blob(entry.digest), 'utf8'))
  manifest.layers = manifest.layers.map((l: { digest: string; mediaType: string }) => {
    const r = spawnSync('zstd', ['-q', '-c', '-3'], { input: gunzipSync(readFileSync(blob(l.digest))), maxBuffer: 1 << 30 })
    if (r.status !== 0) throw new Error(`zstd: ${r.stderr?.toString() ?? r.error}`)
    return { ...l, mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd', ...put(r.stdout) }
  })
  index.manifests[0] = { ...entry, ...put(Buffer.from(JSON.stringify(manifest))) }
  writeFileSync(join(layoutDir, 'index.json'), JSON.stringify(index))
}

/** This machine's platform as OCI names it (GOARCH). */
export function machinePlatform(): { os: string; architecture: string } {
  const arch: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' }
  return { os: 'linux', architecture: arch[process.arch] ?? process.arch }
}

export interface PushedIndex {
  /** The index's digest (what a tag resolves to). */
  digest: string
  /** Manifest digest per platform (`linux/amd64`), the machine's and the other. */
  manifests: Record<string, string>
  /** The other platform (`linux/arm64` on amd64 machines, `linux/amd64` elsewhere). */
  other: { os: string; architecture: string }
}

/**
 * Push a two-platform OCI image index as `repoTag`: `layout` built for this machine's platform and
 * `otherLayout` (default: `layout` with a marker file added) for another platform — so a test can
 * tell which one a pull chose.
 */
export async function pushIndex(
  reg: TestRegistry,
  repoTag: string,
  layout: LayoutImage,
  otherLayout?: LayoutImage,
  opts: Omit<PushOptions, 'all'> = {},
): Promise<PushedIndex> {
  const dir = mkdtempSync(join(tmpdir(), 'orc-push-'))
  try {
    const me = machinePlatform()
    const other = { os: 'linux', architecture: me.architecture === 'amd64' ? 'arm64' : 'amd64' }
    const layoutDir = join(dir, 'layout')
    const blob = (digest: string) => join(layoutDir, 'blobs', 'sha256', digest.replace(/^sha256:/, ''))
    const put = (buf: Buffer): { digest: string; size: number } => {
      const digest = `sha256:${createHash('sha256').update(buf).digest('hex')}`
      writeFileSync(blob(digest), buf)
      return { digest, size: buf.length }
    }
    const alt = otherLayout ?? {
      ...layout,
      layers: [...layout.layers, [{ path: 'platform', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, data: Buffer.from(`${other.architecture}\n`) }]],
    }
    // Two images in one blob directory; the other's config and manifest rewritten for its platform.
    const otherManifest = writeOciLayout(layoutDir, alt).manifestDigest
    const mine = writeOciLayout(layoutDir, layout).manifestDigest
    const m = JSON.parse(readFileSync(blob(otherManifest), 'utf8'))
    const cfg = JSON.parse(readFileSync(blob(m.config.digest), 'utf8'))
    cfg.architecture = other.architecture
    cfg.os = other.os
    m.config = { ...m.config, ...put(Buffer.from(JSON.stringify(cfg))) }
    const theirs = put(Buffer.from(JSON.stringify(m)))
    const manifestType = 'application/vnd.oci.image.manifest.v1+json'
    const index = {
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        { mediaType: manifestType, digest: mine, size: readFileSync(blob(mine)).length, platform: me },
        { mediaType: manifestType, ...theirs, platform: other },
      ],
    }
    const idx = put(Buffer.from(JSON.stringify(index)))
    writeFileSync(join(layoutDir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: index.mediaType, ...idx }] }))
    const digest = await pushLayout(reg, repoTag, layoutDir, { ...opts, all: true })
    return { digest, manifests: { [`${me.os}/${me.architecture}`]: mine, [`${other.os}/${other.architecture}`]: theirs.digest }, other }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** The digest skopeo sees for `HOST/REPO:TAG` (an independent check of what a client resolves). */
export async function skopeoDigest(reg: TestRegistry, repoTag: string): Promise<string> {
  const creds = reg.basicAuth ? ['--creds', `${reg.basicAuth.username}:${reg.basicAuth.password}`] : []
  const out = await skopeo(['inspect', '--raw', '--tls-verify=false', ...creds, `docker://${reg.host}/${repoTag}`])
  return `sha256:${createHash('sha256').update(out).digest('hex')}`
}

/** In front of the registry: counts blob and manifest downloads by digest, and the bytes it answered; `close()` is the registry going away. */
export async function countingProxy(
  reg: TestRegistry,
): Promise<{ host: string; blobGets: Map<string, number>; readonly bytes: number; close(): Promise<void> }> {
  const blobGets = new Map<string, number>()
  const counts = { bytes: 0 }
  const [rhost, rport] = [reg.host.split(':')[0]!, Number(reg.host.split(':')[1])]
  const server: Server = createHttpServer((req, res) => {
    const m = /^\/v2\/.+\/(blobs|manifests)\/(sha256:[a-f0-9]{64})$/.exec(req.url ?? '')
    if (m && req.method === 'GET') blobGets.set(m[2]!, (blobGets.get(m[2]!) ?? 0) + 1)
    const up = httpRequest({ host: rhost, port: rport, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers)
      r.on('data', (c: Buffer) => (counts.bytes += c.length))
      r.pipe(res)
    })
    up.on('error', () => res.destroy())
    req.pipe(up)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  return {
    host: `127.0.0.1:${port}`,
    blobGets,
    get bytes() {
      return counts.bytes
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
