/** GET over HTTPS from a node's self-signed listener, checking its key against the pin (as curl --pinnedpubkey does). */
import { createHash } from 'node:crypto'
import { request } from 'node:https'
import type { TLSSocket } from 'node:tls'

export async function httpsGetPinned(url: string, pin: string): Promise<{ status: number; headers: Record<string, string | undefined>; body: string }> {
  return await new Promise((resolve, reject) => {
    const req = request(url, { rejectUnauthorized: false, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: Object.fromEntries(Object.entries(res.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : v])),
          body: Buffer.concat(chunks).toString('utf8'),
        }),
      )
      res.on('error', reject)
    })
    req.on('socket', (s) =>
      (s as TLSSocket).once('secureConnect', () => {
        const spki = (s as TLSSocket).getPeerX509Certificate()?.publicKey.export({ type: 'spki', format: 'der' })
        const got = spki === undefined ? '' : `sha256//${createHash('sha256').update(spki).digest('base64')}`
        if (got !== pin) req.destroy(new Error(`${url}: certificate key ${got} does not match the pin ${pin}`))
      }),
    )
    req.on('error', reject)
    req.end()
  })
}
