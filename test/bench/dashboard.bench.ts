/**
 * The dashboard's first render with many pods, measured in the browser: a real agent (`orc up`)
 * with N Pending pods (a nodeSelector no node matches: they stay Pending and cost nothing), the
 * real `orc dashboard` against its socket, and headless Chromium (Debian's, puppeteer-core)
 * opening the pods page R times, each in a fresh browser context (no cache). Prints:
 *   dashboard_pods <N>
 *   dashboard_first_render_ms_median <ms>   navigation start → the list with N rows rendered
 *                                            (the page's performance mark `orc-pods-rendered`)
 *   dashboard_first_render_ms_max <ms>
 *   dashboard_rows_visible_ms_median <ms>   goto() → N rows in the DOM, as seen from outside
 * Run: node --import tsx --import ./test/setup.ts test/bench/dashboard.bench.ts [N] [R]
 */
import { join } from 'node:path'
import { execa } from 'execa'
import { NODE_FLAGS } from '../../src/agent/ops/node-flags.ts'
import { startAgentProcess, tempDir } from '../agent/helpers.ts'
import { launchChromium } from '../helpers/browser.ts'
import { waitFor } from '../helpers/wait.ts'

const N = Number(process.argv[2] ?? 1000)
const R = Number(process.argv[3] ?? 5)
const ROOT = new URL('../..', import.meta.url).pathname

const pod = (i: number) => ({
  apiVersion: 'orc/v1',
  kind: 'Pod',
  metadata: { name: `bench-${i}`, labels: { app: 'bench', shard: String(i % 16) } },
  spec: { nodeSelector: { 'orc-bench': 'nowhere' }, containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] },
})

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const tmp = tempDir('orc-bench-dash-')
const agent = await startAgentProcess(join(tmp.path, 'data'))
const dash = execa(process.execPath, [...NODE_FLAGS, join(ROOT, 'bin/orc.mjs'), 'dashboard'], {
  cwd: ROOT,
  reject: false,
  buffer: false,
  env: { ORC_SOCKET: agent.socket, USER: 'tester' },
})
let out = ''
dash.stdout?.on('data', (d: Buffer) => (out += d.toString()))
dash.stderr?.on('data', (d: Buffer) => (out += d.toString()))
const browser = await launchChromium()
try {
  for (let i = 0; i < N; i += 100) {
    const objects = []
    for (let j = i; j < Math.min(N, i + 100); j++) objects.push(pod(j))
    await agent.client.call('POST', '/v1/apply', { body: { objects, reason: 'bench' } })
  }
  const url = await waitFor('the dashboard URL', () => /(http:\/\/127\.0\.0\.1:\d+\/)#token=([\w-]+)/.exec(out) ?? undefined, 30_000)
  const pageUrl = `${url[1]}#/pods?token=${url[2]}`
  const marks: number[] = []
  const visible: number[] = []
  for (let r = 0; r < R; r++) {
    const ctx = await browser.createBrowserContext()
    const page = await ctx.newPage()
    await page.setViewport({ width: 1280, height: 860 })
    const t0 = performance.now()
    await page.goto(pageUrl)
    await page.waitForFunction(`document.querySelectorAll('[data-testid=pods-table] tbody tr').length === ${N}`, { timeout: 60_000, polling: 20 })
    visible.push(performance.now() - t0)
    marks.push(await page.evaluate(() => performance.getEntriesByName('orc-pods-rendered')[0]?.startTime ?? Number.NaN))
    await ctx.close()
  }
  console.log(`dashboard_pods ${N}`)
  console.log(`dashboard_first_render_ms_median ${Math.round(median(marks))}`)
  console.log(`dashboard_first_render_ms_max ${Math.round(Math.max(...marks))}`)
  console.log(`dashboard_rows_visible_ms_median ${Math.round(median(visible))}`)
  console.log(`dashboard_first_render_ms_runs ${marks.map((m) => Math.round(m)).join(',')}`)
} finally {
  await browser.close()
  dash.kill('SIGTERM')
  await agent.stop()
  tmp.remove()
}
