/**
 * Cluster commands: `orc join`, `orc token …`, `orc node remove`, `orc credential export`, and the
 * mesh parts of `orc up` (listen flags, the join hint) and of `orc get nodes -o wide`.
 */
import type { Command } from 'commander'
import { Option } from 'commander'
import {
  type Agent,
  type AgentOptions,
  agentOptionsFromEnv,
  defaultDataDir,
  type MeshSetup,
  socketPathOf,
  startAgent,
  stopOnSignals,
} from '../../agent/index.ts'
import { type Node, type NodeStatus, OrcError } from '../../model/index.ts'
import type { Stored } from '../../store/index.ts'
import { callRoute } from '../call.ts'
import { ago, authorFrom, examples, formatTable, parseLabels, toYaml } from '../format.ts'
import { fetchMembers, unreachableNodes } from '../liveness.ts'
import { createProgress } from '../progress.ts'
import { outputOption } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'
import { NETWORK_FLAG_HELP, networkSetupFromFlags, nodeNetworkCell } from './network.ts'
import { HTTP_LISTEN_HELP, httpOptionFromFlags, installLine } from './ops.ts'

export interface ClusterCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
  now(): number
  /** All of stdin (`orc join --token -`); process.stdin when absent. */
  readStdin?(): Promise<string>
}

function collect(v: string, prev: string[]): string[] {
  return [
    ...prev,
    ...v
      .split(',')
      .map((x) => x.trim())
      .filter((x) => x !== ''),
  ]
}

/** `--expires`: a duration from the agent's now (`90d`) or a UTC time; nothing when absent. */
export function keyExpiryFlag(text: string | undefined): { expiresInMs?: number; expiresAt?: string } {
  if (text === undefined) return {}
  if (/^[0-9]{4}-[0-9]{2}-[0-9]{2}/.test(text.trim())) {
    const ms = Date.parse(text.trim())
    if (!Number.isFinite(ms)) throw new OrcError('invalid', `--expires ${JSON.stringify(text)}: not a time (like 2027-01-31T12:00:00Z)`)
    return { expiresAt: new Date(ms).toISOString() }
  }
  try {
    return { expiresInMs: parseDuration(text) }
  } catch {
    throw new OrcError('invalid', `--expires ${JSON.stringify(text)}: a duration (90d, 12h) or a UTC time (2027-01-31T12:00:00Z)`)
  }
}

/** `90s`, `30m`, `1h`, `7d` → ms. */
export function parseDuration(text: string): number {
  const m = /^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)$/.exec(text.trim())
  if (!m) throw new OrcError('invalid', `duration ${JSON.stringify(text)}: expected a number and a unit, like 90s, 30m, 1h or 7d`)
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 'ms' | 's' | 'm' | 'h' | 'd']
  return Math.round(Number(m[1]) * unit)
}

/**
 * The mesh setup from `--listen`/`--announce`. `ORC_MESH_TUNABLES` (JSON) overrides mesh timers;
 * it exists for tests and benchmarks that run many agents on one machine.
 */
export async function meshSetupFromFlags(opts: { listen?: string[]; announce?: string[]; joinListen?: string[] }, env: NodeJS.ProcessEnv): Promise<MeshSetup> {
  const { parseListenAddress, resolvePeerAddress } = await import('../../mesh/index.ts')
  const setup: MeshSetup = {}
  if (opts.listen !== undefined && opts.listen.length > 0) setup.listen = opts.listen.map(parseListenAddress)
  if (opts.joinListen !== undefined && opts.joinListen.length > 0) {
    if (opts.joinListen.includes('off')) {
      if (opts.joinListen.length > 1) throw new OrcError('invalid', '--join-listen: off cannot be combined with addresses')
      setup.joinListen = []
    } else {
      setup.joinListen = opts.joinListen.map((a) => {
        try {
          return parseListenAddress(a)
        } catch (err) {
          throw err instanceof OrcError ? new OrcError(err.code, `--join-listen: ${err.message}`, err.details, err) : err
        }
      })
    }
  }
  if (opts.announce !== undefined && opts.announce.length > 0) setup.announce = (await Promise.all(opts.announce.map((a) => resolvePeerAddress(a)))).flat()
  if (env.ORC_MESH_TUNABLES) {
    try {
      setup.tunables = JSON.parse(env.ORC_MESH_TUNABLES)
    } catch (err) {
      throw new OrcError('invalid', `ORC_MESH_TUNABLES is not JSON: ${(err as Error).message}`)
    }
  }
  return setup
}

