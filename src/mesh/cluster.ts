/**
 * Cluster files in the data dir: `cluster.json` (id, admin public keys), `swarm.key` (PSK), and the
 * admin credential handed to the operator at cluster creation. Nodes keep only the admin *public*
 * key; the operator keeps the private key and signs remote API requests with it (see rpc.ts).
 */
import { join } from 'node:path'
import { generateKeyPairFromSeed, privateKeyFromProtobuf, privateKeyToProtobuf, publicKeyFromProtobuf, publicKeyToProtobuf } from '@libp2p/crypto/keys'
import type { PrivateKey, PublicKey } from '@libp2p/interface'
import type { Random } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import { readFileIfExists, writeFileAtomic } from './fsutil.ts'
import { generatePskKey, loadPsk, savePsk } from './psk.ts'

export const CLUSTER_FILE = 'cluster.json'
const CREDENTIAL_PREFIX = 'orcadmin1.'

export interface ClusterConfig {
  clusterId: string
  createdAt: number
  /** Admin public keys (base64url protobuf) allowed to use the remote API. */
  adminKeys: string[]
}

export interface ClusterState extends ClusterConfig {
  /** Raw 32-byte pre-shared key. */
  psk: Uint8Array
}

export function b64url(b: Uint8Array): string {
  return Buffer.from(b).toString('base64url')
}
export function fromB64url(s: string): Uint8Array {
  return new Uint8Array(Buffer.from(s, 'base64url'))
}

export function newClusterId(random: Random): string {
  return Buffer.from(random(16)).toString('hex')
}

/** Create a new cluster in `dataDir` (`orc up`): id, PSK, admin key. Refuses if one exists. */
export async function initCluster(opts: { dataDir: string; random: Random; now: number; clusterId?: string }): Promise<{
  cluster: ClusterState
  adminCredential: string
}> {
  if ((await loadCluster(opts.dataDir)) !== undefined) {
    throw new OrcError('conflict', `data dir ${opts.dataDir} already belongs to a cluster`, { dataDir: opts.dataDir })
  }
  const admin = await generateKeyPairFromSeed('Ed25519', opts.random(32))
  const cluster: ClusterState = {
    clusterId: opts.clusterId ?? newClusterId(opts.random),
    createdAt: opts.now,
    adminKeys: [b64url(publicKeyToProtobuf(admin.publicKey))],
    psk: generatePskKey(opts.random),
  }
  await saveCluster(opts.dataDir, cluster)
  return { cluster, adminCredential: encodeAdminCredential(admin) }
}

export async function saveCluster(dataDir: string, c: ClusterState): Promise<void> {
  await savePsk(dataDir, c.psk)
  const cfg: ClusterConfig = { clusterId: c.clusterId, createdAt: c.createdAt, adminKeys: c.adminKeys }
  await writeFileAtomic(join(dataDir, CLUSTER_FILE), JSON.stringify(cfg, null, 2) + '\n', 0o600)
}

export async function loadCluster(dataDir: string): Promise<ClusterState | undefined> {
  const path = join(dataDir, CLUSTER_FILE)
  const buf = await readFileIfExists(path)
  if (buf === undefined) return undefined
  let cfg: ClusterConfig
  try {
    cfg = JSON.parse(buf.toString('utf8'))
    if (typeof cfg.clusterId !== 'string' || !Array.isArray(cfg.adminKeys)) throw new Error('missing fields')
  } catch (err) {
    throw new OrcError('corrupt', `read cluster config ${path}: ${(err as Error).message}`, { path }, err)
  }
  const psk = await loadPsk(dataDir)
  if (psk === undefined) throw new OrcError('corrupt', `cluster config ${path} has no pre-shared key beside it`, { path })
  return { ...cfg, psk }
}

export function encodeAdminCredential(key: PrivateKey): string {
  return CREDENTIAL_PREFIX + b64url(privateKeyToProtobuf(key))
}

export function decodeAdminCredential(s: string): PrivateKey {
  if (!s.startsWith(CREDENTIAL_PREFIX)) throw new OrcError('invalid', 'admin credential is malformed (expected orcadmin1.…)')
  try {
    return privateKeyFromProtobuf(fromB64url(s.slice(CREDENTIAL_PREFIX.length)))
  } catch (err) {
    throw new OrcError('invalid', 'admin credential is malformed (bad key)', {}, err)
  }
}

/** A new user key pair (`orc user add`, `rotate`): the private half as a key credential, the public half as stored. */
export async function newUserKey(random: Random): Promise<{ keyCredential: string; publicKey: string }> {
  const key = await generateKeyPairFromSeed('Ed25519', random(32))
  return { keyCredential: encodeAdminCredential(key), publicKey: b64url(publicKeyToProtobuf(key.publicKey)) }
}

/** The public key (as stored and as the remote API presents it) of a key credential (`orcadmin1.…`). */
export function publicKeyOfCredential(keyCredential: string): string {
  return b64url(publicKeyToProtobuf(decodeAdminCredential(keyCredential).publicKey))
}

export function decodeAdminKey(s: string): PublicKey {
  return publicKeyFromProtobuf(fromB64url(s))
}
