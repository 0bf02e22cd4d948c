/** Options of the node's HTTP listener; light (no libp2p), so the CLI can check flags cheaply. */
import { isIP } from 'node:net'
import { OrcError } from '../../model/index.ts'

/** Default port of the node's HTTP listener (install script, package, /metrics): one below the mesh's 7419. */
export const DEFAULT_HTTP_PORT = 7418
/**
 * `mesh`: port 7418 on each address the mesh advertises to peers (its listen addresses, or the
 * interface addresses of a wildcard listen minus orc's own pod and WireGuard ranges), never
 * 0.0.0.0: the listener is not offered to networks the node does not mesh on. `--http-listen
 * 0.0.0.0:7418` widens it.
 */
export const DEFAULT_HTTP_LISTEN = 'mesh'

export interface HttpListenOption {
  /** `mesh`, `mesh:PORT`, `ip:port`, `[v6]:port` or `off`; port 0 picks a free port. */
  listen: string
  /** Given by the user: a busy port is an error. Otherwise the node falls back to a free port. */
  explicit?: boolean
}

/** Where to listen: one address, or (`mesh`) every address of the mesh, on `port`. */
export type HttpListenAddress = { host: string; port: number; mesh?: undefined } | { mesh: true; port: number; host?: undefined }

/** `off` → undefined; `mesh[:port]`, `ip:port` / `[v6]:port` checked. One clear error for anything else. */
export function parseHttpListen(text: string): HttpListenAddress | undefined {
  const s = text.trim()
  if (s === 'off' || s === 'none') return undefined
  const bad = () =>
    new OrcError(
      'invalid',
      `--http-listen ${JSON.stringify(text)}: give mesh (the mesh's addresses), an IP address and port (like 10.0.0.1:${DEFAULT_HTTP_PORT}, [::]:${DEFAULT_HTTP_PORT} or 0.0.0.0:${DEFAULT_HTTP_PORT}) or off`,
    )
  const mesh = /^mesh(?::([0-9]+))?$/.exec(s)
  if (mesh) {
    const port = mesh[1] === undefined ? DEFAULT_HTTP_PORT : Number(mesh[1])
    if (port > 65535) throw bad()
    return { mesh: true, port }
  }
  const m = /^\[([^\]]+)\]:([0-9]+)$/.exec(s) ?? /^([^:]+):([0-9]+)$/.exec(s)
  if (!m || isIP(m[1]!) === 0) throw bad()
  const port = Number(m[2])
  if (port > 65535) throw bad()
  return { host: m[1]!, port }
}
