// The operator's tools against two real agents on 127.0.0.1: /metrics (Prometheus text, the peers
// gauge follows a join), `orc status` peers table, `orc events`, `orc doctor`, `orc version`,
// and `orc token create --print-install` (on, and refused when the HTTP listener is off).

import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { execa } from 'execa'
import { parsePrometheusText, type Sample } from '../../src/agent/index.ts'
import { type NodeProcess, newNode, orc, ROOT, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { httpsGetPinned } from '../helpers/https.ts'

let pinOf = ''

async function httpAddress(n: NodeProcess): Promise<string> {
  // The listener starts after the API answers (the first start makes its certificate).
  const http = await waitFor(
    'the HTTPS listener to run',
    async () => (await n.client.call<{ http: { address: string; pin: string } | null }>('GET', '/v1/status')).http ?? undefined,
    20_000,
  )
  pinOf = http.pin
  return http.address
}

async function scrape(addr: string): Promise<Sample[]> {
  const res = await httpsGetPinned(`https://${addr}/metrics`, pinOf)
  assert.equal(res.status, 200)
  assert.match(res.headers['content-type'] ?? '', /^text\/plain; version=0\.0\.4/)
  return parsePrometheusText(res.body).samples
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value
}

test('operator tools on a two-node cluster', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const [a, b] = [await newNode(ws, 'a'), await newNode(ws, 'b')]
  for (const n of [a, b]) n.env = { ORC_NETWORK: 'off' }
  await a.up(['--http-listen', '127.0.0.1:0']).ready()
  const addrA = await httpAddress(a)

  await t.test('/metrics parses as Prometheus text and the peers gauge follows a join', async () => {
    const before = await scrape(addrA)
    assert.equal(value(before, 'orc_peers', { state: 'alive' }), 0)
    assert.equal(value(before, 'orc_store_objects', { kind: 'Node' }), 1)
    assert.equal(value(before, 'orc_info', { node: 'a' }), 1)
    b.env = { ...b.env, ORC_SOCKET_USER: 'admin' } // it issues a token below (a joined node's root is node-admin by default)
    await b.join(a.addr, await tokenFrom(a), ['--http-listen', 'off']).ready()
    await waitFor('a to count b alive in /metrics', async () => value(await scrape(addrA), 'orc_peers', { state: 'alive' }) === 1, 60_000)
    const after = await waitFor(
      "b's Node object to reach a",
      async () => {
        const m = await scrape(addrA)
        return value(m, 'orc_store_objects', { kind: 'Node' }) === 2 ? m : undefined
      },
      30_000,
    )
    // Two members, connected to each other: heartbeats go straight on the connection.
    const beats = await waitFor(
      "a to count b's heartbeats",
      async () => value(await scrape(addrA), 'orc_heartbeats_total', { direction: 'in', path: 'direct' }),
      10_000,
    )
    assert.ok(beats > 0, 'heartbeats are counted')
    assert.ok((value(after, 'orc_peer_connections', { path: 'direct' }) ?? 0) >= 1)
    // The same text over the socket.
    const viaCli = await a.cli(['metrics'])
    assert.equal(viaCli.exitCode, 0, viaCli.stderr)
    assert.ok(parsePrometheusText(viaCli.stdout).samples.some((s) => s.name === 'orc_peers'))
  })

  await t.test('orc status lists every node with state, path, latency and pods', async () => {
    await waitFor(
      'a to have pinged b',
      async () => {
        const r = await a.cli(['status'])
        return /^b +alive +direct +[0-9.]+ms /m.test(r.stdout) ? r : undefined
      },
      60_000,
    )
    const r = await a.cli(['status'])
    assert.match(r.stdout, /^NODE +STATE +PATH +LATENCY +LAST SEEN +HANDSHAKE +PODS +VERSION +ADDRESS$/m)
    assert.match(r.stdout, /^a \(this node\) +alive +- +- +now +- +0 /m)
    assert.match(r.stdout, new RegExp(`^HTTP: +https://${addrA.replace(/\./g, '\\.')} `, 'm'))
    const j = JSON.parse((await a.cli(['status', '--json'])).stdout)
    assert.deepEqual(
      j.peers.map((p: { name: string }) => p.name),
      ['a', 'b'],
    )
    assert.equal(j.peers[1].path, 'direct')
  })

  await t.test('orc events shows who changed what and why, on any node', async () => {
    const manifest =
      'apiVersion: orc/v1\nkind: Pod\nmetadata:\n  name: ev\nspec:\n  nodeSelector:\n    orc-test: nowhere\n  containers:\n    - name: main\n      image: busybox\n'
    const applied = await orc(a.socket, ['apply', '-f', '-', '--reason', 'first try'], {}, manifest)
    assert.equal(applied.exitCode, 0, applied.stderr)
    const ev = await waitFor(
      'b to have the pod event',
      async () => {
        const r = await b.cli(['events', 'pod/ev', '-o', 'json'])
        const events = JSON.parse(r.stdout) as Array<{ type: string; source: string; message: string; object: string }>
        return events.find((e) => e.type === 'Created') ? events : undefined
      },
      30_000,
    )
    const created = ev.find((e) => e.type === 'Created')!
    assert.equal(created.object, 'pod/ev')
    assert.equal(created.source, 'user:admin')
    assert.equal(created.message, 'first try')
    const table = await a.cli(['events'])
    assert.equal(table.exitCode, 0, table.stderr)
    assert.match(table.stdout, /^TIME +OBJECT +TYPE +SOURCE +MESSAGE$/m)
    assert.match(table.stdout, /node\/b +Created +controller:node +node joined/)
    assert.match(table.stdout, /default\/pod\/ev +Created +user:admin +first try/)
    const bad = await a.cli(['events', 'gizmos'])
    assert.equal(bad.exitCode, 1)
    assert.match(bad.stderr, /^error: unknown kind "gizmos"/)
  })

  await t.test('orc events -f prints new events as they happen, one JSON object per line', async () => {
    const follower = execa(process.execPath, [join(ROOT, 'bin/orc.mjs'), 'events', '-f', '-o', 'json', '--since', '30m'], {
      env: { ORC_SOCKET: b.socket, USER: 'tester' },
      reject: false,
      buffer: false,
    })
    let out = ''
    follower.stdout!.on('data', (d: Buffer) => (out += d.toString()))
    try {
      const manifest =
        'apiVersion: orc/v1\nkind: Pod\nmetadata:\n  name: followed\nspec:\n  nodeSelector:\n    orc-test: nowhere\n  containers:\n    - name: main\n      image: busybox\n'
      // Started once it has printed what was there already (the earlier pod).
      await waitFor('the follower to print past events', () => out.includes('"pod/ev"'), 60_000)
      const applied = await orc(a.socket, ['apply', '-f', '-', '--reason', 'watch me'], {}, manifest)
      assert.equal(applied.exitCode, 0, applied.stderr)
      const line = await waitFor(
        "the event on b's follower",
        () => out.split('\n').find((l) => l.includes('"pod/followed"') && l.includes('"Created"')),
        30_000,
      )
      const ev = JSON.parse(line)
      assert.equal(ev.message, 'watch me')
      assert.equal(out.split('\n').filter((l) => l.includes('"pod/followed"') && l.includes('"Created"')).length, 1, 'printed once')
    } finally {
      follower.kill('SIGTERM')
      await follower
    }
  })

  await t.test('orc doctor reports this machine: WireGuard mode, sandbox, clock skew against b, disk, data dir', async () => {
    const r = await a.cli(['doctor', '-o', 'json'])
    const findings = JSON.parse(r.stdout) as Array<{ check: string; status: string; message: string; fix?: string }>
    const wg = findings.find((f) => f.check === 'wireguard')!
    const kernel = existsSync('/sys/module/wireguard')
    assert.match(wg.message, kernel ? /WireGuard mode: kernel module/ : /WireGuard mode: wireguard-go/)
    assert.ok(findings.some((f) => f.check === 'sandbox'))
    assert.ok(findings.some((f) => f.check === 'disk' && /GiB free/.test(f.message)))
    assert.ok(
      findings.some((f) => f.check === 'data-dir' && f.status === 'ok'),
      JSON.stringify(findings),
    )
    const clock = findings.find((f) => f.check === 'clock')!
    assert.match(clock.message, /^clock (behind|ahead of) b by [0-9.]+m?s$/)
    assert.equal(clock.status, 'ok', 'one machine, one clock')
    for (const f of findings) if (f.status === 'error' || f.status === 'warn') assert.ok(f.fix, `${f.check} has a fix: ${f.message}`)
    const text = await a.cli(['doctor'])
    assert.match(text.stdout, /^OK +wireguard +WireGuard mode: /m)
    assert.equal(text.exitCode, findings.some((f) => f.status === 'error') ? 1 : 0)
  })

  await t.test('orc doctor without an agent checks the machine and says the agent is down', async () => {
    const r = await orc(`${ws.root}/nowhere.sock`, ['doctor', '--data-dir', ws.dir('nowhere'), '-o', 'json'])
    const findings = JSON.parse(r.stdout) as Array<{ check: string; status: string; fix?: string }>
    assert.ok(findings.some((f) => f.check === 'wireguard'))
    const agent = findings.find((f) => f.check === 'agent')!
    assert.equal(agent.status, 'warn')
    assert.match(agent.fix!, /orc up/)
  })

  await t.test('orc version shows client and nodes', async () => {
    const r = await a.cli(['version', '-o', 'json'])
    assert.equal(r.exitCode, 0, r.stderr)
    const v = JSON.parse(r.stdout)
    assert.equal(v.node.name, 'a')
    assert.equal(v.node.version, v.client)
    assert.deepEqual(Object.keys(v.nodes).sort(), ['a', 'b'])
    assert.equal(v.skew, undefined)
    assert.equal(r.stderr, '')
  })

  await t.test('orc token create --print-install prints the line, and refuses when nothing serves it', async () => {
    const r = await a.cli(['token', 'create', '--print-install'])
    assert.equal(r.exitCode, 0, r.stderr)
    const pin = pinOf.replace(/[+/]/g, '\\$&')
    assert.match(
      r.stdout,
      new RegExp(`^curl -fsS --pinnedpubkey '${pin}' -k https://${addrA.replace(/\./g, '\\.')}/install\\.sh \\| ORC_TOKEN='orcjoin1\\.\\S+' sh -s --\\n$`),
    )
    const script = await httpsGetPinned(`https://${addrA}/install.sh`, pinOf)
    assert.equal(script.status, 200)
    const body = script.body
    assert.ok(body.includes(`ORC_PIN='${pinOf}'`), 'the script fetches the rest pinned to the same key')
    assert.match(body, /^#!\/bin\/sh\n/)
    const psk = readFileSync(join(a.dataDir, 'swarm.key'), 'utf8').trim().split('\n').pop()!
    const clusterId = JSON.parse((await a.cli(['status', '-o', 'json'])).stdout).node.cluster.id
    assert.ok(!body.includes(psk) && !body.includes(clusterId), 'the served script holds nothing secret')
    assert.doesNotMatch(body, /orcjoin1\.[A-Za-z0-9_-]{20,}/, 'and no token')
    const before = (await b.cli(['token', 'list', '-o', 'json'])).stdout
    const off = await b.cli(['token', 'create', '--print-install'])
    assert.equal(off.exitCode, 1)
    assert.match(off.stderr, /^error: this node's HTTP listener is off/)
    assert.equal((await b.cli(['token', 'list', '-o', 'json'])).stdout, before, 'no token was created')
  })
})
