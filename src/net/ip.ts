/**
 * IPv4/IPv6 addresses and prefixes as bigints, with parsing and canonical text form (RFC 5952 for
 * IPv6). Own small implementation: the address math is pure and property-tested, and node:net only
 * validates, it does not normalise or do prefix arithmetic.
 */
import { OrcError } from '../model/index.ts'

export type IpFamily = 4 | 6

export interface IpAddress {
  readonly family: IpFamily
  readonly value: bigint
}

export interface IpPrefix {
  readonly family: IpFamily
  /** The address as written; use `prefixNetwork` for the masked network address. */
  readonly addr: bigint
  readonly len: number
}

const BITS: Record<IpFamily, number> = { 4: 32, 6: 128 }
const MAX6 = (1n << 128n) - 1n
const MAX4 = (1n << 32n) - 1n

export function familyBits(family: IpFamily): number {
  return BITS[family]
}

function invalid(what: string, text: string): OrcError {
  return new OrcError('invalid', `invalid ${what}: ${JSON.stringify(text).slice(0, 80)}`, { value: text })
}

/** Parse dotted-quad IPv4 (no leading zeros, no shorthand). Returns undefined when malformed. */
function tryParseIPv4(text: string): bigint | undefined {
  const parts = text.split('.')
  if (parts.length !== 4) return undefined
  let v = 0n
  for (const p of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return undefined
    const n = Number(p)
    if (n > 255) return undefined
    v = (v << 8n) | BigInt(n)
  }
  return v
}

function tryParseIPv6(text: string): bigint | undefined {
  if (text.length === 0 || text.length > 45) return undefined
  let s = text.toLowerCase()
  // Trailing embedded IPv4 (e.g. ::ffff:192.0.2.1) becomes two hex groups.
  const lastColon = s.lastIndexOf(':')
  if (lastColon >= 0 && s.indexOf('.', lastColon) > lastColon) {
    const v4 = tryParseIPv4(s.slice(lastColon + 1))
    if (v4 === undefined) return undefined
    s = `${s.slice(0, lastColon + 1)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`
  }
  const halves = s.split('::')
  if (halves.length > 2) return undefined
  const groupsOf = (h: string): string[] | undefined => {
    if (h === '') return []
    const g = h.split(':')
    return g.every((x) => /^[0-9a-f]{1,4}$/.test(x)) ? g : undefined
  }
  const head = groupsOf(halves[0]!)
  const tail = halves.length === 2 ? groupsOf(halves[1]!) : []
  if (head === undefined || tail === undefined) return undefined
  let groups: string[]
  if (halves.length === 2) {
    const missing = 8 - head.length - tail.length
    if (missing < 1) return undefined
    groups = [...head, ...Array<string>(missing).fill('0'), ...tail]
  } else {
    if (head.length !== 8) return undefined
    groups = head
  }
  let v = 0n
  for (const g of groups) v = (v << 16n) | BigInt(parseInt(g, 16))
  return v
}

export function parseIPv6(text: string): bigint {
  const v = tryParseIPv6(text)
  if (v === undefined) throw invalid('IPv6 address', text)
  return v
}

export function parseIPv4(text: string): bigint {
  const v = tryParseIPv4(text)
  if (v === undefined) throw invalid('IPv4 address', text)
  return v
}

/** Parse either family; IPv6 if the text contains a colon. */
export function parseIp(text: string): IpAddress {
  if (text.includes(':')) return { family: 6, value: parseIPv6(text) }
  return { family: 4, value: parseIPv4(text) }
}

/**
 * RFC 5952 text: lowercase hex, no leading zeros, the longest run (first on a tie) of two or more
 * zero groups shortened to `::`. IPv4-mapped addresses stay in hex, as WHATWG URL serialises them,
 * so our text equals what node prints for a URL host.
 */
export function formatIPv6(value: bigint): string {
  if (value < 0n || value > MAX6) throw new OrcError('invalid', `IPv6 value out of range: ${value}`)
  const groups: number[] = []
  for (let i = 7; i >= 0; i--) groups.push(Number((value >> BigInt(i * 16)) & 0xffffn))
  let bestStart = -1
  let bestLen = 0
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++
      continue
    }
    let j = i
    while (j < 8 && groups[j] === 0) j++
    if (j - i > bestLen) {
      bestStart = i
      bestLen = j - i
    }
    i = j
  }
  const hex = groups.map((g) => g.toString(16))
  if (bestLen < 2) return hex.join(':')
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`
}

export function formatIPv4(value: bigint): string {
  if (value < 0n || value > MAX4) throw new OrcError('invalid', `IPv4 value out of range: ${value}`)
  return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 0xffn)).join('.')
}

export function formatIp(a: IpAddress): string {
  return a.family === 6 ? formatIPv6(a.value) : formatIPv4(a.value)
}

/** Canonical text of an address in either family (throws OrcError 'invalid' when malformed). */
export function canonicalIp(text: string): string {
  return formatIp(parseIp(text))
}

/**
 * Parse `addr/len`. A bare address is a host prefix (/32 or /128), and `default` is the whole
 * family (as `ip route` prints it), given `family`.
 */
export function parsePrefix(text: string, family?: IpFamily): IpPrefix {
  if (text === 'default') {
    if (family === undefined) throw invalid('prefix', text)
    return { family, addr: 0n, len: 0 }
  }
  const slash = text.indexOf('/')
  const addrText = slash < 0 ? text : text.slice(0, slash)
  const a = parseIp(addrText)
  if (family !== undefined && a.family !== family) throw invalid(`IPv${family} prefix`, text)
  const bits = BITS[a.family]
  let len = bits
  if (slash >= 0) {
    const l = text.slice(slash + 1)
    if (!/^(0|[1-9][0-9]{0,2})$/.test(l) || Number(l) > bits) throw invalid('prefix', text)
    len = Number(l)
  }
  return { family: a.family, addr: a.value, len }
}

export function prefixMask(family: IpFamily, len: number): bigint {
  const bits = BigInt(BITS[family])
  const all = (1n << bits) - 1n
  return len === 0 ? 0n : (all >> (bits - BigInt(len))) << (bits - BigInt(len))
}

/** The prefix with host bits cleared. */
export function prefixNetwork(p: IpPrefix): IpPrefix {
  return { family: p.family, addr: p.addr & prefixMask(p.family, p.len), len: p.len }
}

export function formatPrefix(p: IpPrefix): string {
  return `${formatIp({ family: p.family, value: p.addr })}/${p.len}`
}

/** Canonical masked text of a prefix: `FD00:0::5/64` → `fd00::/64`, `10.0.0.1` → `10.0.0.1/32`. */
/** An IPv6 address as its /128 (`fd00::5/128`, canonical), or undefined when it is not one. */
export function host128(address: string): string | undefined {
  try {
    return formatPrefix({ ...parsePrefix(address, 6), len: 128 })
  } catch {
    return undefined
  }
}

export function canonicalPrefix(text: string, family?: IpFamily): string {
  return formatPrefix(prefixNetwork(parsePrefix(text, family)))
}

export function prefixContains(p: IpPrefix, a: IpAddress | bigint): boolean {
  const value = typeof a === 'bigint' ? a : a.value
  if (typeof a !== 'bigint' && a.family !== p.family) return false
  const m = prefixMask(p.family, p.len)
  return (value & m) === (p.addr & m)
}

/** Whether `inner` lies entirely within `outer`. */
export function prefixCovers(outer: IpPrefix, inner: IpPrefix): boolean {
  return outer.family === inner.family && inner.len >= outer.len && prefixContains(outer, inner.addr)
}
