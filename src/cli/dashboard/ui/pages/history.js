// History of any object (revisions, who and why, side-by-side diff of two revisions, rollback with
// a reason), nodes with their resources and pods, and the cluster's events.
import { useEffect, useRef, useState } from 'preact/hooks'
import { api, seg } from '../api.js'
import { downNodes, live, nodeState, podNode, podPhase, useLive } from '../live.js'
import { ago, bytes, ErrorText, html, Loading, labelsText, State, time, useLoad } from '../util.js'
import { EventsTable } from './pods.js'

// ---- side-by-side diff ------------------------------------------------------------------------

/** Rows of a side-by-side line diff (longest common subsequence): [left, right, 'same'|'del'|'add'|'mod']. */
export function diffRows(a, b) {
  const n = a.length
  const m = b.length
  if (n * m > 4_000_000) return [...a.map((l, i) => [l, b[i] ?? null, l === b[i] ? 'same' : 'mod'])]
  const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1))
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1])
  const rows = []
  let i = 0
  let j = 0
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) rows.push([a[i++], b[j++], 'same'])
    else if (j < m && (i === n || dp[i][j + 1] >= dp[i + 1][j])) rows.push([null, b[j++], 'add'])
    else rows.push([a[i++], null, 'del'])
  }
  // A run of deletions and additions between equal lines: its lines side by side, pair by pair.
  const out = []
  for (let k = 0; k < rows.length; ) {
    if (rows[k][2] === 'same') {
      out.push(rows[k++])
      continue
    }
    const dels = []
    const adds = []
    for (; k < rows.length && rows[k][2] !== 'same'; k++) (rows[k][2] === 'del' ? dels : adds).push(rows[k])
    for (let x = 0; x < Math.max(dels.length, adds.length); x++) {
      const l = dels[x]?.[0] ?? null
      const r = adds[x]?.[1] ?? null
      out.push([l, r, l !== null && r !== null ? 'mod' : l !== null ? 'del' : 'add'])
    }
  }
  return out
}

/** What a revision's content is compared on: labels, annotations, spec (and status when asked). */
function comparable(obj, withStatus) {
  const o = { metadata: { labels: obj.metadata.labels ?? {}, annotations: obj.metadata.annotations ?? {} }, spec: obj.spec }
  if (withStatus) o.status = obj.status
  return JSON.stringify(o, null, 2).split('\n')
}

function SideBySide({ kind, ns, name, from, to, withStatus }) {
  const load = useLoad(
    () => Promise.all([from, to].map((r) => api(`/v1/objects/${seg(kind)}/${seg(ns)}/${seg(name)}/revisions/${seg(r)}`).then((x) => x.object))),
    [kind, ns, name, from, to],
  )
  if (load.error) return html`<${ErrorText} error=${load.error} />`
  if (!load.data) return html`<${Loading} what="the revisions" />`
  const rows = diffRows(comparable(load.data[0], withStatus), comparable(load.data[1], withStatus))
  const changed = rows.filter((r) => r[2] !== 'same').length
  return html`<p role="status" data-testid="diff-summary">${changed === 0 ? 'No difference' : `${changed} changed lines`} between revision ${from} and revision ${to}.</p>
    <table class="diff" data-testid="diff">
      <thead><tr><th scope="col">Revision ${from}</th><th scope="col">Revision ${to}</th></tr></thead>
      <tbody>${rows.map(
        ([l, r, t]) =>
          html`<tr class=${t}><td class=${t === 'same' ? '' : t === 'add' ? 'empty' : 'old'}>${l ?? ''}</td><td class=${t === 'same' ? '' : t === 'del' ? 'empty' : 'new'}>${r ?? ''}</td></tr>`,
      )}</tbody>
    </table>`
}

