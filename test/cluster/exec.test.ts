// `orc exec` and `orc port-forward` from any node: two real agents, a pod pinned to b running busybox
// httpd, reached through a (the sessions are forwarded over the mesh): exit codes, stdin, stderr, an
// interactive shell driven through tmux, real HTTP through a local port, `orc top` across both nodes,
// and a view user refused.

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { chmodSync, existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { execa } from 'execa'
import { TEST_TUNABLES as POD_TUNABLES, pidsRunning, podManifest, skipReason } from '../pods/helpers.ts'
import { newNode, orc, ROOT, tokenFrom, Workspace, waitFor } from './helpers.ts'

const skip = skipReason()
// The comment makes the pod's command line this run's own (cleanup finds it by its argv).
const SCRIPT = `echo made-by-main > /tmp/f; mkdir -p /tmp/www; echo hello-through-port-forward > /tmp/www/index.html; httpd -f -p 8080 -h /tmp/www & echo up; while true; do sleep 1; done # run ${process.pid}`

function hasTmux(): boolean {
  try {
    execFileSync('sh', ['-c', 'command -v tmux'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

test('orc exec and orc port-forward on node a reach a pod that runs on node b; a view user is refused', { skip }, async (t) => {
  const ws = new Workspace()
  chmodSync(ws.root, 0o711)
  const tmuxSession = `orc-exec-${process.pid}`
  t.after(async () => {
    try {
      execFileSync('tmux', ['kill-session', '-t', tmuxSession], { stdio: 'ignore' })
    } catch {}
    await ws.close()
    for (const pid of pidsRunning(['/bin/sh', '-c', SCRIPT])) {
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
    }
  })
  const [a, b] = [await newNode(ws, 'a'), await newNode(ws, 'b')]
  b.env = { ORC_POD_TUNABLES: JSON.stringify(POD_TUNABLES) }
  await a.up().ready()
  await b.join(a.addr, await tokenFrom(a)).ready()
  const img = await orc(undefined, ['image', 'import-busybox', '--data-dir', b.dataDir])
  assert.equal(img.exitCode, 0, img.stderr)
  const ap = await orc(a.socket, ['apply', '-f', '-'], {}, podManifest('x', 'busybox', SCRIPT, { placement: { node: 'b' } }, { app: 'x' }))
  assert.equal(ap.exitCode, 0, ap.stderr)
  await waitFor('pod/x running on b, as a sees it', async () => {
    const r = await a.cli(['get', 'pod', 'x', '-o', 'json'])
    const p = r.exitCode === 0 ? JSON.parse(r.stdout) : undefined
    return p?.status?.phase === 'Running' && p.status.node === 'b'
  })
  await waitFor('the pod to have started its server', async () => (await a.cli(['logs', 'x'])).stdout.includes('up'))

  await t.test("exec through a: the container's files, stdout and stderr apart, the command's exit code", async () => {
    const r = await a.cli(['exec', 'x', '--', 'sh', '-c', 'cat /tmp/f; hostname; echo to-stderr >&2; exit 3'])
    assert.equal(r.exitCode, 3, r.stderr)
    const host = await b.cli(['exec', 'pod/x', '--', 'hostname'])
    assert.equal(host.exitCode, 0, host.stderr)
    assert.equal(r.stdout, `made-by-main\n${host.stdout}`, 'the same container as on b itself')
    assert.match(r.stderr, /^to-stderr$/m)
    const ok = await a.cli(['exec', 'pod/x', '--', 'true'])
    assert.equal(ok.exitCode, 0, ok.stderr)
  })

  await t.test('exec -i passes stdin; without -i the command reads an empty stdin', async () => {
    const r = await orc(a.socket, ['exec', '-i', 'x', '--', 'sh', '-c', 'cat; echo done'], {}, 'line one\nline two\n')
    assert.equal(r.exitCode, 0, r.stderr)
    assert.equal(r.stdout, 'line one\nline two\ndone\n')
    const n = await orc(a.socket, ['exec', 'x', '--', 'sh', '-c', 'cat; echo empty'], {}, 'ignored\n')
    assert.equal(n.stdout, 'empty\n')
  })

  await t.test('exec names a missing container and a missing pod', async () => {
    const c = await a.cli(['exec', 'x', '-c', 'nope', '--', 'true'])
    assert.equal(c.exitCode, 1)
    assert.match(c.stderr, /no container "nope"/)
    const p = await a.cli(['exec', 'nosuch', '--', 'true'])
    assert.equal(p.exitCode, 1)
    assert.match(p.stderr, /nosuch/)
  })

  /** `orc port-forward ARGS 0:REMOTE` through a: GET / twice through the printed local port. */
  const fetchThrough = async (args: string[], shown: RegExp) => {
    const pf = execa(process.execPath, [join(ROOT, 'bin/orc.mjs'), 'port-forward', ...args], {
      cwd: ROOT,
      reject: false,
      env: { ORC_SOCKET: a.socket, USER: 'tester' },
      buffer: false,
    })
    let out = ''
    let err = ''
    pf.stdout?.on('data', (d: Buffer) => (out += d.toString()))
    pf.stderr?.on('data', (d: Buffer) => (err += d.toString()))
    try {
      const port = await waitFor('the local listener', async () => Number(shown.exec(out)?.[1]) || undefined, 20_000)
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`http://127.0.0.1:${port}/`, { headers: { connection: 'close' } })
        assert.equal(res.status, 200, err)
        assert.equal(await res.text(), 'hello-through-port-forward\n')
      }
    } finally {
      pf.kill('SIGINT')
      await pf
    }
  }

  await t.test('port-forward on a carries real HTTP to the pod on b', async () => {
    await fetchThrough(['x', '0:8080'], /127\.0\.0\.1:(\d+) -> pod\/x:8080/)
  })

  await t.test('port-forward to a service on a: a ready pod of it, on b (KIND/NAME and KIND NAME forms)', async () => {
    const svc = { apiVersion: 'orc/v1', kind: 'Service', metadata: { name: 'xs' }, spec: { selector: { app: 'x' }, ports: [{ port: 80, targetPort: 8080 }] } }
    const ap = await orc(a.socket, ['apply', '-f', '-'], {}, JSON.stringify(svc))
    assert.equal(ap.exitCode, 0, ap.stderr)
    for (const target of [['svc/xs'], ['service', 'xs']]) await fetchThrough([...target, '0:80'], /127\.0\.0\.1:(\d+) -> service\/xs:80/)
    // A port the service does not have fails at once, naming its ports.
    const bad = await a.cli(['port-forward', 'service/xs', '0:81'])
    assert.equal(bad.exitCode, 1)
    assert.match(bad.stderr, /service\/xs has no port 81 \(its ports: 80\)/)
  })

  await t.test('an interactive shell (-it) driven through tmux', { skip: hasTmux() ? false : 'skipped: tmux not installed' }, async () => {
    const done = join(ws.root, 'tmux-exit')
    const cmd = `ORC_SOCKET=${a.socket} ${process.execPath} ${join(ROOT, 'bin/orc.mjs')} exec -it x -- sh; echo "exit=$?" > ${done}`
    execFileSync('tmux', ['new-session', '-d', '-s', tmuxSession, '-x', '120', '-y', '40', cmd])
    const pane = () => execFileSync('tmux', ['capture-pane', '-p', '-t', tmuxSession], { encoding: 'utf8' })
    await waitFor('a shell prompt', async () => /[$#] ?$/m.test(pane()), 20_000)
    execFileSync('tmux', ['send-keys', '-t', tmuxSession, 'echo answer=$((6*7)); stty size', 'Enter'])
    await waitFor('the answer on the terminal', async () => pane().includes('answer=42'), 20_000)
    assert.match(pane(), /^40 120\s*$/m, 'the terminal has the size of the tmux window')
    execFileSync('tmux', ['send-keys', '-t', tmuxSession, 'exit 5', 'Enter'])
    await waitFor('the session to end', async () => existsSync(done), 20_000)
    assert.equal(readFileSync(done, 'utf8').trim(), 'exit=5')
  })

  await t.test('orc top on a shows the pod that runs on b and both nodes', async () => {
    const r = await a.cli(['top', 'pods', '-o', 'json'])
    assert.equal(r.exitCode, 0, r.stderr)
    const x = (JSON.parse(r.stdout) as any[]).find((p) => p.name === 'x')
    assert.equal(x?.node, 'b', r.stdout)
    assert.ok(x.memoryBytes > 0 && x.cpuSeconds > 0, r.stdout)
    const n = await a.cli(['top', 'nodes'])
    assert.equal(n.exitCode, 0, n.stderr)
    assert.match(n.stdout, /^a\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%\s+0$/m)
    assert.match(n.stdout, /^b\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%\s+1$/m)
  })

  await t.test('a view user may not exec or port-forward; an edit user may exec', async () => {
    const vera = (await a.cli(['user', 'add', 'vera', '--role', 'view'])).stdout.trim()
    const eddie = (await a.cli(['user', 'add', 'eddie', '--role', 'edit'])).stdout.trim()
    const remote = (cred: string, args: string[]) => orc(undefined, ['--node', a.addr, '--credential', cred, ...args])
    await waitFor('the remote API to know eddie', async () => (await remote(eddie, ['whoami'])).stdout.startsWith('user:eddie '))
    const r = await remote(vera, ['exec', 'x', '--', 'true'])
    assert.equal(r.exitCode, 1)
    assert.match(r.stderr, /user:vera may not apply Pod\/exec/)
    const e = await remote(eddie, ['exec', 'x', '--', 'sh', '-c', 'exit 4'])
    assert.equal(e.exitCode, 4, e.stderr)
    // port-forward: the listener opens, the connection is refused at the session
    const { decodeRemoteCredential, callRemoteApi, resolvePeerAddress } = await import('../../src/mesh/index.ts')
    const res = await callRemoteApi({
      addrs: await resolvePeerAddress(a.addr),
      credential: decodeRemoteCredential(vera),
      req: { method: 'POST', path: '/v1/pods/default/x/portforward', body: { port: 8080 } },
    })
    assert.equal(res.status, 403)
    assert.match(JSON.stringify(res.body), /may not apply Pod\/portforward/)
  })
})
