/**
 * The operator's side of a node: Prometheus metrics, `orc events`, `orc doctor`, the peers table of
 * `orc status`, and the node's HTTP listener serving the bootstrap script, its package and /metrics.
 */
import { timingSafeEqual } from 'node:crypto'
import { createReadStream, readdirSync, statSync } from 'node:fs'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { isIP } from 'node:net'
import { join } from 'node:path'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import type { Logger } from 'pino'
import { OrcError } from '../../model/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { formatDuration, membersTopic, splitHostPort, storeTopic, type Mesh } from '../../mesh/index.ts'
import { parseWorkflowSnapshot } from '../../workflow/index.ts'
import { errorBody, httpStatusOf, type ApiHandler, type ApiResponse } from '../api.ts'
import { MetricsRegistry } from './metrics.ts'
import { buildPackage, renderInstallScript, unameArch, type OrcPackage } from './package.ts'
import { collectEvents, eventTarget } from './events.ts'
import { parseHttpListen, type HttpListenOption } from './options.ts'
import { clockFindings, hostFindings, type Finding } from './doctor.ts'

const run = promisify(execFile)

export interface NodeOpsDeps {
  store: ObjectStore
  nodeName: string
  dataDir: string
  version: string
  clusterId: () => string
  mesh?: Mesh
  logger: Logger
  now: () => number
  http?: HttpListenOption
}

export interface PeerRow {
  name: string
  peerId: string
  self: boolean
  state: string
  /** direct (a mesh connection of its own), relayed (through a relay), gossip (no connection; heard through others). */
  path: 'self' | 'direct' | 'relayed' | 'gossip'
  latencyMs: number | null
  lastSeen: number | null
  /** When the current mesh connection's handshake completed (ms since epoch). */
  handshakeAt: number | null
  addresses: string[]
  version: string | null
  pods: number
}

export interface NodeOps {
  metrics: MetricsRegistry
  /** The API with the ops routes added. */
  wrap(base: ApiHandler): ApiHandler
  /** `host:port` the HTTP listener is bound to, when it runs. */
  httpAddress(): string | undefined
  peers(): PeerRow[]
  start(): Promise<void>
  stop(): Promise<void>
}

function dirBytes(dir: string): number {
  let n = 0
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name)
      n += e.isDirectory() ? dirBytes(p) : e.isFile() ? statSync(p).size : 0
    }
  } catch {
    // vanished while walking: count what is left
  }
  return n
}

function text(res: ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' })
  res.end(body)
}

