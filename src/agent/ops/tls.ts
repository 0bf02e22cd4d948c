/**
 * The HTTPS identity of a node's install listener: a self-signed certificate made once, at the
 * first start, with `openssl` (key and certificate 0600 in DATA_DIR/tls). Nobody verifies it
 * against a CA; the install line pins its public key instead (`curl --pinnedpubkey sha256//…`).
 */

import { createHash, X509Certificate } from 'node:crypto'
import { chmod, mkdir, readFile, rename, rm } from 'node:fs/promises'
import { join } from 'node:path'
import type { CommandRunner } from '../../effects/index.ts'
import { OrcError } from '../../model/index.ts'

export interface TlsIdentity {
  key: Buffer
  cert: Buffer
  /** curl's pin of the certificate's public key: `sha256//` + base64 of the SPKI DER's sha256. */
  pin: string
}

export const TLS_DIR = 'tls'
const KEY_FILE = 'http-key.pem'
const CERT_FILE = 'http-cert.pem'

/** `sha256//BASE64` of a PEM certificate's public key, as `curl --pinnedpubkey` takes it. */
export function publicKeyPin(certPem: Buffer | string): string {
  const spki = new X509Certificate(certPem).publicKey.export({ type: 'spki', format: 'der' })
  return `sha256//${createHash('sha256').update(spki).digest('base64')}`
}

async function readIfExists(path: string): Promise<Buffer | undefined> {
  try {
    return await readFile(path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
}

/** The node's certificate and key, made on first use (P-256, self-signed, 100 years: the pin is what is checked). */
export async function ensureTlsIdentity(dataDir: string, run: CommandRunner, commonName = 'orc'): Promise<TlsIdentity> {
  const dir = join(dataDir, TLS_DIR)
  const keyPath = join(dir, KEY_FILE)
  const certPath = join(dir, CERT_FILE)
  let key = await readIfExists(keyPath)
  let cert = await readIfExists(certPath)
  if (key === undefined || cert === undefined) {
    await mkdir(dir, { recursive: true, mode: 0o700 })
    const tmpKey = `${keyPath}.new`
    const tmpCert = `${certPath}.new`
    const cn = commonName.replace(/[^-A-Za-z0-9_.]/g, '') || 'orc'
    const r = await run('openssl', [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '36500',
      '-subj',
      `/CN=${cn}`,
      '-keyout',
      tmpKey,
      '-out',
      tmpCert,
      '-batch',
    ])
    if (r.exitCode !== 0) {
      await rm(tmpKey, { force: true })
      await rm(tmpCert, { force: true })
      const why = r.exitCode === 127 ? 'openssl is not installed (apt install openssl)' : r.stderr.trim().split('\n').pop()
      throw new OrcError('unavailable', `make the HTTPS certificate of the install listener: ${why}`)
    }
    await chmod(tmpKey, 0o600)
    await chmod(tmpCert, 0o600)
    await rename(tmpCert, certPath)
    await rename(tmpKey, keyPath)
    key = await readFile(keyPath)
    cert = await readFile(certPath)
  }
  try {
    return { key, cert, pin: publicKeyPin(cert) }
  } catch (err) {
    throw new OrcError('corrupt', `read the HTTPS certificate ${certPath}: ${(err as Error).message} (remove ${dir} to make a new one)`, {}, err)
  }
}
