import assert from 'node:assert/strict'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { test } from 'node:test'

// The dependency direction of ../shared/DESIGN.md, checked on every test run:
// a module may import only the modules listed for it, only through their index.ts, and no file
// may take part in an import cycle.
const ALLOWED: Record<string, string[]> = {
  // The injected effects (clock, random, command runner): a leaf every module may be handed.
  effects: [],
  model: [],
  store: ['effects', 'model'],
  workflow: ['effects', 'model'],
  sched: ['effects', 'model'],
  mesh: ['effects', 'model', 'store'],
  net: ['effects', 'model'],
  // Cluster data key and sealed values (Secrets): crypto and one key file.
  secrets: ['effects', 'model'],
  runtime: ['effects', 'model', 'workflow'],
  // Registry images: references, the blob store, the distribution client, pulls and unpacking.
  images: ['effects', 'model', 'runtime'],
  agent: ['effects', 'model', 'store', 'workflow', 'sched', 'mesh', 'net', 'runtime', 'secrets', 'images'],
  cli: ['effects', 'model', 'store', 'workflow', 'sched', 'mesh', 'net', 'runtime', 'agent', 'secrets', 'images'],
}
const root = resolve(new URL('../../..', import.meta.url).pathname)
const src = join(root, 'src')

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n)
    return statSync(p).isDirectory() ? walk(p) : p.endsWith('.ts') ? [p] : []
  })
}

interface Edge {
  from: string
  to: string
  typeOnly: boolean
}

function importsOf(file: string): Edge[] {
  const text = readFileSync(file, 'utf8')
  const out: Edge[] = []
  const re = /(?:^|\n)\s*(import|export)\s+(type\s+)?(?:[^'"]*?\sfrom\s+)?['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g
  for (const m of text.matchAll(re)) {
    const spec = m[3] ?? m[4]!
    if (!spec.startsWith('.')) continue
    out.push({ from: file, to: resolve(dirname(file), spec), typeOnly: Boolean(m[2]) })
  }
  return out
}

const moduleOf = (f: string) => relative(src, f).split('/')[0]!

test('imports follow the dependency direction and go through index.ts', () => {
  const problems: string[] = []
  for (const file of walk(src)) {
    const from = moduleOf(file)
    if (from.endsWith('.ts')) continue // src/polyfill.ts
    assert.ok(from in ALLOWED, `src/${from} is not a known module; add it to ALLOWED in this test and to DESIGN's layout`)
    for (const e of importsOf(file)) {
      if (!e.to.startsWith(src)) {
        problems.push(`${relative(root, file)} imports ${relative(root, e.to)} outside src/`)
        continue
      }
      const to = moduleOf(e.to)
      if (to === from || to.endsWith('.ts')) continue
      if (!ALLOWED[from]!.includes(to)) problems.push(`${relative(root, file)}: ${from} may not import ${to}`)
      else if (relative(join(src, to), e.to) !== 'index.ts') {
        problems.push(`${relative(root, file)} imports ${relative(root, e.to)}; import ${to}/index.ts instead`)
      }
    }
  }
  assert.deepEqual(problems, [])
})

// Type-only imports count too: a type cycle is still two modules that cannot be understood (or
// moved) one without the other.
test('no import cycles between source files, type-only imports included', () => {
  const files = walk(src)
  const graph = new Map<string, string[]>()
  for (const f of files)
    graph.set(
      f,
      importsOf(f).map((e) => e.to),
    )
  const state = new Map<string, 'visiting' | 'done'>()
  const cycles: string[] = []
  const visit = (f: string, stack: string[]) => {
    if (state.get(f) === 'done') return
    if (state.get(f) === 'visiting') {
      cycles.push([...stack.slice(stack.indexOf(f)), f].map((x) => relative(root, x)).join(' → '))
      return
    }
    state.set(f, 'visiting')
    for (const t of graph.get(f) ?? []) visit(t, [...stack, f])
    state.set(f, 'done')
  }
  for (const f of files) visit(f, [])
  assert.deepEqual(cycles, [])
})

// netsim uses a module through its index.ts (or one of its parts' index.ts, such as agent/pods/), as
// the other modules do, so that what a module exports is its interface. (The agent's own index.ts
// stays light for the CLI: the parts netsim runs load libp2p and the scheduler.)
test('netsim imports src modules only through their index.ts', () => {
  const problems: string[] = []
  for (const file of walk(join(root, 'netsim'))) {
    for (const e of importsOf(file)) {
      if (!e.to.startsWith(src)) continue
      const to = moduleOf(e.to)
      if (to.endsWith('.ts')) continue
      if (!/^([a-z-]+\/)?index\.ts$/.test(relative(join(src, to), e.to)))
        problems.push(`${relative(root, file)} imports ${relative(root, e.to)}; import ${to}/index.ts instead`)
    }
  }
  assert.deepEqual(problems, [])
})