export function createNodeOps(d: NodeOpsDeps): NodeOps {
  const log = d.logger.child({ module: 'ops' })
  const metrics = new MetricsRegistry()
  const unsubs: Array<() => void> = []
  let server: Server | undefined
  let boundAddress: string | undefined
  let pkg: Promise<OrcPackage> | undefined
  let nodeBinaryOk: Promise<boolean> | undefined
  const startedAt = d.now()

  // ---- metrics ----
  const gossipMessages = metrics.counter('orc_gossip_messages_total', 'Gossip messages by direction (in: received, out: published) and topic (store, members).')
  const gossipBytes = metrics.counter('orc_gossip_bytes_total', 'Gossip payload bytes by direction and topic.')
  const heartbeats = metrics.counter('orc_heartbeats_total', 'Member heartbeats by direction (in, out) and path (direct: on the connection; gossip: relayed).')
  const syncSessions = metrics.counter('orc_sync_sessions_total', 'Anti-entropy sessions this node initiated that completed.')
  const syncBytes = metrics.counter('orc_sync_bytes_total', 'Anti-entropy bytes by direction.')
  const lag = metrics.histogram(
    'orc_replication_lag_seconds',
    'Time from a write on another node to its arrival here (writes older than 10 minutes count as catch-up instead).',
    [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  )
  const catchup = metrics.counter('orc_replication_catchup_total', 'Writes from other nodes that arrived more than 10 minutes after they were made (a node that was away).')
  const unitDuration = metrics.histogram('orc_unit_duration_seconds', 'Duration of lifecycle units of pods on this node, by unit and result.', [
    0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300,
  ])
  const peersGauge = metrics.gauge('orc_peers', 'Members of the cluster other than this node, by liveness state.')
  const pathGauge = metrics.gauge('orc_peer_connections', 'Mesh connections to members, by path (direct or relayed).')
  const objectsGauge = metrics.gauge('orc_store_objects', 'Objects in the replicated store, by kind.')
  const storeBytes = metrics.gauge('orc_store_disk_bytes', 'Bytes the store (LevelDB) takes on disk.')
  const podsGauge = metrics.gauge('orc_pods', 'Pods bound to this node, by phase.')
  const clusterPods = metrics.gauge('orc_cluster_pods', 'Pods in the whole cluster, by phase.')
  const info = metrics.gauge('orc_info', 'Constant 1, labelled with the node, its orc version and cluster.')
  const up = metrics.gauge('process_start_time_seconds', 'Start time of the agent since the Unix epoch, in seconds.')
  const rss = metrics.gauge('process_resident_memory_bytes', 'Resident memory of the agent process.')
  const heap = metrics.gauge('nodejs_heap_used_bytes', 'V8 heap in use.')
  let diskCache = { at: 0, bytes: 0 }

  metrics.onCollect(() => {
    const now = d.now()
    info.set({ node: d.nodeName, version: d.version, cluster: d.clusterId() }, 1)
    up.set({}, Math.floor(startedAt / 1000))
    const mem = process.memoryUsage()
    rss.set({}, mem.rss)
    heap.set({}, mem.heapUsed)
    peersGauge.reset()
    for (const s of ['alive', 'suspect', 'dead']) peersGauge.set({ state: s }, 0)
    const counts: Record<string, number> = { alive: 0, suspect: 0, dead: 0 }
    for (const m of d.mesh?.members() ?? []) if (!m.self) counts[m.state] = (counts[m.state] ?? 0) + 1
    for (const [s, n] of Object.entries(counts)) peersGauge.set({ state: s }, n)
    pathGauge.reset()
    const paths = { direct: 0, relayed: 0 }
    for (const p of peerRows()) if (p.path === 'direct' || p.path === 'relayed') paths[p.path] += 1
    for (const [p, n] of Object.entries(paths)) pathGauge.set({ path: p }, n)
    objectsGauge.reset()
    const byKind = new Map<string, number>()
    for (const kind of ['Pod', 'Node', 'Cluster', 'SecurityPolicy', 'PinnedDeployment']) byKind.set(kind, d.store.list(kind).length)
    for (const [k, n] of byKind) objectsGauge.set({ kind: k }, n)
    if (now - diskCache.at > 10_000) diskCache = { at: now, bytes: dirBytes(join(d.dataDir, 'db')) }
    storeBytes.set({}, diskCache.bytes)
    podsGauge.reset()
    clusterPods.reset()
    const local = new Map<string, number>()
    const all = new Map<string, number>()
    for (const p of d.store.list('Pod')) {
      const st = (p.status ?? {}) as Record<string, unknown>
      const phase = typeof st.phase === 'string' ? st.phase : 'Pending'
      all.set(phase, (all.get(phase) ?? 0) + 1)
      if (st.node === d.nodeName) local.set(phase, (local.get(phase) ?? 0) + 1)
    }
    for (const ph of ['Pending', 'Running', 'Succeeded', 'Failed']) {
      podsGauge.set({ phase: ph }, local.get(ph) ?? 0)
      clusterPods.set({ phase: ph }, all.get(ph) ?? 0)
    }
    for (const [ph, n] of local) podsGauge.set({ phase: ph }, n)
    for (const [ph, n] of all) clusterPods.set({ phase: ph }, n)
  })

  const seenUnits = new Set<string>()
  const replica = (d.store as { replicaId?: string }).replicaId
  const onChanged = (keys: string[]): void => {
    const now = d.now()
    for (const key of keys) {
      const [kind, ns, ...rest] = key.split('/')
      if (kind === undefined || ns === undefined || rest.length === 0) continue
      const obj = d.store.get({ kind, namespace: ns, name: rest.join('/') })
      if (obj === undefined) continue
      const writer = obj.metadata.revisionId?.split('.')[0]
      if (replica !== undefined && writer !== undefined && writer !== replica) {
        const t = Date.parse(obj.metadata.updatedAt)
        if (!Number.isNaN(t)) {
          const s = Math.max(0, now - t) / 1000
          if (s > 600) catchup.inc()
          else lag.observe({}, s)
        }
      }
      if (kind === 'Pod') observeUnits(obj)
    }
  }
  const observeUnits = (obj: { metadata: { uid: string }; status?: Record<string, unknown> }): void => {
    const st = obj.status ?? {}
    if (st.node !== d.nodeName || st.workflow === undefined) return
    let snap
    try {
      snap = parseWorkflowSnapshot(st.workflow)
    } catch {
      return
    }
    for (const u of snap.units) {
      if (u.kind !== 'unit' || u.startedAt === undefined || u.endedAt === undefined) continue
      if (u.state !== 'done' && u.state !== 'failed') continue
      const k = `${obj.metadata.uid}:${snap.id ?? snap.startedAt}:${u.name}`
      if (seenUnits.has(k)) continue
      if (seenUnits.size > 50_000) seenUnits.clear()
      seenUnits.add(k)
      unitDuration.observe({ unit: u.name, result: u.state }, Math.max(0, u.endedAt - u.startedAt) / 1000)
    }
  }

  // ---- peers ----
  function peerRows(): PeerRow[] {
    const mesh = d.mesh
    const pods = new Map<string, number>()
    for (const p of d.store.list('Pod')) {
      const n = (p.status as Record<string, unknown> | undefined)?.node
      if (typeof n === 'string') pods.set(n, (pods.get(n) ?? 0) + 1)
    }
    const versionOf = (name: string): string | null => {
      const v = (d.store.get({ kind: 'Node', namespace: '', name })?.status as Record<string, unknown> | undefined)?.version
      return typeof v === 'string' ? v : null
    }
    if (mesh === undefined) {
      return [{ name: d.nodeName, peerId: '', self: true, state: 'alive', path: 'self', latencyMs: null, lastSeen: d.now(), handshakeAt: null, addresses: [], version: d.version, pods: pods.get(d.nodeName) ?? 0 }]
    }
    const conns = new Map<string, { relayed: boolean; openedAt: number }>()
    for (const c of mesh.libp2p.getConnections()) {
      const id = c.remotePeer.toString()
      const relayed = c.limits !== undefined || c.remoteAddr.toString().includes('/p2p-circuit')
      const openedAt = c.timeline.open
      const cur = conns.get(id)
      // Prefer a direct connection over a relayed one; among equals the newest handshake.
      if (cur === undefined || (cur.relayed && !relayed) || (cur.relayed === relayed && openedAt > cur.openedAt)) conns.set(id, { relayed, openedAt })
    }
    return mesh
      .members()
      .map((m): PeerRow => {
        const c = conns.get(m.peerId)
        return {
          name: m.name,
          peerId: m.peerId,
          self: m.self,
          state: m.state,
          path: m.self ? 'self' : c === undefined ? 'gossip' : c.relayed ? 'relayed' : 'direct',
          latencyMs: m.self ? null : m.rttMs,
          lastSeen: m.self ? d.now() : m.lastSeen,
          handshakeAt: c?.openedAt ?? null,
          addresses: m.addresses,
          version: versionOf(m.name),
          pods: pods.get(m.name) ?? 0,
        }
      })
      .sort((a, b) => Number(b.self) - Number(a.self) || a.name.localeCompare(b.name))
  }

  // ---- doctor (the agent's part) ----
  async function clockSkews(): Promise<Array<{ peer: string; skewMs: number | null; error?: string }>> {
    const mesh = d.mesh
    if (mesh === undefined) return []
    const peers = mesh.members().filter((m) => !m.self && m.state === 'alive')
    return Promise.all(
      peers.map(async (m) => {
        const t0 = d.now()
        try {
          const r = await mesh.memberRequest(m.peerId, { method: 'GET', path: '/v1/clock' }, { timeoutMs: 5000 })
          const t1 = d.now()
          const remote = (r.body as { now?: unknown } | null)?.now
          if (r.status !== 200 || typeof remote !== 'number') return { peer: m.name, skewMs: null, error: `answered HTTP ${r.status} (an older orc without /v1/clock?)` }
          return { peer: m.name, skewMs: remote - (t0 + t1) / 2 }
        } catch (err) {
          return { peer: m.name, skewMs: null, error: (err as Error).message }
        }
      }),
    )
  }

  async function doctor(): Promise<Finding[]> {
    const out = await hostFindings(d.dataDir)
    out.push({ check: 'agent', status: 'ok', message: `agent ${d.nodeName} running (orc ${d.version}, pid ${process.pid})` })
    const mesh = d.mesh
    if (mesh !== undefined) {
      out.push({ check: 'ports', status: 'ok', message: `mesh listening on ${mesh.addresses().join(', ') || '<none>'}` })
      const dead = mesh.members().filter((m) => !m.self && m.state !== 'alive')
      for (const m of dead) {
        out.push({
          check: 'peers',
          status: 'warn',
          message: `${m.name} is ${m.state} (nothing heard ${m.lastSeen === null ? 'ever' : `for ${formatDuration(d.now() - m.lastSeen)}`})`,
          fix: `check that ${m.addresses[0] ?? 'its address'} is reachable on TCP from here, or remove it: orc node remove ${m.name}`,
        })
      }
      out.push(...clockFindings(await clockSkews()))
      const skewed = peerRows().filter((p) => !p.self && p.version !== null && p.version !== d.version)
      for (const p of skewed) {
        out.push({ check: 'versions', status: 'warn', message: `${p.name} runs orc ${p.version}, this node ${d.version}`, fix: 'upgrade every node to one version (re-run the install one-liner from an upgraded node)' })
      }
    } else {
      out.push({ check: 'ports', status: 'info', message: 'this agent runs without the mesh' })
    }
    const h = httpAddress()
    out.push(
      h !== undefined
        ? { check: 'ports', status: 'ok', message: `install and metrics listener on http://${h}` }
        : { check: 'ports', status: 'info', message: 'HTTP listener off (no install script, no /metrics)', fix: 'orc up --http-listen 0.0.0.0:7418' },
    )
    return out
  }

  // ---- API routes ----
  function wrap(base: ApiHandler): ApiHandler {
    return async (req) => {
      const path = req.path.split('?')[0]!
      const m = req.method.toUpperCase()
      const one = (k: string): string | undefined => {
        const v = req.query?.[k]
        return Array.isArray(v) ? v[v.length - 1] : v
      }
      try {
        if (m === 'GET' && path === '/v1/clock') return { status: 200, body: { now: d.now() } }
        if (m === 'GET' && path === '/v1/ops/metrics') return { status: 200, body: { text: metrics.render() } }
        if (m === 'GET' && path === '/v1/ops/doctor') return { status: 200, body: { findings: await doctor() } }
        if (m === 'GET' && path === '/v1/events') {
          const since = one('since')
          const limit = one('limit')
          const target = eventTarget(one('target'), one('namespace') || undefined)
          const events = await collectEvents(d.store, {
            ...target,
            since: since !== undefined ? Number(since) : undefined,
            limit: limit !== undefined ? Math.min(10_000, Math.max(1, Number(limit) || 500)) : undefined,
            namespace: target.ref === undefined ? one('namespace') || undefined : undefined,
          })
          return { status: 200, body: { events, now: d.now() } }
        }
      } catch (err) {
        const body = errorBody(err)
        return { status: httpStatusOf(body.error.code), body }
      }
      const res: ApiResponse = await base(req)
      if (m === 'GET' && path === '/v1/status' && res.status === 200 && res.body !== null && typeof res.body === 'object') {
        const h = httpAddress()
        ;(res.body as Record<string, unknown>).http = h === undefined ? null : { address: h }
        // In the status answer itself: one round trip, which matters for `orc --node` (a libp2p dial per call).
        ;(res.body as Record<string, unknown>).peers = peerRows()
      }
      return res
    }
  }

  // ---- HTTP listener ----
  function httpAddress(): string | undefined {
    return boundAddress
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
    nodeBinaryOk ??= process.platform !== 'linux'
      ? Promise.resolve(false)
      : run('ldd', [process.execPath]).then(
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
    if (p === '/metrics') return text(res, 200, metrics.render(), 'text/plain; version=0.0.4; charset=utf-8')
    if (p === '/healthz') return text(res, 200, 'ok\n')
    if (p === '/install.sh') {
      const host = (req.headers.host ?? '').trim()
      if (!/^[-A-Za-z0-9.:[\]]+$/.test(host)) return text(res, 400, 'missing or bad Host header\n')
      const pk = await servedPackage()
      const { host: hostname } = splitHostPort(host, 80)
      const port = meshPort()
      const peer = port === undefined ? '' : isIP(hostname) === 6 ? `[${hostname}]:${port}` : `${hostname}:${port}`
      const script = await renderInstallScript({
        server: `http://${host}`,
        version: d.version,
        peer,
        sha256: pk.sha256,
        nodeArch: (await canServeNode()) ? unameArch() : '',
        nodeVersion: process.versions.node,
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
      const size = statSync(process.execPath).size
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size })
      if (req.method === 'HEAD') return void res.end()
      createReadStream(process.execPath).pipe(res)
      return
    }
    return text(res, 404, 'not found: this node serves /install.sh, /metrics and /healthz\n')
  }

  async function listen(host: string, port: number): Promise<Server> {
    const s = createServer((req, res) => {
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

  return {
    metrics,
    wrap,
    httpAddress,
    peers: peerRows,
    async start() {
      unsubs.push(
        d.store.onChange((keys) => {
          const copy = [...keys]
          setImmediate(() => onChanged(copy))
        }),
      )
      const mesh = d.mesh
      if (mesh !== undefined) {
        const storeT = storeTopic(mesh.clusterId, 'cluster')
        const membersT = membersTopic(mesh.clusterId)
        const topicLabel = (t: string) => (t === storeT ? 'store' : t === membersT ? 'members' : 'other')
        unsubs.push(
          d.store.onLocalUpdate((u) => {
            gossipMessages.inc({ direction: 'out', topic: 'store' })
            gossipBytes.inc({ direction: 'out', topic: 'store' }, u.length)
          }),
        )
        const pubsub = mesh.libp2p.services.pubsub as unknown as EventTarget
        const onMessage = (e: Event): void => {
          const msg = (e as CustomEvent<{ topic?: string; data?: Uint8Array }>).detail
          const t = topicLabel(msg?.topic ?? '')
          gossipMessages.inc({ direction: 'in', topic: t })
          gossipBytes.inc({ direction: 'in', topic: t }, msg?.data?.length ?? 0)
        }
        pubsub.addEventListener('message', onMessage)
        unsubs.push(() => pubsub.removeEventListener('message', onMessage))
        unsubs.push(mesh.on('heartbeat', (h) => heartbeats.inc({ direction: h.direction, path: h.path })))
        unsubs.push(
          mesh.on('sync:done', (r) => {
            syncSessions.inc()
            syncBytes.inc({ direction: 'out' }, r.sentBytes ?? 0)
            syncBytes.inc({ direction: 'in' }, r.receivedBytes ?? 0)
          }),
        )
      }
      if (d.http !== undefined) {
        const want = parseHttpListen(d.http.listen)
        if (want !== undefined) {
          try {
            server = await listen(want.host, want.port)
          } catch (err) {
            const code = (err as NodeJS.ErrnoException).code
            if (d.http.explicit || code !== 'EADDRINUSE') {
              throw new OrcError('unavailable', `listen on ${d.http.listen} for HTTP: ${code ?? (err as Error).message} (choose another with --http-listen, or --http-listen off)`, {}, err)
            }
            // Several agents on one machine (tests, experiments): the default port goes to the first.
            server = await listen(want.host, 0)
            log.warn({ wanted: d.http.listen }, 'default HTTP port in use; serving install script and metrics on a free port instead')
          }
          const a = server.address()
          if (a !== null && typeof a === 'object') boundAddress = a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`
          log.info({ address: boundAddress }, 'http listener started (install.sh, /metrics)')
        }
      }
    },
    async stop() {
      for (const u of unsubs.splice(0)) u()
      const s = server
      server = undefined
      boundAddress = undefined
      if (s !== undefined) {
        await new Promise<void>((resolve) => {
          s.close(() => resolve())
          s.closeAllConnections()
        })
      }
    },
  }
}

