// The cluster map: every node, and the links of the node the dashboard talks to — its libp2p mesh
// connections (path, latency, handshake age) and its WireGuard tunnels (state, direct or relayed
// and through which member, last handshake) — and the federations the cluster is in.
import { useEffect } from 'preact/hooks'
import { api } from '../api.js'
import { downNodes, live, nodeState, podNode, useLive } from '../live.js'
import { ago, bytes, ErrorText, html, Loading, labelsText, Problems, State, useLoad } from '../util.js'

const W = 640
const H = 360

/** Node positions: the answering node in the middle, the others on a circle around it. */
function layout(names, self) {
  const pos = new Map()
  const others = names.filter((n) => n !== self)
  if (self !== undefined) pos.set(self, { x: W / 2, y: H / 2 })
  const r = Math.min(W, H) / 2 - 50
  others.forEach((n, i) => {
    // Half a step off the vertical: two peers sit left and right of the middle, not on one line with it.
    const a = -Math.PI / 2 + Math.PI / Math.max(others.length, 1) + (2 * Math.PI * i) / Math.max(others.length, 1)
    pos.set(n, { x: W / 2 + r * Math.cos(a) * 1.5, y: H / 2 + r * Math.sin(a) })
  })
  return pos
}

function MapSvg({ data, nodes, down }) {
  const names = nodes.map((n) => n.metadata.name)
  const pos = layout(names, data.self)
  const tunnels = new Map(data.tunnels.map((t) => [t.node, t]))
  const peers = new Map(data.peers.map((p) => [p.name, p]))
  const me = pos.get(data.self)
  const edges = []
  if (me) {
    for (const n of names) {
      if (n === data.self) continue
      const p = pos.get(n)
      const t = tunnels.get(n)
      const peer = peers.get(n)
      const state = t ? t.state : peer && peer.path !== 'gossip' ? 'mesh' : 'none'
      const relay = t?.path === 'relayed' && t.via ? pos.get(t.via) : undefined
      const label = peer?.latencyMs != null ? `${Math.round(peer.latencyMs)} ms` : ''
      if (relay) {
        edges.push(
          html`<path class="edge relayed ${state}" d=${`M${me.x},${me.y} Q${relay.x},${relay.y} ${p.x},${p.y}`} fill="none"><title>${data.self} → ${n}: WireGuard relayed via ${t.via}, ${state}</title></path>`,
        )
      } else {
        edges.push(
          html`<line class="edge ${state} ${t?.path ?? ''}" x1=${me.x} y1=${me.y} x2=${p.x} y2=${p.y}><title>${data.self} → ${n}: ${t ? `WireGuard ${t.path}, ${t.state}` : `mesh ${peer?.path ?? 'unknown'}`}</title></line>`,
        )
      }
      if (label) edges.push(html`<text class="edge-label" x=${(me.x + p.x) / 2} y=${(me.y + p.y) / 2 - 4}>${label}</text>`)
    }
  }
  return html`<svg class="map" viewBox="0 0 ${W} ${H}" role="img" aria-labelledby="map-title map-desc" data-testid="cluster-map">
    <title id="map-title">Cluster map</title>
    <desc id="map-desc">${names.length} nodes; links as ${data.self ?? 'this node'} sees them. The tables below say the same in text.</desc>
    ${edges}
    ${nodes.map((n) => {
      const p = pos.get(n.metadata.name)
      const st = nodeState(n, down)
      const cls = st === 'Ready' ? 'good' : /Unreachable|NotReady|Removed/.test(st) ? 'bad' : 'warn'
      return html`<g class="node ${cls}" data-node=${n.metadata.name}>
        <circle cx=${p.x} cy=${p.y} r=${n.metadata.name === data.self ? 26 : 20}><title>${n.metadata.name}: ${st}</title></circle>
        <text x=${p.x} y=${p.y + 40} text-anchor="middle">${n.metadata.name}</text>
        <text class="small" x=${p.x} y=${p.y + 54} text-anchor="middle">${st}</text>
      </g>`
    })}
  </svg>`
}

