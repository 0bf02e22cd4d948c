/**
 * Bad input through the real CLI: each case is one clear `error: …` line and a non-zero exit,
 * and nothing already stored changes.
 */

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { KINDS } from '../../src/model/registry.ts'
import { type CliResult, orc, type RunningAgent, startAgentProcess, tempDir, waitFor } from './helpers.ts'

const pod = (name: string, extra = '') =>
  `apiVersion: orc/v1\nkind: Pod\nmetadata:\n  name: ${name}\n  labels: {v: "1"}\nspec:\n  containers:\n    - name: main\n      image: busybox\n${extra}`

function oneLineError(r: CliResult, pattern: RegExp): void {
  assert.notEqual(r.exitCode, 0, 'exit code must be non-zero')
  assert.equal(r.stderr.split('\n').filter(Boolean).length, 1, `one line on stderr, got: ${r.stderr}`)
  assert.match(r.stderr, /^error: /)
  assert.match(r.stderr.trimEnd(), pattern)
}

/** Content hashes of a database dir's files, without LevelDB's own info logs (LOG, LOG.old). */
function dbFiles(dir: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(dir)
      .filter((f) => !f.startsWith('LOG'))
      .map((f) => [
        f,
        createHash('sha256')
          .update(readFileSync(join(dir, f)))
          .digest('hex'),
      ]),
  )
}

