/** Results as a markdown table and a hand-written SVG line plot (no plotting library). */

export function mdTable(header: string[], rows: (string | number)[][]): string {
  const fmt = (v: string | number) => (typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(2)) : v)
  return [`| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.map(fmt).join(' | ')} |`)].join('\n')
}

export interface Series {
  name: string
  points: [number, number][]
  color?: string
  dashed?: boolean
  /** Draw markers only (no line). */
  markers?: boolean
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b']

function niceTicks(min: number, max: number, n = 5): number[] {
  if (max <= min) max = min + 1
  const step0 = (max - min) / n
  const mag = 10 ** Math.floor(Math.log10(step0))
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0)!
  const out: number[] = []
  for (let v = Math.ceil(min / step) * step; v <= max + 1e-9; v += step) out.push(Number(v.toPrecision(12)))
  return out
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')

export function svgPlot(opts: {
  title: string
  xLabel: string
  yLabel: string
  series: Series[]
  logX?: boolean
  width?: number
  height?: number
  vlines?: { x: number; label: string }[]
}): string {
  const W = opts.width ?? 720
  const H = opts.height ?? 420
  const m = { l: 70, r: 20, t: 40, b: 90 }
  const all = opts.series.flatMap((s) => s.points)
  const tx = (x: number) => (opts.logX ? Math.log10(x) : x)
  let x0 = Math.min(...all.map((p) => tx(p[0])))
  let x1 = Math.max(...all.map((p) => tx(p[0])))
  if (x1 === x0) x1 = x0 + 1
  const y0 = Math.min(0, ...all.map((p) => p[1]))
  let y1 = Math.max(...all.map((p) => p[1]))
  if (y1 <= y0) y1 = y0 + 1
  y1 *= 1.05
  if (opts.logX) {
    x0 = Math.floor(x0)
    x1 = Math.ceil(x1)
  }
  const px = (x: number) => m.l + ((tx(x) - x0) / (x1 - x0)) * (W - m.l - m.r)
  const py = (y: number) => H - m.b - ((y - y0) / (y1 - y0)) * (H - m.t - m.b)
  const out: string[] = []
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`)
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`)
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(opts.title)}</text>`)
  // Axes and grid.
  const xt = opts.logX ? Array.from({ length: x1 - x0 + 1 }, (_, i) => 10 ** (x0 + i)) : niceTicks(x0, x1)
  for (const v of xt) {
    const x = px(v)
    out.push(`<line x1="${x}" y1="${m.t}" x2="${x}" y2="${H - m.b}" stroke="#eee"/>`)
    out.push(`<text x="${x}" y="${H - m.b + 16}" text-anchor="middle">${v}</text>`)
  }
  for (const v of niceTicks(y0, y1)) {
    const y = py(v)
    out.push(`<line x1="${m.l}" y1="${y}" x2="${W - m.r}" y2="${y}" stroke="#eee"/>`)
    out.push(`<text x="${m.l - 6}" y="${y + 4}" text-anchor="end">${v}</text>`)
  }
  out.push(`<line x1="${m.l}" y1="${H - m.b}" x2="${W - m.r}" y2="${H - m.b}" stroke="black"/>`)
  out.push(`<line x1="${m.l}" y1="${m.t}" x2="${m.l}" y2="${H - m.b}" stroke="black"/>`)
  out.push(`<text x="${(m.l + W - m.r) / 2}" y="${H - m.b + 36}" text-anchor="middle">${esc(opts.xLabel)}</text>`)
  out.push(`<text transform="translate(16 ${(m.t + H - m.b) / 2}) rotate(-90)" text-anchor="middle">${esc(opts.yLabel)}</text>`)
  for (const v of opts.vlines ?? []) {
    const x = px(v.x)
    out.push(`<line x1="${x}" y1="${m.t}" x2="${x}" y2="${H - m.b}" stroke="#888" stroke-dasharray="3 3"/>`)
    out.push(`<text x="${x + 4}" y="${m.t + 12}" fill="#555">${esc(v.label)}</text>`)
  }
  opts.series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]
    const pts = s.points.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`)
    if (!s.markers && pts.length > 1)
      out.push(`<polyline fill="none" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''} points="${pts.join(' ')}"/>`)
    if (s.markers || s.points.length <= 12)
      for (const p of pts) {
        const [x, y] = p.split(',')
        out.push(`<circle cx="${x}" cy="${y}" r="3.5" fill="${color}"/>`)
      }
    // Legend below the plot.
    const lx = m.l + (i % 3) * 210
    const ly = H - 28 + Math.floor(i / 3) * 16
    out.push(`<line x1="${lx}" y1="${ly - 4}" x2="${lx + 22}" y2="${ly - 4}" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`)
    out.push(`<text x="${lx + 28}" y="${ly}">${esc(s.name)}</text>`)
  })
  out.push('</svg>')
  return out.join('\n') + '\n'
}
