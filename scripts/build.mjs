#!/usr/bin/env node
import { readFileSync } from 'node:fs'
// Bundle the CLI and agent into dist/orc.mjs (every pure-JS npm package inside; scripts/bundle-options.mjs).
// bin/orc.mjs runs the bundle when it is newer than every source file, and the TypeScript sources
// through tsx otherwise, so a stale bundle is never run. The bundle saves the tsx loader thread and
// the loading of ~700 ES modules: a CLI call takes ~0.4 s instead of ~1.3 s, and an agent ~50 MB
// less RSS than from the sources (docs/benchmarks.md).
import { build } from 'esbuild'
import { bundleOptions } from './bundle-options.mjs'

const root = new URL('..', import.meta.url).pathname.replace(/\/$/, '')
const pkg = JSON.parse(readFileSync(`${root}/package.json`, 'utf8'))
await build({ ...bundleOptions({ root, outfile: `${root}/dist/orc.mjs`, version: pkg.version }), sourcemap: 'linked', logLevel: 'warning' })
