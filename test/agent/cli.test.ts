/**
 * The single-node agent driven through the real `orc` CLI: apply/get/delete, history with author
 * filters, diff, rollback, status, restart on the same data dir.
 */

import assert from 'node:assert/strict'
import { chmodSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { parse, parseAllDocuments } from 'yaml'
import { skipReason } from '../pods/helpers.ts'
import { orc, ROOT, type RunningAgent, startAgentProcess, tempDir, waitFor } from './helpers.ts'

const EXAMPLE = readFileSync(join(ROOT, 'examples/pod.yaml'), 'utf8')
/** Without bwrap or a static busybox the example pod cannot run; it then ends Starting/Failed. */
const noSandbox = skipReason()

describe('orc CLI against a real agent', () => {
  const tmp = tempDir()
  const dataDir = join(tmp.path, 'data')
  let agent: RunningAgent
  let sock: string
  const run = (args: string[], input?: string) => orc(sock, args, { input })
  // examples/pod.yaml with its image in this data dir (the example names the root agent's).
  const POD = EXAMPLE.replace(/^( +image: ).*$/m, `$1${join(dataDir, 'images', 'busybox')}`)
  const podFile = join(tmp.path, 'pod.yaml')
  /** Revisions written by users, without the controllers' status writes. */
  const userHistory = async (target: string) =>
    JSON.parse((await run(['history', target, '--exclude-author', 'controller:', '-o', 'json'])).stdout) as { number: number; author: string; op: string }[]

  before(async () => {
    // Pods run as uid 65534 and must reach <data-dir>/images: the data dir is 0711, its parent too.
    chmodSync(tmp.path, 0o711)
    assert.notEqual(POD, EXAMPLE, 'the example names its image on an "image:" line')
    writeFileSync(podFile, POD)
    if (!noSandbox) {
      const img = await orc(undefined, ['image', 'import-busybox', '--data-dir', dataDir])
      assert.equal(img.exitCode, 0, img.stderr)
      // image import says what it is doing on stderr (plain lines when not a terminal)
      const copy = await orc(undefined, ['image', 'import', join(dataDir, 'images', 'busybox'), '--name', 'copy', '--data-dir', dataDir])
      assert.equal(copy.exitCode, 0, copy.stderr)
      assert.match(copy.stderr, /^importing .*images\/busybox into .*images\/copy …$/m)
      assert.match(copy.stdout, /^image copy imported \(rootfs\)/m)
    }
    agent = await startAgentProcess(dataDir, ['--name', 'n1', '--labels', 'zone=lab,disk=ssd'])
    sock = agent.socket
  })
  after(async () => {
    // Containers outlive their agent: delete the pods and wait until they are stopped and removed.
    if (agent && (await run(['delete', 'pod/hello'])).exitCode === 0) {
      await waitFor('pod/hello stopped and removed', async () => (readdirSync(join(dataDir, 'pods')).length === 0 ? true : undefined))
    }
    await agent?.stop()
    tmp.remove()
  })

  it('up says where its socket is, owner-only, and records the node and the cluster', async () => {
    // The banner follows the last component's start; the socket answers a moment before.
    const stdout = await waitFor('the banner', async () => (/Stop with Ctrl-C/.test(agent.output().stdout) ? agent.output().stdout : undefined))
    assert.match(stdout, new RegExp(`socket: +${sock.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`))
    assert.match(stdout, /orc status/)
    assert.equal(statSync(sock).mode & 0o777, 0o600)
    // Sandboxed pods (uid 65534) must traverse the data dir to reach images/ and runtime/, and nothing else.
    assert.equal(statSync(dataDir).mode & 0o777, 0o711, 'data dir: others may traverse, not list')
    assert.equal(statSync(join(dataDir, 'db')).mode & 0o777, 0o700, 'the database is private to its owner')
    for (const f of ['peer.key', 'swarm.key', 'admin.credential']) assert.equal(statSync(join(dataDir, f)).mode & 0o777, 0o600, f)
    for (const f of readdirSync(dataDir)) {
      if (['images', 'runtime', 'orc.pid'].includes(f)) continue
      assert.equal(statSync(join(dataDir, f)).mode & 0o077, 0, `${f} is private to its owner`)
    }
    assert.equal(Number(readFileSync(join(dataDir, 'orc.pid'), 'utf8')), agent.proc.pid)

    const nodes = await run(['get', 'nodes', '-o', 'wide'])
    assert.equal(nodes.exitCode, 0, nodes.stderr)
    assert.match(nodes.stdout, /^NAME +STATUS +MEMBER +LAST SEEN +LATENCY +ADDRESSES +NETWORK +VERSION +LABELS +AGE/)
    assert.match(nodes.stdout, /\nn1 +Ready +alive \(self\) +now +- +\/ip4\/127\.0\.0\.1\/tcp\/\d+ +Off +\d+\.\d+\.\d+ +(disk=ssd,zone=lab|zone=lab,disk=ssd) /)

    const cluster = JSON.parse((await run(['get', 'clusters', '-o', 'json'])).stdout)
    assert.equal(cluster.items.length, 1)
    assert.match(cluster.items[0].spec.id, /^[0-9a-f]{32}$/)

    const status = await run(['status'])
    assert.match(status.stdout, /Node: +n1 /)
    assert.match(status.stdout, new RegExp(`Cluster: +default \\(id ${cluster.items[0].spec.id}\\)`))
  })

  it('image import-busybox without --data-dir lands in the data dir of the agent it talks to', { skip: noSandbox }, async () => {
    // The agent runs on a data dir of the test's, not the default one: the CLI asks it over its socket.
    const r = await run(['image', 'import-busybox', '--name', 'viasocket'])
    assert.equal(r.exitCode, 0, r.stderr)
    assert.match(r.stdout, new RegExp(`in ${join(dataDir, 'images', 'viasocket').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: use image: viasocket`))
    assert.ok(statSync(join(dataDir, 'images', 'viasocket', 'bin')).isDirectory())
    const list = await run(['image', 'list'])
    assert.match(list.stdout, /viasocket/, 'image list reads the same data dir')
  })

  it('applies, reports created/unchanged/configured, and shows objects as table, wide, yaml, json', async () => {
    const first = await run(['apply', '-f', podFile])
    assert.equal(first.exitCode, 0, first.stderr)
    assert.equal(first.stdout, 'pod/hello created\n')
    // Status writes by the controllers meanwhile do not make the same manifest a change.
    assert.equal((await run(['apply', '-f', '-'], POD)).stdout, 'pod/hello unchanged\n')
    // The author is the socket's user (admin, on an agent without the mesh), never a flag.
    const forged = await run(['apply', '-f', '-', '--author', 'controller:scheduler'], POD.replace('app: hello', 'app: web'))
    assert.equal(forged.exitCode, 1)
    assert.match(forged.stderr, /^error: --author is no longer accepted: the author of a change is the user of your credential/)
    const changed = await run(['apply', '-f', '-', '--reason', 'relabel'], POD.replace('app: hello', 'app: web'))
    assert.equal(changed.stdout, 'pod/hello configured\n')

    if (noSandbox) {
      // The image is missing: bound to n1, it stays Starting while resolve-image retries, then Failed.
      await waitFor('pod/hello bound', async () => (JSON.parse((await run(['get', 'pod/hello', '-o', 'json'])).stdout).status?.phase ? true : undefined))
      assert.match((await run(['get', 'pods'])).stdout, /^NAME +STATUS +NODE +REV +RESTARTS +AGE\nhello +(Starting|Failed) +n1 +\d+ +0 +\d+s\n$/)
    } else {
      await waitFor('pod/hello running', async () => {
        const p = JSON.parse((await run(['get', 'pod/hello', '-o', 'json'])).stdout)
        return p.status?.phase === 'Running' && p.status.containers?.[0]?.state === 'running' ? true : undefined
      }).catch(async (err) => {
        throw new Error(`${err.message}\n${(await run(['why', 'pod/hello'])).stdout}${(await run(['logs', 'pod/hello'])).stdout}`)
      })
      // REV is the revision whose spec runs: alice's relabel did not change the spec.
      const table = await run(['get', 'pods'])
      assert.match(table.stdout, /^NAME +READY +STATUS +NODE +REV +RESTARTS +AGE\nhello +1\/1 +Running +n1 +1 +0 +\d+s\n$/)
      assert.match(
        (await run(['get', 'pods', '-o', 'wide', '-A'])).stdout,
        /^NAMESPACE +NAME +READY +STATUS +NODE +IP +POLICY +IMAGE DIGEST +REV +RESTARTS +AGE\ndefault +hello +1\/1 +Running +n1 +<none> +best-effort +<none> +1 +0 /,
      )
    }

    const y = parse((await run(['get', 'pod', 'hello', '-o', 'yaml'])).stdout)
    assert.equal(y.metadata.labels.app, 'web')
    assert.deepEqual(y.spec.containers[0].command, ['sh', '-c', 'echo hello from orc, running as uid $(id -u); sleep 3600'])
    assert.equal(y.status.node, 'n1')
    const users = await userHistory('pod/hello')
    assert.deepEqual(
      users.map((r) => [r.author, r.op]),
      [
        ['user:admin', 'create'],
        ['user:admin', 'update'],
      ],
    )
    const j = JSON.parse((await run(['get', 'pod/hello', '-o', 'json'])).stdout)
    assert.ok(j.metadata.revision >= users[1]!.number, 'the object revision counts the user revisions and the status writes')
    assert.equal(j.metadata.createdAt, y.metadata.createdAt)
  })

  it('history filters by author, diff shows what changed, rollback restores an old revision', async () => {
    const byUsers = await run(['history', 'pod/hello', '--exclude-author', 'controller:'])
    const m = byUsers.stdout.match(
      /^REV +TIME +AUTHOR +OP +REASON +CHANGES\n1 +\S+ +user:admin +create\n(\d+) +\S+ +user:admin +update +relabel +metadata\.labels\.app\n$/,
    )
    assert.ok(m, `user revisions: ${byUsers.stdout}`)
    const alice = Number(m[1])
    // The controllers' writes are in the full history: the binding first, then the lifecycle's.
    const byControllers = JSON.parse((await run(['history', 'pod/hello', '--author', 'controller:', '-o', 'json'])).stdout)
    assert.equal(byControllers[0].author, 'controller:scheduler')
    assert.match(byControllers[0].reason, /^bind to n1/)
    assert.ok(
      byControllers.slice(1).every((r: { author: string }) => r.author === 'controller:lifecycle'),
      'only the lifecycle controller writes after the binding',
    )
    const onlyAdmin = JSON.parse((await run(['history', 'pod/hello', '--author', 'admin', '-o', 'json'])).stdout)
    assert.deepEqual(
      onlyAdmin.map((r: { number: number }) => r.number),
      [1, alice],
    )
    const notAdmin = JSON.parse((await run(['history', 'pod/hello', '--exclude-author', 'user:admin', '--exclude-author', 'controller:', '-o', 'json'])).stdout)
    assert.deepEqual(notAdmin, [])
    const future = await run(['history', 'pod/hello', '--since', '2999-01-01T00:00:00Z'])
    assert.equal(future.stdout, '')

    // Alice's revision against the one before it: only her change (status writes are their own revisions).
    const diff = await run(['diff', 'pod/hello', String(alice - 1), String(alice)])
    assert.equal(diff.stdout, '~ metadata.labels.app: hello → web\n')
    assert.match((await run(['diff', 'pod/hello', '1', String(alice)])).stdout, /^~ metadata\.labels\.app: hello → web$/m)

    const rb = await run(['rollback', 'pod/hello', '--to', '1', '--reason', 'web label was wrong'])
    assert.equal(rb.exitCode, 0, rb.stderr)
    const rbm = rb.stdout.match(/^pod\/hello rolled back to revision 1 \(now revision (\d+)\)\n$/)
    assert.ok(rbm, rb.stdout)
    const after = JSON.parse((await run(['get', 'pod', 'hello', '-o', 'json'])).stdout)
    assert.equal(after.metadata.labels.app, 'hello')
    assert.equal(after.status.node, 'n1', "a rollback keeps the controllers' fields")
    assert.match(
      (await run(['history', 'pod/hello', '--exclude-author', 'controller:'])).stdout,
      new RegExp(`\n${rbm[1]} +\\S+ +user:admin +rollback to 1 +web label was wrong +metadata\\.labels\\.app\n$`),
    )

    // Without --to: the newest earlier revision whose user content differs (alice's label), not a status write.
    const undo = await run(['rollback', 'pod/hello'])
    assert.equal(undo.exitCode, 0, undo.stderr)
    assert.match(undo.stdout, /^pod\/hello rolled back to .* \(now revision \d+\)\n$/)
    assert.equal(JSON.parse((await run(['get', 'pod', 'hello', '-o', 'json'])).stdout).metadata.labels.app, 'web')
  })

  it('applies multi-document files and deletes by KIND/NAME and KIND NAME, keeping history', async () => {
    const two = POD.replace(/name: hello\n/, 'name: a\n') + '---\n' + POD.replace(/name: hello\n/, 'name: b\n').replace(/^#.*\n/, '') + '---\n'
    const file = join(tmp.path, 'two.yaml')
    writeFileSync(file, two)
    assert.equal((await run(['apply', '-f', file, '-n', 'team'])).stdout, 'pod/a created\npod/b created\n')
    assert.match((await run(['get', 'pods', '-n', 'team', '-o', 'name'])).stdout, /^pod\/a\npod\/b\n$/)
    const del = await run(['delete', 'pod', 'a', 'b', '-n', 'team'])
    assert.equal(del.stdout, 'pod/a deleted\npod/b deleted\n')
    assert.equal((await run(['delete', 'pod/hello'])).stdout, 'pod/hello deleted\n')
    const gone = await run(['get', 'pod', 'hello'])
    assert.equal(gone.exitCode, 1)
    assert.equal(gone.stderr, 'error: pod/hello in namespace default not found\n')
    const empty = await run(['get', 'pods', '-A'])
    assert.equal(empty.stdout, '')
    assert.equal(empty.stderr, 'No resources found.\n')
    assert.deepEqual(
      (await userHistory('pod/hello')).map((r) => r.op),
      ['create', 'update', 'rollback', 'rollback', 'delete'],
    )
  })

  it('stops on SIGTERM, removes its socket and pid file, and restarts with its state', async () => {
    await run(['apply', '-f', '-'], POD)
    const clusterId = JSON.parse((await run(['get', 'clusters', '-o', 'json'])).stdout).items[0].spec.id
    assert.equal(await agent.stop(), 0)
    assert.equal(existsSync(sock), false)
    assert.equal(existsSync(join(dataDir, 'orc.pid')), false)
    const down = await run(['get', 'pods'])
    assert.equal(down.exitCode, 1)
    assert.match(down.stderr, /^error: no orc agent is listening at .*orc\.sock \(start one with 'orc up'/)

    agent = await startAgentProcess(dataDir, ['--name', 'n1'])
    const pods = parseAllDocuments((await run(['get', 'pods', '-o', 'yaml'])).stdout).map((d) => d.toJS())
    assert.deepEqual(
      pods.map((p) => p.metadata.name),
      ['hello'],
    )
    const again = JSON.parse((await run(['get', 'clusters', '-o', 'json'])).stdout)
    assert.equal(again.items[0].spec.id, clusterId, 'a restart keeps the cluster')
    const node = JSON.parse((await run(['get', 'node', 'n1', '-o', 'json'])).stdout)
    assert.deepEqual(node.metadata.labels, { zone: 'lab', disk: 'ssd' }, 'labels survive a restart without --labels')
    await waitFor('status', async () => ((await run(['status'])).exitCode === 0 ? true : undefined))
  })
})
