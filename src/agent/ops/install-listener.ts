/**
 * The node's HTTPS listener: the bootstrap script (`curl … | sh`), the package and Node.js runtime it
 * installs, the token check it makes first, /metrics and /healthz. Its certificate is self-signed
 * (tls.ts); the install line pins its public key, and the script it serves carries the sha256 of
 * the package and of the Node.js binary, so what a new machine runs as root is what this node serves.
 */

import { execFile } from 'node:child_process'
import { createHash, timingSafeEqual } from 'node:crypto'
import { createReadStream, statSync } from 'node:fs'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import { createServer } from 'node:https'
import { isIP } from 'node:net'
import { join } from 'node:path'
import { promisify } from 'node:util'
import type { Logger } from 'pino'
import type { CommandRunner } from '../../effects/index.ts'
import { formatDuration, type Mesh, splitHostPort } from '../../mesh/index.ts'
import { OrcError } from '../../model/index.ts'
import type { Component } from '../component.ts'
import type { MetricsRegistry } from './metrics.ts'
import { type HttpListenOption, parseHttpListen } from './options.ts'
import { buildPackage, type OrcPackage, renderInstallScript, unameArch } from './package.ts'
import { ensureTlsIdentity, type TlsIdentity } from './tls.ts'

const run = promisify(execFile)

export interface InstallListenerComponents {
  nodeName: string
  dataDir: string
  version: string
  now: () => number
  mesh?: Mesh
  metrics: MetricsRegistry
  logger: Logger
  http?: HttpListenOption
  /** Makes the certificate (openssl). */
  run: CommandRunner
  /** The Node.js binary served to new machines (tests serve another). */
  nodeBinary?: string
}

export interface InstallListener extends Component {
  /** `host:port` the listener is bound to (the first, when on several mesh addresses), while it runs. */
  address(): string | undefined
  /** Every `host:port` it is bound to. */
  addresses(): string[]
  /** `sha256//…` pin of the listener's certificate public key, while it runs. */
  pin(): string | undefined
}

function text(res: ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' })
  res.end(body)
}

