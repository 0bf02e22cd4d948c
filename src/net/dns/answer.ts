/**
 * Answering one DNS query (pure): decode the untrusted bytes with dns-packet, answer names under the
 * cluster domain (and reverse names of the cluster /48) from the zone, and say when the query is for
 * the upstream resolvers instead. Never throws: what cannot be decoded is dropped (no header) or
 * answered FORMERR (a header, then garbage).
 */
import * as dnsPacket from 'dns-packet'
import { type IpPrefix, prefixContains } from '../ip.ts'
import { addressOfReverse, type DnsZone } from './zone.ts'

export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const
export type Rcode = keyof typeof RCODE

/** Largest query accepted; a question with EDNS is well under 300 bytes. */
export const MAX_QUERY_BYTES = 1232
/** UDP answers without EDNS stay within 512 bytes (RFC 1035); with EDNS within its size, at most this. */
export const MAX_UDP_ANSWER = 1232

export interface AnswerOptions {
  zone: DnsZone
  /** The cluster /48: reverse names inside it are ours, never forwarded. */
  cluster?: IpPrefix
  /** TTL of answers and (in the SOA minimum) of negative answers, seconds. */
  ttl: number
  /** `udp`: answers that do not fit are truncated (TC), so the client asks again over TCP. */
  transport: 'udp' | 'tcp'
  /** Whether there are upstream resolvers (RA flag; SERVFAIL for other names when not). */
  recursion: boolean
}

export type QueryOutcome =
  | { action: 'answer'; response: Buffer; rcode: Rcode; name?: string }
  /** Not ours: send `query` (the client's bytes) upstream and relay the answer. */
  | { action: 'forward'; id: number; name: string }
  | { action: 'drop'; why: string }

const TYPE_NAMES = new Set(['A', 'AAAA', 'SRV', 'PTR', 'SOA', 'NS', 'ANY', 'TXT', 'CNAME', 'MX'])

/** A bare header answer (FORMERR, REFUSED, …) to a query whose header could be read. */
export function errorResponse(query: Buffer, rcode: Rcode, questions: dnsPacket.Question[] = []): Buffer | undefined {
  if (query.length < 12) return undefined
  const id = query.readUInt16BE(0)
  const flags = query.readUInt16BE(2)
  if (flags & 0x8000) return undefined // a response: never answer one (no reflection loops)
  const rd = flags & dnsPacket.RECURSION_DESIRED
  const opcode = flags & 0x7800
  const header = Buffer.alloc(12)
  header.writeUInt16BE(id, 0)
  header.writeUInt16BE(0x8000 | opcode | rd | RCODE[rcode], 2)
  if (questions.length === 0) return header
  try {
    return dnsPacket.encode({ type: 'response', id, flags: opcode | rd | RCODE[rcode], questions })
  } catch {
    return header
  }
}

function soa(zone: DnsZone, ttl: number): dnsPacket.Answer {
  return {
    type: 'SOA',
    name: zone.domain,
    ttl,
    data: { mname: `ns.dns.${zone.domain}`, rname: `hostmaster.${zone.domain}`, serial: 1, refresh: 60, retry: 10, expire: 600, minimum: ttl },
  }
}

