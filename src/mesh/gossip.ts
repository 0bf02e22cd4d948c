/**
 * Gossip topics and the membership message codec. Store updates travel as raw Replicable update
 * bytes on one topic per (cluster, scope); heartbeats and admission announcements share a members
 * topic. Everything decoded here is untrusted input.
 */
import { parseMemberInfo } from './join.ts'
import type { MemberInfo } from './membership.ts'
import type { SwimEvidence, SwimMessage, SwimUpdate } from './swim.ts'
import { isRecord } from './wire.ts'

export function storeTopic(clusterId: string, scope: string): string {
  return `/orc/${clusterId}/store/${scope}/1`
}

export function membersTopic(clusterId: string): string {
  return `/orc/${clusterId}/members/1`
}

export const MAX_MEMBER_MESSAGE_BYTES = 64 * 1024
/** A SWIM message carries evidence ages of every member (~20 bytes each): room for thousands. */
export const MAX_SWIM_MESSAGE_BYTES = 256 * 1024

/**
 * Heartbeats sent straight to each connected member, one long-lived stream per connection, when a
 * node is connected to every member that is not dead (liveness.ts, heartbeat): then everyone hears it
 * directly, and gossip would only add copies (every member relays each heartbeat to its mesh peers,
 * ~0.6 of a core across 20 agents). Otherwise heartbeats go on the members topic as before.
 */
export const HEARTBEAT_PROTOCOL = '/orc/heartbeat/1.0.0'

/**
 * SWIM probes, acks and probe requests (swim.ts), one long-lived stream per member each way, as the
 * heartbeats. Served whatever the node's failureDetector, so a heartbeat node answers a swim node.
 */
export const SWIM_PROTOCOL = '/orc/swim/1.0.0'

export type MemberMessage = { t: 'hb'; name: string; addresses: string[]; seq: number } | { t: 'admit'; member: MemberInfo }

/** A JSON object of at most `max` bytes of strict UTF-8, or undefined. */
function parseJsonRecord(b: Uint8Array, max: number): Record<string, unknown> | undefined {
  if (b.length > max) return undefined
  try {
    const v: unknown = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(b))
    return isRecord(v) ? v : undefined
  } catch {
    return undefined
  }
}

export function encodeMemberMessage(m: MemberMessage): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(m))
}

/** Undefined when the bytes are not a valid member message. */
export function decodeMemberMessage(b: Uint8Array): MemberMessage | undefined {
  const v = parseJsonRecord(b, MAX_MEMBER_MESSAGE_BYTES)
  if (v === undefined) return undefined
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

const SWIM_STATES = new Set(['alive', 'suspect', 'dead'])
const MAX_SWIM_UPDATES = 64
const MAX_SWIM_EVIDENCE = 4096

export function encodeSwimMessage(m: SwimMessage): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(m))
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0
const isId = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 128
const isSig = (v: unknown): v is string => typeof v === 'string' && v.length <= 256

function parseSwimUpdate(v: unknown): SwimUpdate | undefined {
  if (!isRecord(v) || !isId(v.id) || typeof v.s !== 'string' || !SWIM_STATES.has(v.s) || !isCount(v.inc)) return undefined
  if (v.by !== undefined && !isId(v.by)) return undefined
  if (v.sig !== undefined && !isSig(v.sig)) return undefined
  return { id: v.id, s: v.s as SwimUpdate['s'], inc: v.inc, ...(v.by !== undefined ? { by: v.by } : {}), ...(v.sig !== undefined ? { sig: v.sig } : {}) }
}

function parseEvidence(v: unknown): SwimEvidence | undefined | null {
  if (v === undefined) return undefined
  if (!isRecord(v)) return null
  const keys = Object.keys(v)
  if (keys.length > MAX_SWIM_EVIDENCE) return null
  const out: SwimEvidence = Object.create(null)
  for (const k of keys) {
    const age = v[k]
    if (k.length > 16 || !isCount(age)) return null
    out[k] = age
  }
  return out
}

/** Undefined when the bytes are not a valid SWIM message (a peer fault). */
export function decodeSwimMessage(b: Uint8Array): SwimMessage | undefined {
  const v = parseJsonRecord(b, MAX_SWIM_MESSAGE_BYTES)
  if (v === undefined || !isCount(v.seq) || !Array.isArray(v.up) || v.up.length > MAX_SWIM_UPDATES) return undefined
  const up: SwimUpdate[] = []
  for (const u of v.up) {
    const p = parseSwimUpdate(u)
    if (p === undefined) return undefined
    up.push(p)
  }
  if (v.t === 'ping-req') return isId(v.target) ? { t: 'ping-req', seq: v.seq, target: v.target, up } : undefined
  if (v.t !== 'ping' && v.t !== 'ack') return undefined
  if (!isCount(v.inc) || !isSig(v.sig)) return undefined
  const ev = parseEvidence(v.ev)
  if (ev === null || (v.full !== undefined && typeof v.full !== 'boolean')) return undefined
  const common = { seq: v.seq, inc: v.inc, sig: v.sig, up, ...(ev !== undefined ? { ev } : {}), ...(v.full !== undefined ? { full: v.full } : {}) }
  if (v.t === 'ping') return { t: 'ping', ...common }
  if (v.of !== undefined && !isId(v.of)) return undefined
  return { t: 'ack', ...common, ...(v.of !== undefined ? { of: v.of } : {}) }
}
