import assert from 'node:assert/strict'
import { test } from 'node:test'
import { joinListenFor, parseListenAddress, resolvePeerAddress, splitHostPort } from '../../../src/mesh/index.ts'

test('what users type for an address becomes TCP multiaddrs', async () => {
  assert.deepEqual(splitHostPort('10.0.0.1:7420'), { host: '10.0.0.1', port: 7420 })
  assert.deepEqual(splitHostPort('[fd00::1]:7420'), { host: 'fd00::1', port: 7420 })
  assert.deepEqual(splitHostPort('fd00::1'), { host: 'fd00::1', port: 7419 })
  assert.deepEqual(splitHostPort('node1'), { host: 'node1', port: 7419 })
  assert.equal(parseListenAddress('127.0.0.1:0'), '/ip4/127.0.0.1/tcp/0')
  assert.equal(parseListenAddress('[::]:7419'), '/ip6/::/tcp/7419')
  assert.equal(parseListenAddress('/ip4/0.0.0.0/tcp/7419'), '/ip4/0.0.0.0/tcp/7419')
  assert.throws(() => parseListenAddress('node1:7419'), /give an IP address and port/)
  assert.throws(() => parseListenAddress('1.2.3.4:99999'), /port must be 0–65535/)
  assert.deepEqual(await resolvePeerAddress('/ip4/1.2.3.4/tcp/5/p2p/12D3KooWJvSBikbxNwTb59we5AYCWwWBYsCPA7mZAz2cJMGrPwgy'), ['/ip4/1.2.3.4/tcp/5'])
  assert.deepEqual(await resolvePeerAddress('n1.lab:7000', async () => ['192.0.2.1', '2001:db8::1']), ['/ip4/192.0.2.1/tcp/7000', '/ip6/2001:db8::1/tcp/7000'])
  await assert.rejects(
    resolvePeerAddress('nope.invalid', async () => {
      throw Object.assign(new Error('x'), { code: 'ENOTFOUND' })
    }),
    /resolve nope.invalid: ENOTFOUND/,
  )
})

test('a node advertises only the addresses other machines can dial it at', async (t) => {
  const { advertisableAddresses } = await import('../../../src/mesh/index.ts')
  const WILDCARD = ['/ip4/0.0.0.0/tcp/7419', '/ip6/::/tcp/7419']
  const POD_RANGES = ['10.88.0.0/16', 'fd12:3456:789a::/48']
  // What a wildcard listener expands to on a node with pods and its WireGuard interface up.
  const host = [
    '/ip4/127.0.0.1/tcp/7419',
    '/ip4/192.168.1.10/tcp/7419',
    '/ip4/10.88.0.1/tcp/7419',
    '/ip4/169.254.3.4/tcp/7419',
    '/ip6/::1/tcp/7419',
    '/ip6/fe80::1c2:3ff:fe04:506/tcp/7419',
    '/ip6/fd12:3456:789a:1::1/tcp/7419',
    '/ip6/2001:db8:1::10/tcp/7419',
    '/ip6/fd00:aaaa::5/tcp/7419',
  ]

  await t.test('no loopback, link-local, pod egress or cluster ULA address; routable ones kept in order', () => {
    assert.deepEqual(advertisableAddresses(host, WILDCARD, POD_RANGES), [
      '/ip4/192.168.1.10/tcp/7419',
      '/ip6/2001:db8:1::10/tcp/7419',
      '/ip6/fd00:aaaa::5/tcp/7419',
    ])
  })

  await t.test('an address --listen names is advertised whatever it is', () => {
    assert.deepEqual(advertisableAddresses(['/ip4/127.0.0.1/tcp/7420'], ['/ip4/127.0.0.1/tcp/7420'], POD_RANGES), ['/ip4/127.0.0.1/tcp/7420'])
    const both = ['/ip4/192.168.1.10/tcp/7419', '/ip4/10.88.0.1/tcp/7419']
    assert.deepEqual(advertisableAddresses(both, ['/ip4/10.88.0.1/tcp/7419', '/ip4/192.168.1.10/tcp/7419'], POD_RANGES), both)
    assert.deepEqual(advertisableAddresses(['/ip6/::1/tcp/7419'], ['/ip6/0:0::1/tcp/7419']), ['/ip6/::1/tcp/7419'])
  })

  await t.test('a machine with nothing routable still advertises its loopback addresses, never a pod address', () => {
    const offline = ['/ip4/127.0.0.1/tcp/7419', '/ip4/10.88.0.1/tcp/7419', '/ip6/::1/tcp/7419', '/ip6/fd12:3456:789a:1::1/tcp/7419']
    assert.deepEqual(advertisableAddresses(offline, WILDCARD, POD_RANGES), ['/ip4/127.0.0.1/tcp/7419', '/ip6/::1/tcp/7419'])
  })

  await t.test('addresses that are not IP pass through', () => {
    assert.deepEqual(advertisableAddresses(['/memory/a', '/ip4/127.0.0.1/tcp/1'], []), ['/memory/a'])
  })
})

test('the join host listens two ports below the mesh by default; a mesh on a free port gets a free one', () => {
  assert.deepEqual(joinListenFor(['/ip4/0.0.0.0/tcp/7419', '/ip6/::/tcp/7419']), ['/ip4/0.0.0.0/tcp/7417', '/ip6/::/tcp/7417'])
  assert.deepEqual(joinListenFor(['/ip4/127.0.0.1/tcp/0']), ['/ip4/127.0.0.1/tcp/0'])
  assert.deepEqual(joinListenFor(['/ip4/10.0.0.1/tcp/1']), ['/ip4/10.0.0.1/tcp/0'], 'no port below 0')
  assert.deepEqual(joinListenFor(['/memory/x']), [], 'not TCP: no join host there')
})