export function MapPage() {
  const l = useLive()
  const map = useLoad(() => api('/dash/map'), [])
  // Liveness changes (a node lost or back) refresh the links; latencies refresh every 10 s.
  const states = l.members.map((m) => `${m.name}:${m.state}`).join(',')
  useEffect(() => {
    if (map.data) map.reload()
  }, [states])
  useEffect(() => {
    document.title = 'Cluster map · orc'
    const t = setInterval(() => map.reload(), 10_000)
    return () => clearInterval(t)
  }, [])
  if (!map.data) return map.error ? html`<h1>Cluster map</h1><${ErrorText} error=${map.error} />` : html`<h1>Cluster map</h1><${Loading} what="the cluster" />`
  const data = map.data
  const down = downNodes()
  const nodes = live.loaded.Node ? [...live.nodes.values()] : data.nodes
  nodes.sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
  const podsOn = new Map()
  for (const p of live.pods.values()) {
    const n = podNode(p)
    if (n) podsOn.set(n, (podsOn.get(n) ?? 0) + 1)
  }
  const ready = nodes.filter((n) => nodeState(n, down) === 'Ready').length
  const members = new Map(l.members.map((m) => [m.name, m]))
  const tunnels = new Map(data.tunnels.map((t) => [t.node, t]))
  return html`
    <h1>Cluster map${data.cluster ? html` <span class="muted">${data.cluster.name}</span>` : null}</h1>
    <p data-testid="map-summary">${nodes.length} nodes, ${ready} ready; links as seen from <strong>${data.self ?? '?'}</strong>${
      data.network ? html`; pod network ${data.network.state}${data.network.prefix ? ` (${data.network.prefix})` : ''}` : null
    }.</p>
    <${Problems} problems=${data.problems} />
    <${MapSvg} data=${data} nodes=${nodes} down=${down} />
    <p class="legend" aria-hidden="true"><span class="k up">WireGuard up</span> <span class="k waiting">waiting</span> <span class="k down">down</span> <span class="k relayed">relayed (curved, through the relay)</span> <span class="k mesh">mesh only</span></p>

    <h2>Nodes</h2>
    <table data-testid="map-nodes">
      <thead><tr><th scope="col">Node</th><th scope="col">State</th><th scope="col">Labels</th><th scope="col">Addresses</th><th scope="col">Version</th><th scope="col">Pods</th><th scope="col">Last heard</th></tr></thead>
      <tbody>
        ${nodes.map((n) => {
          const m = members.get(n.metadata.name)
          return html`<tr data-node=${n.metadata.name}>
            <th scope="row"><a href=${`#/nodes?node=${encodeURIComponent(n.metadata.name)}`}>${n.metadata.name}</a>${m?.self ? ' (this node)' : ''}</th>
            <td><${State} value=${nodeState(n, down)} /></td>
            <td>${labelsText(n.metadata.labels)}</td>
            <td>${(n.status?.addresses ?? []).join(', ') || '—'}</td>
            <td>${m?.version ?? n.status?.version ?? '—'}</td>
            <td>${podsOn.get(n.metadata.name) ?? 0}</td>
            <td>${m?.self ? '—' : m ? ago(m.lastSeen, l.membersAt || data.now) : '—'}</td>
          </tr>`
        })}
      </tbody>
    </table>

    <h2>Links from ${data.self ?? 'this node'}</h2>
    <table data-testid="map-links">
      <thead><tr>
        <th scope="col">Peer</th><th scope="col">Mesh path</th><th scope="col">Latency</th><th scope="col">Mesh handshake</th>
        <th scope="col">WireGuard</th><th scope="col">WireGuard path</th><th scope="col">Endpoint</th><th scope="col">Last handshake</th><th scope="col">Received / sent</th>
      </tr></thead>
      <tbody>
        ${data.peers
          .filter((p) => !p.self)
          .map((p) => {
            const t = tunnels.get(p.name)
            return html`<tr data-peer=${p.name}>
              <th scope="row">${p.name}</th>
              <td>${p.path}</td>
              <td>${p.latencyMs == null ? '—' : `${Math.round(p.latencyMs)} ms`}</td>
              <td>${p.handshakeAt == null ? '—' : ago(p.handshakeAt, data.now)}</td>
              <td>${t ? html`<${State} value=${t.state} />` : 'no tunnel'}</td>
              <td>${t ? (t.path === 'relayed' ? `relayed via ${t.via}` : t.path) + (t.punched ? ' (hole punched)' : '') : '—'}</td>
              <td>${t?.endpoint ?? '—'}</td>
              <td>${t?.latestHandshakeMs ? ago(t.latestHandshakeMs, data.now) : '—'}</td>
              <td>${t ? `${bytes(t.rxBytes)} / ${bytes(t.txBytes)}` : '—'}</td>
            </tr>`
          })}
      </tbody>
    </table>
    ${data.network === undefined || data.network.state === 'Off' ? html`<p class="muted">The pod network is off on ${data.self}: no WireGuard tunnels.</p>` : null}

    <h2>Federations</h2>
    ${
      data.federations.length === 0
        ? html`<p class="muted" data-testid="federations-none">This cluster is in no federation.</p>`
        : html`<table data-testid="federations">
          <thead><tr><th scope="col">Federation</th><th scope="col">State</th><th scope="col">Namespaces</th><th scope="col">Clusters (members connected / total)</th></tr></thead>
          <tbody>${data.federations.map(
            (f) => html`<tr><th scope="row">${f.name}</th><td><${State} value=${f.state} /></td><td>${f.namespaces.join(', ')}</td>
              <td>${(f.clusters ?? []).map((c) => `${c.name}${c.self ? ' (this)' : ''} ${c.connected}/${c.members}`).join('; ') || '—'}</td></tr>`,
          )}</tbody>
        </table>`
    }
    ${
      data.federated.length > 0
        ? html`<h3>Tunnels to federated clusters</h3>
          <ul>${data.federated.map((t) => html`<li>${t.node}: <${State} value=${t.state} />, ${t.path}, ${t.routes.length} routes</li>`)}</ul>`
        : null
    }
  `
}
