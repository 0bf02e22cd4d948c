/**
 * Remote CLI access (`orc --node ADDR …`). The operator's credential carries the cluster id, the
 * cluster PSK and the admin private key: `orccred1.<base64url JSON>`. The CLI builds a short-lived
 * libp2p host with that PSK (so it passes the private-network handshake) whose identity is the
 * credential key itself, so Noise proves the key and the node's gater knows the caller by peer id
 * (credential-peers.ts): it never takes a trial slot, however many strangers fill them. It calls
 * `/orc/api/1.0.0` signed with the same key (rpc.ts; a different message from Noise's, under its
 * own context string); without a valid admin signature every request is refused.
 */

import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import type { PrivateKey } from '@libp2p/interface'
import { preSharedKey } from '@libp2p/pnet'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'
import { OrcError } from '../model/index.ts'
import { type ClusterState, decodeAdminCredential, encodeAdminCredential } from './cluster.ts'
import { shortError } from './deadline.ts'
import { streamChannel } from './host.ts'
import { meshDefaults } from './options.ts'
import { encodePsk } from './psk.ts'
import { API_PROTOCOL, type ApiRequest, type ApiResponse, callApi } from './rpc.ts'

const PREFIX = 'orccred1.'
/** Why a node refuses the remote CLI's connection (its gater knows admin keys' peer ids only). */
const REFUSED = 'the credential is for another cluster, or its key belongs to no user of this cluster'

export interface RemoteCredential {
  clusterId: string
  psk: Uint8Array
  /** The user's private key (the field keeps its first name: a credential from before users is the admin's). */
  admin: PrivateKey
  /** The user the key belongs to (`admin` in a credential from before users). */
  user: string
}

export function encodeRemoteCredential(cluster: Pick<ClusterState, 'clusterId' | 'psk'>, keyCredential: string, user = 'admin'): string {
  decodeAdminCredential(keyCredential) // refuse to wrap garbage
  const body = { v: 1, cluster: cluster.clusterId, psk: Buffer.from(cluster.psk).toString('hex'), admin: keyCredential, user }
  return PREFIX + Buffer.from(JSON.stringify(body)).toString('base64url')
}

export function decodeRemoteCredential(text: string): RemoteCredential {
  const s = text.trim()
  const bad = (why: string) =>
    new OrcError('invalid', `credential is malformed (${why}); get one with 'orc user add' (or 'orc credential export' for the admin)`)
  if (!s.startsWith(PREFIX)) throw bad('expected orccred1.…')
  let c: any
  try {
    c = JSON.parse(Buffer.from(s.slice(PREFIX.length), 'base64url').toString('utf8'))
  } catch {
    throw bad('not base64url JSON')
  }
  if (c === null || typeof c !== 'object' || c.v !== 1 || typeof c.cluster !== 'string' || typeof c.admin !== 'string') throw bad('missing fields')
  if (typeof c.psk !== 'string' || !/^[0-9a-f]{64}$/.test(c.psk)) throw bad('bad key')
  const user = typeof c.user === 'string' && c.user !== '' ? c.user : 'admin'
  return { clusterId: c.cluster, psk: new Uint8Array(Buffer.from(c.psk, 'hex')), admin: decodeAdminCredential(c.admin), user }
}

export { encodeAdminCredential }

/**
 * One API call to the node at `addrs` (multiaddrs without /p2p, tried in order). The answer is the
 * node's `{status, body}`; a refused credential is an OrcError('forbidden').
 */
export async function callRemoteApi(opts: {
  addrs: string[]
  credential: RemoteCredential
  req: ApiRequest
  timeoutMs?: number
  dialTimeoutMs?: number
}): Promise<ApiResponse> {
  const dialTimeoutMs = opts.dialTimeoutMs ?? meshDefaults.dialTimeoutMs
  const node = await createLibp2p({
    privateKey: opts.credential.admin,
    addresses: { listen: [] },
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    connectionProtector: preSharedKey({ psk: encodePsk(opts.credential.psk), timeout: dialTimeoutMs }),
    connectionManager: { dialTimeout: dialTimeoutMs, reconnectRetries: 0 },
  })
  try {
    const errors: string[] = []
    for (const a of opts.addrs) {
      let conn
      try {
        conn = await node.dial(multiaddr(a), { signal: AbortSignal.timeout(dialTimeoutMs) })
      } catch (err) {
        const why = shortError(err)
        errors.push(`${a}: ${/EOF|reset|closed|aborted|handshake|decrypt/i.test(why) ? `connection refused during the handshake (${REFUSED})` : why}`)
        continue
      }
      const signal = AbortSignal.timeout(opts.timeoutMs ?? meshDefaults.apiTimeoutMs)
      let stream
      try {
        stream = await conn.newStream(API_PROTOCOL, { signal })
      } catch (err) {
        // The node's gater may close the connection just after the dialer's side of the handshake
        // completed: then it is the stream that fails.
        const why = shortError(err)
        errors.push(
          `${a}: ${!(err instanceof Error) || /EOF|reset|closed|aborted/i.test(why) ? `the node closed the connection (${REFUSED})` : `open api stream: ${why}`}`,
        )
        continue
      }
      const ch = streamChannel(stream, meshDefaults.maxApiBytes)
      const onAbort = () => ch.abort(new Error('api call timed out'))
      signal.addEventListener('abort', onAbort, { once: true })
      try {
        return await callApi(ch, opts.req, opts.credential.admin, conn.remotePeer.toString())
      } catch (err) {
        if (err instanceof OrcError && err.details.remote === true) throw err
        if (err instanceof OrcError && err.code === 'forbidden') throw err
        // A stranger's connection (a key of no user, let in on trial while a token is live) gets no API stream.
        if (/closed the stream before api challenge|stream has been reset/i.test(shortError(err))) {
          throw new OrcError('forbidden', `api call to ${a}: the node closed the connection (${REFUSED})`, { node: a }, err)
        }
        throw new OrcError('unavailable', `api call to ${a}: ${shortError(err)}`, { node: a }, err)
      } finally {
        signal.removeEventListener('abort', onAbort)
      }
    }
    throw new OrcError('unavailable', `connect to ${errors.join('; ')}`, { addrs: opts.addrs })
  } finally {
    await Promise.resolve(node.stop()).catch(() => undefined)
  }
}
