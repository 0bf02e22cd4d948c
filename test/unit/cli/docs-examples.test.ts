// Every `orc …` command in the operator docs parses: the command exists, its flags exist and take
// the values given (the docs cannot show a flag the CLI does not have).

import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { test } from 'node:test'
import type { Command } from 'commander'
import { buildProgram } from '../../../src/cli/main.ts'

const ROOT = new URL('../../..', import.meta.url).pathname
const DOCS = ['docs/install.md', 'docs/operations.md', 'docs/secrets.md', 'docs/jobs.md', 'docs/dashboard.md']

/** `orc …` command lines inside ```sh blocks (also inside `$(…)`, `<(…)`, before pipes/redirects). */
function examples(markdown: string): string[] {
  const out: string[] = []
  for (const block of markdown.matchAll(/```sh\n([\s\S]*?)```/g)) {
    for (const line of block[1]!.split('\n')) {
      for (const m of line.replace(/#.*$/, '').matchAll(/(?:^|\$\(|<\(|\|\s*|;\s*|&&\s*)orc\s+([^|>)&;]*)/g)) out.push(m[1]!.trim())
    }
  }
  return out
}

function words(text: string): string[] {
  return [...text.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3]!)
}

function noActions(cmd: Command): void {
  cmd.action(async () => {})
  for (const c of cmd.commands) noActions(c)
}

test('the orc commands shown in docs/install.md, docs/operations.md and docs/secrets.md parse', async () => {
  let total = 0
  for (const doc of DOCS) {
    for (const ex of examples(readFileSync(`${ROOT}${doc}`, 'utf8'))) {
      total++
      let err = ''
      const program = buildProgram({ out: () => {}, err: (t) => (err += t), env: {}, now: () => 0 })
      noActions(program)
      await assert.doesNotReject(program.parseAsync(words(ex), { from: 'user' }), `${doc}: orc ${ex}: ${err}`)
    }
  }
  assert.ok(total >= 10, `found ${total} examples`)
})
