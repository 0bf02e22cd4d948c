#!/usr/bin/env node
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { basename } from 'node:path'
// Bundle the CLI and agent into dist/orc.mjs and dist/chunks/ (every pure-JS npm package inside;
// scripts/bundle-options.mjs).
// bin/orc.mjs runs the bundle when it is newer than every source file, and the TypeScript sources
// through tsx otherwise, so a stale bundle is never run. The bundle saves the tsx loader thread and
// the loading of ~700 ES modules: a CLI call takes ~0.4 s instead of ~1.3 s, and an agent ~50 MB
// less RSS than from the sources (docs/benchmarks.md).
import { build } from 'esbuild'
import { bundleOptions } from './bundle-options.mjs'

const root = new URL('..', import.meta.url).pathname.replace(/\/$/, '')
const pkg = JSON.parse(readFileSync(`${root}/package.json`, 'utf8'))
const r = await build({ ...bundleOptions({ root, outdir: `${root}/dist`, version: pkg.version }), sourcemap: 'linked', logLevel: 'warning', metafile: true })
// Chunks are named by their content: an earlier build's stay behind. Remove those older than ten
// minutes (a process started from the previous build may still load one of its chunks lazily).
const current = new Set(Object.keys(r.metafile.outputs).map((f) => basename(f)))
const chunks = `${root}/dist/chunks`
for (const f of readdirSync(chunks)) {
  const p = `${chunks}/${f}`
  if (!current.has(f) && statSync(p).mtimeMs < Date.now() - 10 * 60_000) rmSync(p, { force: true })
}
