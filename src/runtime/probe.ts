/**
 * TCP and HTTP probes of a running container, made from inside its network namespace: a pod
 * without the node network has a namespace of its own holding only loopback, which nothing on the
 * host can reach, and a pod with one answers on its IPv6 address there too. The agent runs a short
 * node process in the namespace (`nsenter --net`) that connects, asks and prints one JSON line.
 */
import { execFile } from 'node:child_process'
import { readlinkSync } from 'node:fs'
import { descendants } from './procfs.ts'

export interface NetProbeSpec {
  tcpSocket?: { port: number }
  httpGet?: { path?: string; port: number; scheme?: 'HTTP' | 'HTTPS'; httpHeaders?: { name: string; value: string }[] }
}

export interface NetProbeResult {
  ok: boolean
  output: string
}

export interface NetProbeOptions {
  /** The namespace to enter: `/run/netns/orc-…` or `/proc/PID/ns/net`. */
  netns: string
  /** Addresses to try in order (the next only when the previous refuses): the pod's IPv6, loopback. */
  hosts: string[]
  /** What the connect and the request may take (timeoutSeconds). */
  timeoutMs: number
  /** Beyond it, what starting the helper in the namespace may take (a loaded node is slow to start node). */
  startAllowanceMs?: number
  signal?: AbortSignal
  nsenterPath?: string
  nodePath?: string
}

function netnsId(pid: number | 'self'): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/net`)
  } catch {
    return undefined
  }
}

/**
 * The network namespace a container runs in: `/proc/PID/ns/net` of the first process under its
 * supervisor (`pid`) whose namespace is not the agent's. Undefined when none is found (it ended).
 */
export function containerNetnsOf(pid: number): string | undefined {
  const own = netnsId('self')
  for (const p of [pid, ...descendants(pid)]) {
    const ns = netnsId(p)
    if (ns !== undefined && ns !== own) return `/proc/${p}/ns/net`
  }
  return undefined
}

// Runs inside the namespace: plain node, no project code. argv[1] is the request as JSON.
const CHILD = String.raw`
const req = JSON.parse(process.argv[1])
setTimeout(() => done(false, 'timed out after ' + req.timeoutMs / 1000 + 's'), req.timeoutMs)
const done = (ok, output) => { process.stdout.write(JSON.stringify({ ok, output: String(output).slice(0, 300) }) + '\n'); process.exit(0) }
const net = require('node:net')
const hostText = (h) => (h.includes(':') ? '[' + h + ']' : h) + ':' + req.port
const attempt = (i, lastErr) => {
  if (i >= req.hosts.length) return done(false, lastErr)
  const host = req.hosts[i]
  const next = (err) => ['ECONNREFUSED', 'EADDRNOTAVAIL', 'ENETUNREACH', 'EAFNOSUPPORT'].includes(err.code) ? attempt(i + 1, 'connect ' + hostText(host) + ': ' + (err.code || err.message)) : done(false, 'connect ' + hostText(host) + ': ' + (err.code || err.message))
  if (req.kind === 'tcp') {
    const s = net.connect({ host, port: req.port })
    s.once('connect', () => { s.destroy(); done(true, 'connected to ' + hostText(host)) })
    s.once('error', next)
    return
  }
  const mod = require(req.scheme === 'HTTPS' ? 'node:https' : 'node:http')
  const headers = { 'User-Agent': 'orc-probe/1', Accept: '*/*' }
  for (const h of req.headers) headers[h.name] = h.value
  const r = mod.request({ host, port: req.port, path: req.path, method: 'GET', headers, rejectUnauthorized: false }, (res) => {
    let body = ''
    res.setEncoding('utf8')
    res.on('data', (d) => { if (body.length < 200) body += d })
    res.on('end', () => {
      const code = res.statusCode || 0
      const text = body.trim().replace(/\s+/g, ' ').slice(0, 100)
      done(code >= 200 && code < 400, 'HTTP ' + code + (code >= 400 && text ? ': ' + text : ''))
    })
    res.on('error', (err) => done(false, 'HTTP ' + code + ': ' + err.message))
  })
  r.once('error', next)
  r.end()
}
attempt(0, 'no address to probe')
`

/** One TCP or HTTP probe from inside `opts.netns`. Never rejects: a failure is `{ ok: false, output }`. */
export function probeInNetns(spec: NetProbeSpec, opts: NetProbeOptions): Promise<NetProbeResult> {
  const req = spec.httpGet
    ? {
        kind: 'http',
        port: spec.httpGet.port,
        path: spec.httpGet.path || '/',
        scheme: spec.httpGet.scheme ?? 'HTTP',
        headers: spec.httpGet.httpHeaders ?? [],
        hosts: opts.hosts,
        timeoutMs: opts.timeoutMs,
      }
    : { kind: 'tcp', port: spec.tcpSocket?.port ?? 0, hosts: opts.hosts, timeoutMs: opts.timeoutMs }
  const isRoot = process.getuid?.() === 0
  // An unprivileged agent owns the user namespace bwrap made: it enters that one first.
  const enter = isRoot ? [`--net=${opts.netns}`] : [`--user=${opts.netns.replace(/net$/, 'user')}`, `--net=${opts.netns}`, '--preserve-credentials']
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' }
  return new Promise((resolve) => {
    execFile(
      opts.nsenterPath ?? 'nsenter',
      [...enter, '--', opts.nodePath ?? process.execPath, '-e', CHILD, JSON.stringify(req)],
      {
        timeout: opts.timeoutMs + (opts.startAllowanceMs ?? 5_000),
        killSignal: 'SIGKILL',
        env,
        maxBuffer: 64 * 1024,
        ...(opts.signal ? { signal: opts.signal } : {}),
      },
      (err, stdout, stderr) => {
        const line = String(stdout).trim().split('\n').pop() ?? ''
        try {
          const r = JSON.parse(line) as NetProbeResult
          if (typeof r.ok === 'boolean' && typeof r.output === 'string') return resolve(r)
        } catch {}
        const e = err as (NodeJS.ErrnoException & { killed?: boolean }) | null
        if (e?.killed || e?.name === 'AbortError')
          return resolve({ ok: false, output: `no answer from the probe helper within ${(opts.timeoutMs + (opts.startAllowanceMs ?? 5_000)) / 1000}s` })
        const why = String(stderr).trim().split('\n').pop() || e?.message || 'no answer'
        resolve({ ok: false, output: `probe could not run: ${why}` })
      },
    )
  })
}
