/**
 * The bootstrap one-liner end to end, on two network-namespace "machines" of this host: machine A
 * runs an agent from this checkout; machine B has nothing of orc. `orc token create --print-install`
 * on A prints the line; B runs exactly that line (plus test-only flags: its own install prefix,
 * data dir and unit dir, and --no-start because there is no systemd here), fetching the script and
 * the package over HTTPS pinned to A's certificate key. While it runs, no process's command line
 * holds the token. Then B's installed agent starts from the unit's own ExecStart line
 * and both nodes list two members. Re-running the line is a no-op upgrade; bad input changes nothing.
 */

import assert from 'node:assert/strict'
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { execa, type ResultPromise } from 'execa'
import { ApiClient } from '../../src/cli/client.ts'
import { TEST_TUNABLES } from '../cluster/helpers.ts'
import { watchCmdlines } from '../helpers/cmdline.ts'
import { waitFor } from '../helpers/wait.ts'
import { addNetns, delNetns, linkNetns, missingPrerequisite, runSuffix } from '../net/netns.ts'

const ROOT = new URL('../..', import.meta.url).pathname
const BIN = join(ROOT, 'bin/orc.mjs')

const missing = missingPrerequisite(['ip', 'curl', 'tar', 'setpriv'])

describe('bootstrap one-liner on a fresh namespace machine', { skip: missing ? `skipped: ${missing}` : false }, () => {
  const s = runSuffix()
  const nsA = `orci-${s}-a`
  const nsB = `orci-${s}-b`
  const ipA = '198.18.211.1'
  const ipB = '198.18.211.2'
  const ws = mkdtempSync(join(tmpdir(), 'orc-install-'))
  const dataA = join(ws, 'a')
  const machineB = join(ws, 'machine-b') // B's "root file system" for orc: prefix, data, units
  const prefix = join(machineB, 'usr/local')
  const dataB = join(machineB, 'var/lib/orc')
  const units = join(machineB, 'etc/systemd/system')
  const shims = mkdtempSync(join(tmpdir(), 'orc-install-shims-')) // outside ws (0700): nobody runs from it
  const procs: ResultPromise[] = []
  // Agents run without the pod network (another test tier covers it) and with quick mesh timers.
  const env = { ORC_NETWORK: 'off', ORC_MESH_TUNABLES: TEST_TUNABLES, ORC_LOG_LEVEL: 'warn', USER: 'tester' }
  let line = ''

  function spawnIn(ns: string, cmd: string, args: string[]): ResultPromise {
    const p = execa('ip', ['netns', 'exec', ns, cmd, ...args], { reject: false, env, buffer: true, all: true })
    procs.push(p)
    return p
  }

  async function inB(script: string, extraEnv: Record<string, string> = {}): Promise<{ exitCode: number; out: string }> {
    // The line on stdin, as typed into a shell: not in any command line (`sh -c LINE` would be).
    const r = await execa('ip', ['netns', 'exec', nsB, 'sh'], {
      input: `${script}\n`,
      reject: false,
      env: { ...env, ...extraEnv },
      all: true,
      timeout: 240_000,
    })
    return { exitCode: r.exitCode ?? -1, out: String(r.all) }
  }

  async function orcAt(socket: string, args: string[], bin: string[] = [process.execPath, BIN]): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    const r = await execa(bin[0]!, [...bin.slice(1), ...args], { reject: false, env: { ...env, ORC_SOCKET: socket }, timeout: 60_000 })
    return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) }
  }

  before(async () => {
    await addNetns(nsA)
    await addNetns(nsB)
    await linkNetns({ ns: nsA, dev: 'eth0', addr: `${ipA}/30` }, { ns: nsB, dev: 'eth0', addr: `${ipB}/30` })
    // A sudo that only says it ran (the user stays who they were), for the not-root case: the
    // one-liner itself has no sudo and runs as root on a machine without one.
    chmodSync(shims, 0o755)
    writeFileSync(join(shims, 'sudo'), '#!/bin/sh\necho "sudo ran: $*" >&2\nexec "$@"\n')
    chmodSync(join(shims, 'sudo'), 0o755)
    spawnIn(nsA, process.execPath, [BIN, 'up', '--data-dir', dataA, '--name', 'a', '--listen', `${ipA}:7419`, '--http-listen', `${ipA}:7418`])
    await waitFor(
      "agent a's HTTPS listener",
      async () => (await new ApiClient(join(dataA, 'orc.sock')).call<{ http: unknown }>('GET', '/v1/status')).http ?? undefined,
      60_000,
    )
  })

  after(async () => {
    for (const p of procs) p.kill('SIGKILL')
    await Promise.allSettled(procs)
    await delNetns(nsA)
    await delNetns(nsB)
    rmSync(ws, { recursive: true, force: true })
    rmSync(shims, { recursive: true, force: true })
  })

  it('prints the one-liner, which installs orc on B and joins it to the cluster', async () => {
    const r = await orcAt(join(dataA, 'orc.sock'), ['token', 'create', '--ttl', '10m', '--print-install'])
    assert.equal(r.exitCode, 0, r.stderr)
    line = r.stdout.trim()
    assert.match(
      line,
      new RegExp(
        `^curl -fsS --pinnedpubkey 'sha256//[A-Za-z0-9+/=]+' -k https://${ipA.replace(/\./g, '\\.')}:7418/install\\.sh \\| ORC_TOKEN='orcjoin1\\.[A-Za-z0-9_-]+' sh -s --$`,
      ),
    )
    const token = /ORC_TOKEN='([^']+)'/.exec(line)![1]!

    const flags = `--prefix ${prefix} --data-dir ${dataB} --systemd-dir ${units} --name b --listen ${ipB}:7419 --no-start`
    const watch = watchCmdlines(token, new RegExp(`join .*--data-dir ${dataB}`))
    const run = await inB(`${line} ${flags}`)
    const { leaks, seen } = await watch.stop()
    assert.equal(run.exitCode, 0, run.out)
    assert.ok(seen.length > 0, 'the watch saw the orc join the installer ran')
    assert.deepEqual(leaks, [], 'no command line held the token while the installer ran')
    assert.match(run.out, /admitted to cluster [0-9a-f]{32}/)
    assert.match(run.out, /installed and joined/)
    assert.ok(existsSync(join(prefix, 'bin/orc')), 'the orc command is installed')
    assert.ok(existsSync(join(dataB, 'cluster.json')), 'B is a member (its data dir holds the cluster)')

    // The installed command is the orc A runs, and needs nothing from this checkout.
    const v = await orcAt('', ['version', '--client', '-o', 'json'], [join(prefix, 'bin/orc')])
    assert.equal(v.exitCode, 0, v.stderr)
    assert.equal(JSON.parse(v.stdout).client, JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version)
    assert.doesNotMatch(readFileSync(join(prefix, 'bin/orc'), 'utf8'), new RegExp(ROOT))

    // The unit: restarts on failure, starts the installed agent with B's flags.
    const unit = readFileSync(join(units, 'orc.service'), 'utf8')
    assert.match(unit, /^Restart=on-failure$/m)
    assert.match(unit, /^NoNewPrivileges=yes$/m)
    const exec = /^ExecStart=(.+)$/m.exec(unit)![1]!
    assert.equal(exec, `${prefix}/bin/orc up --data-dir ${dataB} --name b --listen ${ipB}:7419`)
  })

  it('passes systemd-analyze verify', async (t) => {
    assert.ok(line !== '', 'needs the install above')
    const analyze = await execa('systemd-analyze', ['--version'], { reject: false })
    if (analyze.exitCode !== 0) return t.skip('skipped: systemd-analyze is not installed')
    const r = await execa('systemd-analyze', ['verify', join(units, 'orc.service')], { reject: false, all: true })
    assert.equal(r.exitCode, 0, String(r.all))
  })

  it("B's installed agent, started as the unit would, makes a two-member cluster", async () => {
    assert.ok(line !== '', 'needs the install above')
    const unit = readFileSync(join(units, 'orc.service'), 'utf8')
    const [cmd, ...args] = /^ExecStart=(.+)$/m.exec(unit)![1]!.split(' ')
    spawnIn(nsB, cmd!, [...args, '--http-listen', `${ipB}:7418`])
    const sockB = join(dataB, 'orc.sock')
    const installed = [join(prefix, 'bin/orc')]
    for (const [socket, bin] of [
      [join(dataA, 'orc.sock'), [process.execPath, BIN]],
      [sockB, installed],
    ] as const) {
      await waitFor(
        `${socket} to see two alive members`,
        async () => {
          const st = await orcAt(socket, ['status', '--json'], [...bin])
          if (st.exitCode !== 0) throw new Error(st.stderr)
          const j = JSON.parse(st.stdout)
          return j.mesh.members.total === 2 && j.mesh.members.alive === 2 ? j : undefined
        },
        90_000,
      )
    }
    const st = await orcAt(sockB, ['status'], installed)
    assert.match(st.stdout, /^b \(this node\) +alive/m)
    assert.match(st.stdout, /^a +alive +direct /m)

    // B, installed from a package, bootstraps the next machine with the very same package.
    const sha = async (ns: string, ip: string) => {
      const r = await execa('ip', ['netns', 'exec', ns, 'curl', '-fsS', '-k', `https://${ip}:7418/install.sh`], { reject: false, timeout: 120_000 })
      assert.equal(r.exitCode, 0, String(r.stderr))
      return /^ORC_SHA256='([0-9a-f]{64})'$/m.exec(String(r.stdout))![1]
    }
    assert.equal(await sha(nsA, ipB), await sha(nsB, ipA))
  })

  it('re-running the same line upgrades in place and does not join again', async () => {
    assert.ok(line !== '', 'needs the install above')
    const flags = `--prefix ${prefix} --data-dir ${dataB} --systemd-dir ${units} --name b --listen ${ipB}:7419 --no-start`
    const run = await inB(`${line} ${flags}`)
    assert.equal(run.exitCode, 0, run.out)
    assert.match(run.out, /already belongs to a cluster/)
    assert.match(run.out, /already installed/)
    assert.doesNotMatch(run.out, /joining the cluster through/)
    assert.match(run.out, /installed; \(re\)start the agent/)
    // An upgrade that names no flags keeps the node's own (its name above all).
    const bare = await inB(`${line.replace(/ORC_TOKEN='[^']*' /, '')} --prefix ${prefix} --data-dir ${dataB} --systemd-dir ${units} --no-start`)
    assert.equal(bare.exitCode, 0, bare.out)
    assert.match(
      readFileSync(join(units, 'orc.service'), 'utf8'),
      new RegExp(`^ExecStart=${prefix}/bin/orc up --data-dir ${dataB} --name b --listen ${ipB}:7419$`, 'm'),
    )
  })

  it('refuses a bad token, no root, or an unsupported OS, and changes nothing', async () => {
    assert.ok(line !== '', 'needs the install above')
    const fetchScript = line.slice(0, line.indexOf(' | '))
    const fresh = join(ws, 'fresh')
    const flags = `--prefix ${fresh}/usr --data-dir ${fresh}/data --systemd-dir ${fresh}/units --no-start`
    const cases: Array<[string, string, RegExp, Record<string, string>?]> = [
      ['damaged token', `${fetchScript} | ORC_TOKEN=orcjoin1.bm90IGEgdG9rZW4 sh -s -- ${flags}`, /^orc-install: error: bad token: it is damaged/m],
      ['used token', `${line} ${flags}`, /^orc-install: error: bad token: token already used$/m],
      [
        'not root',
        `${fetchScript} | ORC_TOKEN=x setpriv --reuid=65534 --regid=65534 --clear-groups sh -s -- --no-sudo ${flags}`,
        /^orc-install: error: must run as root/m,
      ],
      ['token in argv', `${fetchScript} | sh -s -- --token x ${flags}`, /^orc-install: error: a join token in the arguments is visible to every user/m],
    ]
    const fakeRoot = join(ws, 'gentoo')
    mkdirSync(join(fakeRoot, 'etc'), { recursive: true })
    writeFileSync(join(fakeRoot, 'etc/os-release'), 'ID=gentoo\nPRETTY_NAME="Gentoo Linux"\n')
    cases.push([
      'unsupported OS',
      `${fetchScript} | ORC_TOKEN=x sh -s -- ${flags}`,
      /^orc-install: error: unsupported OS: Gentoo Linux/m,
      { ORC_INSTALL_SYSROOT: fakeRoot },
    ])
    for (const [what, script, want, extra] of cases) {
      const r = await inB(script, extra)
      assert.equal(r.exitCode, 1, `${what}: ${r.out}`)
      assert.match(r.out, want, what)
      assert.equal(r.out.trim().split('\n').length, 1, `${what}: one line: ${r.out}`)
      assert.ok(!existsSync(fresh), `${what}: nothing was created`)
    }
  })

  it('not root, runs itself again once with sudo, with the same arguments', async () => {
    assert.ok(line !== '', 'needs the install above')
    const fetchScript = line.slice(0, line.indexOf(' | '))
    const fresh = join(ws, 'fresh')
    const flags = `--prefix ${fresh}/usr --data-dir ${fresh}/data --systemd-dir ${fresh}/units --no-start`
    // The fake sudo leaves the user as it was, so the second run (--no-sudo) refuses. sudo drops
    // ORC_TOKEN from the environment: the token goes to the second run in a file, not an argument.
    const r = await inB(`${fetchScript} | ORC_TOKEN=x setpriv --reuid=65534 --regid=65534 --clear-groups sh -s -- ${flags}`, {
      PATH: `${shims}:${process.env.PATH}`,
    })
    assert.equal(r.exitCode, 1, r.out)
    assert.deepEqual(r.out.trim().split('\n'), [
      'orc-install: not root: running again with sudo',
      `sudo ran: sh ${/sudo ran: sh (\S+)/.exec(r.out)?.[1]} --no-sudo --token-file ${/--token-file (\S+)/.exec(r.out)?.[1]} ${flags}`,
      'orc-install: error: must run as root (--no-sudo)',
    ])
    assert.ok(!existsSync(fresh), 'nothing was created')
  })
})
