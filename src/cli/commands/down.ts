/**
 * `orc down`: stop this machine's agent and remove what its node network made on the host (the
 * WireGuard interface and its routes, pod network namespaces — stopping the pods still running in
 * them — the NAT table, the forwarding sysctls it turned on). The agent does it on the same path
 * as SIGTERM, asked over the local socket; with no agent running, leftovers named in the data dir
 * are removed. The data dir (store, identity, keys) is kept.
 */
import { readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Command } from 'commander'
import { type DownResponse, defaultDataDir, NETWORK_DOWN_FILE, readPid, removeNetworkLeftovers, resolveSocketPath, socketPathOf } from '../../agent/index.ts'
import { OrcError } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { ApiClient } from '../client.ts'
import { examples } from '../format.ts'

export interface DownCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** What the stopping agent wrote it removed (then the report is removed); undefined when none. */
function readDownReport(dataDir: string): string[] | undefined {
  const file = join(dataDir, NETWORK_DOWN_FILE)
  try {
    const r = JSON.parse(readFileSync(file, 'utf8')) as { removed?: unknown }
    rmSync(file, { force: true })
    return Array.isArray(r.removed) ? r.removed.filter((x): x is string => typeof x === 'string') : []
  } catch {
    return undefined
  }
}

function parseTimeout(text: string): number {
  const m = /^([0-9]+)(ms|s|m)?$/.exec(text.trim())
  if (!m) throw new OrcError('invalid', `--timeout ${JSON.stringify(text)}: want a duration like 30s or 2m`)
  const n = Number(m[1])
  return m[2] === 'ms' ? n : m[2] === 'm' ? n * 60_000 : n * 1000
}

const KEPT = (dataDir: string) => `kept: ${dataDir} (store, identity, keys); \`orc up --data-dir ${dataDir}\` starts this node again with them\n`

export function registerDownCommand(program: Command, io: DownCliIO): void {
  program
    .command('down')
    .description("Stop this machine's agent and remove what it made on the host (WireGuard interface, routes, pod namespaces, NAT table); data is kept")
    .option('--data-dir <dir>', `the node's data dir (default: ${defaultDataDir(io.env)}); its socket unless --socket is given`)
    .option('--timeout <duration>', 'how long to wait for the agent to exit', '60s')
    .addHelpText(
      'after',
      `
Pods running on this node are stopped with their namespaces; they start again on the next
\`orc up\`. The data dir — the replicated store, the node's identity and WireGuard key — is kept,
and the node stays a member of its cluster (\`orc node remove\` takes it out). With no agent
running, \`orc down\` removes what a killed agent left behind, as named in <data-dir>/network.json.
` +
        examples(`
  # Stop the local agent and clean up the host
  sudo orc down

  # A second node on the same machine
  orc down --data-dir /tmp/orc2`),
    )
    .action(async (opts: { dataDir?: string; timeout: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals()
      if ((g.node as string | undefined) ?? (io.env.ORC_NODE || undefined)) {
        throw new OrcError(
          'invalid',
          'orc down works on the machine of the node it stops (it waits for the agent to exit and cleans up the host): run it there, without --node',
        )
      }
      const timeoutMs = parseTimeout(opts.timeout)
      const socketFlag = g.socket as string | undefined
      const socket = socketFlag !== undefined || opts.dataDir === undefined ? resolveSocketPath(socketFlag, io.env) : socketPathOf(opts.dataDir)
      let res: DownResponse | undefined
      try {
        res = await callRoute(new ApiClient(socket), 'down')
      } catch (err) {
        if (err instanceof OrcError && err.code === 'not_found') {
          throw new OrcError(
            'unavailable',
            `the agent at ${socket} does not know orc down (an older version): stop it with SIGTERM (systemctl stop orc, or Ctrl-C)`,
            {},
            err,
          )
        }
        if (!(err instanceof OrcError) || err.code !== 'unavailable') throw err
      }
      if (res === undefined) return cleanLeftovers(io, opts.dataDir ?? defaultDataDir(io.env), socket)

      io.out(`stopping node ${res.node} (pid ${res.pid}) …\n`)
      const deadline = Date.now() + timeoutMs
      while (alive(res.pid)) {
        if (Date.now() > deadline)
          throw new OrcError('timeout', `node ${res.node} (pid ${res.pid}) has not exited after ${opts.timeout}; see its log, or stop it with kill ${res.pid}`)
        await new Promise((r) => setTimeout(r, 100))
      }
      io.out(`node ${res.node} stopped\n`)
      const removed = res.dataDir !== undefined ? readDownReport(res.dataDir) : undefined
      if (removed === undefined) {
        const n = res.network
        if (n.iface !== undefined || n.nftTable !== undefined)
          io.out(`its agent removed its node network (interface ${n.iface ?? '-'}, ${n.pods.length} pod namespace(s)); see its log\n`)
        else io.out('its node network was off: nothing on the host to remove\n')
      } else if (removed.length > 0) {
        io.out(`removed:\n${removed.map((l) => `  ${l}\n`).join('')}`)
      } else {
        io.out('nothing of its node network was on the host\n')
      }
      // Whatever the agent could not remove (it logs why), by the names it recorded.
      if (res.dataDir !== undefined) {
        const left = await removeNetworkLeftovers(res.dataDir)
        if (left.removed.length > 0) io.out(`left behind by the agent, removed now:\n${left.removed.map((l) => `  ${l}\n`).join('')}`)
        io.out(KEPT(res.dataDir))
      }
    })
}

async function cleanLeftovers(io: DownCliIO, dataDir: string, socket: string): Promise<void> {
  const pid = readPid(dataDir)
  if (pid !== undefined && pid !== process.pid && alive(pid)) {
    throw new OrcError('unavailable', `an agent (pid ${pid}) holds ${dataDir} but does not answer at ${socket}; stop it (kill ${pid}) and run orc down again`, {
      pid,
    })
  }
  const r = await removeNetworkLeftovers(dataDir)
  if (!r.known) {
    io.out(`no agent is running (no socket at ${socket}) and ${dataDir} has no node network: nothing to do\n`)
    return
  }
  if (r.removed.length === 0) {
    io.out(`no agent is running (no socket at ${socket}) and nothing of its node network is left on the host: nothing to do\n`)
    return
  }
  io.out(`no agent is running; removed what it left behind:\n${r.removed.map((l) => `  ${l}\n`).join('')}`)
  io.out(KEPT(dataDir))
}