function RollbackForm({ kind, ns, name, rev, onDone, onCancel }) {
  const [reason, setReason] = useState('')
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState(undefined)
  const submit = async (e) => {
    e.preventDefault()
    setBusy(true)
    setError(undefined)
    try {
      const r = await api(`/v1/objects/${seg(kind)}/${seg(ns)}/${seg(name)}/rollback`, { method: 'POST', body: { to: rev.number, reason } })
      onDone(r)
    } catch (err) {
      setError(err)
      setBusy(false)
    }
  }
  return html`<form class="rollback" onSubmit=${submit} data-testid="rollback-form">
    <p>Roll ${kind.toLowerCase()}/${name} back to revision ${rev.number} (by ${rev.author}: “${rev.reason || 'no reason'}”). This writes a new revision equal to it, as you.</p>
    <label for="rollback-reason">Reason (recorded in history)</label>
    <input id="rollback-reason" required value=${reason} onInput=${(e) => setReason(e.currentTarget.value)} ref=${(el) => el && !el.dataset.f && (((el.dataset.f = '1'), el.focus()))} />
    <button type="submit" disabled=${busy || reason.trim() === ''}>Roll back</button>
    <button type="button" onClick=${onCancel}>Cancel</button>
    <${ErrorText} error=${error} />
  </form>`
}

