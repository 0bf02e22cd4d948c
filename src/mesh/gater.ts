/**
 * Connection gaters, the first check on every connection, before any protocol runs.
 *
 * The mesh host's (`createGater`):
 * - removed peers (removed.ts) are refused forever, both ways, whatever they hold;
 * - banned peers are refused while the ban lasts;
 * - members get a connection, and so do credential peers (the remote CLI, known by the peer id of
 *   its credential key: credential-peers.ts);
 * - anyone else is refused (`acceptsStrangers` is false for the mesh host) — joiners go to the
 *   join host, where strangers get a trial ("probation") connection while a join is open (a live
 *   token, token.ts) and a slot is free: bounded in total and per source address (admission.ts).
 *
 * The join host's (`createJoinGater`, join.ts) and a joiner's temporary host's (`createJoinerGater`)
 * are below.
 */
import type { ConnectionGater, MultiaddrConnection, PeerId } from '@libp2p/interface'

export interface GatePolicy {
  /** Removed from the cluster: refused before anything else. */
  isRemoved(peerId: string): boolean
  isMember(peerId: string): boolean
  /** The remote CLI, dialing with a credential key of this cluster as its identity. */
  isCredentialPeer(peerId: string): boolean
  isBanned(peerId: string): boolean
  /** Peers we may dial although they are not members yet (the issuer, while we join). */
  mayDial(peerId: string): boolean
  /** True while a stranger could join (a live token exists). */
  acceptsStrangers(): boolean | Promise<boolean>
  /** Try to take a trial slot for a stranger from `source` (its IP address); false when refused. */
  startProbation(peerId: string, source: string): boolean
}

export type GateDecision = 'allow' | 'probation' | 'deny'

/** The inbound decision, as a pure function of the policy. `source` is the remote IP address. */
export async function decideInbound(policy: GatePolicy, peerId: string, source = ''): Promise<GateDecision> {
  if (policy.isRemoved(peerId)) return 'deny'
  if (policy.isBanned(peerId)) return 'deny'
  if (policy.isMember(peerId) || policy.isCredentialPeer(peerId)) return 'allow'
  if (!(await policy.acceptsStrangers())) return 'deny'
  return policy.startProbation(peerId, source) ? 'probation' : 'deny'
}

export function decideOutbound(policy: GatePolicy, peerId: string): GateDecision {
  if (policy.isRemoved(peerId)) return 'deny'
  if (policy.isBanned(peerId)) return 'deny'
  if (policy.isMember(peerId) || policy.mayDial(peerId)) return 'allow'
  return 'deny'
}

/** The IP address a connection comes from ('' when it is not an IP transport). */
export function sourceAddress(maConn: Pick<MultiaddrConnection, 'remoteAddr'> | undefined): string {
  const m = /^\/(?:ip4|ip6|dns4|dns6|dns)\/([^/]+)/.exec(maConn?.remoteAddr?.toString() ?? '')
  return m?.[1] ?? ''
}

export function createGater(policy: GatePolicy): ConnectionGater {
  return {
    denyDialPeer: (peer: PeerId) => decideOutbound(policy, peer.toString()) === 'deny',
    denyOutboundEncryptedConnection: (peer: PeerId) => decideOutbound(policy, peer.toString()) === 'deny',
    denyInboundEncryptedConnection: async (peer: PeerId, maConn: MultiaddrConnection) =>
      (await decideInbound(policy, peer.toString(), sourceAddress(maConn))) === 'deny',
    // A removal that arrives while a connection is being upgraded: refused at the last step too.
    denyInboundUpgradedConnection: (peer: PeerId) => policy.isRemoved(peer.toString()),
    denyOutboundUpgradedConnection: (peer: PeerId) => policy.isRemoved(peer.toString()),
  }
}

/** What the join host's gater asks (join.ts): the join window and the trial limits of admission.ts. */
export type JoinGatePolicy = Pick<GatePolicy, 'isRemoved' | 'isBanned' | 'acceptsStrangers' | 'startProbation'>

/**
 * The join host's gater: it dials nobody; it lets a peer in only while a join is open (a live
 * token, or one that stopped being live within the grace) and a trial slot is free for its source
 * address — never a removed or banned peer, whoever it is.
 */
export function createJoinGater(policy: JoinGatePolicy): ConnectionGater {
  const inbound = async (peerId: string, source: string): Promise<boolean> => {
    if (policy.isRemoved(peerId) || policy.isBanned(peerId)) return false
    if (!(await policy.acceptsStrangers())) return false
    return policy.startProbation(peerId, source)
  }
  return {
    denyDialPeer: () => true,
    denyDialMultiaddr: () => true,
    denyInboundEncryptedConnection: async (peer: PeerId, maConn: MultiaddrConnection) => !(await inbound(peer.toString(), sourceAddress(maConn))),
    denyInboundUpgradedConnection: (peer: PeerId) => policy.isRemoved(peer.toString()),
  }
}

/** A joiner's temporary host (join.ts) dials the token's issuer and nobody else, and takes no connection. */
export function createJoinerGater(issuer: string): ConnectionGater {
  return {
    denyDialPeer: (peer: PeerId) => peer.toString() !== issuer,
    denyOutboundEncryptedConnection: (peer: PeerId) => peer.toString() !== issuer,
    denyInboundConnection: () => true,
  }
}