describe('bad input', () => {
  const tmp = tempDir()
  const dataDir = join(tmp.path, 'data')
  let agent: RunningAgent
  const run = (args: string[], input?: string) => orc(agent.socket, args, { input })
  /** Every bad batch leads with a valid change to `keep`, which must not be written. */
  const change = pod('keep').replace('v: "1"', 'v: "2"') + '---\n'
  const keepObject = async () => JSON.parse((await run(['get', 'pod', 'keep', '-o', 'json'])).stdout)
  /**
   * The revisions users wrote to `keep`. Its image does not exist, so controller:lifecycle keeps
   * adding status revisions (Starting, Failed, retries); only a user revision would mean a bad
   * batch got through.
   */
  const keepUserRevisions = async () =>
    JSON.parse((await run(['history', 'pod/keep', '--exclude-author', 'controller:', '-o', 'json'])).stdout).map((r: { number: number }) => r.number)
  const assertKeepUnchanged = async () => {
    assert.deepEqual(await keepUserRevisions(), [1], 'no user revision was added to pod/keep')
    const obj = await keepObject()
    assert.deepEqual(obj.metadata.labels, { v: '1' })
    assert.equal(obj.spec.containers[0].image, 'busybox')
  }

  before(async () => {
    agent = await startAgentProcess(dataDir)
    const r = await run(['apply', '-f', '-'], pod('keep'))
    assert.equal(r.exitCode, 0, r.stderr)
  })
  after(async () => {
    await agent?.stop()
    tmp.remove()
  })

  it('malformed YAML names the document and line', async () => {
    const text = change + 'apiVersion: orc/v1\nkind: Pod\nmetadata:\n  name: b\n    bad: [indent\n'
    const file = join(tmp.path, 'broken.yaml')
    writeFileSync(file, text)
    oneLineError(await run(['apply', '-f', file]), new RegExp(`^error: ${file.replace(/[.]/g, '\\.')} document 2, line \\d+ column \\d+: `))
    oneLineError(await run(['apply', '-f', '-'], '{"apiVersion": "orc/v1",'), /^error: stdin document 1, line 1 column \d+: /)
  })

  it('unknown kind, unknown field, invalid values and oversized objects are refused before any write', async () => {
    const cases: [string, RegExp][] = [
      [
        change + 'apiVersion: orc/v1\nkind: Gizmo\nmetadata: {name: g}\n',
        // Every kind the registry knows, by its plural (a new kind joins the list by registering).
        new RegExp(`^error: stdin document 2 \\(line 11\\): unknown kind "Gizmo" \\(known: ${KINDS.map((k) => k.plural).join(', ')}\\)$`, 'm'),
      ],
      [change + pod('x', '  colour: red\n'), /^error: stdin document 2 \(line 11\): pod\/x: spec\.colour: unknown field$/m],
      [change + pod('x', '  restartPolicy: Sometimes\n'), /pod\/x: spec\.restartPolicy: must be one of Always, OnFailure, Never; got "Sometimes"$/m],
      [change + pod('Bad_Name'), /metadata\.name: must be a DNS label/],
      [
        change +
          pod('big').replace(
            'labels: {v: "1"}',
            `annotations: {a: "${'x'.repeat(60000)}", b: "${'x'.repeat(60000)}", c: "${'x'.repeat(60000)}", d: "${'x'.repeat(60000)}", e: "${'x'.repeat(60000)}"}`,
          ),
        /pod\/big: object is \d+ bytes; the limit is 262144$/m,
      ],
      [change + pod('x', 'status:\n  phase: Running\n'), /pod\/x: status\.phase is owned by controller:lifecycle; user:admin may not change it/],
    ]
    for (const [input, pattern] of cases) oneLineError(await run(['apply', '-f', '-'], input), pattern)
    await assertKeepUnchanged() // the valid document before the bad one was not applied
    assert.equal((await run(['get', 'pods', '-o', 'name'])).stdout, 'pod/keep\n')
  })

  it('a user cannot write a controller-owned field of an existing object', async () => {
    // keep is bound and run here: its status holds both controllers' fields; the first changed leaf is named.
    await waitFor('pod/keep bound and started', async () => ((await keepObject()).status?.phase ? true : undefined))
    oneLineError(
      await run(['apply', '-f', '-'], pod('keep', 'status:\n  node: n9\n')),
      /^error: stdin document 1 \(line 1\): pod\/keep: status\.phase is owned by controller:lifecycle; user:admin may not change it$/,
    )
    await assertKeepUnchanged()
    assert.notEqual((await keepObject()).status.node, 'n9')
    // A pod pinned to another node gets no status here, so status.node is the only field changed.
    const away = pod('away', '  placement: {node: elsewhere}\n')
    assert.equal((await run(['apply', '-f', '-'], away)).stdout, 'pod/away created\n')
    oneLineError(
      await run(['apply', '-f', '-'], away + 'status:\n  node: n9\n'),
      /pod\/away: status\.node is owned by controller:scheduler; user:admin may not change it$/,
    )
    const stored = JSON.parse((await run(['get', 'pod', 'away', '-o', 'json'])).stdout)
    assert.equal(stored.metadata.revision, 1)
    assert.equal(stored.status, undefined)
    assert.equal((await run(['delete', 'pod/away'])).exitCode, 0)
  })

  it('rollback to a missing revision, diff of a missing revision, unknown objects and bad arguments', async () => {
    // Status writes add revisions to keep all the time: 999 is one it will not reach.
    oneLineError(await run(['rollback', 'pod/keep', '--to', '999']), /^error: pod\/keep has no revision 999/)
    oneLineError(await run(['diff', 'pod/keep', '1', '999']), /no revision 999/)
    // Without --to, status writes are skipped: nothing a user wrote differs from revision 1.
    oneLineError(await run(['rollback', 'pod/keep']), /^error: pod\/keep has no earlier revision with different content to roll back to$/)
    oneLineError(await run(['rollback', 'pod/nothing']), /pod\/nothing/)
    oneLineError(await run(['delete', 'pod/nothing']), /^error: pod\/nothing in namespace default not found$/)
    oneLineError(await run(['get', 'gizmos']), /^error: unknown kind "gizmos"/)
    // A bare name is a pod's (issue #22); none by that name, nor one close to it
    const bare = await run(['history', 'web'])
    assert.deepEqual([bare.exitCode, bare.stderr], [0, 'No revisions of pod/web match.\n'])
    oneLineError(await run(['describe', 'web']), /^error: "web": give its kind too, as KIND\/NAME \(like pod\/web\) or KIND NAME$/)
    oneLineError(await run(['history', 'pod/keep', '--since', 'yesterday-ish']), /--since "yesterday-ish": expected a duration/)
    oneLineError(await run(['get', 'pods', '-o', 'xml']), /error: option '-o, --output <format>' argument 'xml' is invalid/)
    oneLineError(await run(['frobnicate']), /error: unknown command 'frobnicate'/)
    oneLineError(await run(['apply']), /apply needs -f FILE/)
    oneLineError(await run(['apply', '-f', join(tmp.path, 'missing.yaml')]), /missing\.yaml: no such file/)
    await assertKeepUnchanged()
  })

  it('--debug adds the error code and cause chain', async () => {
    const r = await run(['--debug', 'rollback', 'pod/keep', '--to', '999'])
    assert.equal(r.exitCode, 1)
    assert.match(r.stderr, /^error: pod\/keep has no revision 999.*\n {2}code: not_found\n/)
  })

  it("a second agent on the same data dir is refused with the first one's pid; the first keeps running", async () => {
    const second = await orc(undefined, ['up', '--data-dir', dataDir], { env: { ORC_LOG_LEVEL: 'warn' } })
    oneLineError(second, new RegExp(`^error: data dir ${dataDir} is in use by another orc agent \\(pid ${agent.proc.pid}\\); stop it first`))
    assert.equal(Number(readFileSync(join(dataDir, 'orc.pid'), 'utf8')), agent.proc.pid)
    assert.equal((await run(['get', 'pods', '-o', 'name'])).stdout, 'pod/keep\n', 'the first agent still answers')
  })

  it('an unknown log level, from the flag or ORC_LOG_LEVEL, is named in one line and nothing starts', async () => {
    const fresh = join(tmp.path, 'loglevel')
    oneLineError(
      await orc(undefined, ['up', '--data-dir', fresh, '--log-level', 'loud']),
      /^error: log level "loud" \(--log-level\) is not one of trace, debug, info, warn, error/,
    )
    oneLineError(
      await orc(undefined, ['up', '--data-dir', fresh], { env: { ORC_LOG_LEVEL: 'chatty' } }),
      /^error: log level "chatty" \(ORC_LOG_LEVEL\) is not one of/,
    )
    assert.equal(existsSync(join(fresh, 'orc.sock')), false)
  })

  it('no agent, and a socket the user may not open, give one line each', async () => {
    const none = await orc(join(tmp.path, 'nope.sock'), ['get', 'pods'])
    oneLineError(none, /no orc agent is listening at .*nope\.sock/)
    if (process.getuid?.() === 0) {
      // As root, check the socket refuses another user: run the CLI as nobody.
      const { execa } = await import('execa')
      const r = await execa(
        'setpriv',
        [
          '--reuid=65534',
          '--regid=65534',
          '--clear-groups',
          process.execPath,
          '-e',
          `require('node:net').createConnection(${JSON.stringify(agent.socket)}).on('error', (e) => { console.log(e.code); process.exit(0) }).on('connect', () => { console.log('connected'); process.exit(0) })`,
        ],
        { reject: false },
      )
      assert.match(String(r.stdout), /EACCES/, `another user must not connect: ${r.stdout}${r.stderr}`)
    }
  })

  it('a corrupted database is refused with one line and left as it was', async () => {
    assert.equal(await agent.stop(), 0)
    const copy = join(tmp.path, 'corrupt')
    cpSync(dataDir, copy, { recursive: true })
    writeFileSync(join(copy, 'db', 'CURRENT'), 'garbage')
    const before = dbFiles(join(copy, 'db'))
    const r = await orc(undefined, ['up', '--data-dir', copy], { env: { ORC_LOG_LEVEL: 'warn' } })
    oneLineError(r, /database is corrupted/)
    assert.deepEqual(dbFiles(join(copy, 'db')), before, 'no database file was changed')
    assert.equal(existsSync(join(copy, 'orc.sock')), false)
    // The original data dir still opens.
    agent = await startAgentProcess(dataDir)
    await assertKeepUnchanged()
  })
})
