// The orc dashboard: Preact components written with htm (tagged templates, no JSX build step),
// routed by the URL's fragment (#/pods, #/pods/NS/NAME, …) so every page is a real link.
import { render } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import { api, takeToken } from './api.js'
import { startLive, useLive } from './live.js'
import { EventsPage, HistoryPage, NodesPage } from './pages/history.js'
import { MapPage } from './pages/map.js'
import { PodPage, PodsPage } from './pages/pods.js'
import { html } from './util.js'

function parseRoute(hash) {
  const path = hash.replace(/^#/, '').split('?')[0]
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent)
  return parts
}

function useRoute() {
  const [route, setRoute] = useState(parseRoute(location.hash))
  useEffect(() => {
    const on = () => setRoute(parseRoute(location.hash))
    window.addEventListener('hashchange', on)
    return () => window.removeEventListener('hashchange', on)
  }, [])
  return route
}

const NAV = [
  ['#/', 'Cluster map', (r) => r.length === 0],
  ['#/pods', 'Pods', (r) => r[0] === 'pods'],
  ['#/nodes', 'Nodes', (r) => r[0] === 'nodes'],
  ['#/events', 'Events', (r) => r[0] === 'events'],
  ['#/history', 'History', (r) => r[0] === 'history'],
]

function page(route) {
  switch (route[0]) {
    case undefined:
      return html`<${MapPage} />`
    case 'pods':
      return route.length === 3 ? html`<${PodPage} ns=${route[1]} name=${route[2]} />` : html`<${PodsPage} />`
    case 'nodes':
      return html`<${NodesPage} />`
    case 'events':
      return html`<${EventsPage} />`
    case 'history':
      return html`<${HistoryPage} kind=${route[1]} ns=${route[2]} name=${route[3]} />`
    default:
      return html`<h1>Not found</h1><p>No page <code>${location.hash}</code>. <a href="#/">Back to the cluster map</a>.</p>`
  }
}

function App({ whoami }) {
  const route = useRoute()
  const l = useLive()
  const main = useRef(null)
  // A new page: move the focus to it, as a page load would (keyboard and screen-reader users).
  useEffect(() => {
    if (main.current && document.activeElement !== document.body) main.current.focus()
  }, [route.join('/')])
  return html`
    <a class="skip" href="#main" onClick=${(e) => (e.preventDefault(), main.current?.focus())}>Skip to content</a>
    <header class="top">
      <span class="brand">orc</span>
      <nav aria-label="Pages">
        <ul>
          ${NAV.map(([href, label, on]) => html`<li><a href=${href} aria-current=${on(route) ? 'page' : undefined}>${label}</a></li>`)}
        </ul>
      </nav>
      <span class="who" title="The API calls are made as this user">${whoami.user} (${whoami.roles.join(', ')})</span>
      <span class="conn ${l.connected ? 'ok' : 'bad'}" role="status" data-testid="live-state">${l.connected ? 'live' : 'offline'}</span>
    </header>
    ${l.problem ? html`<p class="problem" role="alert">${l.problem}</p>` : null}
    <main id="main" tabindex="-1" ref=${main}>${page(route)}</main>
  `
}

async function boot() {
  const root = document.getElementById('app')
  const token = takeToken()
  if (!token) {
    render(html`<main><h1>orc dashboard</h1><p>Open the URL that <code>orc dashboard</code> printed: it carries the token this page needs.</p></main>`, root)
    return
  }
  // The live stream starts at once, beside the whoami call: the first list arrives sooner.
  const es = startLive()
  let whoami
  try {
    whoami = await api('/v1/whoami')
  } catch (err) {
    es.close()
    render(html`<main><h1>orc dashboard</h1><p role="alert">${err.message}</p></main>`, root)
    return
  }
  root.textContent = ''
  render(html`<${App} whoami=${whoami} />`, root)
}

boot()
