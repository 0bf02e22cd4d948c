/**
 * Connection gater: only admitted members get a connection, plus — while a join is open (token.ts) — a
 * bounded number of strangers on probation, who may use only the join (and, if enabled, the api)
 * protocol and are closed when probation ends. Banned peers are refused outright.
 */
import type { ConnectionGater, PeerId } from '@libp2p/interface'

export interface GatePolicy {
  isMember(peerId: string): boolean
  isBanned(peerId: string): boolean
  /** Peers we may dial although they are not members yet (the issuer, while we join). */
  mayDial(peerId: string): boolean
  /** True while a stranger could join (a live token exists) or strangers may use the api. */
  acceptsStrangers(): boolean | Promise<boolean>
  /** Try to take a probation slot for a stranger; false when all slots are taken. */
  startProbation(peerId: string): boolean
}

export type GateDecision = 'allow' | 'probation' | 'deny'

/** The inbound decision, as a pure function of the policy. */
export async function decideInbound(policy: GatePolicy, peerId: string): Promise<GateDecision> {
  if (policy.isBanned(peerId)) return 'deny'
  if (policy.isMember(peerId)) return 'allow'
  if (!(await policy.acceptsStrangers())) return 'deny'
  return policy.startProbation(peerId) ? 'probation' : 'deny'
}

export function decideOutbound(policy: GatePolicy, peerId: string): GateDecision {
  if (policy.isBanned(peerId)) return 'deny'
  if (policy.isMember(peerId) || policy.mayDial(peerId)) return 'allow'
  return 'deny'
}

export function createGater(policy: GatePolicy): ConnectionGater {
  return {
    denyDialPeer: (peer: PeerId) => decideOutbound(policy, peer.toString()) === 'deny',
    denyOutboundEncryptedConnection: (peer: PeerId) => decideOutbound(policy, peer.toString()) === 'deny',
    denyInboundEncryptedConnection: async (peer: PeerId) => (await decideInbound(policy, peer.toString())) === 'deny',
  }
}
