/** The behaviour every real runtime must show; run by sandbox.test.ts and oci.test.ts. */

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { createServer, get as httpGet } from 'node:http'
import { join } from 'node:path'
import { test } from 'node:test'
import { createRuntime, endOf, followLog, GVISOR_PIDS_ALLOWANCE, type Runtime, readLogLines, shmDirOf } from '../../src/runtime/index.ts'
import { descendants } from '../../src/runtime/procfs.ts'
import { busyboxImages } from '../fixtures/busybox-image.ts'
import { hostUidOf, parseProbe, probeScript, skipReason, tempDir, waitFor, whichMissing } from './harness.ts'

/** Host pids whose command line holds `word`. */
function pidsRunning(word: string): number[] {
  const out: number[] = []
  for (const d of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(d)) continue
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0').includes(word)) out.push(Number(d))
    } catch {}
  }
  return out
}

/** The host process of gVisor's Sentry (argv[0] `runsc-sandbox`) below a container's wrapper. */
function sentryOf(wrapperPid: number): number | undefined {
  return descendants(wrapperPid).find((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] === 'runsc-sandbox'
    } catch {
      return false
    }
  })
}

function statusField(pid: number, field: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith(`${field}:`))
      ?.split('\t')[1]
      ?.trim()
  } catch {
    return undefined
  }
}

