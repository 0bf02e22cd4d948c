#!/usr/bin/env node
// Writes docs/cli.md from the CLI's own help (every command's `--help`, examples included), so
// the reference cannot drift from the code; test/unit/cli/cli-docs.test.ts fails when it is stale.
// Usage: node scripts/gen-cli-docs.mjs          (rewrite docs/cli.md)
//        node scripts/gen-cli-docs.mjs --check  (exit 1 when docs/cli.md is stale)
import { readFileSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const root = new URL('..', import.meta.url).pathname
export const CLI_DOC = `${root}docs/cli.md`

/** Help text of every command, as markdown. Deterministic: fixed width, no colours, fixed env. */
export async function renderCliDocs() {
  const { buildProgram } = await import('../src/cli/main.ts')
  // Defaults that depend on the machine (data dir, $USER) are shown for a root install.
  const io = { out: () => {}, err: () => {}, env: { ORC_DATA_DIR: '/var/lib/orc', USER: 'root' }, now: () => 0 }
  const program = buildProgram(io)
  const sections = []
  const walk = (cmd, path) => {
    let text = ''
    cmd.configureOutput({ writeOut: (s) => (text += s), getOutHelpWidth: () => 100, getOutHasColors: () => false })
    cmd.outputHelp()
    sections.push({ path, text: text.replace(/[ \t]+$/gm, '') })
    for (const sub of cmd.commands) if (!sub._hidden) walk(sub, [...path, sub.name()])
  }
  walk(program, [])
  const title = (p) => (p.length === 0 ? 'orc' : `orc ${p.join(' ')}`)
  const anchor = (p) => title(p).replace(/ /g, '-')
  return [
    '# orc command reference',
    '',
    "Generated from the CLI's own help by `node scripts/gen-cli-docs.mjs`; do not edit by hand",
    '(`test/unit/cli/cli-docs.test.ts` fails when this file is stale). Defaults that depend on the',
    'machine are shown as they are for root.',
    '',
    ...sections.slice(1).map((s) => `- [${title(s.path)}](#${anchor(s.path)})`),
    '',
    ...sections.flatMap((s) => [`## ${title(s.path)}`, '', '```text', s.text.trimEnd(), '```', '']),
  ].join('\n')
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { register } = await import('tsx/esm/api')
  register()
  await import('../src/polyfill.ts')
  const text = await renderCliDocs()
  if (process.argv.includes('--check')) {
    let cur = ''
    try {
      cur = readFileSync(CLI_DOC, 'utf8')
    } catch {}
    if (cur !== text) {
      console.error('docs/cli.md is stale: run node scripts/gen-cli-docs.mjs')
      process.exit(1)
    }
  } else {
    writeFileSync(CLI_DOC, text)
    console.error(`wrote ${CLI_DOC}`)
  }
}
