/**
 * Strings in UTF-16 code unit order: the same on every node whatever its locale, and without ICU's
 * collator, which `localeCompare` loads on first use (~4 MB of the node binary's data paged in for
 * good, measured on an idle agent; docs/benchmarks.md). For orc's names (lowercase DNS labels,
 * peer ids, unit names) it is also the order `localeCompare` gave.
 */
export function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}
