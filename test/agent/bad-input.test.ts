/**
 * Bad input through the real CLI: each case is one clear `error: …` line and a non-zero exit,
 * and nothing already stored changes.
 */
import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createHash } from 'node:crypto'
import { orc, startAgentProcess, tempDir, type CliResult, type RunningAgent } from './helpers.ts'

const pod = (name: string, extra = '') =>
  `apiVersion: orc/v1\nkind: Pod\nmetadata:\n  name: ${name}\n  labels: {v: "1"}\nspec:\n  containers:\n    - name: main\n      image: /img\n${extra}`

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
      .map((f) => [f, createHash('sha256').update(readFileSync(join(dir, f))).digest('hex')]),
  )
}

describe('bad input', () => {
  const tmp = tempDir()
  const dataDir = join(tmp.path, 'data')
  let agent: RunningAgent
  const run = (args: string[], input?: string) => orc(agent.socket, args, { input })
  /** Every bad batch leads with a valid change to `keep`, which must not be written. */
  const change = pod('keep').replace('v: "1"', 'v: "2"') + '---\n'
  const keepRevision = async () => JSON.parse((await run(['get', 'pod', 'keep', '-o', 'json'])).stdout).metadata

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
      [change + 'apiVersion: orc/v1\nkind: Gizmo\nmetadata: {name: g}\n', /^error: stdin document 2 \(line 11\): unknown kind "Gizmo" \(known: pods, nodes, clusters\)$/m],
      [change + pod('x', '  colour: red\n'), /^error: stdin document 2 \(line 11\): pod\/x: spec\.colour: unknown field$/m],
      [change + pod('x', '  restartPolicy: Sometimes\n'), /pod\/x: spec\.restartPolicy: must be one of Always, OnFailure, Never; got "Sometimes"$/m],
      [change + pod('Bad_Name'), /metadata\.name: must be a DNS label/],
      [change + pod('big').replace('labels: {v: "1"}', `annotations: {a: "${'x'.repeat(60000)}", b: "${'x'.repeat(60000)}", c: "${'x'.repeat(60000)}", d: "${'x'.repeat(60000)}", e: "${'x'.repeat(60000)}"}`),
        /pod\/big: object is \d+ bytes; the limit is 262144$/m],
      [change + pod('x', 'status:\n  phase: Running\n'), /pod\/x: status\.phase is owned by controller:lifecycle; user:tester may not change it/],
    ]
    for (const [input, pattern] of cases) oneLineError(await run(['apply', '-f', '-'], input), pattern)
    const meta = await keepRevision()
    assert.equal(meta.revision, 1, 'the valid document before the bad one was not applied')
    assert.deepEqual(meta.labels, { v: '1' })
    assert.equal((await run(['get', 'pods', '-o', 'name'])).stdout, 'pod/keep\n')
  })

  it('a user cannot write a controller-owned field of an existing object', async () => {
    oneLineError(await run(['apply', '-f', '-'], pod('keep', 'status:\n  node: n9\n')), /status\.node is owned by controller:scheduler/)
    assert.equal((await keepRevision()).revision, 1)
  })

  it('rollback to a missing revision, diff of a missing revision, unknown objects and bad arguments', async () => {
    oneLineError(await run(['rollback', 'pod/keep', '--to', '9']), /^error: pod\/keep has no revision 9/)
    oneLineError(await run(['diff', 'pod/keep', '1', '7']), /no revision 7/)
    oneLineError(await run(['rollback', 'pod/nothing']), /pod\/nothing/)
    oneLineError(await run(['delete', 'pod/nothing']), /^error: pod\/nothing in namespace default not found$/)
    oneLineError(await run(['get', 'gizmos']), /^error: unknown kind "gizmos"/)
    oneLineError(await run(['history', 'web']), /expected KIND\/NAME, like pod\/web/)
    oneLineError(await run(['history', 'pod/keep', '--since', 'yesterday-ish']), /--since "yesterday-ish": expected a duration/)
    oneLineError(await run(['get', 'pods', '-o', 'xml']), /error: option '-o, --output <format>' argument 'xml' is invalid/)
    oneLineError(await run(['frobnicate']), /error: unknown command 'frobnicate'/)
    oneLineError(await run(['apply']), /apply needs -f FILE/)
    oneLineError(await run(['apply', '-f', join(tmp.path, 'missing.yaml')]), /missing\.yaml: no such file/)
    assert.equal((await keepRevision()).revision, 1)
  })

  it('--debug adds the error code and cause chain', async () => {
    const r = await run(['--debug', 'rollback', 'pod/keep', '--to', '9'])
    assert.equal(r.exitCode, 1)
    assert.match(r.stderr, /^error: pod\/keep has no revision 9.*\n {2}code: not_found\n/)
  })

  it('a second agent on the same data dir is refused with the first one\'s pid; the first keeps running', async () => {
    const second = await orc(undefined, ['up', '--data-dir', dataDir], { env: { ORC_LOG_LEVEL: 'warn' } })
    oneLineError(second, new RegExp(`^error: data dir ${dataDir} is in use by another orc agent \\(pid ${agent.proc.pid}\\); stop it first`))
    assert.equal(Number(readFileSync(join(dataDir, 'orc.pid'), 'utf8')), agent.proc.pid)
    assert.equal((await run(['get', 'pods', '-o', 'name'])).stdout, 'pod/keep\n', 'the first agent still answers')
  })

  it('no agent, and a socket the user may not open, give one line each', async () => {
    const none = await orc(join(tmp.path, 'nope.sock'), ['get', 'pods'])
    oneLineError(none, /no orc agent is listening at .*nope\.sock/)
    if (process.getuid?.() === 0) {
      // As root, check the socket refuses another user: run the CLI as nobody.
      const { execa } = await import('execa')
      const r = await execa('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e',
        `require('node:net').createConnection(${JSON.stringify(agent.socket)}).on('error', (e) => { console.log(e.code); process.exit(0) }).on('connect', () => { console.log('connected'); process.exit(0) })`],
        { reject: false })
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
    assert.equal((await keepRevision()).revision, 1)
  })
})
