/**
 * Credential peers: the remote CLI dials with its credential key as its libp2p identity
 * (remote.ts), so Noise proves it holds that key and the node knows it by peer id before any
 * protocol. The gater lets such a peer in without a trial slot: a flood of strangers cannot starve
 * an operator. The keys are the cluster's admin keys, plus any a caller adds (users' keys, later).
 */
import { peerIdFromPublicKey } from '@libp2p/peer-id'
import { decodeAdminKey } from './cluster.ts'

/** The libp2p peer id of a credential public key (base64url protobuf, as in ClusterConfig.adminKeys). */
export function peerIdOfCredentialKey(key: string): string | undefined {
  try {
    return peerIdFromPublicKey(decodeAdminKey(key)).toString()
  } catch {
    return undefined
  }
}

/** Answers "is this peer id one of these credential keys?", recomputing only when the keys change. */
export class CredentialPeers {
  private lastKeys = ''
  private peers = new Set<string>()

  constructor(private readonly keys: () => readonly string[]) {}

  has(peerId: string): boolean {
    const keys = this.keys()
    const joined = keys.join('\n')
    if (joined !== this.lastKeys) {
      this.lastKeys = joined
      this.peers = new Set(keys.map(peerIdOfCredentialKey).filter((p): p is string => p !== undefined))
    }
    return this.peers.has(peerId)
  }
}
