/**
 * Prometheus metrics of a node, in the text exposition format (version 0.0.4). A registry of
 * counters, gauges and histograms kept by the agent, plus gauges computed at scrape time from the
 * store and the mesh. No client library: the format is a few lines of text.
 */
import { byCodeUnits } from '../../model/index.ts'

export type Labels = Record<string, string>

type Kind = 'counter' | 'gauge' | 'histogram'

interface Family {
  name: string
  help: string
  kind: Kind
  /** Values by label set (key: canonical label text). */
  values: Map<string, { labels: Labels; value: number }>
  buckets?: number[]
  hist?: Map<string, { labels: Labels; counts: number[]; sum: number; count: number }>
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"')
}

function labelText(l: Labels): string {
  const keys = Object.keys(l).sort()
  return keys.length === 0 ? '' : `{${keys.map((k) => `${k}="${escapeLabel(l[k]!)}"`).join(',')}}`
}

function num(v: number): string {
  if (Number.isNaN(v)) return 'NaN'
  if (v === Infinity) return '+Inf'
  if (v === -Infinity) return '-Inf'
  return String(v)
}

export class MetricsRegistry {
  private readonly families = new Map<string, Family>()
  private readonly collectors: Array<() => void> = []

  private family(name: string, help: string, kind: Kind, buckets?: number[]): Family {
    let f = this.families.get(name)
    if (f === undefined) {
      f = { name, help, kind, values: new Map(), buckets, hist: kind === 'histogram' ? new Map() : undefined }
      this.families.set(name, f)
    } else if (f.kind !== kind) {
      throw new Error(`metric ${name} is a ${f.kind}, not a ${kind}`)
    }
    return f
  }

  counter(name: string, help: string): { inc(labels?: Labels, by?: number): void } {
    const f = this.family(name, help, 'counter')
    return {
      inc: (labels = {}, by = 1) => {
        const k = labelText(labels)
        const cur = f.values.get(k)
        if (cur) cur.value += by
        else f.values.set(k, { labels, value: by })
      },
    }
  }

  gauge(name: string, help: string): { set(labels: Labels, value: number): void; reset(): void } {
    const f = this.family(name, help, 'gauge')
    return {
      set: (labels, value) => void f.values.set(labelText(labels), { labels, value }),
      reset: () => f.values.clear(),
    }
  }

  histogram(name: string, help: string, buckets: number[]): { observe(labels: Labels, v: number): void } {
    const f = this.family(
      name,
      help,
      'histogram',
      [...buckets].sort((a, b) => a - b),
    )
    return {
      observe: (labels, v) => {
        const k = labelText(labels)
        let h = f.hist!.get(k)
        if (h === undefined) {
          h = { labels, counts: f.buckets!.map(() => 0), sum: 0, count: 0 }
          f.hist!.set(k, h)
        }
        f.buckets!.forEach((b, i) => {
          if (v <= b) h!.counts[i]! += 1
        })
        h.sum += v
        h.count += 1
      },
    }
  }

  /** Run `fn` before every scrape (scrape-time gauges). */
  onCollect(fn: () => void): void {
    this.collectors.push(fn)
  }

  /** The exposition text. */
  render(): string {
    for (const c of this.collectors) c()
    const out: string[] = []
    for (const f of [...this.families.values()].sort((a, b) => byCodeUnits(a.name, b.name))) {
      out.push(`# HELP ${f.name} ${f.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`)
      out.push(`# TYPE ${f.name} ${f.kind}`)
      if (f.kind === 'histogram') {
        for (const h of f.hist!.values()) {
          f.buckets!.forEach((b, i) => out.push(`${f.name}_bucket${labelText({ ...h.labels, le: num(b) })} ${h.counts[i]}`))
          out.push(`${f.name}_bucket${labelText({ ...h.labels, le: '+Inf' })} ${h.count}`)
          out.push(`${f.name}_sum${labelText(h.labels)} ${num(h.sum)}`)
          out.push(`${f.name}_count${labelText(h.labels)} ${h.count}`)
        }
      } else {
        for (const v of f.values.values()) out.push(`${f.name}${labelText(v.labels)} ${num(v.value)}`)
      }
    }
    return out.join('\n') + '\n'
  }
}

export interface Sample {
  name: string
  labels: Labels
  value: number
}

/**
 * Parse exposition text (what a scraper does): every sample, with `# TYPE` lines checked against
 * the names that follow. Throws on a line that is not valid; used by tests and `orc doctor`.
 */
export function parsePrometheusText(text: string): { samples: Sample[]; types: Map<string, string> } {
  const samples: Sample[] = []
  const types = new Map<string, string>()
  const lineRe = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?[0-9]+)?$/
  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?/gy
  text.split('\n').forEach((line, i) => {
    if (line === '' || line.startsWith('# HELP ')) return
    if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(' ')
      if (!name || !['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(type ?? '')) throw new Error(`line ${i + 1}: bad TYPE line: ${line}`)
      types.set(name, type!)
      return
    }
    if (line.startsWith('#')) return
    const m = lineRe.exec(line)
    if (!m) throw new Error(`line ${i + 1}: not a sample: ${line}`)
    const labels: Labels = {}
    if (m[3] !== undefined && m[3] !== '') {
      labelRe.lastIndex = 0
      let consumed = 0
      for (let lm = labelRe.exec(m[3]); lm !== null; lm = labelRe.exec(m[3])) {
        labels[lm[1]!] = lm[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\')
        consumed = labelRe.lastIndex
      }
      if (consumed !== m[3].length) throw new Error(`line ${i + 1}: bad labels: ${line}`)
    }
    const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4])
    if (Number.isNaN(value) && m[4] !== 'NaN') throw new Error(`line ${i + 1}: bad value: ${line}`)
    const base = m[1]!.replace(/_(bucket|sum|count)$/, '')
    if (!types.has(m[1]!) && !types.has(base)) throw new Error(`line ${i + 1}: sample ${m[1]} has no TYPE line`)
    samples.push({ name: m[1]!, labels, value })
  })
  return { samples, types }
}
