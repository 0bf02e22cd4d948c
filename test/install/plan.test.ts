/**
 * The install script's decisions, without installing anything: `--dry-run` on stand-in machines.
 * A machine is a fake /etc/os-release (and /sys/module) under ORC_INSTALL_SYSROOT plus a PATH
 * that holds only the basic tools and whichever of orc's tools the machine "has".
 */

import assert from 'node:assert/strict'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { execa } from 'execa'
import { renderInstallScript, unameArch } from '../../src/agent/ops/package.ts'

const BASIC = ['sed', 'head', 'tr', 'uname', 'id', 'sort', 'cut', 'hostname', 'cat', 'base64', 'sha256sum', 'mktemp', 'rm', 'printf', 'curl']
const ORC_TOOLS = ['wg', 'wireguard-go', 'bwrap', 'runc', 'nft', 'ip']

const OS = {
  debian: 'ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
  ubuntu: 'ID=ubuntu\nID_LIKE=debian\nPRETTY_NAME="Ubuntu 24.04 LTS"\n',
  fedora: 'ID=fedora\nPRETTY_NAME="Fedora Linux 40"\n',
  rocky: 'ID="rocky"\nID_LIKE="rhel centos fedora"\nPRETTY_NAME="Rocky Linux 9.4"\n',
  arch: 'ID=arch\nPRETTY_NAME="Arch Linux"\n',
  alpine: 'ID=alpine\nPRETTY_NAME="Alpine Linux v3.20"\n',
}

function which(bin: string): string | undefined {
  return ['/usr/bin', '/bin', '/usr/sbin', '/sbin'].map((d) => join(d, bin)).find((p) => existsSync(p))
}

