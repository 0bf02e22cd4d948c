import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { test } from 'node:test'
// @ts-expect-error: a plain .mjs script without type declarations
import { CLI_DOC, renderCliDocs } from '../../../scripts/gen-cli-docs.mjs'

test('docs/cli.md is the CLI help as it is now (regenerate: node scripts/gen-cli-docs.mjs)', async () => {
  const want: string = await renderCliDocs()
  assert.match(want, /^## orc doctor$/m)
  assert.match(want, /^## orc token create$/m)
  assert.match(want, /--print-install/)
  let have = ''
  try {
    have = readFileSync(CLI_DOC, 'utf8')
  } catch {}
  assert.ok(have === want, 'docs/cli.md is stale: run node scripts/gen-cli-docs.mjs')
})
