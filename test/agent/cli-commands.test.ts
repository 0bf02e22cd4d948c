/**
 * The commands a kubectl or Nomad user reaches for (issue #22), through the real `orc` CLI against a
 * real agent: --version, describe, scale, get -w, get all, the -o forms, KIND NAME and bare NAME,
 * "did you mean", and completion of object names. The pods here select a node label no node has,
 * so they stay Pending: nothing runs, and describe has a placement reason to show.
 *
 * Most commands run in this process (`main` with its output captured), each as `orc ARGS` would,
 * against the agent's socket: a CLI process costs seconds of start-up on a loaded machine. The
 * ones whose process matters (--version, get -w, the completion script, an error's exit) run as
 * real processes.
 */

import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { execa } from 'execa'
import { parse, parseAllDocuments } from 'yaml'
import { main } from '../../src/cli/main.ts'
import { type CliResult, orc, ROOT, type RunningAgent, startAgentProcess, tempDir, waitFor } from './helpers.ts'

const POD = (name: string) => `apiVersion: orc/v1
kind: Pod
metadata:
  name: ${name}
  labels: {app: ${name}}
spec:
  nodeSelector: {zone: nowhere}
  containers:
    - name: main
      image: busybox
      command: [sleep, '3600']
`

const DEPLOYMENT = `apiVersion: orc/v1
kind: PinnedDeployment
metadata:
  name: web
spec:
  replicas: 1
  previous:
    metadata:
      labels: {app: web}
    spec:
      nodeSelector: {zone: nowhere}
      containers:
        - name: main
          image: busybox
          command: [sleep, '3600']
`