export function installListener(d: InstallListenerComponents): InstallListener {
  const log = d.logger.child({ module: 'ops' })
  let servers: Server[] = []
  let boundAddress: string | undefined
  let boundAll: string[] = []
  let pkg: Promise<OrcPackage> | undefined
  let nodeBinaryOk: Promise<boolean> | undefined
  let nodeSha256: Promise<string> | undefined
  let tls: TlsIdentity | undefined
  const nodeBinary = d.nodeBinary ?? process.execPath

  function nodeBinarySha256(): Promise<string> {
    nodeSha256 ??= (async () => {
      const h = createHash('sha256')
      for await (const chunk of createReadStream(nodeBinary)) h.update(chunk as Buffer)
      return h.digest('hex')
    })().catch((err) => {
      nodeSha256 = undefined
      throw err
    })
    return nodeSha256
  }

  function servedPackage(): Promise<OrcPackage> {
    pkg ??= buildPackage({ version: d.version, outDir: join(d.dataDir, 'install') }).catch((err) => {
      pkg = undefined
      throw err
    })
    return pkg
  }

  function canServeNode(): Promise<boolean> {
    // A Node.js linked against shared libnode/libuv (distribution builds) does not run elsewhere.
    nodeBinaryOk ??=
      process.platform !== 'linux'
        ? Promise.resolve(false)
        : run('ldd', [nodeBinary]).then(
            (r) => !/libnode|libuv|libv8/.test(r.stdout),
            () => true,
          )
    return nodeBinaryOk
  }

  function meshPort(): number | undefined {
    for (const a of d.mesh?.addresses() ?? []) {
      const m = /\/tcp\/([0-9]+)/.exec(a)
      if (m) return Number(m[1])
    }
    return undefined
  }

  async function tokenVerdict(id: string, hash: string): Promise<string> {
    const mesh = d.mesh
    if (mesh === undefined) return 'refused: this node does not run the mesh, so nobody can join through it'
    const rec = (await mesh.listTokens()).find((t) => t.id === id)
    const a = Buffer.from(rec?.secretHash ?? '', 'hex')
    const b = Buffer.from(/^[0-9a-f]{64}$/.test(hash) ? hash : '', 'hex')
    if (rec === undefined || a.length !== 32 || a.length !== b.length || !timingSafeEqual(a, b)) {
      return `refused: token not recognised by node ${d.nodeName}; fetch the script from the node that created the token (orc token create --print-install prints the right line), or the token is forged`
    }
    const now = d.now()
    if (rec.revoked) return 'refused: token revoked'
    if (now >= rec.expiresAt) return `refused: token expired ${formatDuration(now - rec.expiresAt)} ago`
    if (rec.usesLeft <= 0) return 'refused: token already used'
    return `ok: ${rec.usesLeft} use(s) left, expires in ${formatDuration(rec.expiresAt - now)}`
  }

  async function serveHttp(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://orc')
    if (req.method !== 'GET' && req.method !== 'HEAD') return text(res, 405, 'only GET\n')
    const p = url.pathname
    if (p === '/metrics') return text(res, 200, d.metrics.render(), 'text/plain; version=0.0.4; charset=utf-8')
    if (p === '/healthz') return text(res, 200, 'ok\n')
    if (p === '/install.sh') {
      const host = (req.headers.host ?? '').trim()
      if (!/^[-A-Za-z0-9.:[\]]+$/.test(host)) return text(res, 400, 'missing or bad Host header\n')
      const pk = await servedPackage()
      const { host: hostname } = splitHostPort(host, 80)
      const port = meshPort()
      const peer = port === undefined ? '' : isIP(hostname) === 6 ? `[${hostname}]:${port}` : `${hostname}:${port}`
      const serveNode = await canServeNode()
      const script = await renderInstallScript({
        server: `https://${host}`,
        pin: tls?.pin ?? '',
        version: d.version,
        peer,
        sha256: pk.sha256,
        nodeArch: serveNode ? unameArch() : '',
        nodeVersion: process.versions.node,
        nodeSha256: serveNode ? await nodeBinarySha256() : '',
      })
      return text(res, 200, script, 'text/x-shellscript; charset=utf-8')
    }
    if (p === '/install/token') {
      return text(res, 200, (await tokenVerdict(url.searchParams.get('id') ?? '', url.searchParams.get('hash') ?? '')) + '\n')
    }
    if (p === `/install/orc-${d.version}.tar.gz` || p === '/install/orc.tar.gz') {
      const pk = await servedPackage()
      res.writeHead(200, { 'content-type': 'application/gzip', 'content-length': pk.bytes, 'x-orc-sha256': pk.sha256 })
      if (req.method === 'HEAD') return void res.end()
      createReadStream(pk.path).pipe(res)
      return
    }
    if (p === '/install/node') {
      if (!(await canServeNode())) return text(res, 404, 'this node cannot serve its Node.js runtime (not a self-contained build)\n')
      const size = statSync(nodeBinary).size
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size })
      if (req.method === 'HEAD') return void res.end()
      createReadStream(nodeBinary).pipe(res)
      return
    }
    return text(res, 404, 'not found: this node serves /install.sh, /metrics and /healthz\n')
  }

  async function listen(host: string, port: number, id: TlsIdentity): Promise<Server> {
    const s = createServer({ key: id.key, cert: id.cert }, (req, res) => {
      serveHttp(req, res).catch((err) => {
        log.warn({ err: (err as Error).message, path: req.url }, 'http request failed')
        if (!res.headersSent) text(res, 500, `error: ${(err as Error).message.split('\n')[0]}\n`)
        else res.destroy()
      })
    })
    s.keepAliveTimeout = 5000
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject)
      s.listen(port, host, () => {
        s.off('error', reject)
        resolve()
      })
    })
    return s
  }

  async function close(): Promise<void> {
    const all = servers
    servers = []
    boundAddress = undefined
    boundAll = []
    tls = undefined
    await Promise.all(
      all.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.close(() => resolve())
            s.closeAllConnections()
          }),
      ),
    )
  }

  /** The IPs of the mesh's advertised addresses, those others reach first; loopback when there are none. */
  function meshHosts(): string[] {
    const hosts: string[] = []
    for (const a of d.mesh?.addresses() ?? []) {
      const m = /^\/(ip4|ip6)\/([^/]+)\/tcp\//.exec(a)
      if (!m || /^fe80:/i.test(m[2]!) || hosts.includes(m[2]!)) continue
      hosts.push(m[2]!)
    }
    const loopback = (h: string) => h.startsWith('127.') || h === '::1'
    const ordered = [...hosts.filter((h) => !loopback(h)), ...hosts.filter(loopback)]
    return ordered.length > 0 ? ordered : ['127.0.0.1']
  }

  function addressText(s: Server): string | undefined {
    const a = s.address()
    if (a === null || typeof a !== 'object') return undefined
    return a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`
  }

  return {
    name: 'install-listener',
    address: () => boundAddress,
    addresses: () => [...boundAll],
    pin: () => (boundAddress === undefined ? undefined : tls?.pin),
    async start() {
      if (d.http === undefined) return
      const want = parseHttpListen(d.http.listen)
      if (want === undefined) return
      const id = await ensureTlsIdentity(d.dataDir, d.run, d.nodeName)
      tls = id
      const explicit = d.http.explicit === true
      const hosts = want.mesh ? meshHosts() : [want.host]
      let port = want.port
      const failed = (err: unknown, what: string) => {
        const code = (err as NodeJS.ErrnoException).code
        return new OrcError(
          'unavailable',
          `listen on ${what} for HTTPS: ${code ?? (err as Error).message} (choose another with --http-listen, or --http-listen off)`,
          {},
          err,
        )
      }
      for (const host of hosts) {
        const what = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
        try {
          servers.push(await listen(host, port, id))
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code
          if (servers.length === 0 && !explicit && code === 'EADDRINUSE') {
            // Several agents on one machine (tests, experiments): the default port goes to the first.
            servers.push(await listen(host, 0, id))
            log.warn({ wanted: what }, 'default HTTP port in use; serving install script and metrics on a free port instead')
          } else if (want.mesh && hosts.length > 1) {
            // One of several mesh addresses (an interface going away): serve on the others.
            log.warn({ address: what, err: code ?? (err as Error).message }, 'cannot serve install script and metrics on a mesh address; skipped')
            continue
          } else {
            await close()
            throw failed(err, what)
          }
        }
        const a = servers[servers.length - 1]!.address()
        if (a !== null && typeof a === 'object') port = a.port // mesh:0 or a fallback: the same port everywhere
      }
      if (servers.length === 0) {
        await close()
        throw new OrcError(
          'unavailable',
          `listen for HTTPS on none of the mesh's addresses (${hosts.join(', ')}): choose one with --http-listen, or --http-listen off`,
        )
      }
      tls = id
      boundAll = servers.map(addressText).filter((x): x is string => x !== undefined)
      boundAddress = boundAll[0]
      log.info({ addresses: boundAll, pin: id.pin }, 'https listener started (install.sh, /metrics)')
    },
    // With the local API, before the parts behind it stop.
    beforeStop: close,
    stop() {},
  }
}
