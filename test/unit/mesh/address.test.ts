import { test } from 'node:test'
import assert from 'node:assert/strict'
import { parseListenAddress, resolvePeerAddress, splitHostPort } from '../../../src/mesh/index.ts'

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
  await assert.rejects(resolvePeerAddress('nope.invalid', async () => { throw Object.assign(new Error('x'), { code: 'ENOTFOUND' }) }), /resolve nope.invalid: ENOTFOUND/)
})
