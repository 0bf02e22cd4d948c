#!/usr/bin/env node
import { spawn } from 'node:child_process'
// Runs every test file under test/ (Node 20's test runner does not expand globs, and with no file
// arguments it runs nothing and exits 0 — so the files are listed here explicitly).
// Usage: node scripts/run-tests.mjs [substring...]   (only files whose path contains one of them)
import { readdirSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'

const root = new URL('..', import.meta.url).pathname
function walk(dir) {
  const out = []
  for (const name of readdirSync(dir)) {
    const p = join(dir, name)
    if (statSync(p).isDirectory()) {
      if (name === 'bench' || name === 'fixtures') continue
      out.push(...walk(p))
    } else if (name.endsWith('.test.ts')) out.push(relative(root, p))
  }
  return out
}
const filters = process.argv.slice(2)
const files = walk(join(root, 'test'))
  .filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)))
  .sort()
if (files.length === 0) {
  console.error('no test files matched')
  process.exit(1)
}
// The chaos tests (five agents, kill -9, partitions) load both cores on their own: run beside other
// files they starve those files' agents of CPU (joins time out). They run afterwards, one at a time.
const alone = files.filter((f) => f.startsWith('test/chaos/'))
const together = files.filter((f) => !alone.includes(f))
let status = 0
const totals = { pass: 0, fail: 0, skipped: 0 }
/** Run one `node --test` over `list`, streaming its output, adding its closing counts to `totals`. */
function runTests(list, concurrency) {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--import', './test/setup.ts', '--test', `--test-concurrency=${concurrency}`, '--test-timeout=240000', '--test-force-exit', ...list],
      { cwd: root, stdio: ['inherit', 'pipe', 'inherit'] },
    )
    let partial = ''
    child.stdout.on('data', (d) => {
      process.stdout.write(d)
      const lines = (partial + d.toString()).split('\n')
      partial = lines.pop()
      for (const l of lines) {
        const m = /^# (pass|fail|skipped) (\d+)$/.exec(l)
        if (m) totals[m[1]] += Number(m[2])
      }
    })
    child.on('close', (code) => resolve(code ?? 1))
  })
}
for (const [list, concurrency] of [
  [together, 2],
  [alone, 1],
]) {
  if (list.length === 0) continue
  const code = await runTests(list, concurrency)
  if (code !== 0) status = code
}
// One closing line for both runs (each prints its own summary).
console.log(`${totals.pass} passed, ${totals.fail} failed, ${totals.skipped} skipped`)
process.exit(status)
