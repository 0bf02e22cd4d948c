// Secrets through a real agent (`orc up` child process) and the real CLI: a marker plaintext is
// applied, changed, listed, diffed and revealed; it is never in the LevelDB files of the data dir,
// in `get -o yaml|json`, `history`, `diff`, `events`, `metrics`, or the agent's logs (at debug). A clear-text
// Config value is the control: the same grep finds it in the data dir.
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { type CliResult, orc, type RunningAgent, startAgentProcess, tempDir, waitFor } from './helpers.ts'

const MARK = `MARKER-${randomBytes(6).toString('hex')}-pw`
const MARK2 = `${MARK}-v2`
const TOKEN = `MARKER-${randomBytes(6).toString('hex')}-tok`
/** In a file given with --from-file, not UTF-8: stored as binaryData. */
const BIN = Buffer.concat([Buffer.from([0xff, 0xfe, 0x00]), Buffer.from(`MARKER-${randomBytes(6).toString('hex')}-bin`)])
const CONTROL = `CLEAR-${randomBytes(6).toString('hex')}-config`
const EXTRA = `MARKER-${randomBytes(6).toString('hex')}-extra`
const TOKEN2 = `MARKER-${randomBytes(6).toString('hex')}-tak` // as long as TOKEN
const secrets = [MARK, MARK2, TOKEN, TOKEN2, EXTRA, BIN.subarray(3).toString()]

/** Every file under `dir` holding `needle`'s bytes. */
function filesHolding(dir: string, needle: string | Buffer): string[] {
  const out: string[] = []
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.isFile() && statSync(p).size < 512 * 1024 * 1024 && readFileSync(p).includes(needle)) out.push(p)
    }
  }
  walk(dir)
  return out
}

function leaks(text: string): string[] {
  return secrets.filter((m) => text.includes(m))
}

const manifest = (docs: object[]) => docs.map((d) => JSON.stringify({ apiVersion: 'orc/v1', ...d })).join('\n---\n')

