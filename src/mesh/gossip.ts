/**
 * Gossip topics and the membership message codec. Store updates travel as raw Replicable update
 * bytes on one topic per (cluster, scope); heartbeats and admission announcements share a members
 * topic. Everything decoded here is untrusted input.
 */
import { parseMemberInfo } from './join.ts'
import type { MemberInfo } from './membership.ts'
import { isRecord } from './wire.ts'

export function storeTopic(clusterId: string, scope: string): string {
  return `/orc/${clusterId}/store/${scope}/1`
}

export function membersTopic(clusterId: string): string {
  return `/orc/${clusterId}/members/1`
}

export const MAX_MEMBER_MESSAGE_BYTES = 64 * 1024

/**
 * Heartbeats sent straight to each connected member, one long-lived stream per connection, when a
 * node is connected to every member that is not dead (liveness.ts, heartbeat): then everyone hears it
 * directly, and gossip would only add copies (every member relays each heartbeat to its mesh peers,
 * ~0.6 of a core across 20 agents). Otherwise heartbeats go on the members topic as before.
 */
export const HEARTBEAT_PROTOCOL = '/orc/heartbeat/1.0.0'

export type MemberMessage = { t: 'hb'; name: string; addresses: string[]; seq: number } | { t: 'admit'; member: MemberInfo }

export function encodeMemberMessage(m: MemberMessage): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(m))
}

/** Undefined when the bytes are not a valid member message. */
export function decodeMemberMessage(b: Uint8Array): MemberMessage | undefined {
  if (b.length > MAX_MEMBER_MESSAGE_BYTES) return undefined
  let v: unknown
  try {
    v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(b))
  } catch {
    return undefined
  }
  if (!isRecord(v)) return undefined
  if (v.t === 'hb') {
    const info = parseMemberInfo({ peerId: 'x', name: v.name, addresses: v.addresses })
    if (info === undefined || typeof v.seq !== 'number' || !Number.isFinite(v.seq)) return undefined
    return { t: 'hb', name: info.name, addresses: info.addresses, seq: v.seq }
  }
  if (v.t === 'admit') {
    const member = parseMemberInfo(v.member)
    return member === undefined ? undefined : { t: 'admit', member }
  }
  return undefined
}