describe('operator commands against a real agent', () => {
  const tmp = tempDir()
  const dataDir = join(tmp.path, 'data')
  let agent: RunningAgent
  let sock: string
  /** `orc ARGS` in this process: the same program, io captured, the exit code read back. */
  const run = async (args: string[], env?: Record<string, string>): Promise<CliResult> => {
    let stdout = ''
    let stderr = ''
    const io = {
      out: (t: string) => void (stdout += t),
      err: (t: string) => void (stderr += t),
      env: { ...process.env, ORC_SOCKET: sock, USER: 'tester', ...env },
      now: () => Date.now(),
    }
    const before = process.exitCode
    process.exitCode = undefined
    await main(args, io)
    const exitCode = Number(process.exitCode ?? 0)
    process.exitCode = before
    return { stdout, stderr, exitCode }
  }
  const ok = async (args: string[], env?: Record<string, string>) => {
    const r = await run(args, env)
    assert.equal(r.exitCode, 0, `orc ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  const webPods = async () =>
    (JSON.parse(await ok(['get', 'pods', '-o', 'json'])).items as { metadata: { name: string } }[])
      .map((p) => p.metadata.name)
      .filter((n) => n.startsWith('web-'))

  before(async () => {
    agent = await startAgentProcess(dataDir, ['--name', 'n1'])
    sock = agent.socket
    const file = join(tmp.path, 'objects.yaml')
    writeFileSync(file, `${POD('hello')}---\n${POD('db')}---\n${DEPLOYMENT}`)
    await ok(['apply', '-f', file])
  })
  after(async () => {
    await agent?.stop()
    tmp.remove()
  })

  it('--version and -V print the client version orc version reports', async () => {
    const want = JSON.parse(await ok(['version', '--client', '-o', 'json'])).client as string
    assert.match(want, /^\d+\.\d+\.\d+/)
    const real = await orc(sock, ['--version'])
    assert.deepEqual([real.exitCode, real.stdout, real.stderr], [0, `orc ${want}\n`, ''])
    assert.equal(await ok(['-V']), `orc ${want}\n`)
  })

  it('describe shows a pod: spec, status, placement reason, its events and revisions', async () => {
    const text = await ok(['describe', 'pod/hello'])
    assert.match(text, /^Name: +hello$/m)
    assert.match(text, /^Namespace: +default$/m)
    assert.match(text, /^Kind: +Pod$/m)
    assert.match(text, /^Spec:\n {2}nodeSelector:\n {4}zone: nowhere$/m)
    assert.match(text, /^Placement \(n1\):\n {2}pod\/default\/hello: pending: 0\/1 nodes can run it.*\n {4}n1: nodeSelector zone=nowhere does not match$/m)
    assert.match(text, /^Revisions:\n {2}REV +TIME +AUTHOR +OP +REASON +CHANGES\n {2}1 +\S+ +user:\S+ +create/m)
    assert.match(text, /^Events:\n {2}TIME +OBJECT +TYPE +SOURCE +MESSAGE\n(.*\n)* {2}\S+ \S+ +default\/pod\/hello +Created +user:/m)
    // KIND NAME is the same object; json holds the same parts for a script.
    assert.match(await ok(['describe', 'pod', 'hello']), /^Name: +hello\n/)
    const d = JSON.parse(await ok(['describe', 'pod', 'hello', '-o', 'json']))
    assert.equal(d.object.metadata.name, 'hello')
    assert.ok(d.revisions.some((r: { op: string }) => r.op === 'create'))
    assert.ok(d.events.some((e: { type: string }) => e.type === 'Created'))
    assert.match(d.placement.text, /zone=nowhere does not match/)
    assert.equal(parse(await ok(['describe', 'node/n1', '-o', 'yaml'])).object.kind, 'Node')
  })

  it('scale writes a revision with a reason and the deployment pods follow', async () => {
    await waitFor('the deployment pod', async () => ((await webPods()).length === 1 ? true : undefined))
    assert.match(await ok(['scale', 'pinneddeployment/web', '--replicas', '3']), /^pinneddeployment\/web scaled from 1 to 3 replicas \(revision \d+\)\n$/)
    const revs = JSON.parse(await ok(['history', 'pinneddeployment/web', '--exclude-author', 'controller:', '-o', 'json']))
    assert.equal(revs.at(-1).reason, 'scale to 3 replicas')
    assert.deepEqual(
      revs.at(-1).changes.map((c: { path: string[] }) => c.path.join('.')),
      ['spec.replicas'],
    )
    await waitFor('three web pods', async () => ((await webPods()).length === 3 ? true : undefined))
    // The other forms, and a reason given
    assert.match(await ok(['scale', 'web', '--replicas', '2', '--reason', 'night']), /scaled from 3 to 2 replicas/)
    assert.match(await ok(['scale', 'pd', 'web', '--replicas', '2']), /^pinneddeployment\/web unchanged: already 2 replicas$/m)
    assert.equal(JSON.parse(await ok(['history', 'pinneddeployment', 'web', '--exclude-author', 'controller:', '-o', 'json'])).at(-1).reason, 'night')
    await waitFor('two web pods', async () => ((await webPods()).length === 2 ? true : undefined))
    const bad = await run(['scale', 'pod/hello', '--replicas', '2'])
    assert.equal(bad.exitCode, 1)
    assert.match(bad.stderr, /^error: pod\/hello: only pinneddeployments scale/)
  })

  it('get -w prints the list, then a change made after it started', async () => {
    const bin = join(ROOT, 'bin/orc.mjs')
    const watch = execa(process.execPath, [bin, 'get', 'pods', '-w'], { cwd: ROOT, reject: false, env: { ORC_SOCKET: sock, USER: 'tester' } })
    const json = execa(process.execPath, [bin, 'get', 'pods', '-w', '-o', 'json'], { cwd: ROOT, reject: false, env: { ORC_SOCKET: sock, USER: 'tester' } })
    let out = ''
    let jout = ''
    watch.stdout?.on('data', (d: Buffer) => (out += d.toString()))
    json.stdout?.on('data', (d: Buffer) => (jout += d.toString()))
    try {
      await waitFor('the first list', async () =>
        /^NAME +READY +STATUS/.test(out) && /^hello +0\/1 +Pending/m.test(out) && /"name":"hello"/.test(jout) ? true : undefined,
      )
      assert.doesNotMatch(out, /watched/)
      const file = join(tmp.path, 'watched.yaml')
      writeFileSync(file, POD('watched'))
      await ok(['apply', '-f', file])
      await waitFor('the new pod in the watch', async () => (/^watched +0\/1 +Pending/m.test(out) ? true : undefined), 30_000)
      await waitFor('an ADDED event', async () => (/"type":"ADDED","object":\{[^\n]*"name":"watched"/.test(jout) ? true : undefined), 30_000)
      await ok(['delete', 'watched'])
      await waitFor('the deletion in the watch', async () => (/^pod\/watched deleted$/m.test(out) ? true : undefined), 30_000)
      await waitFor('a DELETED event', async () => (/"type":"DELETED","object":\{[^\n]*"name":"watched"/.test(jout) ? true : undefined), 30_000)
      // The header is printed once; later lines are rows.
      assert.equal(out.match(/^NAME /gm)?.length, 1)
    } finally {
      watch.kill('SIGTERM')
      json.kill('SIGTERM')
      await Promise.all([watch, json])
    }
  })

  it('get all lists every namespaced kind, grouped, names as kind/name; get events lists events', async () => {
    const text = await ok(['get', 'all'])
    assert.match(text, /^NAME +READY +STATUS +NODE .*\npod\/db +0\/1 +Pending/m)
    assert.match(text, /\n\nNAME +READY +NEXT +AGE\npinneddeployment\/web +0\/\d/)
    const names = (await ok(['get', 'all', '-o', 'name'])).split('\n').filter(Boolean)
    assert.ok(names.includes('pod/hello') && names.includes('pinneddeployment/web'), names.join(' '))
    const list = JSON.parse(await ok(['get', 'all', '-o', 'json']))
    assert.equal(list.kind, 'List')
    assert.ok(list.items.some((i: { kind: string }) => i.kind === 'PinnedDeployment'))
    assert.equal(parseAllDocuments(await ok(['get', 'all', '-o', 'yaml'])).length, list.items.length)
    // get events: orc events' last hour of the namespace
    assert.match(await ok(['get', 'events']), /^TIME +OBJECT +TYPE +SOURCE +MESSAGE\n(.*\n)*\S+ \S+ +default\/pod\/hello +Created +user:/)
    const empty = await run(['get', 'all', '-n', 'nothing-here'])
    assert.equal(empty.exitCode, 0)
    assert.equal(empty.stderr, 'No resources found in nothing-here namespace.\n')
  })

  it('read commands take -o table|wide|json|yaml|name where they make sense, text being table', async () => {
    const table = await ok(['get', 'pods'])
    assert.match(table, /^NAME +READY +STATUS +NODE +REV +RESTARTS +AGE\n/)
    assert.equal((await ok(['get', 'pods', '-o', 'text'])).split('\n')[0], table.split('\n')[0])
    assert.match(await ok(['get', 'pods', '-o', 'wide']), /^NAME +READY +STATUS +NODE +IP +POLICY/)
    assert.equal(parse(await ok(['get', 'pod', 'hello', '-o', 'yaml'])).metadata.name, 'hello')
    assert.equal(JSON.parse(await ok(['get', 'pod', 'hello', '-o', 'json'])).metadata.name, 'hello')
    assert.match(await ok(['get', 'pods', '-o', 'name']), /^pod\/db\npod\/hello\n/)
    // history, events, status, version, diff, why, logs, controllers: text is the table form
    assert.match(await ok(['history', 'pod/hello', '-o', 'text']), /^REV +TIME +AUTHOR/)
    assert.match(await ok(['events', 'pod/hello', '-o', 'text']), /^TIME +OBJECT +TYPE/)
    assert.match(await ok(['status', '-o', 'table']), /^Node: +n1/)
    assert.match(await ok(['version', '-o', 'table']), /^Client: orc /)
    assert.ok(parse(await ok(['diff', 'pod/hello', '1', '1', '-o', 'yaml'])).length === 0)
    assert.deepEqual(JSON.parse(await ok(['diff', 'pd/web', '1', '2', '-o', 'json'])), parse(await ok(['diff', 'pd/web', '1', '2', '-o', 'yaml'])))
    assert.equal(JSON.parse(await ok(['why', 'hello', '-o', 'json'])).pod, 'pod/hello')
    assert.match(await ok(['why', 'hello', '-o', 'text']), /^pod\/hello: Pending/)
    // logs: -o json is taken (the pending pod has none to show), yaml is not a form of logs
    assert.match((await run(['logs', 'hello', '-o', 'json'])).stderr, /^error: pod\/hello is not bound to a node yet/)
    assert.match((await run(['logs', 'hello', '-o', 'yaml'])).stderr, /argument 'yaml' is invalid\. choose one of table, json, text/)
    assert.ok(JSON.parse(await ok(['controllers', '-o', 'json'])).controllers)
    const bad = await run(['history', 'pod/hello', '-o', 'xml'])
    assert.equal(bad.exitCode, 1)
    assert.match(bad.stderr, /option '-o, --output <format>' argument 'xml' is invalid\. choose one of table, json, yaml, text/)
  })

  it('commands take KIND/NAME, KIND NAME, and a bare NAME where the kind is implied', async () => {
    const want = JSON.parse(await ok(['history', 'pod/db', '-o', 'json']))
    assert.ok(want.length >= 1)
    assert.deepEqual(JSON.parse(await ok(['history', 'pod', 'db', '-o', 'json'])), want)
    assert.deepEqual(JSON.parse(await ok(['history', 'db', '-o', 'json'])), want)
    assert.equal(await ok(['diff', 'db', '1', '1']), 'no differences\n')
    assert.equal(await ok(['diff', 'pod', 'db', '1', '1']), 'no differences\n')
    for (const w of [['pod', 'db'], ['db'], ['pod/db']]) assert.match(await ok(['why', ...w]), /^pod\/db: Pending/, w.join(' '))
    // orc edit takes any kind as KIND NAME, with a reason recorded
    const edited = await ok(['edit', 'pinneddeployment', 'web', '--reason', 'edit test'], { ORC_EDITOR: 'sed -i s/replicas:\\ 2/replicas:\\ 1/' })
    assert.equal(edited, 'pinneddeployment/web edited\n')
    const revs = JSON.parse(await ok(['history', 'pd/web', '--exclude-author', 'controller:', '-o', 'json']))
    assert.equal(revs.at(-1).reason, 'edit test')
    assert.equal(JSON.parse(await ok(['get', 'pd', 'web', '-o', 'json'])).spec.replicas, 1)
    assert.equal(await ok(['events', 'pod', 'db', '-o', 'json']), await ok(['events', 'pod/db', '-o', 'json']))
    for (const w of [['web'], ['pd/web'], ['pinneddeployment', 'web']])
      assert.equal(JSON.parse(await ok(['rollout', 'status', ...w, '-o', 'json'])).deployment, 'web')
    assert.match((await run(['rollout', 'status', 'pod', 'db'])).stderr, /^error: pod db: rollouts are of PinnedDeployments/)
    assert.equal(await ok(['delete', 'db']), 'pod/db deleted\n')
    const file = join(tmp.path, 'db.yaml')
    writeFileSync(file, POD('db'))
    await ok(['apply', '-f', file])
  })

  it('a mistyped kind or name gets "did you mean"', async () => {
    const kind = await orc(sock, ['get', 'pdos'])
    assert.equal(kind.exitCode, 1)
    assert.match(kind.stderr, /^error: unknown kind "pdos": did you mean pods\? \(known: /)
    const kind2 = await run(['describe', 'pinneddeploymnet/web'])
    assert.match(kind2.stderr, /^error: unknown kind "pinneddeploymnet": did you mean pinneddeployment\?/)
    const name = await run(['describe', 'pod/helo'])
    assert.equal(name.exitCode, 1)
    assert.equal(name.stderr, 'error: pod/helo in namespace default not found: did you mean pod/hello?\n')
    const get = await run(['get', 'pod', 'hllo'])
    assert.match(get.stderr, /^error: pod\/hllo in namespace default not found: did you mean pod\/hello\?$/m)
    const hist = await run(['history', 'helo'])
    assert.match(hist.stderr, /^error: pod\/helo has no revisions: did you mean pod\/hello\?$/m)
    const bare = await run(['describe', 'hello'])
    assert.equal(bare.stderr, 'error: "hello": give its kind too, as KIND/NAME (like pod/hello) or KIND NAME\n')
    const nothingClose = await run(['describe', 'pod/zzzzzz'])
    assert.equal(nothingClose.stderr, 'error: pod/zzzzzz in namespace default not found\n')
  })

  it('through a remote node, with a view credential: describe, get all, get -w', async () => {
    const add = await run(['user', 'add', 'vera', '--role', 'view'])
    assert.equal(add.exitCode, 0, add.stderr)
    const cred = add.stdout.trim()
    const status = JSON.parse(await ok(['status', '-o', 'json'])) as { mesh?: { addresses: string[] } }
    const addr = status.mesh?.addresses.find((x) => x.startsWith('/ip4/127.0.0.1/tcp/'))
    assert.ok(addr, JSON.stringify(status.mesh))
    const remote = ['--node', addr!, '--credential', cred]
    await waitFor('the remote API to know user:vera', async () => ((await run([...remote, 'whoami'])).stdout.startsWith('user:vera ') ? true : undefined))
    assert.match(await ok([...remote, 'describe', 'pod', 'hello']), /^Name: +hello\n(.*\n)*Revisions:\n(.*\n)*Events:\n/)
    assert.match(await ok([...remote, 'get', 'all']), /^pinneddeployment\/web /m)
    const watch = execa(process.execPath, [join(ROOT, 'bin/orc.mjs'), ...remote, 'get', 'pods', '-w'], { cwd: ROOT, reject: false, env: { USER: 'tester' } })
    let out = ''
    watch.stdout?.on('data', (d: Buffer) => (out += d.toString()))
    try {
      await waitFor('the first list, remotely', async () => (/^hello +0\/1 +Pending/m.test(out) ? true : undefined), 60_000)
      const file = join(tmp.path, 'remote.yaml')
      writeFileSync(file, POD('remote'))
      await ok(['apply', '-f', file])
      await waitFor('the new pod in the remote watch', async () => (/^remote +0\/1 +Pending/m.test(out) ? true : undefined), 60_000)
    } finally {
      watch.kill('SIGTERM')
      await watch
    }
    await ok(['delete', 'remote'])
  })

  it('completion completes object names from the agent, and is silent without one', async () => {
    const lines = (s: string) => s.split('\n').filter(Boolean).sort()
    const pods = lines(await ok(['__complete', '--', 'history', '']))
    assert.ok(pods.includes('hello') && pods.includes('db'), pods.join(' '))
    assert.ok(lines(await ok(['__complete', '--', 'get', 'pods', ''])).includes('hello'))
    assert.ok(lines(await ok(['__complete', '--', 'describe', 'pod/'])).includes('pod/hello'))
    assert.deepEqual(lines(await ok(['__complete', '--', 'scale', '-n', 'default', ''])), ['web'])
    assert.deepEqual(lines(await ok(['__complete', '--', 'rollout', 'status', ''])), ['web'])
    assert.deepEqual(lines(await ok(['__complete', '--', 'history', '-n', 'elsewhere', ''])), [])
    // The bash script asks for them (orc on PATH is this CLI)
    const binDir = join(tmp.path, 'bin')
    await execa('mkdir', ['-p', binDir])
    writeFileSync(join(binDir, 'orc'), `#!/bin/sh\nexec "${process.execPath}" "${join(ROOT, 'bin/orc.mjs')}" "$@"\n`, { mode: 0o755 })
    const script = await ok(['completion', 'bash'])
    const r = await execa('bash', ['-c', `${script}\nCOMP_WORDS=(orc describe pod/h); COMP_CWORD=2; _orc; printf '%s\\n' "\${COMPREPLY[@]}"`], {
      env: { PATH: `${binDir}:${process.env.PATH}`, ORC_SOCKET: sock },
    })
    assert.deepEqual(lines(String(r.stdout)), ['pod/hello'])
    const none = await orc(join(tmp.path, 'no.sock'), ['__complete', '--', 'history', ''])
    assert.deepEqual([none.exitCode, none.stdout, none.stderr], [0, '', ''])
  })
})
