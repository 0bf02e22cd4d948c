/**
 * `orc dashboard`: a web UI on this machine (127.0.0.1) over the same API client as every other
 * command — the local socket, or `--node`/`--credential` — so the page can do what the user can
 * (docs/dashboard.md).
 */
import { spawn } from 'node:child_process'
import type { Command } from 'commander'
import { OrcError } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { startDashboard } from '../dashboard/server.ts'
import { examples } from '../format.ts'
import type { ApiCaller } from '../remote.ts'

export interface DashboardCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
  now(): number
}

function parsePort(v: string): number {
  const n = Number(v)
  if (!Number.isInteger(n) || n < 0 || n > 65_535)
    throw new OrcError('invalid', `--port ${JSON.stringify(v)}: a TCP port is a whole number 0–65535 (0: any free port)`)
  return n
}

/** The desktop's "open this URL" command; its failure is reported, the dashboard keeps running. */
function openBrowser(url: string, io: DashboardCliIO): void {
  const cmd = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer' : 'xdg-open'
  const child = spawn(cmd, [url], { stdio: 'ignore', detached: true })
  child.on('error', (err) => io.err(`could not open a browser (${cmd}: ${err.message}); open the URL above yourself\n`))
  child.unref()
}

export function registerDashboardCommand(program: Command, io: DashboardCliIO, client: (cmd: Command) => ApiCaller): void {
  program
    .command('dashboard')
    .description(
      'Serve a web UI of the cluster on this machine (127.0.0.1): map, pods, lifecycle, logs, history with rollback, live. It calls the API as you, through the local socket or --node/--credential',
    )
    .option('--port <port>', 'TCP port on 127.0.0.1 (default: any free port)', parsePort)
    .option('--open', 'open the page in the desktop browser')
    .addHelpText(
      'after',
      examples(`
  # Print the page's URL (it carries a one-time token; keep it to yourself)
  orc dashboard

  # A fixed port, opened in the browser
  orc dashboard --port 7480 --open

  # Against a remote node, as the user of the credential
  orc --node lab1:7419 --credential ~/alice.cred dashboard`),
    )
    .action(async (opts: { port?: number; open?: boolean }, cmd: Command) => {
      const c = client(cmd)
      // Fail now, with the client's own error, when there is no agent to talk to.
      const me = await callRoute(c, 'whoami')
      const dash = await startDashboard({ client: c, port: opts.port, now: io.now })
      io.out(`orc dashboard for ${me.user} (${me.roles.join(', ') || 'no roles'}): ${dash.url}\n`)
      io.out('Ctrl-C stops it.\n')
      if (opts.open) openBrowser(dash.url, io)
      // Ctrl-C (or SIGTERM) ends the process as it is: the dashboard holds nothing to save, and a
      // close would wait for the agent's long polls in flight (up to 10 s).
      await new Promise<never>(() => {})
    })
}