export function runtimeSuite(kind: 'sandbox' | 'oci' | 'gvisor'): void {
  const reason = skipReason(kind)
  const gvisor = kind === 'gvisor'
  if (reason) console.log(`# ${kind}: skipped: ${reason}`)
  const it = (name: string, fn: (ctx: { dir: string; rt: (o?: object) => Runtime }) => Promise<void>) =>
    test(`${kind}: ${name}`, async (t) => {
      if (reason) return t.skip(`skipped: ${reason}`)
      const { dir, cleanup } = tempDir(`orc-rt-${kind}-`)
      const made: Runtime[] = []
      const rt = (o: object = {}) => {
        const r = createRuntime(kind, { stateDir: join(dir, 'state'), ...o })
        made.push(r)
        return r
      }
      try {
        await fn({ dir, rt })
      } finally {
        for (const r of made) {
          await r.close()
          // kill leftovers directly: a closed runtime (a "dead agent") no longer observes exits
          for (const c of r.list()) {
            if (c.state !== 'running') continue
            for (const pid of [c.pid, ...descendants(c.pid)].reverse()) {
              try {
                process.kill(pid, 'SIGKILL')
              } catch {}
            }
          }
        }
        // bundles (and runsc's state) of containers killed behind a closed runtime's back stay on the tmpfs
        for (const prefix of [`orc-${kind}`, 'orc-gvisor-state']) rmSync(shmDirOf(prefix, join(dir, 'state')), { recursive: true, force: true })
        cleanup()
      }
    })

  it('confines the process', async ({ dir, rt }) => {
    const marker = join('/tmp', `orc-host-marker-${process.pid}-${kind}`)
    writeFileSync(marker, 'host secret\n')
    try {
      const r = rt()
      const logDir = join(dir, 'logs')
      const h = await r.start({ id: 'probe', image: busyboxImages().rootfs, command: ['/bin/sh', '-c', probeScript(marker)], logDir })
      const exit = await h.exited
      const lines = readLogLines(logDir)
      assert.equal(exit.code, 0, lines.join('\n'))
      const p = parseProbe(lines)
      assert.equal(p.uid, '65534', 'runs as the unprivileged uid')
      const pids = p.procs!.split(' ').filter(Boolean).map(Number)
      assert.ok(pids.length > 0 && pids.length <= 6 && Math.max(...pids) < 50, `sees only its own processes: ${p.procs}`)
      assert.equal(p.rootwrite, 'no', 'image root is read-only')
      assert.equal(p.tmpwrite, 'yes', 'has a private writable /tmp')
      assert.equal(p.blockdevs, '0', 'no block devices')
      const allowed = new Set(['/dev/null', '/dev/zero', '/dev/full', '/dev/random', '/dev/urandom', '/dev/tty', '/dev/ptmx', '/dev/pts/ptmx'])
      // gVisor's own emulated devices (served by the Sentry, not the host's; useless without capabilities)
      if (gvisor) for (const d of ['/dev/fuse', '/dev/net/tun']) allowed.add(d)
      for (const d of p.chardevs!.split(' ').filter(Boolean)) assert.ok(allowed.has(d), `unexpected device ${d}`)
      assert.equal(p.marker, 'hidden', 'host files are not visible')
      assert.equal(p.ifaces, 'lo', 'only loopback')
      assert.equal(p.capeff, '0000000000000000', 'no capabilities')
      if (gvisor) {
        // the Sentry reports neither; it is the Sentry that runs under no_new_privs and a host filter (next test)
        assert.equal(p.nonewprivs, '')
        assert.equal(p.seccomp, '0')
      } else {
        assert.equal(p.nonewprivs, '1')
        assert.equal(p.seccomp, process.arch === 'x64' ? '2' : '0', 'seccomp filter applied')
      }
      assert.ok(!p.rootdirs!.split(' ').includes('work'), 'no host mounts')
    } finally {
      rmSync(marker, { force: true })
    }
  })

  it('runs as a non-root uid on the host too', async ({ dir, rt }) => {
    const r = rt()
    const logDir = join(dir, 'logs')
    const h = await r.start({ id: 'uid', image: busyboxImages().rootfs, command: ['/bin/sh', '-c', 'echo up; sleep 30'], logDir })
    await waitFor('output', () => readLogLines(logDir).includes('up'))
    const { readFileSync } = await import('node:fs')
    const comm = (pid: number) => {
      try {
        return readFileSync(`/proc/${pid}/comm`, 'utf8').trim()
      } catch {
        return ''
      }
    }
    // Under gVisor the container's processes are the Sentry's tasks: on the host there is the Sentry.
    const sleeper = await waitFor(gvisor ? 'the gVisor sandbox' : 'the sleep process', () =>
      gvisor ? sentryOf(h.pid) : descendants(h.pid).find((pid) => comm(pid) === 'sleep'),
    )
    const uid = hostUidOf(sleeper)
    assert.ok(uid !== undefined && uid !== 0, `host uid of the container process is ${uid}`)
    if (gvisor) {
      assert.equal(statusField(sleeper, 'Seccomp'), '2', 'the Sentry runs under a host seccomp filter')
      assert.equal(statusField(sleeper, 'NoNewPrivs'), '1')
      // its capabilities are those of root in a user namespace of its own, mapped to that uid
      assert.notEqual(readlinkSync(`/proc/${sleeper}/ns/user`), readlinkSync('/proc/self/ns/user'), 'the Sentry has its own user namespace')
    }
    await r.stop('uid', { graceMs: 0 })
  })

  it('stops gracefully with SIGTERM, and kills what ignores it', async ({ dir, rt }) => {
    const r = rt()
    const image = busyboxImages().rootfs
    const logA = join(dir, 'a')
    await r.start({
      id: 'trap',
      image,
      command: ['/bin/sh', '-c', "trap 'echo got-term; exit 0' TERM; echo ready; while true; do sleep 0.05; done"],
      logDir: logA,
    })
    await waitFor('ready', () => readLogLines(logA).includes('ready'))
    const e1 = await r.stop('trap', { graceMs: 10_000 })
    assert.equal(e1.code, 0)
    assert.ok(readLogLines(logA).includes('got-term'), 'the process saw SIGTERM')

    const logB = join(dir, 'b')
    const h = await r.start({ id: 'stubborn', image, command: ['/bin/sh', '-c', "trap '' TERM; echo ready; while true; do sleep 0.05; done"], logDir: logB })
    await waitFor('ready', () => readLogLines(logB).includes('ready'))
    const t0 = Date.now()
    const e2 = await r.stop('stubborn', { graceMs: 300 })
    assert.ok(Date.now() - t0 >= 300, 'waited the grace period')
    assert.ok(e2.signal === 'SIGKILL' || (e2.code !== null && e2.code !== 0), `killed: ${JSON.stringify(e2)}`)
    assert.equal(r.status('stubborn')?.state, 'exited')
    await waitFor('tree gone', () => descendants(h.pid).length === 0 || undefined)
  })

  it('re-adopts running containers after an agent restart and reports gone ones', async ({ dir, rt }) => {
    const image = busyboxImages().rootfs
    const a = rt()
    const logDir = join(dir, 'logs')
    const h = await a.start({ id: 'long', image, command: ['/bin/sh', '-c', 'echo up; while true; do sleep 0.05; done'], logDir, revision: 4 })
    await a.start({ id: 'short', image, command: ['/bin/sh', '-c', 'sleep 0.2; exit 7'], logDir: join(dir, 'logs2') })
    await a.close() // the agent "dies": this instance observes nothing any more
    await waitFor('short to end', () => !existsSync(`/proc/${a.status('short')!.pid}/stat`) || undefined)

    const b = rt()
    const { adopted, gone } = await b.recover()
    assert.deepEqual(
      adopted.map((x) => x.id),
      ['long'],
    )
    assert.equal(adopted[0]!.pid, h.pid)
    assert.equal(b.status('long')?.state, 'running')
    assert.equal(b.status('long')?.revision, 4)
    assert.deepEqual(
      gone.map((g) => [g.id, g.state, g.exit?.code]),
      [['short', 'exited', 7]],
    )

    const exits: string[] = []
    b.onExit((id) => exits.push(id))
    // (under runc the shell is pid 1 and ignores an unhandled SIGTERM, so this ends in SIGKILL)
    const e = await b.stop('long', { graceMs: 1000 })
    assert.ok(e.signal === 'SIGTERM' || e.signal === 'SIGKILL', JSON.stringify(e))
    assert.deepEqual(exits, ['long'])
    await b.remove('long')
    await b.remove('short')
    assert.deepEqual(b.list(), [])
  })

  it('does not mistake a reused pid for its container', async ({ dir, rt }) => {
    const a = rt()
    const logDir = join(dir, 'logs')
    await a.start({ id: 'c', image: busyboxImages().rootfs, command: ['/bin/sh', '-c', 'sleep 30'], logDir })
    await a.close()
    // The container dies while no agent watches, and its pid goes to another process (here: this
    // test runner, which is certainly alive but started at another time).
    const recFile = join(dir, 'state', kind, 'containers', 'c', 'record.json')
    const { readFileSync } = await import('node:fs')
    const rec = JSON.parse(readFileSync(recFile, 'utf8'))
    // kill the container's own process (the sleep) so the runtime binaries wind down normally
    const comm = (pid: number) => {
      try {
        return readFileSync(`/proc/${pid}/comm`, 'utf8').trim()
      } catch {
        return ''
      }
    }
    const sleeper = await waitFor('the sleep process', () => (gvisor ? sentryOf(rec.pid) : descendants(rec.pid).find((pid) => comm(pid) === 'sleep')))
    process.kill(sleeper, 'SIGKILL')
    await waitFor('container gone', () => !existsSync(`/proc/${rec.pid}/stat`) || undefined)
    rec.pid = process.pid
    writeFileSync(recFile, JSON.stringify(rec))
    const b = rt()
    const { adopted, gone } = await b.recover()
    assert.equal(adopted.length, 0, 'a live pid with another start time is not adopted')
    assert.equal(gone[0]?.id, 'c')
    assert.notEqual(gone[0]?.state, 'running')
  })

  it('a fenced container dies once its lease is stale, even with no runtime watching (dead agent)', async ({ dir, rt }) => {
    const r = rt()
    const lease = join(dir, 'lease')
    const nowS = () => Math.floor(Date.now() / 1000)
    // Renewed as the agent does (pods/fence.ts): a new file renamed over the old. A plain rewrite
    // truncates first, and a watchdog reading the empty file then takes the lease for stale.
    const renew = () => {
      writeFileSync(`${lease}.tmp`, `${nowS()}\n`)
      renameSync(`${lease}.tmp`, lease)
    }
    renew()
    const fence = { leaseFile: lease, termAfterSeconds: 3, killAfterSeconds: 4 }
    const h = await r.start({
      id: 'fenced',
      image: busyboxImages().rootfs,
      command: ['/bin/sh', '-c', 'trap "" TERM; sleep 600 & wait'],
      logDir: join(dir, 'logs'),
      fence,
    })
    // A fresh lease keeps it running; the agent renews it (every second; here more often, so a
    // loaded machine's late timers do not age the whole-second lease past the 3 s deadline).
    let renewed = Date.now()
    for (let i = 0; i < 16; i++) {
      await new Promise((res) => setTimeout(res, 250))
      renew()
      renewed = Date.now()
    }
    assert.equal(r.status('fenced')?.state, 'running', 'a renewed lease keeps the container')
    // The agent dies (stops watching and renewing): the watchdog kills the container (it ignores SIGTERM) by itself.
    const tree = [h.pid, ...descendants(h.pid)]
    await r.close()
    await waitFor('every process of the fenced container gone', () => (tree.every((pid) => !existsSync(`/proc/${pid}/stat`)) ? true : undefined), 20_000)
    // The lease holds whole seconds (a renewal at 10.9 s writes 10): SIGTERM is due 3 s after the
    // written second, so no earlier than 2 s after the last renewal, counted from that write.
    const took = Date.now() - renewed
    assert.ok(took >= 2_000, `killed ${took} ms after the last renewal, not before the lease ran out`)
    assert.ok(existsSync(join(dir, 'state', kind, 'containers', 'fenced', 'exit.fenced')), 'the watchdog leaves a fenced mark')
  })

  it('captures logs per revision, rotates them and follows new lines', async ({ dir, rt }) => {
    const r = rt({ logs: { maxBytes: 16 * 1024, maxFiles: 3, checkIntervalMs: 50 } })
    const image = busyboxImages().rootfs
    const logDir = join(dir, 'logs')
    const big = await r.start({
      id: 'big',
      image,
      logDir,
      revision: 1,
      command: [
        '/bin/sh',
        '-c',
        'i=0; while [ $i -lt 3000 ]; do echo "line $i ................................"; i=$((i+1)); if [ $((i % 200)) = 0 ]; then sleep 0.05; fi; done; echo err-line >&2',
      ],
    })
    await big.exited
    const files = readdirSync(logDir).filter((f) => f.startsWith('1.log'))
    assert.ok(files.length <= 3, `at most 3 files: ${files}`)
    assert.ok(files.length >= 2, `rotated: ${files}`)
    const total = files.reduce((n, f) => n + statSync(join(logDir, f)).size, 0)
    assert.ok(total < 4 * 16 * 1024, `bounded: ${total} bytes`)
    assert.deepEqual(readLogLines(logDir, { revision: 1, tail: 2 }), ['line 2999 ................................', 'err-line'])

    // follow a slow writer of revision 2 from another process
    const slow = await r.start({ id: 'slow', image, logDir, revision: 2, command: ['/bin/sh', '-c', 'for i in 1 2 3 4; do echo n$i; sleep 0.1; done'] })
    const ac = new AbortController()
    const seen: string[] = []
    for await (const line of followLog(logDir, { revision: 2, signal: ac.signal, pollMs: 50 })) {
      seen.push(line)
      if (seen.length === 4) ac.abort()
    }
    assert.deepEqual(seen, ['n1', 'n2', 'n3', 'n4'])
    await slow.exited
    assert.deepEqual(readLogLines(logDir, { revision: 1, tail: 1 }), ['err-line'], 'revision 1 logs are kept apart')
  })

  it('runs from an imported OCI layout tar (layers and whiteouts applied)', async ({ dir, rt }) => {
    const r = rt()
    const logDir = join(dir, 'logs')
    const h = await r.start({ id: 'layout', image: busyboxImages().layoutTar, logDir })
    assert.equal((await h.exited).code, 0, readLogLines(logDir).join('\n'))
    assert.deepEqual(readLogLines(logDir), ['hello-from-layout', 'hello-from-layer-2'])
    const logDir2 = join(dir, 'logs2')
    const h2 = await r.start({
      id: 'layout2',
      image: busyboxImages().layoutTar,
      logDir: logDir2,
      args: ['ls /opq; test -e /etc/removed && echo removed-still-there; echo "g=$GREETING"'],
    })
    assert.equal((await h2.exited).code, 0)
    assert.deepEqual(readLogLines(logDir2), ['b', 'g=layout'])
  })

  it('enforces a pids limit', async ({ dir, rt }) => {
    const r = rt()
    if (gvisor) {
      // The limit bounds the sandbox's host threads (the Sentry's own included, plus an allowance):
      // a pod asking for 8 still starts, and the host cgroup holds the sum.
      const logDir = join(dir, 'logs')
      const h = await r.start({ id: 'forky', image: busyboxImages().rootfs, logDir, resources: { pids: 8 }, command: ['/bin/sh', '-c', 'echo up; sleep 30'] })
      await waitFor('output', () => readLogLines(logDir).includes('up'), 30_000)
      assert.equal(r.status('forky')!.enforced.pids, 'oci')
      const sentry = await waitFor('the gVisor sandbox', () => sentryOf(h.pid))
      const line = readFileSync(`/proc/${sentry}/cgroup`, 'utf8')
        .split('\n')
        .find((l) => /^[0-9]+:pids:/.test(l) || l.startsWith('0::'))!
      const path = line.slice(line.indexOf(':', line.indexOf(':') + 1) + 1)
      const max = [join('/sys/fs/cgroup/pids', path, 'pids.max'), join('/sys/fs/cgroup', path, 'pids.max')].find((f) => existsSync(f))!
      assert.equal(readFileSync(max, 'utf8').trim(), String(8 + GVISOR_PIDS_ALLOWANCE))
      await r.stop('forky', { graceMs: 0 })
      return
    }
    const logDir = join(dir, 'logs')
    const h = await r.start({
      id: 'forky',
      image: busyboxImages().rootfs,
      logDir,
      resources: { pids: 8 },
      command: ['/bin/sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do sleep 1 & done; wait; echo done'],
    })
    await h.exited
    const st = r.status('forky')!
    assert.ok(st.enforced.pids, 'the host enforces pids here')
    const out = readLogLines(logDir)
    assert.ok(
      out.some((l) => /can't fork|resource temporarily unavailable/i.test(l)),
      `forks were refused: ${out.join(' | ')}`,
    )
    assert.ok(st.enforced.pids === 'oci' || st.enforced.pids === 'cgroup-v1' || st.enforced.pids === 'cgroup-v2')
  })

  it('exec runs a command inside the running container (namespaces, files, identity, cgroups, env)', async ({ dir, rt }) => {
    const r = rt()
    const logDir = join(dir, 'logs')
    const marker = 100_000 + (process.pid % 50_000)
    await r.start({
      id: 'ex',
      image: busyboxImages().rootfs,
      command: ['/bin/sh', '-c', `echo made-by-main > /tmp/f; echo up; sleep ${marker}`],
      env: { FROM_SPEC: 'spec-value' },
      resources: { memoryBytes: 64 << 20, pids: 64 },
      logDir,
    })
    await waitFor('output', () => readLogLines(logDir).includes('up'))
    const script = [
      'cat /tmp/f',
      'echo "env=$FROM_SPEC/$EXTRA"',
      'echo "uid=$(id -u)"',
      `if ps | grep -q "sleep ${marker}"; then echo sees-main=yes; else echo sees-main=no; fi`,
      'echo "capeff=$(grep CapEff /proc/self/status | cut -f2)"',
      'echo "nonewprivs=$(grep NoNewPrivs /proc/self/status | cut -f2)"',
      'echo "pidscg=$(grep -E "^[0-9]+:pids:|^0::" /proc/self/cgroup | head -1 | cut -d: -f3)"',
      'echo "host=$(hostname)"',
      'if ls / | grep -qx work; then echo hostroot=yes; else echo hostroot=no; fi',
      'echo oops >&2',
      'exit 7',
    ].join('; ')
    const res = await r.exec('ex', { command: ['/bin/sh', '-c', script], env: { EXTRA: 'extra' } })
    const out = res.stdout.toString()
    assert.equal(res.code, 7, out + res.stderr.toString())
    assert.equal(res.stderr.toString(), 'oops\n')
    const lines = out.split('\n')
    assert.equal(lines[0], 'made-by-main', "sees the container's own /tmp")
    const p = parseProbe(lines)
    assert.equal(p.env, 'spec-value/extra', 'has the container environment plus the extra')
    assert.equal(p.uid, '65534', 'runs as the container user')
    assert.equal(p['sees-main'], 'yes', 'is in the container pid namespace')
    assert.equal(p.capeff, '0000000000000000')
    // gVisor: the command is a task of the same Sentry (its host cgroups are the sandbox's)
    assert.equal(p.nonewprivs, gvisor ? '' : '1')
    assert.equal(p.pidscg, gvisor ? '' : '/', 'is in the container cgroup (the root of its cgroup namespace)')
    assert.equal(p.host, 'ex')
    assert.equal(p.hostroot, 'no', 'has the image as its root')

    // stdin, timeout (the whole tree is killed), tty
    const cat = await r.exec('ex', { command: ['cat'], stdin: 'through stdin\n' })
    assert.equal(cat.stdout.toString(), 'through stdin\n')
    const slow = await r.exec('ex', { command: ['sleep', String(marker + 1)], timeoutMs: 300 })
    assert.equal(slow.timedOut, true)
    assert.equal(slow.signal, 'SIGKILL')
    await waitFor('the timed-out command to be gone', () => pidsRunning(String(marker + 1)).length === 0)
    let tty = await r.exec('ex', { command: ['/bin/sh', '-c', 'stty size; exit 3'], tty: true, rows: 31, cols: 101 })
    // Seen once in ~10 full runs under runc: the command started before its terminal was usable
    // (`stty: standard input: No such file or directory`). Retried once on that symptom only; noted
    // in docs/runtimes.md.
    if (kind === 'oci' && /stty: standard input: No such file or directory/.test(tty.stdout.toString()))
      tty = await r.exec('ex', { command: ['/bin/sh', '-c', 'stty size; exit 3'], tty: true, rows: 31, cols: 101 })
    assert.equal(tty.code, 3)
    assert.match(tty.stdout.toString(), /31 101\r\n/)
    await assert.rejects(r.exec('nope', { command: ['true'] }), /not found/)
    // usage(): the container's own cgroups account it, limits or not (orc top)
    const u = await r.usage('ex')
    assert.ok(u !== undefined && u.memoryBytes !== null && u.memoryBytes > 0, `memory is accounted: ${JSON.stringify(u)}`)
    assert.ok(u.cpuSeconds !== null && u.cpuSeconds > 0, `cpu is accounted: ${JSON.stringify(u)}`)
    await r.stop('ex', { graceMs: 100 })
    await assert.rejects(r.exec('ex', { command: ['true'] }), /not running/)
    assert.equal(await r.usage('ex'), undefined)
  })

  it('connectPort reaches a server inside the container network namespace (port-forward)', async ({ dir, rt }) => {
    const r = rt()
    const logDir = join(dir, 'logs')
    const marker = 200_000 + (process.pid % 50_000)
    await r.start({
      id: 'web',
      image: busyboxImages().rootfs,
      command: [
        '/bin/sh',
        '-c',
        `mkdir -p /tmp/www; echo served-inside > /tmp/www/index.html; httpd -f -p 127.0.0.1:8080 -h /tmp/www & echo up; sleep ${marker}`,
      ],
      logDir,
    })
    await waitFor('output', () => readLogLines(logDir).includes('up'))
    const get = async () => {
      const p = await r.connectPort('web', 8080)
      const chunks: Buffer[] = []
      p.stdout.on('data', (b: Buffer) => chunks.push(b))
      p.stdin.end('GET / HTTP/1.0\r\n\r\n')
      const exit = await p.exited
      return { exit, text: Buffer.concat(chunks).toString('utf8') }
    }
    // httpd may take a moment to listen after the shell printed
    let got = await get()
    for (let i = 0; i < 50 && !got.text.includes('served-inside'); i++) {
      await new Promise((x) => setTimeout(x, 100))
      got = await get()
    }
    assert.match(got.text, /^HTTP\/1\.[01] 200/)
    assert.match(got.text, /served-inside/)
    assert.equal(got.exit.code, 0)
    const closed = await r.connectPort('web', 8081)
    const err: Buffer[] = []
    closed.stderr.on('data', (b: Buffer) => err.push(b))
    closed.stdout.resume()
    closed.stdin.end()
    assert.equal((await closed.exited).code, 1, 'nothing listens on 8081')
    assert.match(Buffer.concat(err).toString(), /connect to port 8081/)
    await r.stop('web', { graceMs: 100 })
  })

  it('joins the pod network namespace: its IPv6 address, reachable both ways, and port-forward to it', async ({ dir, rt }) => {
    if (process.getuid?.() !== 0 || whichMissing('ip')) return
    const tag = `${kind.slice(0, 2)}${process.pid % 100_000}`
    const ns = `orc-rt-${tag}`
    const ip = (...a: string[]) => execFileSync('ip', a, { stdio: ['ignore', 'ignore', 'pipe'] })
    const server = createServer((_req, res) => res.end('from-the-host\n'))
    try {
      ip('netns', 'add', ns)
      ip('link', 'add', `v${tag}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns)
      ip('addr', 'add', 'fd97:1::1/64', 'dev', `v${tag}`, 'nodad')
      ip('link', 'set', `v${tag}`, 'up')
      ip('-n', ns, 'addr', 'add', 'fd97:1::2/64', 'dev', 'eth0', 'nodad')
      ip('-n', ns, 'link', 'set', 'eth0', 'up')
      ip('-n', ns, 'link', 'set', 'lo', 'up')
      await new Promise<void>((res) => server.listen(18_000 + (process.pid % 1000), 'fd97:1::1', () => res()))
      const hostPort = (server.address() as { port: number }).port
      const r = rt()
      const logDir = join(dir, 'logs')
      // busybox httpd forks a child per connection. Under this runsc's host networking (20221219) a
      // forked child's socket is often closed when the parent closes its copy: httpd logs "eof on
      // read" and the client gets a bare close (2 to 7 connections in 20, whichever way the client
      // comes; a server that does not fork answered 20 of 20). That is gVisor's bug, not orc's
      // (docs/runtimes.md), so under gVisor the pod serves with a non-forking loop of `nc -l`.
      const serve = gvisor
        ? `(while :; do printf "HTTP/1.0 200 OK\\r\\n\\r\\nfrom-the-pod\\n" | nc -l -p 8080 >/dev/null; done)`
        : 'mkdir -p /tmp/w; echo from-the-pod > /tmp/w/index.html; httpd -f -p [::]:8080 -h /tmp/w'
      await r.start({
        id: 'netpod',
        image: busyboxImages().rootfs,
        netnsPath: `/run/netns/${ns}`,
        command: [
          '/bin/sh',
          '-c',
          `ip -6 addr 2>/dev/null | grep -q fd97:1::2 && echo addr=yes; printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 5 fd97:1::1 ${hostPort} 2>&1; ${serve} & echo up; sleep 600`,
        ],
        logDir,
      })
      await waitFor('output', () => readLogLines(logDir).includes('up'), 30_000).catch((err) => {
        throw new Error(`${err.message}: ${readLogLines(logDir).join(' | ')}`)
      })
      const lines = readLogLines(logDir)
      assert.ok(lines.includes('addr=yes'), `the pod has its IPv6 address: ${lines.join(' | ')}`)
      assert.ok(lines.includes('from-the-host'), `the pod reached the host over IPv6: ${lines.join(' | ')}`)
      const get = () =>
        new Promise<string>((res) => {
          const req = httpGet({ host: 'fd97:1::2', port: 8080, path: '/', timeout: 2000 }, (resp) => {
            let body = ''
            resp.on('data', (c) => (body += c))
            resp.on('end', () => res(body))
          })
          req.on('error', () => res(''))
          req.on('timeout', () => req.destroy())
        })
      let body = await get()
      for (const deadline = Date.now() + 20_000; body !== 'from-the-pod\n' && Date.now() < deadline; body = await get())
        await new Promise((x) => setTimeout(x, 100))
      assert.equal(body, 'from-the-pod\n', 'the host reaches the pod on its IPv6 address')
      const forward = async () => {
        const p = await r.connectPort('netpod', 8080)
        const chunks: Buffer[] = []
        const errs: Buffer[] = []
        p.stdout.on('data', (b: Buffer) => chunks.push(b))
        p.stderr.on('data', (b: Buffer) => errs.push(b))
        p.stdin.end('GET / HTTP/1.0\r\n\r\n')
        // output may still be on its way when the process has exited
        const [exit] = await Promise.all([p.exited, endOf(p.stdout)])
        return { out: Buffer.concat(chunks).toString(), err: Buffer.concat(errs).toString(), exit }
      }
      let fwd = await forward()
      // gVisor's `nc -l` loop is between two connections for a moment: a refusal then is no failure
      for (let i = 0; gvisor && i < 5 && /connect to port 8080 failed/.test(fwd.err); i++) fwd = await forward()
      assert.match(fwd.out, /from-the-pod/, `port-forward reaches the pod in its namespace: ${JSON.stringify(fwd.exit)} ${fwd.err}`)
      await r.stop('netpod', { graceMs: 100 })
    } finally {
      server.close()
      try {
        ip('netns', 'del', ns)
      } catch {}
      try {
        ip('link', 'del', `v${tag}`)
      } catch {}
    }
  })
}