describe('Secrets through a real agent: plaintext never leaks', () => {
  const dir = tempDir('orc-secrets-')
  const work = tempDir('orc-secrets-files-')
  let agent: RunningAgent
  let sock: string
  const run = async (args: string[], input?: string, env?: Record<string, string>): Promise<CliResult> =>
    orc(sock, args, { ...(input !== undefined ? { input } : {}), ...(env ? { env } : {}) })
  /** What every command printed: none of it may hold a secret value (except --show-secrets output). */
  const printed: string[] = []
  const ok = async (args: string[], input?: string): Promise<string> => {
    const r = await run(args, input)
    assert.equal(r.exitCode, 0, `orc ${args.join(' ')}: ${r.stderr}`)
    printed.push(r.stdout, r.stderr)
    return r.stdout
  }
  let asUser: (name: string, role: string) => Promise<(args: string[]) => Promise<CliResult>>

  before(async () => {
    agent = await startAgentProcess(dir.path, ['--log-level', 'debug'])
    sock = agent.socket
    asUser = async (name, role) => {
      const add = await run(['user', 'add', name, '--role', role])
      assert.equal(add.exitCode, 0, add.stderr)
      const cred = add.stdout.trim()
      const status = JSON.parse(await ok(['status', '-o', 'json'])) as { mesh?: { addresses: string[] } }
      const addr = status.mesh?.addresses.find((x) => x.startsWith('/ip4/127.0.0.1/tcp/'))
      assert.ok(addr, JSON.stringify(status.mesh))
      const as = (args: string[]) => run(['--node', addr!, '--credential', cred, ...args])
      await waitFor(`the remote API to know user:${name}`, async () => ((await as(['whoami'])).stdout.startsWith(`user:${name} `) ? true : undefined))
      return as
    }
  })
  after(async () => {
    await agent?.stop()
    dir.remove()
    work.remove()
  })

  const revisions = async (ref: string) => (JSON.parse(await ok(['history', ref, '-o', 'json'])) as unknown[]).length

  it('orc create secret and a multi-object apply store sealed values; get shows keys, sizes and hashes', async () => {
    writeFileSync(join(work.path, 'key.bin'), BIN)
    assert.equal(
      await ok(['create', 'secret', 'db', '--from-literal', `password=${MARK}`, '--from-file', `key=${join(work.path, 'key.bin')}`]),
      'secret/db created\n',
    )
    const file = join(work.path, 'app.yaml')
    writeFileSync(
      file,
      manifest([
        { kind: 'Config', metadata: { name: 'app' }, spec: { data: { note: CONTROL } } },
        { kind: 'Secret', metadata: { name: 'api' }, spec: { data: { token: TOKEN }, type: 'bearer' } },
      ]),
    )
    assert.equal(await ok(['apply', '-f', file]), 'config/app created\nsecret/api created\n')
    const table = await ok(['get', 'secrets'])
    assert.match(table, /^NAME\s+KEYS\s+SIZE\s+AGE\n/)
    assert.match(table, new RegExp(`\\napi\\s+1\\s+${TOKEN.length}\\s`))
    assert.match(table, new RegExp(`\\ndb\\s+2\\s+${MARK.length + BIN.length}\\s`))
    assert.match(await ok(['get', 'secrets', '-o', 'wide']), new RegExp(`\\ndb\\s+2\\s+\\d+\\s+no\\s+password:${MARK.length},key:${BIN.length}\\s`))
    const yaml = await ok(['get', 'secret', 'db', '-o', 'yaml'])
    assert.match(yaml, /password:\n\s+value: orc:enc:v1:[0-9a-f]{16}:\S+\n\s+hash: [0-9a-f]{16}\n\s+size: /)
    assert.match(yaml, /key:\n[\s\S]*binary: true/)
  })

  it('re-applying the same values writes no revision', async () => {
    const file = join(work.path, 'app.yaml')
    const n = await revisions('secret/api')
    assert.equal(await ok(['apply', '-f', file]), 'config/app unchanged\nsecret/api unchanged\n')
    // The sealed form applied back (orc get -o yaml | orc apply -f -) changes nothing either.
    assert.equal(await ok(['apply', '-f', '-'], await ok(['get', 'secret', 'api', '-o', 'yaml'])), 'secret/api unchanged\n')
    assert.equal(await revisions('secret/api'), n)
  })

  it('a changed value: history and diff name the key and its value hashes, never the value', async () => {
    const revealed = await run(['get', 'secret', 'db', '--show-secrets'])
    assert.equal(revealed.exitCode, 0, revealed.stderr)
    assert.ok(revealed.stdout.includes(`password: ${MARK}\n`), revealed.stdout)
    const file = join(work.path, 'db.yaml')
    writeFileSync(file, revealed.stdout.replace(`password: ${MARK}\n`, `password: ${MARK2}\n`))
    assert.equal(await ok(['apply', '-f', file, '--reason', 'new password']), 'secret/db configured\n')
    const history = await ok(['history', 'secret/db'])
    assert.match(history, /\n2\s+\S+\s+user:admin\s+update\s+new password\s+spec\.sealed\.password\n/)
    const diff = await ok(['diff', 'secret/db', '1', '2'])
    assert.match(
      diff,
      new RegExp(`^~ spec\\.sealed\\.password: value changed \\(hash [0-9a-f]{16} → [0-9a-f]{16}, ${MARK.length} → ${MARK2.length} bytes\\)\n$`),
    )
    await ok(['diff', 'secret/db', '1', '2', '-o', 'json'])
    await ok(['history', 'secret/db', '-o', 'yaml'])
    await ok(['get', 'secret', 'db', '-o', 'json'])
    await ok(['get', 'secrets', '-A', '-o', 'yaml'])
    await ok(['metrics'])
    const events = await ok(['events'])
    assert.match(events, /secret\/db\s+Updated\s+user:admin\s+new password/)
  })

  it('orc edit: a Secret opens sealed (a new value goes in clear under spec.data), or with --show-secrets opened; no file is left', async () => {
    const shm = () => (existsSync('/dev/shm') ? readdirSync('/dev/shm').filter((f) => f.startsWith('orc-edit-')) : [])
    const leftBefore = shm()
    const add = await run(['edit', 'secret/api'], undefined, { EDITOR: `sed -i '$a\\  data: {extra: ${EXTRA}}'` })
    assert.equal(add.exitCode, 0, add.stderr)
    assert.equal(add.stdout, 'secret/api edited\n')
    const change = await run(['edit', 'secret/api', '--show-secrets'], undefined, { EDITOR: `sed -i s/${TOKEN}/${TOKEN2}/` })
    assert.equal(change.exitCode, 0, change.stderr)
    printed.push(add.stdout, add.stderr, change.stdout, change.stderr)
    const opened = JSON.parse((await run(['get', 'secret', 'api', '--show-secrets', '-o', 'json'])).stdout)
    assert.deepEqual(opened.spec.data, { token: TOKEN2, extra: EXTRA })
    assert.deepEqual(shm(), leftBefore)
    assert.match(
      await ok(['diff', 'secret/api', '1', '3']),
      /^~ spec\.sealed\.token: value changed \(hash [0-9a-f]{16} → [0-9a-f]{16}, same size\)\n\+ spec\.sealed\.extra: added/,
    )
  })

  it('--show-secrets: admin and edit see the values; a view user reads the sealed form and is refused the values in one line', async () => {
    const edit = await asUser('eddie', 'edit')
    const e = await edit(['get', 'secret', 'api', '--show-secrets', '-o', 'json'])
    assert.equal(e.exitCode, 0, e.stderr)
    assert.equal(JSON.parse(e.stdout).spec.data.token, TOKEN2)
    const view = await asUser('vera', 'view')
    const sealed = await view(['get', 'secret', 'api', '-o', 'yaml'])
    assert.equal(sealed.exitCode, 0, sealed.stderr)
    assert.deepEqual(leaks(sealed.stdout), [])
    const refused = await view(['get', 'secret', 'api', '--show-secrets'])
    assert.equal(refused.exitCode, 1)
    assert.equal(refused.stdout, '')
    assert.match(
      refused.stderr,
      /^error: user:vera may not get Secret\/reveal in namespace default \(it opens the values; roles admin and edit grant Secret\/reveal, view does not\)\n$/,
    )
  })

  it('bad input is refused in one line naming the key, and nothing changes', async () => {
    const n = await revisions('secret/db')
    const cases: Array<[string[], RegExp, string?]> = [
      [['create', 'secret', 'bad', '--from-literal', `a/b=${MARK}`], /^error: secret\/bad: spec\.data\.a\/b: a data key is/],
      [
        ['apply', '-f', '-'],
        /^error: stdin document 1 \(line 1\): secret\/db: spec\.binaryData\.blob: binaryData values are base64\n$/,
        manifest([{ kind: 'Secret', metadata: { name: 'db' }, spec: { data: { password: MARK }, binaryData: { blob: `${MARK}!` } } }]),
      ],
    ]
    writeFileSync(join(work.path, 'big.txt'), `${MARK}\n`.padEnd(1024 * 1024 + 10, 'x'))
    cases.push([
      ['create', 'secret', 'big', '--from-file', join(work.path, 'big.txt')],
      /^error: secret\/big: spec: 1048586 bytes of data; at most 131072 \(128 KiB\) per object\n$/,
    ])
    for (const [args, want, input] of cases) {
      const r = await run(args, input)
      assert.equal(r.exitCode, 1, `orc ${args.join(' ')} was accepted`)
      assert.match(r.stderr, want)
      assert.equal(r.stderr.trimEnd().includes('\n'), false, r.stderr)
      printed.push(r.stdout, r.stderr)
    }
    assert.equal(await revisions('secret/db'), n)
    for (const name of ['bad', 'big']) assert.equal((await run(['get', 'secret', name])).exitCode, 1)
  })

  it('no plaintext in any output, in the agent log, or in the data dir (LevelDB); the clear Config value is found there', async () => {
    assert.deepEqual(leaks(printed.join('\n')), [])
    const code = await agent.stop()
    assert.equal(code, 0)
    const { stdout, stderr } = agent.output()
    assert.ok(stderr.includes('"secret revealed"'), 'the debug log was captured') // the audit line, keys only
    assert.deepEqual(leaks(stdout + stderr), [])
    assert.ok(filesHolding(join(dir.path, 'db'), CONTROL).length > 0, 'control: the grep finds a clear value in the store files')
    for (const m of [...secrets, BIN]) assert.deepEqual(filesHolding(dir.path, m), [], `plaintext ${String(m)} found in the data dir`)
  })
})