function HistoryForm() {
  const [kind, setKind] = useState('Pod')
  const [ns, setNs] = useState('default')
  const [name, setName] = useState('')
  return html`<form class="filters" onSubmit=${(e) => {
    e.preventDefault()
    location.hash = `#/history/${seg(kind)}/${seg(ns === '' ? '_' : ns)}/${seg(name)}`
  }}>
    <label for="h-kind">Kind</label><input id="h-kind" value=${kind} required onInput=${(e) => setKind(e.currentTarget.value)} />
    <label for="h-ns">Namespace</label><input id="h-ns" value=${ns} onInput=${(e) => setNs(e.currentTarget.value)} placeholder="empty: cluster-scoped" />
    <label for="h-name">Name</label><input id="h-name" value=${name} required onInput=${(e) => setName(e.currentTarget.value)} />
    <button type="submit">Show history</button>
  </form>`
}

export function HistoryPage({ kind, ns, name }) {
  useEffect(() => {
    document.title = name ? `History of ${kind}/${name} · orc` : 'History · orc'
  }, [kind, name])
  if (!kind || !ns || !name)
    return html`<h1>History</h1><p>Every change to an object is a revision with its author and reason. Which object?</p><${HistoryForm} />`
  return html`<${History} kind=${kind} ns=${ns} name=${name} />`
}

function History({ kind, ns, name }) {
  const [excludeControllers, setExclude] = useState(false)
  const hist = useLoad(
    () => api(`/v1/objects/${seg(kind)}/${seg(ns)}/${seg(name)}/history`, { query: excludeControllers ? { excludeAuthor: 'controller:' } : {} }),
    [kind, ns, name, excludeControllers],
  )
  const [pair, setPair] = useState(undefined)
  const [rollback, setRollback] = useState(undefined)
  const [done, setDone] = useState('')
  const [withStatus, setWithStatus] = useState(false)
  const revs = hist.data?.revisions ?? []
  const content = revs.filter((r) => !r.compacted && r.op !== 'delete')
  const latest = content[content.length - 1]
  const prev = content[content.length - 2]
  const from = pair?.[0] ?? prev?.number
  const to = pair?.[1] ?? latest?.number
  const title = html`<h1>History of ${kind.toLowerCase()}/${name} ${ns !== '_' ? html`<span class="muted">${ns}</span>` : null}</h1>`
  if (!hist.data) return hist.error ? html`${title}<${ErrorText} error=${hist.error} />` : html`${title}<${Loading} what="the history" />`
  return html`
    ${title}
    ${kind.toLowerCase() === 'pod' && ns !== '_' ? html`<p><a href=${`#/pods/${seg(ns)}/${seg(name)}`}>The pod's page</a></p>` : null}
    <p class="check"><input type="checkbox" id="h-excl" checked=${excludeControllers} onChange=${(e) => setExclude(e.currentTarget.checked)} /><label for="h-excl">Hide controllers' revisions (status writes)</label></p>
    ${done ? html`<p class="ok" role="status" data-testid="rollback-done">${done}</p>` : null}
    <table data-testid="history-table">
      <thead><tr><th scope="col">Revision</th><th scope="col">Change</th><th scope="col">Who</th><th scope="col">Why</th><th scope="col">When</th><th scope="col">Fields</th><th scope="col">Actions</th></tr></thead>
      <tbody>${[...revs].reverse().map(
        (r) => html`<tr key=${r.id} data-rev=${r.number}>
          <th scope="row">${r.number}</th>
          <td>${r.op}${r.compacted ? ' (compacted)' : ''}</td>
          <td>${r.author}</td>
          <td>${r.reason || '—'}</td>
          <td title=${time(r.time)}>${ago(r.time)}</td>
          <td>${
            (r.changes ?? [])
              .slice(0, 4)
              .map((c) => c.path.join('.'))
              .join(', ') || '—'
          }${(r.changes ?? []).length > 4 ? ', …' : ''}</td>
          <td class="actions">
            ${
              !r.compacted && r.op !== 'delete' && r !== latest
                ? html`<button type="button" onClick=${() => setPair([r.number, latest.number])}>Compare with latest</button>
                  <button type="button" onClick=${() => (setRollback(r), setDone(''))} data-testid=${`rollback-${r.number}`}>Roll back to ${r.number}…</button>`
                : null
            }
          </td>
        </tr>`,
      )}</tbody>
    </table>
    ${
      rollback
        ? html`<${RollbackForm} kind=${kind} ns=${ns} name=${name} rev=${rollback} onCancel=${() => setRollback(undefined)}
          onDone=${(r) => {
            setRollback(undefined)
            setDone(
              r.revision
                ? `Rolled back: revision ${r.revision.number} restores revision ${rollback.number}.`
                : 'Nothing to roll back: the object already equals that revision.',
            )
            setPair(undefined)
            hist.reload()
          }} />`
        : null
    }
    <h2>Compare</h2>
    ${
      content.length < 2
        ? html`<p class="muted">Only one revision with content: nothing to compare.</p>`
        : html`<form class="filters" onSubmit=${(e) => e.preventDefault()}>
          <label for="cmp-a">Revision</label>
          <select id="cmp-a" value=${from} onChange=${(e) => setPair([Number(e.currentTarget.value), to])}>${content.map((r) => html`<option value=${r.number}>${r.number}</option>`)}</select>
          <label for="cmp-b">with revision</label>
          <select id="cmp-b" value=${to} onChange=${(e) => setPair([from, Number(e.currentTarget.value)])}>${content.map((r) => html`<option value=${r.number}>${r.number}</option>`)}</select>
          <input type="checkbox" id="cmp-status" checked=${withStatus} onChange=${(e) => setWithStatus(e.currentTarget.checked)} /><label for="cmp-status">Include status</label>
        </form>
        <${SideBySide} kind=${kind} ns=${ns} name=${name} from=${from} to=${to} withStatus=${withStatus} />`
    }
  `
}

// ---- nodes ------------------------------------------------------------------------------------

export function NodesPage() {
  const l = useLive()
  const top = useLoad(() => api('/v1/top'), [])
  useEffect(() => {
    document.title = 'Nodes · orc'
    const t = setInterval(() => top.reload(), 15_000)
    return () => clearInterval(t)
  }, [])
  const wanted = new URLSearchParams(location.hash.split('?')[1] ?? '').get('node')
  useEffect(() => {
    if (wanted) document.getElementById(`node-${wanted}`)?.scrollIntoView()
  }, [wanted, l.loaded.Node])
  if (!l.loaded.Node) return html`<h1>Nodes</h1><${Loading} what="nodes" />`
  const down = downNodes()
  const nodes = [...live.nodes.values()].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
  const res = new Map((top.data?.nodes ?? []).map((n) => [n.node, n]))
  const missing = new Map((top.data?.unreachable ?? []).map((u) => [u.node, u.error]))
  const pods = new Map()
  for (const p of live.pods.values()) {
    const n = podNode(p)
    if (n === undefined) continue
    if (!pods.has(n)) pods.set(n, [])
    pods.get(n).push(p)
  }
  return html`
    <h1>Nodes</h1>
    ${top.error ? html`<p class="muted">Resources unavailable: ${top.error.message}</p>` : null}
    ${nodes.map((n) => {
      const name = n.metadata.name
      const r = res.get(name)
      const ps = (pods.get(name) ?? []).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
      return html`<section class="node-card" id=${`node-${name}`} aria-labelledby=${`node-h-${name}`} data-node=${name}>
        <h2 id=${`node-h-${name}`}>${name} <${State} value=${nodeState(n, down)} /></h2>
        <dl>
          <dt>Labels</dt><dd>${labelsText(n.metadata.labels)}</dd>
          <dt>Addresses</dt><dd>${(n.status?.addresses ?? []).join(', ') || '—'}</dd>
          <dt>CPU</dt><dd>${r ? `${(r.cpuMillis / 1000).toFixed(2)} of ${r.cpuCores} cores` : missing.has(name) ? `unknown (${missing.get(name)})` : '—'}</dd>
          <dt>Memory</dt><dd>${r ? `${bytes(r.memoryBytes)} of ${bytes(r.memoryTotalBytes)}` : '—'}</dd>
          <dt>Capacity</dt><dd>${n.status?.capacity ? `cpu ${n.status.capacity.cpu ?? '—'}, memory ${n.status.capacity.memory ?? '—'}` : '—'}</dd>
          <dt>Pod network</dt><dd>${n.status?.network?.state ? `${n.status.network.state}${n.status.network.prefix ? ` (${n.status.network.prefix})` : ''}` : '—'}</dd>
          <dt>Version</dt><dd>${n.status?.version ?? '—'}</dd>
        </dl>
        <h3>Pods (${ps.length})</h3>
        ${
          ps.length === 0
            ? html`<p class="muted">None.</p>`
            : html`<ul class="pod-list">${ps
                .slice(0, 200)
                .map(
                  (p) =>
                    html`<li><a href=${`#/pods/${seg(p.metadata.namespace)}/${seg(p.metadata.name)}`}>${p.metadata.namespace}/${p.metadata.name}</a> <${State} value=${podPhase(p, down)} /></li>`,
                )}${ps.length > 200 ? html`<li>… and ${ps.length - 200} more (<a href=${`#/pods?q=${seg(name)}`}>all</a>)</li>` : null}</ul>`
        }
        <p><a href=${`#/history/Node/_/${seg(name)}`}>History of node/${name}</a></p>
      </section>`
    })}
  `
}

// ---- events -----------------------------------------------------------------------------------

export function EventsPage() {
  const l = useLive()
  const ev = useLoad(() => api('/v1/events', { query: { limit: 300 } }), [])
  useEffect(() => {
    document.title = 'Events · orc'
  }, [])
  // Something was written: read the events again, at most every 2 s.
  const timer = useRef(undefined)
  useEffect(() => {
    if (timer.current === undefined) timer.current = setTimeout(() => ((timer.current = undefined), ev.reload()), 2000)
  }, [l.version])
  useEffect(() => () => clearTimeout(timer.current), [])
  return html`<h1>Events</h1>
    <p>What changed, who changed it and why: revisions of objects and the pods' lifecycle units, newest first.</p>
    ${ev.error ? html`<${ErrorText} error=${ev.error} />` : null}
    ${ev.data ? html`<${EventsTable} events=${ev.data.events} now=${ev.data.now} links=${true} />` : html`<${Loading} what="events" />`}`
}
