import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { Command } from 'commander'
import { execa } from 'execa'
import { completionsOf } from '../../../src/cli/commands/complete.ts'
import { bashCompletion, fishCompletion, zshCompletion } from '../../../src/cli/commands/ops.ts'
import { buildProgram } from '../../../src/cli/main.ts'

const io = { out: () => {}, err: () => {}, env: {}, now: () => 0 }
/** The commands a user sees (`__complete` is hidden). */
const visible = (p: Command) => p.commands.filter((c) => !(c as unknown as { _hidden?: boolean })._hidden)

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
  const top = visible(program)
    .map((c) => c.name())
    .sort()
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
  for (const c of visible(program)) assert.match(fish, new RegExp(`-n '__fish_use_subcommand' -a '${c.name()}'`), c.name())
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

test('object arguments complete to names of the kind the words imply, asked of the agent once per kind', async () => {
  const program = buildProgram(io)
  const asked: string[] = []
  const names = async (kind: string, ns: string | undefined) => {
    asked.push(`${kind}@${ns ?? ''}`)
    return kind === 'Pod' ? ['web', 'db'] : kind === 'PinnedDeployment' ? ['front'] : []
  }
  const of = (words: string[]) => completionsOf(program, words, names)
  assert.deepEqual(await of(['history', '']), ['web', 'db'], 'history implies pods')
  assert.deepEqual(await of(['get', 'pods', '']), ['web', 'db'])
  assert.deepEqual(await of(['get', '']), [], 'kinds come from the static script')
  assert.deepEqual(await of(['describe', 'pod/w']), ['pod/web', 'pod/db'])
  assert.deepEqual(await of(['describe', 'pd/']), ['pd/front'])
  assert.deepEqual(await of(['scale', '-n', 'prod', '']), ['front'])
  assert.equal(asked.at(-1), 'PinnedDeployment@prod', 'the namespace flag is passed on')
  assert.deepEqual(await of(['rollout', 'status', '']), ['front'])
  assert.deepEqual(await of(['delete', 'pod', 'web', '']), ['web', 'db'], 'delete takes several names')
  assert.deepEqual(await of(['history', 'pod', 'web', '']), [], 'history takes one')
  assert.deepEqual(await of(['history', '--']), [], 'a flag is not an object')
  assert.deepEqual(await of(['status', '']), [], 'status takes no object')
  assert.deepEqual(await of(['--socket', '/x', 'why', '']), ['web', 'db'], 'global flags and their values are skipped')
})
