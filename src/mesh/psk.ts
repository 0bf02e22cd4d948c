/**
 * The cluster's pre-shared key (libp2p private network, XSalsa20 over every connection): 32 random
 * bytes, stored in the libp2p v1 swarm-key text format in `<dataDir>/swarm.key` (mode 0600).
 */
import { join } from 'node:path'
import type { Random } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import { readFileIfExists, writeFileAtomic } from './fsutil.ts'

export const PSK_FILE = 'swarm.key'
const HEADER = '/key/swarm/psk/1.0.0/\n/base16/\n'

export function generatePskKey(random: Random): Uint8Array {
  return random(32)
}

/** Raw 32-byte key → swarm-key text bytes as `@libp2p/pnet` expects. */
export function encodePsk(raw: Uint8Array): Uint8Array {
  if (raw.length !== 32) throw new OrcError('invalid', `pre-shared key must be 32 bytes, got ${raw.length}`)
  return new TextEncoder().encode(HEADER + Buffer.from(raw).toString('hex'))
}

/** Swarm-key text bytes → raw 32-byte key. */
export function decodePsk(text: Uint8Array): Uint8Array {
  const s = new TextDecoder().decode(text).trim()
  const m = /^\/key\/swarm\/psk\/1\.0\.0\/\s*\n\/base16\/\s*\n([0-9a-fA-F]{64})$/.exec(s)
  if (m === null) throw new OrcError('corrupt', 'pre-shared key is not a v1 base16 swarm key')
  return new Uint8Array(Buffer.from(m[1], 'hex'))
}

export async function savePsk(dataDir: string, raw: Uint8Array): Promise<void> {
  await writeFileAtomic(join(dataDir, PSK_FILE), encodePsk(raw), 0o600)
}

export async function loadPsk(dataDir: string): Promise<Uint8Array | undefined> {
  const path = join(dataDir, PSK_FILE)
  const buf = await readFileIfExists(path)
  if (buf === undefined) return undefined
  try {
    return decodePsk(new Uint8Array(buf))
  } catch (err) {
    throw new OrcError('corrupt', `read pre-shared key ${path}: not a v1 base16 swarm key`, { path }, err)
  }
}
