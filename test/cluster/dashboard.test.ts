// `orc dashboard` in a real browser (Debian's Chromium, headless, driven by puppeteer-core) against
// three real agents: every page loads and shows the cluster; a rollback made in the page is a
// revision in `orc history`; logs follow; a node whose agent is killed -9 turns Unreachable live;
// a view-only user's dashboard (remote, --node/--credential) shows the cluster and cannot roll
// back. A screenshot of each page goes to the test's output dir (ORC_TEST_OUTPUT, default
// tmp/test-output/dashboard), checked as a PNG of the viewport's size. ORC_DASHBOARD_DOCS_IMG=DIR
// also writes the viewport shots docs/dashboard.md shows.

import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { execa, type ResultPromise } from 'execa'
import type { Browser, Page } from 'puppeteer-core'
import { NODE_FLAGS } from '../../src/agent/ops/node-flags.ts'
import { browserSkipReason, launchChromium, pngSize } from '../helpers/browser.ts'
import { pidsRunning, podManifest, skipReason } from '../pods/helpers.ts'
import { sharedBusybox } from '../sched/helpers.ts'
import { BIN, newNode, ROOT, tokenFrom, Workspace, waitFor } from './helpers.ts'

/** What the test reads of the page's elements (the TypeScript setup has no DOM library). */
type El = { innerText: string; value: string; disabled: boolean }

const skip = browserSkipReason() ?? skipReason()
const OUT = process.env.ORC_TEST_OUTPUT ? join(process.env.ORC_TEST_OUTPUT, 'dashboard') : join(ROOT, 'tmp', 'test-output', 'dashboard')
const DOCS_IMG = process.env.ORC_DASHBOARD_DOCS_IMG
const VIEW = { width: 1280, height: 860 }
const TICKS = `i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.5; done # dashboard ${process.pid}`
const SLEEP = `dashboard-${process.pid}`

