// Sums a V8 CPU profile (.cpuprofile, as cpu-profile.mjs writes them) by function: the time each
// function ran itself ("self") and with everything it called ("total"), in ms and as a share of the
// profile, idle and the garbage collector included. What docs/benchmarks.md quotes from profiles.
//   node test/bench/profile-summary.mjs FILE.cpuprofile [TOP=30]
import { readFileSync } from 'node:fs'

const file = process.argv[2]
if (!file) {
  console.error('usage: node test/bench/profile-summary.mjs FILE.cpuprofile [TOP]')
  process.exit(2)
}
const top = Number(process.argv[3] ?? 30)
const profile = JSON.parse(readFileSync(file, 'utf8'))
const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const parent = new Map()
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const hits = new Map()
for (const s of profile.samples) hits.set(s, (hits.get(s) ?? 0) + 1)
const msPerSample = (profile.endTime - profile.startTime) / profile.samples.length / 1000
const name = (n) => {
  const f = n.callFrame
  const where = f.url ? ` ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}` : ''
  return `${f.functionName || '(anonymous)'}${where}`
}
const self = new Map()
const total = new Map()
for (const [id, count] of hits) {
  const k = name(byId.get(id))
  self.set(k, (self.get(k) ?? 0) + count)
  // Each function once per sample, however deep it recurses.
  const seen = new Set()
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const key = name(byId.get(cur))
    if (seen.has(key)) continue
    seen.add(key)
    total.set(key, (total.get(key) ?? 0) + count)
  }
}
const all = profile.samples.length
const line = ([k, count]) => `${(count * msPerSample).toFixed(0).padStart(7)} ms ${((100 * count) / all).toFixed(1).padStart(5)} %  ${k}`
console.log(`${file}: ${all} samples over ${(all * msPerSample).toFixed(0)} ms`)
console.log('self:')
for (const e of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(line(e))
console.log('total:')
for (const e of [...total].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(line(e))
