import assert from 'node:assert/strict'
import { test } from 'node:test'
import { parseHttpListen } from '../../../src/agent/index.ts'
import { httpOptionFromFlags, installLine, peersTable } from '../../../src/cli/commands/ops.ts'

test('--http-listen: default, explicit, env, off, and one clear error', () => {
  assert.deepEqual(httpOptionFromFlags(undefined, {}), { listen: 'mesh', explicit: false })
  assert.deepEqual(parseHttpListen('mesh'), { mesh: true, port: 7418 }, 'by default: the mesh addresses, not 0.0.0.0')
  assert.deepEqual(parseHttpListen('mesh:0'), { mesh: true, port: 0 })
  assert.deepEqual(parseHttpListen('0.0.0.0:7418'), { host: '0.0.0.0', port: 7418 }, 'widened on purpose')
  assert.deepEqual(httpOptionFromFlags('127.0.0.1:0', {}), { listen: '127.0.0.1:0', explicit: true })
  assert.deepEqual(httpOptionFromFlags(undefined, { ORC_HTTP_LISTEN: '[::1]:9000' }), { listen: '[::1]:9000', explicit: true })
  assert.equal(httpOptionFromFlags('off', {}), undefined)
  assert.deepEqual(parseHttpListen('[fd00::1]:7418'), { host: 'fd00::1', port: 7418 })
  for (const bad of ['example.com:80', '7418', '1.2.3.4:99999', '', 'mesh:99999', 'meshy']) {
    assert.throws(
      () => httpOptionFromFlags(bad, {}),
      /^OrcError: --http-listen .*: give mesh \(the mesh's addresses\), an IP address and port \(like 10\.0\.0\.1:7418, \[::\]:7418 or 0\.0\.0\.0:7418\) or off$/,
      bad,
    )
  }
})

test('the install line pins the listener key, names the listener (or the join address), and keeps the token out of argv', () => {
  const pin = 'sha256//47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='
  const pinned = `curl -fsS --pinnedpubkey '${pin}' -k`
  assert.equal(
    installLine('0.0.0.0:7418', '192.168.1.10', 'orcjoin1.abc', pin),
    `${pinned} https://192.168.1.10:7418/install.sh | ORC_TOKEN='orcjoin1.abc' sh -s --`,
  )
  assert.equal(installLine('10.0.0.5:8080', '192.168.1.10', 'T', pin), `${pinned} https://10.0.0.5:8080/install.sh | ORC_TOKEN='T' sh -s --`)
  assert.equal(installLine('[::]:7418', 'fd00::5', 'T', pin), `${pinned} https://[fd00::5]:7418/install.sh | ORC_TOKEN='T' sh -s --`)
  assert.throws(() => installLine('10.0.0.5:8080', undefined, 'T', ''), /unexpected certificate pin/)
})

test('the peers table puts this node first and shows what is unknown as -', () => {
  const now = 1_000_000
  const text = peersTable(
    [
      {
        name: 'a',
        peerId: 'p1',
        self: true,
        state: 'alive',
        path: 'self',
        latencyMs: null,
        lastSeen: now,
        handshakeAt: null,
        addresses: ['/ip4/10.0.0.1/tcp/7419'],
        version: '0.1.0',
        pods: 2,
      },
      {
        name: 'b',
        peerId: 'p2',
        self: false,
        state: 'suspect',
        path: 'gossip',
        latencyMs: null,
        lastSeen: now - 7000,
        handshakeAt: null,
        addresses: [],
        version: null,
        pods: 0,
      },
      {
        name: 'c',
        peerId: 'p3',
        self: false,
        state: 'alive',
        path: 'relayed',
        latencyMs: 12.34,
        lastSeen: now - 1000,
        handshakeAt: now - 3_600_000,
        addresses: ['/ip4/10.0.0.3/tcp/7419'],
        version: '0.1.0',
        pods: 1,
      },
    ],
    now,
  )
  assert.equal(
    text,
    [
      'NODE            STATE     PATH      LATENCY   LAST SEEN   HANDSHAKE   PODS   VERSION   ADDRESS',
      'a (this node)   alive     -         -         now         -           2      0.1.0     /ip4/10.0.0.1/tcp/7419',
      'b               suspect   gossip    -         7s ago      -           0      -         -',
      'c               alive     relayed   12.3ms    1s ago      60m ago     1      0.1.0     /ip4/10.0.0.3/tcp/7419',
      '',
    ].join('\n'),
  )
})
