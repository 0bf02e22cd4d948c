/**
 * The single-node agent driven through the real `orc` CLI: apply/get/delete, history with author
 * filters, diff, rollback, status, restart on the same data dir.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse, parseAllDocuments } from 'yaml'
import { orc, startAgentProcess, tempDir, waitFor, ROOT, type RunningAgent } from './helpers.ts'

const POD = readFileSync(join(ROOT, 'examples/pod.yaml'), 'utf8')

describe('orc CLI against a real agent', () => {
  const tmp = tempDir()
  const dataDir = join(tmp.path, 'data')
  let agent: RunningAgent
  let sock: string
  const run = (args: string[], input?: string) => orc(sock, args, { input })

  before(async () => {
    agent = await startAgentProcess(dataDir, ['--name', 'n1', '--labels', 'zone=lab,disk=ssd'])
    sock = agent.socket
  })
  after(async () => {
    await agent?.stop()
    tmp.remove()
  })

  it('up says where its socket is, owner-only, and records the node and the cluster', async () => {
    const { stdout } = agent.output()
    assert.match(stdout, new RegExp(`socket: +${sock.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`))
    assert.match(stdout, /orc status/)
    assert.equal(statSync(sock).mode & 0o777, 0o600)
    assert.equal(statSync(dataDir).mode & 0o077, 0, 'data dir is private to its owner')
    assert.equal(Number(readFileSync(join(dataDir, 'orc.pid'), 'utf8')), agent.proc.pid)

    const nodes = await run(['get', 'nodes', '-o', 'wide'])
    assert.equal(nodes.exitCode, 0, nodes.stderr)
    assert.match(nodes.stdout, /^NAME +STATUS +MEMBER +LAST SEEN +LATENCY +ADDRESSES +VERSION +LABELS +AGE/)
    assert.match(nodes.stdout, /\nn1 +Ready +alive \(self\) +now +- +\/ip4\/127\.0\.0\.1\/tcp\/\d+ +\d+\.\d+\.\d+ +(disk=ssd,zone=lab|zone=lab,disk=ssd) /)

    const cluster = JSON.parse((await run(['get', 'clusters', '-o', 'json'])).stdout)
    assert.equal(cluster.items.length, 1)
    assert.match(cluster.items[0].spec.id, /^[0-9a-f]{32}$/)

    const status = await run(['status'])
    assert.match(status.stdout, /Node: +n1 /)
    assert.match(status.stdout, new RegExp(`Cluster: +default \\(id ${cluster.items[0].spec.id}\\)`))
  })

  it('applies, reports created/unchanged/configured, and shows objects as table, wide, yaml, json', async () => {
    const first = await run(['apply', '-f', join(ROOT, 'examples/pod.yaml')])
    assert.equal(first.exitCode, 0, first.stderr)
    assert.equal(first.stdout, 'pod/hello created\n')
    assert.equal((await run(['apply', '-f', '-'], POD)).stdout, 'pod/hello unchanged\n')
    const changed = await run(['apply', '-f', '-', '--author', 'alice', '--reason', 'relabel'], POD.replace('app: hello', 'app: web'))
    assert.equal(changed.stdout, 'pod/hello configured\n')

    const table = await run(['get', 'pods'])
    assert.match(table.stdout, /^NAME +STATUS +NODE +REV +AGE\nhello +Pending +<none> +2 +\d+s\n$/)
    assert.match((await run(['get', 'pods', '-o', 'wide', '-A'])).stdout, /^NAMESPACE +NAME +STATUS +NODE +POLICY +REV +AGE\ndefault +hello +Pending +<none> +best-effort +2 /)

    const y = parse((await run(['get', 'pod', 'hello', '-o', 'yaml'])).stdout)
    assert.equal(y.metadata.labels.app, 'web')
    assert.deepEqual(y.spec.containers[0].command, ['sh', '-c', 'echo hello from orc; sleep 3600'])
    assert.equal(y.metadata.updatedBy, 'user:alice')
    const j = JSON.parse((await run(['get', 'pod/hello', '-o', 'json'])).stdout)
    assert.equal(j.metadata.revision, 2)
    assert.equal(j.metadata.createdAt, y.metadata.createdAt)
  })

  it('history filters by author, diff shows what changed, rollback restores an old revision', async () => {
    const all = await run(['history', 'pod/hello'])
    assert.match(all.stdout, /^REV +TIME +AUTHOR +OP +REASON +CHANGES\n1 +\S+ +user:tester +create\n2 +\S+ +user:alice +update +relabel +metadata\.labels\.app\n$/)
    const onlyAlice = JSON.parse((await run(['history', 'pod/hello', '--author', 'alice', '-o', 'json'])).stdout)
    assert.deepEqual(onlyAlice.map((r: { number: number }) => r.number), [2])
    const notAlice = JSON.parse((await run(['history', 'pod/hello', '--exclude-author', 'user:alice', '-o', 'json'])).stdout)
    assert.deepEqual(notAlice.map((r: { author: string }) => r.author), ['user:tester'])
    const future = await run(['history', 'pod/hello', '--since', '2999-01-01T00:00:00Z'])
    assert.equal(future.stdout, '')

    const diff = await run(['diff', 'pod/hello', '1', '2'])
    assert.equal(diff.stdout, '~ metadata.labels.app: hello → web\n')

    const rb = await run(['rollback', 'pod/hello', '--to', '1', '--reason', 'web label was wrong'])
    assert.equal(rb.exitCode, 0, rb.stderr)
    assert.equal(rb.stdout, 'pod/hello rolled back to revision 1 (now revision 3)\n')
    const after = JSON.parse((await run(['get', 'pod', 'hello', '-o', 'json'])).stdout)
    assert.equal(after.metadata.labels.app, 'hello')
    assert.match((await run(['history', 'pod/hello'])).stdout, /\n3 +\S+ +user:tester +rollback to 1 +web label was wrong +metadata\.labels\.app\n$/)
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
    const hist = JSON.parse((await run(['history', 'pod/hello', '-o', 'json'])).stdout)
    assert.deepEqual(hist.map((r: { op: string }) => r.op), ['create', 'update', 'rollback', 'delete'])
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
    assert.deepEqual(pods.map((p) => p.metadata.name), ['hello'])
    const again = JSON.parse((await run(['get', 'clusters', '-o', 'json'])).stdout)
    assert.equal(again.items[0].spec.id, clusterId, 'a restart keeps the cluster')
    const node = JSON.parse((await run(['get', 'node', 'n1', '-o', 'json'])).stdout)
    assert.deepEqual(node.metadata.labels, { zone: 'lab', disk: 'ssd' }, 'labels survive a restart without --labels')
    await waitFor('status', async () => ((await run(['status'])).exitCode === 0 ? true : undefined))
  })
})
