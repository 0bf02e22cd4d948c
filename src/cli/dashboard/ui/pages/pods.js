// Pods: the list (filter, status, node, IP, policy, restarts, ready) and a pod's page (spec,
// status, `orc why` with the lifecycle unit graph and its critical chain, logs with follow, events).
import { useEffect, useMemo, useRef, useState } from 'preact/hooks'
import { api, seg, stream } from '../api.js'
import { downNodes, live, podNode, podPhase, podReady, podRestarts, useLive } from '../live.js'
import { ago, duration, ErrorText, html, Loading, labelsText, Problems, State, time, useLoad } from '../util.js'

const PHASES = ['', 'Pending', 'Running', 'Succeeded', 'Failed', 'Unknown']
let markedFirstRender = false

function matches(pod, words, down) {
  if (words.length === 0) return true
  const hay = [
    pod.metadata.name,
    pod.metadata.namespace,
    podNode(pod) ?? '',
    podPhase(pod, down),
    pod.status?.network?.ipv6 ?? '',
    ...Object.entries(pod.metadata.labels ?? {}).map(([k, v]) => `${k}=${v}`),
  ]
    .join(' ')
    .toLowerCase()
  return words.every((w) => hay.includes(w))
}

export function PodsPage() {
  const l = useLive()
  const [filter, setFilter] = useState(new URLSearchParams(location.hash.split('?')[1] ?? '').get('q') ?? '')
  const [phase, setPhase] = useState('')
  useEffect(() => {
    document.title = 'Pods · orc'
  }, [])
  const down = downNodes()
  const all = useMemo(
    () =>
      [...live.pods.values()].sort(
        (a, b) => (a.metadata.namespace ?? '').localeCompare(b.metadata.namespace ?? '') || a.metadata.name.localeCompare(b.metadata.name),
      ),
    [l.version],
  )
  const words = filter.toLowerCase().split(/\s+/).filter(Boolean)
  const shown = all.filter((p) => matches(p, words, down) && (phase === '' || podPhase(p, down) === phase))
  // The benchmark's mark: the first render of the list with the cluster's pods (test/bench/dashboard.bench.ts).
  useEffect(() => {
    if (!markedFirstRender && l.loaded.Pod) {
      markedFirstRender = true
      performance.mark('orc-pods-rendered')
    }
  })
  return html`
    <h1>Pods</h1>
    <form class="filters" role="search" onSubmit=${(e) => e.preventDefault()}>
      <label for="pod-filter">Filter</label>
      <input id="pod-filter" type="search" value=${filter} placeholder="name, node, label=value, phase…" onInput=${(e) => setFilter(e.currentTarget.value)} />
      <label for="pod-phase">Status</label>
      <select id="pod-phase" value=${phase} onChange=${(e) => setPhase(e.currentTarget.value)}>
        ${PHASES.map((p) => html`<option value=${p}>${p === '' ? 'any' : p}</option>`)}
      </select>
    </form>
    ${
      !l.loaded.Pod
        ? html`<${Loading} what="pods" />`
        : html`<p role="status" data-testid="pods-count">${all.length} pods${shown.length !== all.length ? `, ${shown.length} shown` : ''}</p>
      <table data-testid="pods-table">
        <thead><tr>
          <th scope="col">Name</th><th scope="col">Namespace</th><th scope="col">Status</th><th scope="col">Ready</th><th scope="col">Restarts</th>
          <th scope="col">Node</th><th scope="col">IP</th><th scope="col">Policy</th><th scope="col">Age</th>
        </tr></thead>
        <tbody>
          ${shown.map(
            (p) => html`<tr key=${`${p.metadata.namespace}/${p.metadata.name}`} data-pod=${p.metadata.name}>
              <th scope="row"><a href=${`#/pods/${seg(p.metadata.namespace)}/${seg(p.metadata.name)}`}>${p.metadata.name}</a></th>
              <td>${p.metadata.namespace}</td>
              <td><${State} value=${podPhase(p, down)} /></td>
              <td>${podReady(p)}</td>
              <td>${podRestarts(p)}</td>
              <td>${podNode(p) ?? '—'}</td>
              <td>${p.status?.network?.ipv6 ?? '—'}</td>
              <td>${p.spec?.policy ?? 'best-effort'}</td>
              <td>${ago(p.metadata.createdAt)}</td>
            </tr>`,
          )}
        </tbody>
      </table>`
    }
  `
}

// ---- a pod's page ---------------------------------------------------------------------------

/** Layers of the unit graph: a unit sits one column right of the latest unit it waits for. */
function layers(units) {
  const by = new Map(units.map((u) => [u.name, u]))
  const depth = new Map()
  const visit = (u, seen) => {
    if (depth.has(u.name)) return depth.get(u.name)
    if (seen.has(u.name)) return 0
    seen.add(u.name)
    let d = 0
    for (const a of u.after) {
      const v = by.get(a)
      if (v) d = Math.max(d, visit(v, seen) + 1)
    }
    depth.set(u.name, d)
    return d
  }
  for (const u of units) visit(u, new Set())
  return depth
}

function UnitGraph({ workflow, chain }) {
  const units = workflow.units
  const depth = layers(units)
  const cols = new Map()
  for (const u of units) {
    const d = depth.get(u.name)
    if (!cols.has(d)) cols.set(d, [])
    cols.get(d).push(u)
  }
  const onChain = new Set((chain?.steps ?? []).map((s) => s.unit))
  const BW = 136
  const BH = 34
  const GX = 26
  const GY = 14
  const pos = new Map()
  let rows = 0
  for (const [d, us] of cols) {
    us.forEach((u, i) => pos.set(u.name, { x: 10 + d * (BW + GX), y: 10 + i * (BH + GY) }))
    rows = Math.max(rows, us.length)
  }
  const width = 20 + cols.size * (BW + GX)
  const height = 20 + rows * (BH + GY)
  const edges = []
  for (const u of units) {
    const to = pos.get(u.name)
    for (const a of u.after) {
      const from = pos.get(a)
      if (!from) continue
      const crit = onChain.has(u.name) && onChain.has(a)
      edges.push(
        html`<line class="dep ${crit ? 'critical' : ''} ${u.requires.includes(a) ? 'requires' : ''}" x1=${from.x + BW} y1=${from.y + BH / 2} x2=${to.x} y2=${to.y + BH / 2} />`,
      )
    }
  }
  return html`<div class="graph-wrap"><svg class="units" width=${width} height=${height} viewBox="0 0 ${width} ${height}" role="img" aria-labelledby="units-title" data-testid="unit-graph">
    <title id="units-title">Lifecycle units: ${units.length} units, arrows from what a unit waits for; the critical chain is outlined. The table below lists the same.</title>
    ${edges}
    ${units.map((u) => {
      const p = pos.get(u.name)
      return html`<g class="unit ${u.state} ${onChain.has(u.name) ? 'critical' : ''} ${u.kind}" data-unit=${u.name}>
        <rect x=${p.x} y=${p.y} width=${BW} height=${BH} rx=${u.kind === 'target' ? 14 : 4} />
        <text x=${p.x + 8} y=${p.y + 14}>${u.name.length > 20 ? `${u.name.slice(0, 19)}…` : u.name}</text>
        <text class="small" x=${p.x + 8} y=${p.y + 27}>${u.state}${u.startedAt !== undefined && u.kind === 'unit' ? ` · ${duration((u.endedAt ?? workflow.at) - u.startedAt)}` : ''}</text>
      </g>`
    })}
  </svg></div>`
}

function Logs({ ns, name, containers }) {
  const [container, setContainer] = useState(containers[0] ?? '')
  const [follow, setFollow] = useState(false)
  const [lines, setLines] = useState([])
  const [note, setNote] = useState('')
  const box = useRef(null)
  useEffect(() => {
    setLines([])
    setNote('')
    if (!follow) {
      let gone = false
      api(`/v1/pods/${seg(ns)}/${seg(name)}/logs`, { query: { container, tail: 500 } }).then(
        (r) => !gone && setLines(r.lines),
        (err) => !gone && setNote(err.message),
      )
      return () => {
        gone = true
      }
    }
    let first = true
    const es = stream(
      `/dash/logs/${seg(ns)}/${seg(name)}`,
      { container },
      {
        lines: (r) => {
          setLines((old) => (first ? r.lines : [...old, ...r.lines]).slice(-5000))
          first = false
        },
        end: (r) => {
          setNote(`Follow ended: ${r.reason}.`)
          es.close()
        },
        problem: (p) => setNote(p.message),
      },
    )
    return () => es.close()
  }, [ns, name, container, follow])
  useEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight
  }, [lines])
  return html`<section aria-labelledby="logs-h">
    <h2 id="logs-h">Logs</h2>
    <div class="toolbar">
      ${
        containers.length > 1
          ? html`<label for="log-container">Container</label>
        <select id="log-container" value=${container} onChange=${(e) => setContainer(e.currentTarget.value)}>${containers.map((c) => html`<option>${c}</option>`)}</select>`
          : null
      }
      <button type="button" aria-pressed=${follow ? 'true' : 'false'} onClick=${() => setFollow(!follow)} data-testid="follow-logs">${follow ? 'Stop following' : 'Follow'}</button>
      <span class="muted" role="status">${follow ? 'following: new lines appear as the container writes them' : ''}</span>
    </div>
    ${note ? html`<p class="muted">${note}</p>` : null}
    <pre class="logs" ref=${box} tabindex="0" aria-label="Log lines" data-testid="logs">${lines.join('\n')}</pre>
  </section>`
}

export function PodPage({ ns, name }) {
  const l = useLive()
  const rev = live.pods.get(`${ns}/${name}`)?.metadata.revisionId
  const page = useLoad(() => api(`/dash/pod/${seg(ns)}/${seg(name)}`), [ns, name])
  useEffect(() => {
    document.title = `pod/${name} · orc`
  }, [name])
  // A new revision of the pod (its status moved): read the page again.
  useEffect(() => {
    if (page.data && rev !== undefined && rev !== page.data.pod.metadata.revisionId) page.reload()
  }, [rev])
  if (!page.data) return page.error ? html`<h1>pod/${name}</h1><${ErrorText} error=${page.error} />` : html`<h1>pod/${name}</h1><${Loading} what="the pod" />`
  const d = page.data
  const pod = d.pod
  const down = downNodes()
  const phase = podPhase(pod, down)
  void l
  const st = pod.status ?? {}
  return html`
    <h1>pod/${name} <span class="muted">${ns}</span></h1>
    <p data-testid="pod-summary"><${State} value=${phase} /> ${d.node ? html`on node <a href=${`#/nodes?node=${seg(d.node)}`}>${d.node}</a>` : 'not bound to a node yet'}${
      st.network?.ipv6 ? `, IP ${st.network.ipv6}` : ''
    }, policy ${pod.spec?.policy ?? 'best-effort'}, revision ${pod.metadata.revision}${st.runningRevision !== undefined ? ` (running ${st.runningRevision})` : ''}.${' '}
      <a href=${`#/history/Pod/${seg(ns)}/${seg(name)}`}>History and rollback</a></p>
    ${d.nodeLiveness ? html`<p class="problem" role="alert">Node ${d.node} is ${d.nodeLiveness.text}: the status below is its last report.</p>` : null}
    ${st.reason ? html`<p>Reason: ${st.reason}</p>` : null}
    <${Problems} problems=${d.problems} />

    <section aria-labelledby="why-h">
      <h2 id="why-h">Why (lifecycle)</h2>
      ${
        d.why
          ? html`<p data-testid="why-summary"><strong>${d.why.explanation.summary}</strong></p>
            <${UnitGraph} workflow=${d.workflow} chain=${d.why.chain} />
            <h3>Critical chain</h3>
            <pre data-testid="critical-chain">${d.why.chainText}</pre>
            <details><summary>Full explanation (orc why)</summary><pre>${d.why.text}</pre></details>
            <table data-testid="units-table">
              <thead><tr><th scope="col">Unit</th><th scope="col">State</th><th scope="col">Waits for</th><th scope="col">Started</th><th scope="col">Took</th><th scope="col">Attempts</th><th scope="col">Last error</th></tr></thead>
              <tbody>${d.workflow.units.map(
                (u) => html`<tr class=${d.why.chain.steps.some((s) => s.unit === u.name) ? 'critical' : ''}>
                  <th scope="row">${u.name}${d.why.chain.steps.some((s) => s.unit === u.name) ? html` <span class="tag">critical</span>` : null}</th>
                  <td><${State} value=${u.state} /></td><td>${u.after.join(', ') || '—'}</td>
                  <td>${u.startedAt !== undefined ? `+${duration(u.startedAt - d.workflow.startedAt)}` : '—'}</td>
                  <td>${u.startedAt !== undefined && u.kind === 'unit' ? duration((u.endedAt ?? d.workflow.at) - u.startedAt) : '—'}</td>
                  <td>${u.attempts}/${u.maxAttempts}</td><td>${u.lastError ?? '—'}</td></tr>`,
              )}</tbody>
            </table>`
          : html`<p data-testid="why-summary">No lifecycle run recorded yet: the node it is bound to has not started it (or no node is bound).</p>`
      }
      ${d.placement ? html`<h3>Placement</h3><pre data-testid="placement">${d.placement.text}</pre>` : null}
    </section>

    <section aria-labelledby="status-h">
      <h2 id="status-h">Status</h2>
      <table>
        <thead><tr><th scope="col">Container</th><th scope="col">State</th><th scope="col">Ready</th><th scope="col">Restarts</th><th scope="col">Details</th></tr></thead>
        <tbody>${(st.containers ?? []).map(
          (
            c,
          ) => html`<tr><th scope="row">${c.name}</th><td><${State} value=${c.state} /></td><td>${c.ready === false ? 'no' : c.state === 'running' ? 'yes' : '—'}</td>
            <td>${c.restarts ?? 0}</td><td>${[c.pid !== undefined ? `pid ${c.pid}` : '', c.exitCode !== undefined ? `exit ${c.exitCode}` : '', c.reason ?? ''].filter(Boolean).join(', ') || '—'}</td></tr>`,
        )}</tbody>
      </table>
      <p>Labels: ${labelsText(pod.metadata.labels)}</p>
    </section>

    <section aria-labelledby="spec-h">
      <h2 id="spec-h">Spec</h2>
      <pre data-testid="pod-spec">${d.specYaml}</pre>
    </section>

    <${Logs} ns=${ns} name=${name} containers=${(pod.spec?.containers ?? []).map((c) => c.name)} />

    <section aria-labelledby="events-h">
      <h2 id="events-h">Events</h2>
      <${EventsTable} events=${d.events} now=${d.now} />
    </section>
  `
}

export function EventsTable({ events, now, links = false }) {
  if (events.length === 0) return html`<p class="muted">No events.</p>`
  const rows = [...events].sort((a, b) => b.time - a.time)
  return html`<table data-testid="events-table">
    <thead><tr><th scope="col">When</th>${links ? html`<th scope="col">Object</th>` : null}<th scope="col">Type</th><th scope="col">Who</th><th scope="col">What</th><th scope="col">Revision</th></tr></thead>
    <tbody>${rows.map(
      (e) => html`<tr key=${e.id}>
        <td title=${time(e.time)}>${ago(e.time, now)}</td>
        ${links ? html`<td>${objectLink(e)}</td>` : null}
        <td>${e.type}</td><td>${e.source}</td><td>${e.message}</td><td>${e.revision ?? '—'}</td></tr>`,
    )}</tbody>
  </table>`
}

function objectLink(e) {
  const [kind, name] = e.object.split('/')
  if (!name) return e.object
  const ns = e.namespace === '' ? '_' : e.namespace
  return html`<a href=${`#/history/${seg(kind)}/${seg(ns)}/${seg(name)}`}>${e.object}</a>${e.namespace ? html` <span class="muted">${e.namespace}</span>` : null}`
}
