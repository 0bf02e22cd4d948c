#!/usr/bin/env node
import { spawn, spawnSync } from 'node:child_process'
// Runs every test file under test/ (Node 20's test runner does not expand globs, and with no file
// arguments it runs nothing and exits 0 — so the files are listed here explicitly).
// Usage: node scripts/run-tests.mjs [substring...]   (only files whose path contains one of them)
import { existsSync, readdirSync, statSync } from 'node:fs'
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
/** Newest modification time of any file under `dir`. */
function newest(dir) {
  let t = 0
  for (const name of readdirSync(dir)) {
    const p = join(dir, name)
    const st = statSync(p)
    t = Math.max(t, st.isDirectory() ? newest(p) : st.mtimeMs)
  }
  return t
}
// The tests start agents and CLI calls through bin/orc.mjs, which runs dist/orc.mjs only while it is
// newer than src/ and the TypeScript sources through tsx otherwise (~0.2 s vs ~0.8 s of CPU a call).
// A fresh clone gets the bundle from scripts/setup.sh; after an edit it is rebuilt here, so a run on a
// working tree costs what CI's does.
const bundle = join(root, 'dist', 'orc.mjs')
if (!existsSync(bundle) || statSync(bundle).mtimeMs <= newest(join(root, 'src'))) {
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { cwd: root, stdio: 'inherit' })
  if (r.status !== 0) {
    console.error('run-tests: building dist/orc.mjs failed')
    process.exit(1)
  }
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
// files they starve those files' agents of CPU (joins time out). They run last, one at a time.
const alone = files.filter((f) => f.startsWith('test/chaos/'))
// The testbed files start three to eight agents each in network namespaces (two or three clusters
// for the federation ones). They run after the rest, two at a time: three at once outlasted the
// time limit in a quiet run (2026-12-05, when every CLI call of theirs cost ~1.1 s of CPU).
const testbed = files.filter((f) => f.startsWith('test/testbed/'))
// The rest, in alphabetical order. (Starting the VM and cluster files first was tried on
// 2026-12-05: the cluster files then ran beside the VM tests' TCG guests, and a join waited past
// its 20 s; the whole run gained under a minute.)
const together = files.filter((f) => !alone.includes(f) && !testbed.includes(f))
let status = 0
const totals = { pass: 0, fail: 0, skipped: 0 }
// --test-timeout: Node 20 applies it to each file as a whole too, not only to each test: 600 s, as
// a three-scenario testbed file passed 240 s in CI (2026-12-05) while each scenario took ~1 min.
/** Run one `node --test` over `list`, streaming its output, adding its closing counts to `totals`. */
function runTests(list, concurrency) {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--import', './test/setup.ts', '--test', `--test-concurrency=${concurrency}`, '--test-timeout=600000', '--test-force-exit', ...list],
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
// Three files at once on this 2-core machine: most real-agent tests wait on timers and the network
// more than they compute (a full run: 15 min 28 s at 3, ~19 min at 2; docs/benchmarks.md).
for (const [list, concurrency] of [
  [together, 3],
  [testbed, 2],
  [alone, 1],
]) {
  if (list.length === 0) continue
  const code = await runTests(list, concurrency)
  if (code !== 0) status = code
}
// One closing line for both runs (each prints its own summary).
console.log(`${totals.pass} passed, ${totals.fail} failed, ${totals.skipped} skipped`)
process.exit(status)