/** Decide what to do with one query. */
export function answerQuery(bytes: Buffer, o: AnswerOptions): QueryOutcome {
  if (bytes.length < 12) return { action: 'drop', why: 'shorter than a DNS header' }
  if (bytes.readUInt16BE(2) & 0x8000) return { action: 'drop', why: 'a response, not a query' }
  if (bytes.length > MAX_QUERY_BYTES) return formerr(bytes, 'oversized query')
  let q: dnsPacket.DecodedPacket
  try {
    q = dnsPacket.decode(bytes)
  } catch {
    return formerr(bytes, 'malformed')
  }
  const opcode = (bytes.readUInt16BE(2) >> 11) & 0xf
  if (opcode !== 0) return { action: 'answer', response: errorResponse(bytes, 'NOTIMP')!, rcode: 'NOTIMP' }
  const questions = q.questions ?? []
  if (questions.length !== 1 || (q.answers?.length ?? 0) > 0) return formerr(bytes, 'not one question')
  const question = questions[0]!
  const name = question.name.toLowerCase().replace(/\.$/, '')
  const edns = (q.additionals ?? []).find((a) => a.type === 'OPT') as { udpPayloadSize?: number } | undefined
  // A reverse name outside the cluster /48 is ours when the zone has its PTR: a shared service's
  // virtual address (in its federation's range) or a shared pod of another member cluster.
  const ours =
    name === o.zone.domain ||
    name.endsWith(`.${o.zone.domain}`) ||
    reverseInCluster(name, o.cluster) ||
    (name.endsWith('.ip6.arpa') && (o.zone.records.get(name)?.ptr.length ?? 0) > 0)
  if (!ours) {
    if (!o.recursion) return respond(bytes, q, question, o, { rcode: 'SERVFAIL', answers: [], authoritative: false, edns, name })
    return { action: 'forward', id: q.id ?? 0, name }
  }
  if ((question.class ?? 'IN') !== 'IN' && question.class !== 'ANY')
    return respond(bytes, q, question, o, { rcode: 'REFUSED', answers: [], authoritative: false, edns, name })
  // dns-packet names type 255 `ANY`, which its types do not list.
  const type: string = TYPE_NAMES.has(question.type) ? question.type : 'OTHER'
  const answers: dnsPacket.Answer[] = []
  const additionals: dnsPacket.Answer[] = []
  const rec = o.zone.records.get(name)
  const exists = o.zone.names.has(name) || (rec !== undefined && (rec.ptr.length > 0 || rec.aaaa.length > 0))
  if (!exists) return respond(bytes, q, question, o, { rcode: 'NXDOMAIN', answers: [], authoritative: true, edns, name, negative: true })
  if (rec !== undefined) {
    if (type === 'AAAA' || type === 'ANY') for (const a of rec.aaaa) answers.push({ type: 'AAAA', name: question.name, ttl: o.ttl, data: a })
    if (type === 'PTR' || type === 'ANY') for (const p of rec.ptr) answers.push({ type: 'PTR', name: question.name, ttl: o.ttl, data: p })
    if (type === 'SRV' || type === 'ANY') {
      for (const s of rec.srv) {
        answers.push({ type: 'SRV', name: question.name, ttl: o.ttl, data: s })
        for (const a of o.zone.records.get(s.target)?.aaaa ?? []) additionals.push({ type: 'AAAA', name: s.target, ttl: o.ttl, data: a })
      }
    }
  }
  if (name === o.zone.domain && (type === 'SOA' || type === 'ANY')) answers.push(soa(o.zone, o.ttl))
  return respond(bytes, q, question, o, { rcode: 'NOERROR', answers, additionals, authoritative: true, edns, name, negative: answers.length === 0 })
}

function reverseInCluster(name: string, cluster: IpPrefix | undefined): boolean {
  if (cluster === undefined || !name.endsWith('.ip6.arpa')) return false
  const a = addressOfReverse(name)
  if (a !== undefined) return prefixContains(cluster, a)
  // A partial reverse name (fewer nibbles) inside the /48 (12 nibbles) is ours too.
  const nibbles = name.slice(0, -'.ip6.arpa'.length).split('.')
  if (nibbles.length < 12 || nibbles.length > 32 || !nibbles.every((n) => /^[0-9a-f]$/.test(n))) return false
  const hex = nibbles.reverse().join('').padEnd(32, '0')
  return prefixContains(cluster, BigInt(`0x${hex}`))
}

function formerr(bytes: Buffer, why: string): QueryOutcome {
  const response = errorResponse(bytes, 'FORMERR')
  return response === undefined ? { action: 'drop', why } : { action: 'answer', response, rcode: 'FORMERR' }
}

interface Reply {
  rcode: Rcode
  answers: dnsPacket.Answer[]
  additionals?: dnsPacket.Answer[]
  authoritative: boolean
  edns: { udpPayloadSize?: number } | undefined
  name: string
  /** No answer: the SOA goes in the authority section, so resolvers cache the miss for its minimum. */
  negative?: boolean
}

function respond(bytes: Buffer, q: dnsPacket.DecodedPacket, question: dnsPacket.Question, o: AnswerOptions, r: Reply): QueryOutcome {
  const rd = (q.flags ?? 0) & dnsPacket.RECURSION_DESIRED
  let flags = rd | RCODE[r.rcode] | (r.authoritative ? dnsPacket.AUTHORITATIVE_ANSWER : 0) | (o.recursion ? dnsPacket.RECURSION_AVAILABLE : 0)
  const opt: dnsPacket.Answer[] = r.edns
    ? [{ type: 'OPT', name: '.', udpPayloadSize: MAX_UDP_ANSWER, extendedRcode: 0, ednsVersion: 0, flags: 0, flag_do: false, options: [] }]
    : []
  const packet: dnsPacket.Packet = {
    type: 'response',
    id: q.id ?? 0,
    flags,
    questions: [question],
    answers: r.answers,
    authorities: r.negative ? [soa(o.zone, o.ttl)] : [],
    additionals: [...(r.additionals ?? []), ...opt],
  }
  let response: Buffer
  try {
    response = dnsPacket.encode(packet)
  } catch {
    // A name the encoder refuses (a label over 63 bytes that still decoded): the question was bad.
    return formerr(bytes, 'unencodable question')
  }
  const limit = o.transport === 'tcp' ? 65535 : Math.min(MAX_UDP_ANSWER, Math.max(512, r.edns?.udpPayloadSize ?? 512))
  if (response.length > limit) {
    flags |= dnsPacket.TRUNCATED_RESPONSE
    response = dnsPacket.encode({ ...packet, flags, answers: [], authorities: [], additionals: opt })
  }
  return { action: 'answer', response, rcode: r.rcode, name: r.name }
}
