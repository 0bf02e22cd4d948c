/** Options of the node's HTTP listener; light (no libp2p), so the CLI can check flags cheaply. */
import { isIP } from 'node:net'
import { OrcError } from '../../model/index.ts'

/** Default port of the node's HTTP listener (install script, package, /metrics): one below the mesh's 7419. */
export const DEFAULT_HTTP_PORT = 7418
export const DEFAULT_HTTP_LISTEN = `0.0.0.0:${DEFAULT_HTTP_PORT}`

export interface HttpListenOption {
  /** `ip:port`, `[v6]:port` or `off`; port 0 picks a free port. */
  listen: string
  /** Given by the user: a busy port is an error. Otherwise the node falls back to a free port. */
  explicit?: boolean
}

/** `off` → undefined; `ip:port` / `[v6]:port` checked. One clear error for anything else. */
export function parseHttpListen(text: string): { host: string; port: number } | undefined {
  const s = text.trim()
  if (s === 'off' || s === 'none') return undefined
  const bad = () =>
    new OrcError(
      'invalid',
      `--http-listen ${JSON.stringify(text)}: give an IP address and port (like ${DEFAULT_HTTP_LISTEN} or [::]:${DEFAULT_HTTP_PORT}) or off`,
    )
  const m = /^\[([^\]]+)\]:([0-9]+)$/.exec(s) ?? /^([^:]+):([0-9]+)$/.exec(s)
  if (!m || isIP(m[1]!) === 0) throw bad()
  const port = Number(m[2])
  if (port > 65535) throw bad()
  return { host: m[1]!, port }
}
