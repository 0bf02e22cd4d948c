// What every page uses: the htm tag, time and size formats, the problem list.

import htm from 'htm'
import { h } from 'preact'
import { useCallback, useEffect, useState } from 'preact/hooks'

export const html = htm.bind(h)

/** `12s`, `3m`, `2h5m`, `4d` — like the CLI's AGE column. */
export function duration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—'
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)}s`
  const s = Math.round(ms / 1000)
  if (s < 60) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m`
  const hrs = Math.floor(m / 60)
  if (hrs < 24) return m % 60 === 0 ? `${hrs}h` : `${hrs}h${m % 60}m`
  return `${Math.floor(hrs / 24)}d`
}

export function ago(t, now = Date.now()) {
  if (t === null || t === undefined) return 'never'
  const at = typeof t === 'string' ? Date.parse(t) : t
  return now - at < 1000 ? 'just now' : `${duration(now - at)} ago`
}

export function bytes(n) {
  if (n === null || n === undefined) return '—'
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  let v = n
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024
    i++
  }
  return `${v < 10 && i > 0 ? v.toFixed(1) : Math.round(v)} ${units[i]}`
}

export function time(t) {
  const d = new Date(typeof t === 'string' ? Date.parse(t) : t)
  return Number.isNaN(d.getTime())
    ? '—'
    : d
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, 'Z')
}

export function labelsText(labels) {
  const e = Object.entries(labels ?? {})
  return e.length === 0 ? '—' : e.map(([k, v]) => `${k}=${v}`).join(', ')
}

/** Parts of a view that could not be loaded (and why); the rest of the page still shows. */
export function Problems({ problems }) {
  const e = Object.entries(problems ?? {})
  if (e.length === 0) return null
  return html`<div class="problem" role="alert">
    <p>Some parts could not be loaded:</p>
    <ul>${e.map(([k, v]) => html`<li><strong>${k}</strong>: ${v}</li>`)}</ul>
  </div>`
}

/** A state as a word with a colour class (never colour alone). */
export function State({ value }) {
  const v = String(value ?? '—')
  const cls = /^(Ready|Running|running|Succeeded|alive|up|done|direct|joined)$/.test(v)
    ? 'good'
    : /^(Unreachable|Failed|down|failed|dead|NotReady|Unknown|removed)/.test(v)
      ? 'bad'
      : 'warn'
  return html`<span class="state ${cls}">${v}</span>`
}

/**
 * Load `fn()` when `deps` change; { data, error, loading, reload }. New deps drop the data of the old
 * ones (a diff of revisions 5 and 6 must not show under the title of 1 and 2 while those load); a
 * reload keeps the data shown until the new answer arrives.
 */
export function useLoad(fn, deps) {
  const [st, set] = useState({ data: undefined, error: undefined, loading: true })
  const load = useCallback((fresh) => {
    let gone = false
    set((s) => (fresh === true ? { data: undefined, error: undefined, loading: true } : { ...s, loading: true }))
    fn().then(
      (data) => !gone && set({ data, error: undefined, loading: false }),
      (error) => !gone && set((s) => ({ data: s.data, error, loading: false })),
    )
    return () => {
      gone = true
    }
  }, deps)
  useEffect(() => load(true), [load])
  return { ...st, reload: () => load(false) }
}

export function Loading({ what }) {
  return html`<p class="muted" role="status">Loading ${what}…</p>`
}

export function ErrorText({ error }) {
  return error ? html`<p class="problem" role="alert">${error.message}</p>` : null
}
