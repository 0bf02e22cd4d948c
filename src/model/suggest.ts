/**
 * "Did you mean …?": the candidates closest to a mistyped word, by edit distance (insertions,
 * deletions, substitutions and swaps of neighbours each cost one), for kinds and object names.
 */
import { byCodeUnits } from './compare.ts'

/** Optimal string alignment distance (Damerau–Levenshtein without repeated edits of one substring). */
export function editDistance(a: string, b: string): number {
  const m = a.length
  const n = b.length
  if (m === 0) return n
  if (n === 0) return m
  let prev2: number[] = []
  let prev = Array.from({ length: n + 1 }, (_, j) => j)
  for (let i = 1; i <= m; i++) {
    const cur = [i]
    for (let j = 1; j <= n; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let d = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, prev2[j - 2]! + 1)
      cur.push(d)
    }
    prev2 = prev
    prev = cur
  }
  return prev[n]!
}

/**
 * The candidates a user who typed `word` most likely meant, best first (at most `max`): those within
 * a third of the word's length in edits (at least 1), and those that start with it or contain it.
 */
export function closestWords(word: string, candidates: Iterable<string>, max = 3): string[] {
  const w = word.toLowerCase()
  const limit = Math.max(1, Math.floor(w.length / 3))
  const scored: { c: string; d: number }[] = []
  for (const c of new Set(candidates)) {
    const lc = c.toLowerCase()
    if (lc === w) continue
    const d = editDistance(w, lc)
    if (d <= limit) scored.push({ c, d })
    else if (w.length >= 2 && (lc.startsWith(w) || lc.includes(w))) scored.push({ c, d: limit + 1 + (lc.startsWith(w) ? 0 : 1) })
  }
  return scored
    .sort((x, y) => x.d - y.d || byCodeUnits(x.c, y.c))
    .slice(0, max)
    .map((s) => s.c)
}

/** ` (did you mean a, b or c?)`-style tail, or '' when nothing is close. */
export function didYouMean(word: string, candidates: Iterable<string>): string {
  return didYouMeanOf(closestWords(word, candidates))
}

/** The `did you mean …?` sentence of a list of suggestions, or '' for none. */
export function didYouMeanOf(best: readonly string[]): string {
  if (best.length === 0) return ''
  const list = best.length === 1 ? best[0]! : `${best.slice(0, -1).join(', ')} or ${best[best.length - 1]}`
  return `did you mean ${list}?`
}