describe('install script plan (--dry-run)', () => {
  const ws = mkdtempSync(join(tmpdir(), 'orc-plan-'))
  let script = ''
  let n = 0

  before(async () => {
    script = join(ws, 'install.sh')
    writeFileSync(
      script,
      await renderInstallScript({
        server: 'https://192.0.2.1:7418',
        pin: 'sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=',
        version: '9.9.9',
        peer: '192.0.2.1:7419',
        sha256: 'ab'.repeat(32),
        nodeArch: unameArch(),
        nodeVersion: '20.20.0',
        nodeSha256: 'cd'.repeat(32),
      }),
    )
  })
  after(() => rmSync(ws, { recursive: true, force: true }))

  /** A stand-in machine: its OS, the tools on its PATH, its Node.js version, a kernel WireGuard module. */
  async function plan(m: { os: string; tools: string[]; node?: string; kernelWg?: boolean; args?: string[] }): Promise<Record<string, string>> {
    const dir = join(ws, `m${n++}`)
    const bin = join(dir, 'bin')
    mkdirSync(join(dir, 'etc'), { recursive: true })
    mkdirSync(bin, { recursive: true })
    writeFileSync(join(dir, 'etc/os-release'), m.os)
    if (m.kernelWg) mkdirSync(join(dir, 'sys/module/wireguard'), { recursive: true })
    for (const b of BASIC) {
      const p = which(b)
      if (p) symlinkSync(p, join(bin, b))
    }
    for (const t of m.tools) {
      writeFileSync(join(bin, t), '#!/bin/sh\nexit 0\n')
      chmodSync(join(bin, t), 0o755)
    }
    if (m.node !== undefined) {
      writeFileSync(join(bin, 'node'), `#!/bin/sh\necho ${m.node}\n`)
      chmodSync(join(bin, 'node'), 0o755)
    }
    const r = await execa('/bin/sh', [script, '--dry-run', '--prefix', join(dir, 'usr'), '--data-dir', join(dir, 'data'), ...(m.args ?? [])], {
      reject: false,
      env: { PATH: bin, ORC_INSTALL_SYSROOT: dir },
    })
    assert.equal(r.exitCode, 0, `${r.stdout}\n${r.stderr}`)
    assert.ok(!existsSync(join(dir, 'usr')) && !existsSync(join(dir, 'data')), 'a dry run creates nothing')
    return Object.fromEntries(
      String(r.stdout)
        .split('\n')
        .filter(Boolean)
        .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]),
    )
  }

  it('finds nothing missing on a Debian machine that has every tool and a recent Node.js', async () => {
    const p = await plan({ os: OS.debian, tools: ORC_TOOLS, node: '20.20.0' })
    assert.equal(p['package-manager'], 'apt')
    assert.equal(p['missing-packages'], 'none')
    assert.equal(p.wireguard, 'wireguard-go')
    assert.match(p.node!, /^system /)
    assert.match(p.install!, /^orc 9\.9\.9 into .*\/usr\/lib\/orc\/9\.9\.9/)
    assert.match(p.join!, /^192\.0\.2\.1:7419 as /)
  })

  it('installs the Debian packages of every missing tool', async () => {
    const p = await plan({ os: OS.debian, tools: [], node: '20.20.0' })
    assert.deepEqual(p['missing-packages']!.split(' ').sort(), ['bubblewrap', 'iproute2', 'nftables', 'runc', 'wireguard-go', 'wireguard-tools'])
  })

  it('needs no wireguard-go where the kernel has WireGuard', async () => {
    const p = await plan({ os: OS.ubuntu, tools: ['bwrap', 'runc', 'nft', 'ip'], node: '22.3.0', kernelWg: true })
    assert.equal(p['package-manager'], 'apt')
    assert.equal(p.wireguard, 'kernel')
    assert.equal(p['missing-packages'], 'wireguard-tools')
  })

  it('uses dnf on Fedora and RHEL rebuilds, with their package names', async () => {
    for (const os of [OS.fedora, OS.rocky]) {
      const p = await plan({ os, tools: ['wg', 'bwrap', 'runc', 'nft'], node: '20.11.1' })
      assert.equal(p['package-manager'], 'dnf')
      assert.equal(p['missing-packages'], 'iproute')
      assert.equal(p['not-packaged'], 'wireguard-go', 'Fedora packages no wireguard-go: the script says so')
    }
  })

  it('uses pacman on Arch', async () => {
    const p = await plan({ os: OS.arch, tools: ['wg', 'wireguard-go', 'bwrap', 'nft', 'ip'], node: '21.0.0' })
    assert.equal(p['package-manager'], 'pacman')
    assert.equal(p['missing-packages'], 'runc')
  })

  it('takes Node.js from the serving node when it is absent or too old (same CPU)', async () => {
    for (const node of [undefined, '18.19.0', '20.9.0']) {
      const p = await plan({ os: OS.debian, tools: ORC_TOOLS, node })
      assert.match(p.node!, /^from https:\/\/192\.0\.2\.1:7418 \(Node\.js 20\.20\.0/, `node ${node}`)
      assert.equal(p['missing-packages'], 'none')
    }
  })

  it('falls back to the distribution nodejs when the serving node has another CPU', async () => {
    const other = join(ws, 'other-arch.sh')
    writeFileSync(
      other,
      await renderInstallScript({
        server: 'https://192.0.2.1:7418',
        pin: 'sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=',
        version: '9.9.9',
        peer: '192.0.2.1:7419',
        sha256: 'ab'.repeat(32),
        nodeArch: 'riscv64',
        nodeVersion: '20.20.0',
        nodeSha256: '',
      }),
    )
    const saved = script
    script = other
    try {
      const p = await plan({ os: OS.debian, tools: ORC_TOOLS })
      assert.equal(p['missing-packages'], 'nodejs')
    } finally {
      script = saved
    }
  })

  it('refuses an unsupported distribution in one line', async () => {
    const dir = join(ws, 'alpine')
    mkdirSync(join(dir, 'etc'), { recursive: true })
    writeFileSync(join(dir, 'etc/os-release'), OS.alpine)
    const r = await execa('/bin/sh', [script, '--dry-run'], { reject: false, env: { PATH: process.env.PATH, ORC_INSTALL_SYSROOT: dir } })
    assert.equal(r.exitCode, 1)
    assert.equal(String(r.stderr), 'orc-install: error: unsupported OS: Alpine Linux v3.20 (orc supports Debian, Ubuntu, Fedora, RHEL and its rebuilds, Arch)')
  })

  it('rejects unknown options and missing values in one line', async () => {
    for (const [args, want] of [
      [['--frobnicate'], 'orc-install: error: unknown option --frobnicate (see --help)'],
      [['--token-file'], 'orc-install: error: --token-file needs a value (see --help)'],
      [
        ['--token', 'orcjoin1.abc'],
        'orc-install: error: a join token in the arguments is visible to every user of this machine (ps): give it in ORC_TOKEN or with --token-file FILE',
      ],
      [['--prefix', 'relative/dir'], 'orc-install: error: --prefix must be an absolute path'],
    ] as const) {
      const r = await execa('/bin/sh', [script, ...args], { reject: false })
      assert.equal(r.exitCode, 1, args.join(' '))
      assert.equal(String(r.stderr), want)
    }
  })
})
