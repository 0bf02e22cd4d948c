/**
 * `orc --node ADDR`: the same API calls as the unix-socket client, carried to a remote node over
 * the mesh's `/orc/api/1.0.0` protocol and signed with the operator's credential. libp2p is loaded
 * only when a command actually goes remote.
 */
import { existsSync, readFileSync } from 'node:fs'
import { errorOfResponse, OrcError } from '../model/index.ts'
import type { ClientRequest } from './client.ts'

/** What every command needs from a client: one API call. */
export interface ApiCaller {
  call<T = unknown>(method: string, path: string, req?: ClientRequest): Promise<T>
}

/** `--credential VALUE` or `ORC_CREDENTIAL`: the credential itself or a file holding it. */
export function readCredential(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  const v = flag ?? env.ORC_CREDENTIAL
  if (v === undefined || v.trim() === '') {
    throw new OrcError(
      'forbidden',
      "--node needs the cluster's admin credential: pass --credential (the credential or a file holding it) or set ORC_CREDENTIAL; get it with 'orc credential export' on the node that created the cluster",
    )
  }
  const s = v.trim()
  if (s.startsWith('orccred1.')) return s
  if (existsSync(s)) {
    try {
      return readFileSync(s, 'utf8').trim()
    } catch (err) {
      throw new OrcError('forbidden', `read credential file ${s}: ${(err as Error).message}`, {}, err)
    }
  }
  throw new OrcError('invalid', `credential ${JSON.stringify(s.slice(0, 20))}…: neither a credential (orccred1.…) nor a readable file`)
}

export class RemoteApiClient implements ApiCaller {
  constructor(
    readonly node: string,
    private readonly credentialText: string,
  ) {}

  async call<T = unknown>(method: string, path: string, req: ClientRequest = {}): Promise<T> {
    const { callRemoteApi, decodeRemoteCredential, resolvePeerAddress } = await import('../mesh/index.ts')
    const credential = decodeRemoteCredential(this.credentialText)
    const addrs = await resolvePeerAddress(this.node)
    const query: Record<string, string> = {}
    for (const [k, v] of Object.entries(req.query ?? {})) {
      if (v === undefined) continue
      query[k] = Array.isArray(v) ? v.join(',') : String(v)
    }
    const res = await callRemoteApi({ addrs, credential, req: { method, path, query, body: req.body } })
    if (res.status >= 400) throw errorOfResponse(res.status, res.body, `node ${this.node} answered ${res.status}`)
    return res.body as T
  }
}
