/**
 * The install line fetches over a channel pinned to the serving node's certificate, and the script
 * checks the package and the Node.js binary against the sha256 it carries. A test HTTPS server plays
 * the node (its certificate made by the listener's own code) and can serve tampered files; an
 * impostor with another certificate serves a tampered script. The machine is a stand-in: an
 * existing member (no join), a PATH without Node.js (so the node's binary is fetched).
 */

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:https'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { execa } from 'execa'
import { renderInstallScript, unameArch } from '../../src/agent/ops/package.ts'
import { ensureTlsIdentity, publicKeyPin } from '../../src/agent/ops/tls.ts'
import { execaRunner } from '../../src/effects/index.ts'

const TOOLS = [
  'sh',
  'sed',
  'head',
  'tr',
  'uname',
  'id',
  'sort',
  'cut',
  'hostname',
  'cat',
  'base64',
  'sha256sum',
  'mktemp',
  'rm',
  'mkdir',
  'mv',
  'ln',
  'chmod',
  'tar',
  'gzip',
  'curl',
]

function which(bin: string): string | undefined {
  return ['/usr/bin', '/bin', '/usr/sbin', '/sbin'].map((d) => join(d, bin)).find((p) => existsSync(p))
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex')
const missing = TOOLS.find((t) => which(t) === undefined)
const notRoot = process.getuid?.() !== 0

describe('install over a pinned channel', { skip: missing ? `skipped: ${missing} is not installed` : notRoot ? 'skipped: needs root' : false }, () => {
  const ws = mkdtempSync(join(tmpdir(), 'orc-verify-'))
  const servers: Server[] = []
  const genuine = { pkg: Buffer.alloc(0), node: Buffer.from('#!/bin/sh\nexit 0\n') }
  let serve = { ...genuine }
  let base = ''
  let pin = ''
  let impostor = ''
  let n = 0

  async function listen(dir: string, handler: (path: string) => Buffer | undefined): Promise<{ port: number; pin: string }> {
    const id = await ensureTlsIdentity(dir, execaRunner)
    const s = createServer({ key: id.key, cert: id.cert }, (req, res) => {
      const body = handler(new URL(req.url ?? '/', 'https://x').pathname)
      res.writeHead(body === undefined ? 404 : 200)
      res.end(body)
    })
    servers.push(s)
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
    return { port: (s.address() as AddressInfo).port, pin: id.pin }
  }

  before(async () => {
    const src = join(ws, 'pkg')
    mkdirSync(src)
    writeFileSync(join(src, 'orc.mjs'), '// stand-in package\n')
    await execa('tar', ['-czf', join(ws, 'orc.tar.gz'), '-C', src, 'orc.mjs'])
    genuine.pkg = readFileSync(join(ws, 'orc.tar.gz'))
    serve = { ...genuine }
    let script = ''
    const node = await listen(join(ws, 'node'), (p) =>
      p === '/install.sh' ? Buffer.from(script) : p === '/install/orc-9.9.9.tar.gz' ? serve.pkg : p === '/install/node' ? serve.node : undefined,
    )
    base = `https://127.0.0.1:${node.port}`
    pin = node.pin
    script = await renderInstallScript({
      server: base,
      pin,
      version: '9.9.9',
      peer: '127.0.0.1:7419',
      sha256: sha256(genuine.pkg),
      nodeArch: unameArch(),
      nodeVersion: '20.20.0',
      nodeSha256: sha256(genuine.node),
    })
    // An impostor on the path to the node: its own certificate, a script that would leave a mark.
    const evil = script.replace('set -eu\n', `set -eu\ntouch ${join(ws, 'impostor-ran')}\n`)
    const other = await listen(join(ws, 'impostor'), (p) => (p === '/install.sh' ? Buffer.from(evil) : undefined))
    impostor = `https://127.0.0.1:${other.port}`
    assert.notEqual(other.pin, pin)
  })

  after(async () => {
    for (const s of servers) s.closeAllConnections()
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))))
    rmSync(ws, { recursive: true, force: true })
  })

  /** The printed line's shape, run on a fresh stand-in member machine; its exit code, output and root. */
  async function install(from: string): Promise<{ exitCode: number; out: string; root: string }> {
    const root = join(ws, `m${n++}`)
    const bin = join(root, 'bin')
    mkdirSync(bin, { recursive: true })
    mkdirSync(join(root, 'data'))
    writeFileSync(join(root, 'data/cluster.json'), '{}\n') // a member already: upgrade, no join
    for (const t of TOOLS) symlinkSync(which(t)!, join(bin, t))
    const line = `curl -fsS --pinnedpubkey '${pin}' -k ${from}/install.sh | sh -s -- --prefix ${root}/usr --data-dir ${root}/data --no-systemd --no-start --skip-packages`
    const r = await execa('sh', ['-c', line], { reject: false, all: true, env: { PATH: bin }, extendEnv: false, timeout: 60_000 })
    return { exitCode: r.exitCode ?? -1, out: String(r.all), root }
  }

  it('the listener pin is the sha256 of the certificate public key, as curl computes it', async () => {
    const cert = readFileSync(join(ws, 'node/tls/http-cert.pem'))
    assert.equal(publicKeyPin(cert), pin)
    assert.match(pin, /^sha256\/\/[A-Za-z0-9+/]{43}=$/)
    for (const f of ['http-cert.pem', 'http-key.pem']) {
      const { statSync } = await import('node:fs')
      assert.equal(statSync(join(ws, 'node/tls', f)).mode & 0o777, 0o600, f)
    }
    // Made once: a second start keeps the same key (the pin in printed lines stays valid).
    assert.equal((await ensureTlsIdentity(join(ws, 'node'), execaRunner)).pin, pin)
  })

  it('installs the genuine package and Node.js binary', async () => {
    serve = { ...genuine }
    const r = await install(base)
    assert.equal(r.exitCode, 0, r.out)
    assert.match(r.out, /orc 9\.9\.9 installed/)
    assert.deepEqual(readFileSync(join(r.root, 'usr/lib/orc/node/bin/node')), genuine.node)
    assert.ok(existsSync(join(r.root, 'usr/lib/orc/9.9.9/orc.mjs')))
  })

  it('refuses a tampered package and installs nothing of it', async () => {
    serve = { ...genuine, pkg: Buffer.concat([genuine.pkg, Buffer.from('x')]) }
    const r = await install(base)
    assert.equal(r.exitCode, 1, r.out)
    assert.match(
      r.out,
      /^orc-install: error: the package from https:\/\/127\.0\.0\.1:\d+ does not match the sha256 this script carries \(got [0-9a-f]{64}, expected [0-9a-f]{64}\): refusing it$/m,
    )
    assert.ok(!existsSync(join(r.root, 'usr/lib/orc/9.9.9')))
    assert.ok(!existsSync(join(r.root, 'usr/bin/orc')))
  })

  it('refuses a tampered Node.js binary and never runs it', async () => {
    const mark = join(ws, 'tampered-node-ran')
    serve = { ...genuine, node: Buffer.from(`#!/bin/sh\ntouch ${mark}\n`) }
    const r = await install(base)
    assert.equal(r.exitCode, 1, r.out)
    assert.match(r.out, /^orc-install: error: the Node\.js binary from https:\/\/127\.0\.0\.1:\d+ does not match the sha256 this script carries/m)
    assert.ok(!existsSync(mark), 'the tampered binary did not run')
    assert.ok(!existsSync(join(r.root, 'usr/lib/orc/node/bin/node')))
  })

  it('refuses a script from a server without the pinned key: nothing of it runs', async () => {
    serve = { ...genuine }
    const r = await install(impostor)
    assert.match(r.out, /public key does not match pinned public key/)
    assert.ok(!existsSync(join(ws, 'impostor-ran')), 'the impostor script never ran')
    assert.ok(!existsSync(join(r.root, 'usr')))
  })
})
