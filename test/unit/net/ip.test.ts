import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import { canonicalPrefix, formatIPv4, formatIPv6, isOrcErrorLike, parseIPv4, parseIPv6, parsePrefix, prefixContains } from './helpers.ts'

const v6 = fc.bigInt({ min: 0n, max: (1n << 128n) - 1n })
// Addresses with long zero runs are where canonical forms differ; bias towards them.
const sparseV6 = fc
  .array(fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 0xffff })), { minLength: 8, maxLength: 8 })
  .map((g) => g.reduce((acc, x) => (acc << 16n) | BigInt(x), 0n))

function urlHost(text: string): string {
  return new URL(`http://[${text}]/`).hostname.slice(1, -1)
}

test('parse(format(x)) = x for every IPv6 value', () => {
  fc.assert(
    fc.property(fc.oneof(v6, sparseV6), (x) => parseIPv6(formatIPv6(x)) === x),
    { numRuns: 2000 },
  )
})

test('canonical text agrees with node URL normalisation, from any spelling', () => {
  // Non-canonical spellings: full form, upper case, leading zeros, compressed where possible.
  const spelling = fc.tuple(fc.oneof(v6, sparseV6), fc.integer({ min: 0, max: 3 })).map(([x, style]) => {
    const groups = Array.from({ length: 8 }, (_, i) => Number((x >> BigInt((7 - i) * 16)) & 0xffffn))
    if (style === 0) return { x, text: groups.map((g) => g.toString(16).padStart(4, '0')).join(':') }
    if (style === 1) return { x, text: groups.map((g) => g.toString(16).toUpperCase()).join(':') }
    if (style === 2) return { x, text: formatIPv6(x).toUpperCase() }
    return { x, text: groups.map((g) => g.toString(16)).join(':') }
  })
  fc.assert(
    fc.property(spelling, ({ x, text }) => {
      assert.equal(parseIPv6(text), x)
      assert.equal(formatIPv6(parseIPv6(text)), urlHost(text))
    }),
    { numRuns: 2000 },
  )
})

test('RFC 5952 examples', () => {
  assert.equal(formatIPv6(parseIPv6('2001:0db8:0000:0000:0000:0000:0002:0001')), '2001:db8::2:1')
  assert.equal(formatIPv6(parseIPv6('2001:db8:0:1:1:1:1:1')), '2001:db8:0:1:1:1:1:1') // one zero group stays
  assert.equal(formatIPv6(parseIPv6('2001:db8:0:0:1:0:0:1')), '2001:db8::1:0:0:1') // first of equal runs
  assert.equal(formatIPv6(parseIPv6('2001:0:0:1:0:0:0:1')), '2001:0:0:1::1') // longest run
  assert.equal(formatIPv6(0n), '::')
  assert.equal(formatIPv6(1n), '::1')
  assert.equal(formatIPv6(parseIPv6('::ffff:192.0.2.1')), '::ffff:c000:201')
})

test('malformed addresses are refused with an OrcError', () => {
  for (const bad of ['', ':', ':::', '1::2::3', '1:2:3:4:5:6:7:8:9', '12345::', 'g::', '1:2:3:4:5:6:7', '::1%eth0', '1.2.3.4']) {
    assert.throws(() => parseIPv6(bad), isOrcErrorLike('invalid'), bad)
  }
  for (const bad of ['1.2.3', '256.0.0.1', '01.2.3.4', '1.2.3.4.5', 'a.b.c.d']) {
    assert.throws(() => parseIPv4(bad), isOrcErrorLike('invalid'), bad)
  }
})

test('IPv4 round trip', () => {
  fc.assert(fc.property(fc.bigInt({ min: 0n, max: (1n << 32n) - 1n }), (x) => parseIPv4(formatIPv4(x)) === x))
})

test('prefixes: canonical text is masked; containment', () => {
  assert.equal(canonicalPrefix('FD00:0:0:1::5/64'), 'fd00:0:0:1::/64')
  assert.equal(canonicalPrefix('10.88.3.4/16'), '10.88.0.0/16')
  assert.equal(canonicalPrefix('fd00::5'), 'fd00::5/128')
  assert.equal(canonicalPrefix('default', 6), '::/0')
  assert.throws(() => parsePrefix('fd00::/129'), isOrcErrorLike('invalid'))
  assert.throws(() => parsePrefix('10.0.0.0/33'), isOrcErrorLike('invalid'))
  const p = parsePrefix('fd12:3456:789a:1::/64')
  assert.ok(prefixContains(p, parseIPv6('fd12:3456:789a:1:ffff::1')))
  assert.ok(!prefixContains(p, parseIPv6('fd12:3456:789a:2::1')))
})
