import assert from 'node:assert/strict'
import { test } from 'node:test'
import { execa } from 'execa'
import { bashCompletion, fishCompletion, zshCompletion } from '../../../src/cli/commands/ops.ts'
import { buildProgram } from '../../../src/cli/main.ts'

const io = { out: () => {}, err: () => {}, env: {}, now: () => 0 }

async function complete(script: string, words: string[]): Promise<string[]> {
  // What bash does on TAB: COMP_WORDS/COMP_CWORD set, the function called, COMPREPLY read.
  const cword = words.length - 1
  const arr = words.map((w) => `'${w}'`).join(' ')
  const r = await execa('bash', ['-c', `${script}\nCOMP_WORDS=(${arr}); COMP_CWORD=${cword}; _orc; printf '%s\\n' "\${COMPREPLY[@]}"`])
  return String(r.stdout).split('\n').filter(Boolean).sort()
}

test('bash completion offers the commands of the command table, their subcommands, flags and kinds', async () => {
  const program = buildProgram(io)
  const script = bashCompletion(program)
  const top = program.commands.map((c) => c.name()).sort()
  for (const name of ['up', 'join', 'status', 'doctor', 'events', 'version', 'completion', 'token']) assert.ok(top.includes(name), name)
  assert.deepEqual(await complete(script, ['orc', '']), top)
  assert.deepEqual(
    await complete(script, ['orc', 'do']),
    top.filter((c) => c.startsWith('do')),
  )
  assert.deepEqual(await complete(script, ['orc', 'token', '']), ['create', 'list', 'revoke'])
  assert.ok((await complete(script, ['orc', 'token', 'create', '--'])).includes('--print-install'))
  assert.ok((await complete(script, ['orc', 'up', '--http'])).includes('--http-listen'))
  assert.ok((await complete(script, ['orc', 'get', ''])).includes('pods'), 'kinds after get')
  assert.ok((await complete(script, ['orc', '--socket', '/x', 'sta'])).includes('status'), 'global flags are skipped')
})

test('zsh and fish scripts cover the same commands', async () => {
  const program = buildProgram(io)
  const zsh = zshCompletion(program)
  assert.match(zsh, /^#compdef orc\n/)
  assert.match(zsh, /bashcompinit/)
  const fish = fishCompletion(program)
  for (const c of program.commands) assert.match(fish, new RegExp(`-n '__fish_use_subcommand' -a '${c.name()}'`), c.name())
  assert.match(fish, /__fish_seen_subcommand_from create; and __fish_seen_subcommand_from token' -l print-install/)
  const hasFish = (await execa('fish', ['--version'], { reject: false }).catch(() => ({ exitCode: 1 }))).exitCode === 0
  if (hasFish) {
    const r = await execa('fish', ['--no-execute', '-c', fish], { reject: false })
    assert.equal(r.exitCode, 0, String(r.stderr))
  }
})

test('an unknown shell is one clear error', async () => {
  let err = ''
  const program = buildProgram({ ...io, err: (t: string) => (err += t) })
  program.exitOverride()
  await assert.rejects(program.parseAsync(['completion', 'tcsh'], { from: 'user' }), /completion for "tcsh": choose bash, zsh or fish/)
  assert.equal(err, '')
})