/** Help of `--join-listen` (`orc up`, `orc join`). */
export const JOIN_LISTEN_HELP =
  'where new nodes redeem join tokens and receive the cluster key: host:port or multiaddr, may repeat, or off (default: the mesh listen addresses, port - 2, e.g. 0.0.0.0:7417)'

/** `host:port` of a multiaddr like /ip4/1.2.3.4/tcp/7419 (what users type after `orc join`). */
export function hostPortOf(ma: string): string {
  const m = /^\/(ip4|ip6|dns|dns4|dns6)\/([^/]+)\/tcp\/([0-9]+)/.exec(ma)
  if (!m) return ma
  return m[1] === 'ip6' ? `[${m[2]}]:${m[3]}` : `${m[2]}:${m[3]}`
}

/** The address to suggest for `orc join`: the first non-loopback one, else the first. */
export function joinAddressOf(addresses: string[]): string | undefined {
  const usable = addresses.filter((a) => !/\/ip6\/fe80/.test(a))
  const pick = usable.find((a) => !/^\/ip4\/127\.|^\/ip6\/::1\//.test(a)) ?? usable[0]
  return pick === undefined ? undefined : hostPortOf(pick)
}

/** Lines `orc up` prints about the mesh: where peers dial, how to add a node. */
export function meshBanner(agent: Agent, socketHint: string[]): string[] {
  const c = agent.cluster
  if (c === undefined) return []
  const addrs = c.mesh.addresses()
  const at = joinAddressOf(addrs) ?? '<this node’s address>'
  return [
    `  peer id:  ${c.peerId}`,
    `  listens:  ${addrs.join(', ') || '<none>'}`,
    `  joins at: ${c.mesh.joinAddresses().join(', ') || 'off'}`,
    '',
    'Add a node: create a join token here, then run orc join on the new machine:',
    ...socketHint.map((l) => `  ${l}`),
    '  orc token create --ttl 1h',
    `  orc join ${at} --token-file <file holding the token>`,
    'or print a one-line installer for a bare machine (docs/install.md):',
    ...socketHint.map((l) => `  ${l}`),
    '  orc token create --print-install',
  ]
}

/**
 * The join token of `orc join`: from `--token-file`, stdin (`--token -`) or `$ORC_TOKEN`. A token
 * given as an argument is refused rather than scrubbed: by the time the process could re-exec
 * without it, `ps` and `/proc/PID/cmdline` have shown it to every user, and the shell history kept it.
 */
export async function joinTokenFrom(opts: { token?: string; tokenFile?: string }, io: Pick<ClusterCliIO, 'env' | 'readStdin'>): Promise<string> {
  const ways = '--token-file FILE, --token - (stdin) or the ORC_TOKEN environment variable'
  if (opts.token !== undefined && opts.token !== '-') {
    throw new OrcError(
      'invalid',
      `a join token on the command line is visible to every user of this machine (ps, /proc/PID/cmdline): pass it with ${ways}, and revoke this one (orc token revoke)`,
    )
  }
  const given = [opts.token !== undefined, opts.tokenFile !== undefined, Boolean(io.env.ORC_TOKEN)].filter(Boolean).length
  if (given === 0) throw new OrcError('invalid', `a join token is required: pass it with ${ways}`)
  if (given > 1) throw new OrcError('invalid', `give the join token one way only (${ways})`)
  let text: string
  if (opts.tokenFile !== undefined) {
    const { readFile } = await import('node:fs/promises')
    try {
      text = await readFile(opts.tokenFile, 'utf8')
    } catch (err) {
      throw new OrcError('invalid', `--token-file ${opts.tokenFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, {}, err)
    }
  } else if (opts.token === '-') {
    text = await (io.readStdin ?? readProcessStdin)()
  } else {
    text = io.env.ORC_TOKEN ?? ''
    // Not passed on to what the agent starts (pods, helpers).
    delete io.env.ORC_TOKEN
  }
  const token = text.trim()
  if (token === '')
    throw new OrcError(
      'invalid',
      `the join token is empty (${opts.tokenFile !== undefined ? `--token-file ${opts.tokenFile}` : opts.token === '-' ? 'stdin' : 'ORC_TOKEN'})`,
    )
  return token
}

async function readProcessStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const c of process.stdin) chunks.push(c as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

/** Run an agent in the foreground until a signal stops it (shared by up and join). */
async function runForeground(io: ClusterCliIO, opts: AgentOptions, banner: (a: Agent) => string[]): Promise<void> {
  const agent = await startAgent(opts)
  const removeSignals = stopOnSignals(agent)
  io.out(banner(agent).join('\n') + '\n')
  await agent.stopped
  removeSignals()
}

function ageOf(iso: unknown, now: number): string {
  const t = typeof iso === 'string' ? Date.parse(iso) : NaN
  return Number.isNaN(t) ? '<unknown>' : ago(now - t).replace(' ago', '')
}

/** `orc get nodes -o wide`: the stored Node objects joined with this node's live view of the mesh. */
export async function nodesWideTable(client: ApiCaller, items: Stored<Node>[], now: number): Promise<string> {
  const members = (await fetchMembers(client)) ?? [] // an agent without the mesh: none
  const down = unreachableNodes(members, now)
  const byPeer = new Map(members.map((m) => [m.peerId, m]))
  const rows = items.map((o) => {
    const st: NodeStatus = o.status ?? {}
    const m = typeof st.peerId === 'string' ? byPeer.get(st.peerId) : undefined
    const removed = st.state === 'Removed'
    // `indirect`: no connection to it (a partial mesh, beyond fullMeshMax members): heard through gossip.
    const state = removed ? 'removed' : m === undefined ? '<unknown>' : m.self ? 'alive (self)' : m.connected === false ? `${m.state} (indirect)` : m.state
    const seen = m === undefined ? '-' : m.self ? 'now' : m.lastSeen === null ? 'never' : ago(now - m.lastSeen)
    const rtt = m === undefined || m.self || m.rttMs === null ? '-' : `${Math.round(m.rttMs * 10) / 10}ms`
    const addrs = (m && m.addresses.length > 0 ? m.addresses : (st.addresses ?? [])).join(',') || '<none>'
    const labels =
      Object.entries(o.metadata.labels ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(',') || '<none>'
    const status = !removed && m !== undefined && !m.self ? (down.get(m.name)?.text ?? String(st.state ?? 'Unknown')) : String(st.state ?? 'Unknown')
    return [o.metadata.name, status, state, seen, rtt, addrs, nodeNetworkCell(o), String(st.version ?? '<unknown>'), labels, ageOf(o.metadata.createdAt, now)]
  })
  return formatTable(['NAME', 'STATUS', 'MEMBER', 'LAST SEEN', 'LATENCY', 'ADDRESSES', 'NETWORK', 'VERSION', 'LABELS', 'AGE'], rows)
}

export function registerClusterCommands(program: Command, io: ClusterCliIO, client: (cmd: Command) => ApiCaller): void {
  // ---- join
  program
    .command('join')
    .description("Join an existing cluster with a token, then run this node's agent in the foreground")
    .argument('<peer>', "a node of the cluster: host:port, IP, DNS name or multiaddr (the token also names its issuer's addresses)")
    .option('--token-file <path>', 'file holding the join token from `orc token create` on a member')
    .option('--token <->', 'read the join token from stdin (`--token -`); a token itself is refused here, see --token-file')
    .option('--data-dir <dir>', `where the node keeps its state; must be new or empty (default: ${defaultDataDir(io.env)})`)
    .option('--name <name>', 'node name, unique in the cluster (default: the host name)')
    .option('--labels <k=v,...>', "labels of this node's Node object")
    .option('--listen <addr>', 'listen address, host:port or multiaddr; may repeat (default: 0.0.0.0:7419 and [::]:7419)', collect, [] as string[])
    .option('--announce <addr>', 'address peers should dial instead of the listen addresses (NAT, public IP); may repeat', collect, [] as string[])
    .option('--join-listen <addr>', JOIN_LISTEN_HELP, collect, [] as string[])
    .option('--log-level <level>', 'trace, debug, info, warn or error (default: $ORC_LOG_LEVEL, else info)')
    .option('--http-listen <addr>', HTTP_LISTEN_HELP)
    .option('--network <mode>', NETWORK_FLAG_HELP)
    .option('--wg-port <port>', 'WireGuard UDP port (default 51820, a free one when taken)')
    .addHelpText(
      'after',
      examples(`
  # On a member: make a token (one use, valid for an hour)
  orc token create

  # On the new machine: the token from a file, stdin or $ORC_TOKEN, never as an argument
  # (every user of a machine can read the arguments of its processes)
  orc join 192.168.1.10:7419 --token-file ./token
  orc join 192.168.1.10:7419 --token - < ./token

  # A second node on the same machine, for experiments
  ORC_TOKEN="$T" orc join 127.0.0.1:7419 --data-dir /tmp/orc2 --name node2 --listen 127.0.0.1:7420`),
    )
    .action(async (peer: string, opts, cmd: Command) => {
      const dataDir: string = opts.dataDir ?? defaultDataDir(io.env)
      const socketFlag = cmd.optsWithGlobals().socket as string | undefined
      const socketPath = socketFlag ?? socketPathOf(dataDir)
      const token = await joinTokenFrom(opts, io)
      const setup = await meshSetupFromFlags(opts, io.env)
      // A spinner on a terminal; the same lines as plain text anywhere else (scripts grep them).
      const progress = createProgress({ write: (t) => io.out(t), isTTY: Boolean(process.stdout.isTTY) })
      setup.join = { token, peer, onProgress: (line) => (line.startsWith('ready') ? progress.done(line) : progress.update(line)) }
      try {
        await runForeground(
          io,
          {
            ...agentOptionsFromEnv(io.env),
            dataDir,
            socketPath,
            nodeName: opts.name,
            labels: opts.labels !== undefined ? parseLabels(opts.labels) : undefined,
            logLevel: opts.logLevel,
            mesh: setup,
            http: httpOptionFromFlags(opts.httpListen, io.env),
            network: networkSetupFromFlags(opts, io.env),
          },
          (agent) => [
            `orc ${agent.info.version}: node ${agent.info.name} joined cluster ${agent.info.cluster?.name} (id ${agent.info.cluster?.id})`,
            `  data dir: ${dataDir}`,
            `  socket:   ${socketPath}`,
            ...meshBanner(agent, socketPath === socketPathOf(defaultDataDir(io.env)) ? [] : [`export ORC_SOCKET=${socketPath}`]),
            '',
            'Stop with Ctrl-C.',
            '',
          ],
        )
      } catch (err) {
        if (err instanceof OrcError && !err.message.startsWith('join')) throw new OrcError(err.code, `join: ${err.message}`, err.details, err)
        throw err
      }
    })

  // ---- token
  const token = program.command('token').description('Create, list and revoke join tokens of this node')
  token
    .command('create')
    .description('Create a join token (printed on stdout; how to use it on stderr)')
    .option('--ttl <duration>', 'how long the token is valid (90s, 30m, 1h, 7d)', '1h')
    .option('--uses <n>', 'how many nodes may join with it', '1')
    .addOption(new Option('-o, --output <format>', 'output format').choices(['token', 'json']).default('token'))
    .option('--print-install', 'print the one-line install command for a new machine (curl … | sh) instead of the bare token')
    .addHelpText(
      'after',
      examples(`
  # One node, within the hour
  orc token create

  # The line to paste on a new machine: installs orc from this node, joins, starts it
  orc token create --print-install

  # Three nodes, within ten minutes; keep the token in a variable
  T=$(orc token create --ttl 10m --uses 3)`),
    )
    .action(async (opts, cmd: Command) => {
      const ttlMs = parseDuration(opts.ttl)
      const uses = Number(opts.uses)
      if (!Number.isInteger(uses) || uses < 1) throw new OrcError('invalid', `--uses ${JSON.stringify(opts.uses)}: must be a positive whole number`)
      let http: { address: string; pin: string } | undefined
      if (opts.printInstall) {
        // Before the token exists: a node that serves no install script should not burn one.
        const s = await callRoute(client(cmd), 'status')
        if (!s.http)
          throw new OrcError(
            'unavailable',
            "this node's HTTP listener is off, so it serves no install script (start it with --http-listen ADDR), or use orc join",
          )
        http = s.http
      }
      const r = await callRoute(
        client(cmd),
        'createToken',
        {},
        {
          body: { ttlMs, uses },
        },
      )
      if (http !== undefined) {
        const line = installLine(http.address, joinAddressOf(r.addresses)?.replace(/^\[?([^\]]*?)\]?:[0-9]+$/, '$1'), r.token, http.pin)
        if (opts.output === 'json') return io.out(JSON.stringify({ ...r, install: line }, null, 2) + '\n')
        io.out(line + '\n')
        io.err(
          `token ${r.id}: ${r.uses} use${r.uses === 1 ? '' : 's'}, expires ${new Date(r.expiresAt).toISOString()}\nRun the line above on the new machine (as root, or as a user who may use sudo). It holds the token: keep it as secret.\n`,
        )
        return
      }
      if (opts.output === 'json') return io.out(JSON.stringify(r, null, 2) + '\n')
      io.out(r.token + '\n')
      const at = joinAddressOf(r.addresses) ?? '<this node’s address>'
      io.err(
        `token ${r.id}: ${r.uses} use${r.uses === 1 ? '' : 's'}, expires ${new Date(r.expiresAt).toISOString()}\n` +
          `On the new machine (the token in a file, or in ORC_TOKEN; never as an argument):\n  orc join ${at} --token-file <file>\n`,
      )
    })
  token
    .command('list')
    .description('List the join tokens this node issued')
    .addOption(outputOption(['table', 'json', 'yaml']))
    .action(async (opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'tokens')
      if (opts.output === 'json') return io.out(JSON.stringify(r.tokens, null, 2) + '\n')
      if (opts.output === 'yaml') return io.out(toYaml(r.tokens))
      if (r.tokens.length === 0) return io.err('No tokens.\n')
      const now = io.now()
      io.out(
        formatTable(
          ['ID', 'STATE', 'USES LEFT', 'EXPIRES', 'USED BY'],
          r.tokens.map((t) => [
            t.id,
            t.revoked ? 'revoked' : t.expiresAt <= now ? 'expired' : t.usesLeft <= 0 ? 'used' : 'live',
            `${t.usesLeft}/${t.uses}`,
            t.expiresAt <= now ? `${ago(now - t.expiresAt)}` : `in ${ago(t.expiresAt - now).replace(' ago', '')}`,
            t.usedBy.join(',') || '-',
          ]),
        ),
      )
    })
  token
    .command('revoke')
    .description('Revoke a join token (nodes that already joined stay members)')
    .argument('<ID>', 'token id from `orc token list` or `orc token create`')
    .action(async (id: string, _opts, cmd: Command) => {
      await callRoute(client(cmd), 'revokeToken', { id })
      io.out(`token ${id} revoked\n`)
    })

  // ---- node
  const node = program.command('node').description('Manage the nodes of the cluster')
  node
    .command('remove')
    .description('Remove a node from the cluster: every node refuses its connections from then on')
    .argument('<NODE>', 'node name (see orc get nodes)')
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .option('--reason <text>', 'why; recorded in the history')
    .addHelpText(
      'after',
      examples(`
  orc node remove node3 --reason "disk failed"`),
    )
    .action(async (name: string, opts, cmd: Command) => {
      const author = authorFrom(io.env, opts.author)
      const r = await callRoute(
        client(cmd),
        'removeNode',
        { name },
        {
          body: { author, reason: opts.reason },
        },
      )
      io.out(`node/${name} removed (peer ${r.peerId} is refused by every node)\n`)
    })

  node
    .command('forget')
    .description('Declare a lost node gone: its best-effort pods move to other nodes now (ha pods move on their own after haAfter)')
    .argument('<NODE>', 'node name (see orc get nodes)')
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .option('--reason <text>', 'why; recorded in the history')
    .option('--force', 'forget a node this node still sees alive (its pods run twice until it hears of it)')
    .addHelpText(
      'after',
      examples(`
  orc node forget node3 --reason "burnt power supply"`),
    )
    .action(async (name: string, opts, cmd: Command) => {
      const author = authorFrom(io.env, opts.author)
      const r = await callRoute(
        client(cmd),
        'forgetNode',
        { name },
        {
          body: { author, reason: opts.reason, force: opts.force === true },
        },
      )
      io.out(`node/${name} forgotten: its ${r.pods} pod(s) may move to other nodes; the mark is cleared when its agent starts again\n`)
    })

  // ---- credential
  program
    .command('credential')
    .description('The admin credential for remote CLI access (orc --node)')
    .command('export')
    .description('Print the admin credential (keep it secret: it grants full control of the cluster)')
    .addHelpText(
      'after',
      examples(`
  # On the node that created the cluster
  orc credential export > ~/.orc-credential && chmod 600 ~/.orc-credential

  # Anywhere that can reach a node
  orc --node 192.168.1.10:7419 --credential ~/.orc-credential get nodes`),
    )
    .action(async (_opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'credential')
      io.out(r.credential + '\n')
    })

  registerUserCommands(program, io, client)
}

/** `orc user add|list|remove|rotate` and `orc whoami` (agent/users.ts). */
function registerUserCommands(program: Command, io: ClusterCliIO, client: (cmd: Command) => ApiCaller): void {
  const printCredential = (r: { user: string; roles: string[]; credential: string; expiresAt?: string }, what: string) => {
    io.out(r.credential + '\n')
    const expiry = r.expiresAt ? `; it expires at ${r.expiresAt}` : ''
    io.err(
      `${what} user ${r.user} (roles: ${r.roles.join(', ') || 'none'}${expiry}). The credential above is shown once and stored nowhere: keep it secret (orc --node ADDR --credential FILE …).\n`,
    )
  }
  const expiresOption = [
    '--expires <when>',
    'when the key stops being accepted: a duration from now (90d, 12h) or a UTC time (2027-01-31T12:00:00Z); default never',
  ] as const
  const user = program.command('user').description('Users: who may call the API, with which role (docs/security.md)')
  user
    .command('add')
    .description('Create a user with its own key and print its credential (once)')
    .argument('<NAME>', 'user name (lower-case letters, digits, - _ .)')
    .option('--role <role>', 'admin, edit, view, or a Role object (default: view)', 'view')
    .option(...expiresOption)
    .option('--reason <text>', 'why; recorded in the history')
    .addHelpText(
      'after',
      examples(`
  orc user add alice --role edit > alice.credential && chmod 600 alice.credential
  orc user add ci --role edit --expires 30d > ci.credential
  orc --node 192.168.1.10:7419 --credential alice.credential get pods`),
    )
    .action(async (name: string, opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'addUser', {}, { body: { name, role: opts.role, reason: opts.reason, ...keyExpiryFlag(opts.expires) } })
      printCredential(r, 'created')
    })
  user
    .command('list')
    .description('List the users and their roles')
    .addOption(outputOption(['table', 'json', 'yaml']))
    .action(async (opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'users')
      if (opts.output === 'json') return io.out(JSON.stringify(r.users, null, 2) + '\n')
      if (opts.output === 'yaml') return io.out(toYaml(r.users))
      io.out(
        formatTable(
          ['NAME', 'ROLES', 'KEY', 'EXPIRES'],
          r.users.map((u) => [u.name, u.roles.join(',') || '<none>', u.key, u.expiresAt ?? 'never']),
        ),
      )
    })
  user
    .command('remove')
    .description('Remove a user: its credential is refused from then on')
    .argument('<NAME>', 'user name')
    .option('--reason <text>', 'why; recorded in the history')
    .action(async (name: string, opts, cmd: Command) => {
      await callRoute(client(cmd), 'removeUser', { name }, { body: { reason: opts.reason } })
      io.out(`user ${name} removed\n`)
    })
  user
    .command('rotate')
    .description('Give a user a new key and print its credential (once); the old credential is refused from then on')
    .argument('<NAME>', 'user name (admin too)')
    .option(...expiresOption)
    .option('--reason <text>', 'why; recorded in the history')
    .addHelpText(
      'after',
      examples(`
  orc user rotate alice > alice.credential
  orc user rotate admin --expires 90d > admin.credential`),
    )
    .action(async (name: string, opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'rotateUser', { name }, { body: { reason: opts.reason, ...keyExpiryFlag(opts.expires) } })
      printCredential(r, 'new key for')
    })
  program
    .command('whoami')
    .description('The user this CLI speaks as, and its roles')
    .addOption(outputOption(['table', 'json', 'yaml']))
    .action(async (opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'whoami')
      if (opts.output === 'json') return io.out(JSON.stringify(r, null, 2) + '\n')
      if (opts.output === 'yaml') return io.out(toYaml(r))
      io.out(`${r.author} (roles: ${r.roles.join(', ') || 'none'}; via ${r.via}${r.expiresAt ? `; credential expires at ${r.expiresAt}` : ''})\n`)
    })
}
