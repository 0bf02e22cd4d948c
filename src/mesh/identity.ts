/** The node's libp2p identity: an Ed25519 key kept in the data dir (mode 0600). */
import { join } from 'node:path'
import { generateKeyPairFromSeed, privateKeyFromProtobuf, privateKeyToProtobuf } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import type { Random } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import { readFileIfExists, writeFileAtomic } from './fsutil.ts'

export const IDENTITY_FILE = 'peer.key'

export async function generateIdentity(random: Random): Promise<PrivateKey> {
  return generateKeyPairFromSeed('Ed25519', random(32))
}

/** Load the node key from `<dataDir>/peer.key`, creating it on first start. */
export async function loadOrCreateIdentity(dataDir: string, random: Random): Promise<PrivateKey> {
  const path = join(dataDir, IDENTITY_FILE)
  const existing = await readFileIfExists(path)
  if (existing !== undefined) {
    try {
      return privateKeyFromProtobuf(new Uint8Array(existing))
    } catch (err) {
      throw new OrcError('corrupt', `read node identity ${path}: not a libp2p private key`, { path }, err)
    }
  }
  const key = await generateIdentity(random)
  await writeFileAtomic(path, privateKeyToProtobuf(key), 0o600)
  return key
}

export function peerIdOf(key: PrivateKey): string {
  return peerIdFromPrivateKey(key).toString()
}
