#!/usr/bin/env node
// Bundle the CLI and agent into dist/orc.mjs (npm packages stay external). bin/orc.mjs runs the
// bundle when it is newer than every source file, and the TypeScript sources through tsx otherwise,
// so a stale bundle is never run. The bundle saves the tsx loader thread: ~0.2 s per CLI call and
// tens of MB of agent RSS (docs/benchmarks.md).
import { build } from 'esbuild'
import { readFileSync } from 'node:fs'

const root = new URL('..', import.meta.url).pathname
const pkg = JSON.parse(readFileSync(`${root}package.json`, 'utf8'))
await build({
  entryPoints: [`${root}src/cli/entry.ts`],
  outfile: `${root}dist/orc.mjs`,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  packages: 'external',
  sourcemap: 'linked',
  define: { __ORC_VERSION__: JSON.stringify(pkg.version) },
  logLevel: 'warning',
})