/** `orc [flags] dashboard` as a process; resolves with its URL once it printed it. */
async function startDashboardProcess(args: string[], env: Record<string, string>): Promise<{ url: string; proc: ResultPromise }> {
  const proc = execa(process.execPath, [...NODE_FLAGS, BIN, ...args, 'dashboard'], {
    cwd: ROOT,
    reject: false,
    buffer: false,
    env: { USER: 'tester', ORC_CREDENTIAL: '', ORC_NODE: '', ...env },
  })
  let out = ''
  let err = ''
  proc.stdout?.on('data', (d: Buffer) => (out += d.toString()))
  proc.stderr?.on('data', (d: Buffer) => (err += d.toString()))
  let exited = false
  void proc.then(() => (exited = true))
  const url = await waitFor(
    'orc dashboard to print its URL',
    () => {
      if (exited) throw new Error(`orc dashboard exited: ${out}${err}`)
      return /(http:\/\/127\.0\.0\.1:\d+\/#token=[\w-]+)/.exec(out)?.[1]
    },
    30_000,
  )
  return { url, proc }
}

async function shot(page: Page, name: string): Promise<void> {
  mkdirSync(OUT, { recursive: true })
  const file = join(OUT, `${name}.png`)
  await page.screenshot({ path: file as `${string}.png` })
  const png = pngSize(file)
  assert.deepEqual([png.width, png.height], [VIEW.width, VIEW.height], `${file}: a screenshot of the viewport`)
  assert.ok(png.bytes > 8_000, `${file}: ${png.bytes} bytes is too small for a rendered page`)
  if (DOCS_IMG) {
    // Smaller, for the docs (each PNG well under 150 KB).
    mkdirSync(DOCS_IMG, { recursive: true })
    await page.setViewport({ width: 1024, height: 700 })
    await page.screenshot({ path: join(DOCS_IMG, `dashboard-${name}.png`) as `${string}.png` })
    await page.setViewport(VIEW)
  }
}

// biome-ignore lint/performance/useDomNodeTextContent: the text as the user sees it (table cells apart by tabs)
const text = (page: Page, sel: string) => page.$eval(sel, (e) => (e as unknown as El).innerText)

async function go(page: Page, hash: string): Promise<void> {
  await page.evaluate(`location.hash = ${JSON.stringify(hash)}`)
}

async function waitText(page: Page, what: string, sel: string, re: RegExp, timeoutMs = 30_000): Promise<string> {
  try {
    return await waitFor(
      what,
      async () => {
        // biome-ignore lint/performance/useDomNodeTextContent: the text as the user sees it (table cells apart by tabs)
        const t = await page.$eval(sel, (e) => (e as unknown as El).innerText).catch(() => '')
        return re.test(t) ? t : undefined
      },
      timeoutMs,
    )
  } catch (err) {
    // What the page showed instead: a failure in CI is otherwise a bare timeout.
    // biome-ignore lint/performance/useDomNodeTextContent: the text as the user sees it
    const shown = await page.$eval('main', (e) => (e as unknown as El).innerText).catch((e) => `(no main: ${(e as Error).message})`)
    throw new Error(`${(err as Error).message}; the page showed:\n${shown.slice(0, 3000)}`)
  }
}

test('orc dashboard in Chromium against three agents: pages, rollback, logs -f, a node killed -9', { skip, timeout: 230_000 }, async (t) => {
  const ws = new Workspace()
  const procs: ResultPromise[] = []
  let browser: Browser | undefined
  t.after(async () => {
    await browser?.close().catch(() => {})
    for (const p of procs) p.kill('SIGTERM')
    await ws.close()
    for (const argv of [
      ['/bin/sh', '-c', TICKS],
      ['sleep', SLEEP],
    ]) {
      for (const pid of pidsRunning(argv)) {
        try {
          process.kill(pid, 'SIGKILL')
        } catch {}
      }
    }
  })
  const image = await sharedBusybox(ws)
  const [a, b, c] = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]
  await a.up().ready()
  await b.join(a.addr, await tokenFrom(a)).ready()
  await c.join(a.addr, await tokenFrom(a)).ready()
  const apply = async (manifest: string, reason: string) => {
    const r = await execa(process.execPath, [...NODE_FLAGS, BIN, 'apply', '-f', '-', '--reason', reason], {
      cwd: ROOT,
      reject: false,
      input: manifest,
      env: { ORC_SOCKET: a.socket, USER: 'tester' },
    })
    assert.equal(r.exitCode, 0, String(r.stderr))
  }
  await apply(podManifest('web', image, TICKS, { placement: { node: 'b' } }, { app: 'web' }), 'first web')
  await apply(
    JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name: 'sleepy' },
      spec: { terminationGracePeriodSeconds: 1, placement: { node: 'c' }, containers: [{ name: 'main', image, command: ['sleep', SLEEP] }] },
    }),
    'a pod on c',
  )
  // No node has the label: it stays Pending, and says why.
  await apply(
    JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name: 'waiting' },
      spec: { nodeSelector: { disk: 'tape' }, containers: [{ name: 'main', image, command: ['sleep', '1'] }] },
    }),
    'nowhere to go',
  )
  // A second user revision of web: a label (the spec and container stay).
  await apply(podManifest('web', image, TICKS, { placement: { node: 'b' } }, { app: 'web', tier: 'v2' }), 'label tier v2')
  for (const [pod, node] of [
    ['web', 'b'],
    ['sleepy', 'c'],
  ]) {
    await waitFor(
      `${pod} running on ${node}`,
      async () => {
        const r = await a.cli(['get', 'pod', pod!, '-o', 'json'])
        const p = r.exitCode === 0 ? JSON.parse(r.stdout) : undefined
        return p?.status?.phase === 'Running' && p.status.node === node
      },
      60_000,
    )
  }

  const dash = await startDashboardProcess([], { ORC_SOCKET: a.socket })
  procs.push(dash.proc)
  browser = await launchChromium()
  const page = await browser.newPage()
  const pageErrors: string[] = []
  page.on('pageerror', (e) => pageErrors.push(String((e as Error).message ?? e)))
  await page.setViewport(VIEW)
  await page.goto(dash.url, { waitUntil: 'load' })
  assert.doesNotMatch(page.url(), /token=/, 'the token leaves the address bar once read')

  // ---- cluster map
  await waitFor('three Ready nodes on the map', async () => {
    // biome-ignore lint/performance/useDomNodeTextContent: the text as the user sees it (table cells apart by tabs)
    const rows = await page.$$eval('[data-testid=map-nodes] tbody tr', (trs) => trs.map((tr) => (tr as unknown as El).innerText))
    return rows.length === 3 && rows.every((r) => /Ready/.test(r)) ? rows : undefined
  })
  assert.match(await text(page, '[data-testid=map-summary]'), /3 nodes, 3 ready; links as seen from a/)
  assert.equal((await page.$$('[data-testid=cluster-map] g.node')).length, 3)
  const links = await text(page, '[data-testid=map-links]')
  assert.match(links, /\bb\b[\s\S]*\bc\b/, 'a link row for each peer')
  assert.match(links, /direct/)
  assert.match(links, /\d+ ms/, 'a latency')
  assert.match(await text(page, 'main'), /This cluster is in no federation/)
  await shot(page, 'map')

  // ---- keyboard and colour schemes
  await page.keyboard.press('Tab')
  assert.equal(await page.evaluate('document.activeElement.textContent'), 'Skip to content')
  await page.keyboard.press('Tab')
  await page.keyboard.press('Tab')
  assert.equal(await page.evaluate('document.activeElement.textContent'), 'Pods')
  assert.notEqual(await page.evaluate('getComputedStyle(document.activeElement).outlineStyle'), 'none', 'focus is visible')
  await page.keyboard.press('Enter')
  await waitFor('Enter on the Pods link to open the pods page', async () => (await page.evaluate('location.hash')) === '#/pods')
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'dark' }])
  assert.equal(await page.evaluate('getComputedStyle(document.documentElement).backgroundColor'), 'rgb(13, 17, 23)')
  assert.equal(await page.evaluate('getComputedStyle(document.body).color'), 'rgb(230, 237, 243)')
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'light' }])
  assert.equal(await page.evaluate('getComputedStyle(document.documentElement).backgroundColor'), 'rgb(255, 255, 255)')

  // ---- pods: list, filter
  await go(page, '#/pods')
  await waitText(page, 'three pods listed', '[data-testid=pods-count]', /^3 pods/)
  // biome-ignore lint/performance/useDomNodeTextContent: the text as the user sees it (table cells apart by tabs)
  const rowOf = async (name: string) => page.$eval(`[data-testid=pods-table] tr[data-pod="${name}"]`, (e) => (e as unknown as El).innerText)
  assert.match(await rowOf('web'), /web\tdefault\tRunning\t1\/1\t0\tb\t/)
  assert.match(await rowOf('waiting'), /Pending/)
  assert.match(await rowOf('sleepy'), /Running[\s\S]*\bc\b/)
  await page.type('#pod-filter', 'tier=v2')
  await waitText(page, 'the filter to keep web only', '[data-testid=pods-count]', /^3 pods, 1 shown/)
  await shot(page, 'pods')
  await page.$eval('#pod-filter', (e) => ((e as unknown as El).value = ''))

  // ---- a pod's page: why, critical chain, spec, events, logs -f
  await go(page, '#/pods/default/web')
  await waitText(page, "web's page", '[data-testid=pod-summary]', /Running\s+on node b/)
  assert.match(await text(page, '[data-testid=why-summary]'), /pod\/web: target running reached/)
  assert.ok((await page.$$('[data-testid=unit-graph] g.unit')).length >= 5, 'the lifecycle unit graph')
  assert.ok((await page.$$('[data-testid=unit-graph] g.unit.critical')).length >= 2, 'the critical chain is marked')
  assert.match(await text(page, '[data-testid=critical-chain]'), /running reached after[\s\S]*start-containers/)
  assert.match(await text(page, '[data-testid=pod-spec]'), /node: b/)
  assert.match(await text(page, '[data-testid=events-table]'), /label tier v2[\s\S]*first web/)
  const before = await waitText(page, 'the first log lines', '[data-testid=logs]', /tick \d+/)
  const lastTick = (s: string) => Math.max(...[...s.matchAll(/tick (\d+)/g)].map((m) => Number(m[1])))
  const seen = lastTick(before)
  await page.click('[data-testid=follow-logs]')
  assert.equal(await page.$eval('[data-testid=follow-logs]', (e) => e.getAttribute('aria-pressed')), 'true')
  await waitFor('new lines while following', async () => lastTick(await text(page, '[data-testid=logs]')) >= seen + 3, 30_000)
  await page.evaluate('window.scrollTo(0, 0)')
  await shot(page, 'pod')
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'dark' }])
  await page.evaluate(`document.querySelector('[data-testid=logs]').scrollIntoView({ block: 'center' })`)
  await shot(page, 'pod-logs-dark')
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'light' }])
  await page.click('[data-testid=follow-logs]')

  // ---- a pending pod says why
  await go(page, '#/pods/default/waiting')
  await waitText(page, 'the placement of a pod no node fits', '[data-testid=placement]', /disk/)

  // ---- history: side-by-side diff, rollback from the page
  await go(page, '#/history/Pod/default/web')
  await waitText(page, "web's history", '[data-testid=history-table]', /label tier v2/)
  await page.click('#h-excl')
  const userRevs = await waitFor('only the users revisions', async () => {
    const t = await text(page, '[data-testid=history-table]')
    return /controller:/.test(t) ? undefined : t
  })
  assert.match(userRevs, /user:admin\tlabel tier v2[\s\S]*user:admin\tfirst web/)
  const firstRev = await page.$$eval('[data-testid=history-table] tbody tr', (trs) => Number(trs[trs.length - 1]!.getAttribute('data-rev')))
  assert.equal(firstRev, 1)
  // The diff is fetched after the table: wait for it. In one CI run it never came (30 s, the page
  // not captured): say what the page showed, then open the history again once — a second miss fails.
  await waitText(page, 'the diff of the selected revisions', '[data-testid=diff-summary]', /changed lines between revision 1 and revision/).catch(
    async (err) => {
      t.diagnostic(`first wait for the diff failed: ${(err as Error).message}`)
      await go(page, '#/events')
      await go(page, '#/history/Pod/default/web')
      await waitText(page, "web's history again", '[data-testid=history-table]', /label tier v2/)
      await page.click('#h-excl')
      await waitText(page, 'the diff of the selected revisions (again)', '[data-testid=diff-summary]', /changed lines between revision 1 and revision/)
    },
  )
  assert.match(await page.$eval('[data-testid=diff]', (e) => [...e.querySelectorAll('td.new')].map((td) => td.textContent).join('\n')), /"tier": "v2"/)
  await shot(page, 'history')
  await page.click('[data-testid=rollback-1]')
  await page.waitForSelector('#rollback-reason')
  assert.equal(await page.$eval('[data-testid=rollback-form] button[type=submit]', (e) => (e as unknown as El).disabled), true, 'no reason, no rollback')
  await page.type('#rollback-reason', 'back to the first web, from the dashboard')
  await page.click('[data-testid=rollback-form] button[type=submit]')
  const done = await waitText(page, 'the rollback to be written', '[data-testid=rollback-done]', /Rolled back: revision \d+ restores revision 1/)
  const newRev = Number(/revision (\d+) restores/.exec(done)![1])
  const hist = await a.cli(['history', 'pod/web', '-o', 'json'])
  assert.equal(hist.exitCode, 0, hist.stderr)
  const rb = (JSON.parse(hist.stdout) as { number: number; op: string; author: string; reason: string }[]).find((r) => r.number === newRev)
  assert.deepEqual(rb && { op: rb.op, author: rb.author, reason: rb.reason }, {
    op: 'rollback',
    author: 'user:admin',
    reason: 'back to the first web, from the dashboard',
  })
  const labels = JSON.parse((await a.cli(['get', 'pod', 'web', '-o', 'json'])).stdout).metadata.labels
  assert.deepEqual(labels, { app: 'web' }, 'the label of revision 2 is gone')

  // ---- nodes, events
  await go(page, '#/nodes')
  await waitText(page, "b's card to list web", '[data-node=b]', /default\/web/)
  await waitText(page, "a's CPU and memory (orc top)", '[data-node=a]', /Memory\s+[\d.]+ \w+ of/)
  assert.equal((await page.$$('section.node-card')).length, 3)
  await shot(page, 'nodes')
  await go(page, '#/events')
  await waitText(page, 'the rollback among the events', '[data-testid=events-table]', /RolledBack[\s\S]*user:admin/)
  await shot(page, 'events')

  // ---- a view-only user, remote: sees the cluster, cannot roll back
  const vera = await a.cli(['user', 'add', 'vera', '--role', 'view'])
  assert.equal(vera.exitCode, 0, vera.stderr)
  const credFile = join(ws.root, 'vera.credential')
  writeFileSync(credFile, vera.stdout.trim(), { mode: 0o600 })
  const remote = await startDashboardProcess(['--node', b.addr, '--credential', credFile], {})
  procs.push(remote.proc)
  const viewer = await browser.newPage()
  await viewer.setViewport(VIEW)
  await viewer.goto(remote.url, { waitUntil: 'load' })
  await go(viewer, '#/pods')
  await waitText(viewer, "vera's pods list", '[data-testid=pods-count]', /^3 pods/, 60_000)
  assert.match(await text(viewer, 'header'), /vera \(view\)/)
  await go(viewer, '#/history/Pod/default/web')
  await viewer.waitForSelector('[data-testid=rollback-1]', { timeout: 60_000 })
  await viewer.click('[data-testid=rollback-1]')
  await viewer.type('#rollback-reason', 'vera tries')
  await viewer.click('[data-testid=rollback-form] button[type=submit]')
  const refusal = await waitText(viewer, 'the refusal', '[data-testid=rollback-form] [role=alert]', /\S/, 60_000)
  assert.match(refusal, /vera|forbidden|not allowed|may not|permission/i)
  const after = JSON.parse((await a.cli(['history', 'pod/web', '-o', 'json'])).stdout) as { number: number }[]
  assert.equal(Math.max(...after.map((r) => r.number)) >= newRev, true)
  assert.equal(
    after.some((r) => (r as { reason?: string }).reason === 'vera tries'),
    false,
    'no revision by vera',
  )
  await viewer.close()

  // ---- c killed -9: Unreachable on the map, its pod Unknown, without reloading the page
  await go(page, '#/')
  await waitText(page, 'the map', '[data-testid=map-summary]', /3 nodes, 3 ready/)
  await c.kill('SIGKILL')
  await waitText(page, 'c to turn Unreachable', '[data-testid=map-nodes] tr[data-node=c]', /Unreachable/, 60_000)
  assert.match(await text(page, '[data-testid=map-summary]'), /3 nodes, 2 ready/)
  await shot(page, 'map-unreachable')
  await go(page, '#/pods')
  await waitText(page, "sleepy's status to turn Unknown", '[data-testid=pods-table] tr[data-pod=sleepy]', /Unknown/, 30_000)
  assert.deepEqual(pageErrors, [], 'no script error in the page')
})
