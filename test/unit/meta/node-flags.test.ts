// The agent's V8 flags (src/agent/ops/node-flags.ts) are passed by every way orc is started: if one
// launcher lost them, that launcher's agents would take ~30 MB more RSS and nothing else would say so.

import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { test } from 'node:test'
import { NODE_ENV_WORDS, NODE_FLAGS } from '../../../src/agent/ops/node-flags.ts'

const root = new URL('../../../', import.meta.url).pathname
const read = (p: string) => readFileSync(root + p, 'utf8')
const flags = NODE_FLAGS.join(' ')
const env = NODE_ENV_WORDS.join(' ')

test('bin/orc.mjs, scripts/run.sh and the orc script install.sh writes start node with the agent flags and environment', () => {
  assert.ok(flags.length > 0)
  assert.ok(env.length > 0)
  assert.equal(read('bin/orc.mjs').split('\n')[0], `#!/usr/bin/env -S ${env} node ${flags}`)
  assert.match(read('scripts/run.sh'), new RegExp(`^ORC=\\(env ${env} node ${flags} bin/orc\\.mjs\\)$`, 'm'))
  assert.match(read('scripts/run.sh'), /^orc\(\) \{ "\$\{ORC\[@\]\}" "\$@"; \}$/m)
  // The installed script sets the environment itself: a minimal PATH may hold no `env`.
  const exports = NODE_ENV_WORDS.map((w) => `export ${w}\n`).join('')
  assert.match(read('src/agent/ops/install.sh'), new RegExp(`^${exports}exec "\\$NODE_BIN" ${flags} "\\$LIB/current/orc\\.mjs"`, 'm'))
})

test("scripts/run.sh starts the agent as its own child, so that its pid is the agent's", () => {
  // Through the orc shell function, $! was a subshell's pid: a TERM to the script reached the
  // subshell and left the agent running with its pods and NAT table.
  assert.match(read('scripts/run.sh'), /^"\$\{ORC\[@\]\}" up &\nagent=\$!$/m)
  assert.doesNotMatch(read('scripts/run.sh'), /^orc up &/m)
})
