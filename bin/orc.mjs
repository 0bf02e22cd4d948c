#!/usr/bin/env node
// Entry point of the `orc` command. Runs the TypeScript sources through tsx so that what runs is
// exactly what is in the tree (no stale build output).
import { register } from 'tsx/esm/api'
register()
await import('../src/polyfill.ts')
const { main } = await import('../src/cli/main.ts')
await main(process.argv.slice(2))
