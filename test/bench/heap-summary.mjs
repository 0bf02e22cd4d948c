#!/usr/bin/env node
// Sums a V8 heap snapshot (memory.bench.ts with HEAP_SNAPSHOT=1 writes one) by what holds the bytes:
// each object constructor, and strings, code and arrays as one row each; prints the top N rows.
//   node test/bench/heap-summary.mjs FILE.heapsnapshot [N=40]
import { readFileSync } from 'node:fs'

const [file, top = '40'] = process.argv.slice(2)
if (!file) {
  console.error('usage: node test/bench/heap-summary.mjs FILE.heapsnapshot [N]')
  process.exit(2)
}
const snap = JSON.parse(readFileSync(file, 'utf8'))
const fields = snap.snapshot.meta.node_fields
const types = snap.snapshot.meta.node_types[0]
const width = fields.length
const [iType, iName, iSize] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f))
const rows = new Map()
let total = 0
for (let i = 0; i < snap.nodes.length; i += width) {
  const type = types[snap.nodes[i + iType]]
  const size = snap.nodes[i + iSize]
  const named = ['object', 'closure', 'native', 'hidden', 'synthetic'].includes(type)
  const key = /string/.test(type) ? 'string' : named ? `${type} ${snap.strings[snap.nodes[i + iName]]}` : type
  const r = rows.get(key) ?? { bytes: 0, count: 0 }
  r.bytes += size
  r.count++
  rows.set(key, r)
  total += size
}
console.log(`total ${(total / 1e6).toFixed(1)} MB`)
for (const [key, r] of [...rows].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, Number(top)))
  console.log(`${(r.bytes / 1e6).toFixed(2).padStart(7)} MB ${String(r.count).padStart(8)}  ${key.slice(0, 90)}`)
