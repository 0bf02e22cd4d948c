#!/usr/bin/env -S MALLOC_ARENA_MAX=2 node --max-semi-space-size=2
// Entry point of the `orc` command. Runs dist/orc.mjs (built by scripts/build.mjs) when it is newer
// than every file under src/, and the TypeScript sources through tsx otherwise — what runs is always
// what is in the tree. ORC_NO_BUNDLE=1 forces the sources.
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

// `orc get pods | head` closes the pipe early; that is not an error.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err) => {
    if (err.code === 'EPIPE') process.exit(0)
    throw err
  })
}

const root = new URL('..', import.meta.url).pathname
const bundle = join(root, 'dist', 'orc.mjs')

function newestSource(dir) {
  let newest = 0
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name)
    newest = Math.max(newest, e.isDirectory() ? newestSource(p) : statSync(p).mtimeMs)
  }
  return newest
}

if (!process.env.ORC_NO_BUNDLE && existsSync(bundle) && statSync(bundle).mtimeMs > newestSource(join(root, 'src'))) {
  await import(bundle)
} else {
  const { register } = await import('tsx/esm/api')
  register()
  await import('../src/polyfill.ts')
  const { main } = await import('../src/cli/main.ts')
  await main(process.argv.slice(2))
}
