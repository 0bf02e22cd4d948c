/**
 * The operator's daily tools: `orc doctor`, `orc events`, `orc version`, `orc metrics`,
 * `orc completion`, plus the peers table of `orc status` and the install one-liner of
 * `orc token create --print-install`.
 */
import type { Command } from 'commander'
import {
  type ClusterEvent,
  DEFAULT_HTTP_LISTEN,
  DEFAULT_HTTP_PORT,
  defaultDataDir,
  type Finding,
  type HttpListenOption,
  localDoctorFindings,
  ORC_VERSION,
  type PeerRow,
  parseHttpListen,
} from '../../agent/index.ts'
import { KINDS, OrcError } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { ago, examples, formatTable, parseSince, toYaml } from '../format.ts'
import { IMPLIED_KINDS, objectRef, outputOption, refText } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

export interface OpsCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
  now(): number
}

/** `--http-listen` (or `ORC_HTTP_LISTEN`) as the agent's option; the default when neither is given. */
export function httpOptionFromFlags(flag: string | undefined, env: NodeJS.ProcessEnv): HttpListenOption | undefined {
  const given = flag ?? (env.ORC_HTTP_LISTEN || undefined)
  const listen = given ?? DEFAULT_HTTP_LISTEN
  if (parseHttpListen(listen) === undefined) return undefined
  return { listen, explicit: given !== undefined }
}

export const HTTP_LISTEN_HELP = `HTTPS listener for the install script and /metrics: mesh (port ${DEFAULT_HTTP_PORT} on the mesh's addresses), ip:port (0.0.0.0:${DEFAULT_HTTP_PORT}: every interface) or off (default: ${DEFAULT_HTTP_LISTEN}; $ORC_HTTP_LISTEN)`

// ---- status --------------------------------------------------------------------------------------

/** `tailscale status`-like table: one line per node, this one first. */
export function peersTable(rows: PeerRow[], now: number): string {
  return formatTable(
    ['NODE', 'STATE', 'PATH', 'LATENCY', 'LAST SEEN', 'HANDSHAKE', 'PODS', 'VERSION', 'ADDRESS'],
    rows.map((p) => [
      p.self ? `${p.name} (this node)` : p.name,
      p.state,
      p.path === 'self' ? '-' : p.path,
      p.latencyMs === null ? '-' : `${Math.round(p.latencyMs * 10) / 10}ms`,
      p.self ? 'now' : p.lastSeen === null ? 'never' : ago(now - p.lastSeen),
      p.handshakeAt === null ? '-' : ago(now - p.handshakeAt),
      String(p.pods),
      p.version ?? '-',
      p.addresses[0] ?? '-',
    ]),
  )
}

// ---- doctor ------------------------------------------------------------------------------------

export function doctorText(findings: Finding[]): string {
  const lines: string[] = []
  const width = Math.max(...findings.map((f) => f.check.length), 5)
  for (const f of findings) {
    lines.push(`${f.status.toUpperCase().padEnd(5)}  ${f.check.padEnd(width)}  ${f.message}`)
    if (f.fix !== undefined && f.status !== 'ok') lines.push(`${' '.repeat(7 + width + 2)}fix: ${f.fix}`)
  }
  const errors = findings.filter((f) => f.status === 'error').length
  const warns = findings.filter((f) => f.status === 'warn').length
  lines.push('', errors + warns === 0 ? 'No problems found.' : `${errors} error(s), ${warns} warning(s).`)
  return lines.join('\n') + '\n'
}

// ---- events ------------------------------------------------------------------------------------

function timeText(t: number): string {
  return new Date(t)
    .toISOString()
    .replace('T', ' ')
    .replace(/\.\d+Z$/, 'Z')
}

export function eventsTable(events: ClusterEvent[], withHeader = true): string {
  const rows = events.map((e) => [timeText(e.time), e.namespace ? `${e.namespace}/${e.object}` : e.object, e.type, e.source, e.message])
  if (!withHeader) return rows.map((r) => r.join('   ')).join('\n') + (rows.length > 0 ? '\n' : '')
  return formatTable(['TIME', 'OBJECT', 'TYPE', 'SOURCE', 'MESSAGE'], rows)
}

// ---- completion --------------------------------------------------------------------------------

interface CmdNode {
  path: string[]
  subs: string[]
  flags: string[]
  /** Suggest kinds for the first argument (`orc get <TAB>`). */
  kindArg: boolean
  /** Its arguments are objects: completed by `orc __complete` (names from the agent). */
  objects: boolean
  description: string
}

/** Every command of the program with its subcommands and flags (hidden ones left out). */
export function commandTree(program: Command): CmdNode[] {
  const out: CmdNode[] = []
  const walk = (c: Command, path: string[]) => {
    const visible = c.commands.filter((s) => !(s as unknown as { _hidden?: boolean })._hidden)
    const flags = c.options.flatMap((o) => [o.long, o.short].filter((x): x is string => typeof x === 'string'))
    const args = (c as unknown as { registeredArguments?: Array<{ name(): string }> }).registeredArguments ?? []
    out.push({
      path,
      subs: visible.map((s) => s.name()),
      flags: [...flags, '--help'],
      kindArg: args.length > 0 && /KIND/.test(args[0]!.name()),
      objects: IMPLIED_KINDS.has(c) || (args.length > 0 && /KIND/.test(args[0]!.name())),
      description: c.description().split('\n')[0] ?? '',
    })
    for (const s of visible) walk(s, [...path, s.name()])
  }
  walk(program, [])
  return out
}

const KIND_WORDS = KINDS.map((k) => k.plural)

export function bashCompletion(program: Command): string {
  const tree = commandTree(program)
  const globalFlags = tree[0]!.flags
  const subsCase = tree.map((n) => `    "${n.path.join(' ')}") echo "${[...n.subs, ...(n.kindArg ? KIND_WORDS : [])].join(' ')}" ;;`).join('\n')
  const flagsCase = tree.map((n) => `    "${n.path.join(' ')}") echo "${[...new Set([...n.flags, ...globalFlags])].join(' ')}" ;;`).join('\n')
  const objectPaths = `|${tree
    .filter((n) => n.objects)
    .map((n) => n.path.join(' '))
    .join('|')}|`
  return `# bash completion for orc (generated by \`orc completion bash\`; do not edit)
# Install: orc completion bash > /etc/bash_completion.d/orc   (or: source <(orc completion bash))
_orc_subs() {
  case "$1" in
${subsCase}
  esac
}
_orc_flags() {
  case "$1" in
${flagsCase}
  esac
}
_orc() {
  local cur path w i subs
  cur="\${COMP_WORDS[COMP_CWORD]}"
  path=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    case "$w" in -*) continue ;; esac
    subs=" $(_orc_subs "$path") "
    if [[ "$subs" == *" $w "* ]] && [[ " ${KIND_WORDS.join(' ')} " != *" $w "* ]]; then path="\${path:+$path }$w"; fi
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_orc_flags "$path")" -- "$cur"))
  elif [[ "${objectPaths}" == *"|$path|"* ]]; then
    # Object arguments: kinds and names, from the agent (quiet and empty when it does not answer).
    COMPREPLY=($(compgen -W "$(_orc_subs "$path") $(orc __complete -- "\${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(_orc_subs "$path")" -- "$cur"))
  fi
}
complete -o default -F _orc orc
`
}

export function zshCompletion(program: Command): string {
  return `#compdef orc
# zsh completion for orc (generated by \`orc completion zsh\`; do not edit)
# Install: orc completion zsh > "\${fpath[1]}/_orc"   (or: source <(orc completion zsh))
autoload -U +X bashcompinit && bashcompinit
${bashCompletion(program)
  .split('\n')
  .filter((l) => !l.startsWith('#'))
  .join('\n')}`
}

export function fishCompletion(program: Command): string {
  const q = (s: string) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`
  const lines = [
    '# fish completion for orc (generated by `orc completion fish`; do not edit)',
    '# Install: orc completion fish > ~/.config/fish/completions/orc.fish',
    'complete -c orc -f',
  ]
  const tree = commandTree(program)
  const byPath = new Map(tree.map((n) => [n.path.join(' '), n]))
  for (const n of tree) {
    const cond =
      n.path.length === 0
        ? '__fish_use_subcommand'
        : `__fish_seen_subcommand_from ${n.path[n.path.length - 1]}${n.path.length > 1 ? `; and __fish_seen_subcommand_from ${n.path[0]}` : ''}`
    for (const s of n.subs) {
      const d = byPath.get([...n.path, s].join(' '))?.description ?? ''
      lines.push(`complete -c orc -n ${q(cond)} -a ${q(s)} -d ${q(d)}`)
    }
    if (n.kindArg) lines.push(`complete -c orc -n ${q(cond)} -a ${q(KIND_WORDS.join(' '))}`)
    if (n.objects) lines.push(`complete -c orc -n ${q(cond)} -a ${q('(orc __complete -- (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)')}`)
    if (n.path.length === 0) continue
    for (const f of n.flags) if (f.startsWith('--')) lines.push(`complete -c orc -n ${q(cond)} -l ${f.slice(2)}`)
  }
  for (const f of tree[0]!.flags) if (f.startsWith('--')) lines.push(`complete -c orc -l ${f.slice(2)}`)
  return lines.join('\n') + '\n'
}

// ---- the install one-liner ---------------------------------------------------------------------

/**
 * `curl -fsS --pinnedpubkey sha256//PIN -k https://HOST:PORT/install.sh | ORC_TOKEN=T sh -s --`.
 * `-k` because the certificate is self-signed; `--pinnedpubkey` is the check instead: curl refuses
 * any server whose key is not this node's, so the script (which carries the sha256 of the package
 * and the Node.js binary) is the one this node serves. The token goes in the environment of `sh`,
 * not its arguments (`ps` shows those to every user). HOST: the listener's own IP when it is bound
 * to one, else the address peers dial this node at. No `sudo`: a root shell on a machine without
 * sudo (a fresh Debian) could not run that; the script runs itself again with sudo when not root.
 */
export function installLine(httpAddress: string, joinHost: string | undefined, token: string, pin: string): string {
  const m = /^\[?([^\]]+?)\]?:([0-9]+)$/.exec(httpAddress)
  if (!m) throw new OrcError('internal', `unexpected HTTP listener address ${httpAddress}`)
  if (!/^sha256\/\/[A-Za-z0-9+/=]+$/.test(pin)) throw new OrcError('internal', `unexpected certificate pin ${JSON.stringify(pin)}`)
  const wildcard = m[1] === '0.0.0.0' || m[1] === '::'
  const host = wildcard ? (joinHost ?? m[1]!) : m[1]!
  const hostText = host.includes(':') ? `[${host}]` : host
  return `curl -fsS --pinnedpubkey '${pin}' -k https://${hostText}:${m[2]}/install.sh | ORC_TOKEN='${token}' sh -s --`
}

// ---- commands ----------------------------------------------------------------------------------

type OutputOpts = { output: string }

export function registerOpsCommands(program: Command, io: OpsCliIO, client: (cmd: Command) => ApiCaller): void {
  // ---- doctor
  program
    .command('doctor')
    .description('Check this machine and its node: kernel, WireGuard, sandbox, clock skew, ports, disk, data dir')
    .option('--data-dir <dir>', `data dir to check when no agent runs (default: ${defaultDataDir(io.env)})`)
    .addOption(outputOption(['table', 'json', 'yaml']))
    .addHelpText(
      'after',
      examples(`
  # Everything the local agent and this machine can tell; exit status 1 when something is broken
  orc doctor

  # For a script
  orc doctor -o json | jq '.[] | select(.status == "error")'`),
    )
    .action(async (opts: OutputOpts & { dataDir?: string }, cmd: Command) => {
      let findings: Finding[]
      try {
        findings = (await callRoute(client(cmd), 'doctor')).findings
      } catch (err) {
        if (!(err instanceof OrcError) || (err.code !== 'unavailable' && err.code !== 'not_found')) throw err
        findings = await localDoctorFindings(opts.dataDir ?? defaultDataDir(io.env))
        findings.push({ check: 'agent', status: 'warn', message: err.message.split('\n')[0]!, fix: 'start it: systemctl start orc (or orc up)' })
      }
      if (opts.output === 'json') io.out(JSON.stringify(findings, null, 2) + '\n')
      else if (opts.output === 'yaml') io.out(toYaml(findings))
      else io.out(doctorText(findings))
      if (findings.some((f) => f.status === 'error')) process.exitCode = 1
    })

  // ---- events
  program
    .command('events')
    .description('Show what happened: revisions of objects (who, why) and pod lifecycle units, from replicated state')
    .argument('[TARGET]', 'an object (pod/web, or pod web) or a kind (pods); default: everything')
    .argument('[NAME]', 'the name, when TARGET is a kind')
    .option('-n, --namespace <ns>', 'namespace of TARGET (default: default); without TARGET, only this namespace')
    .option('--since <time>', 'only newer events: a duration (30m, 2h, 7d), a time, or all', '1h')
    .option('--limit <n>', 'at most this many (the newest)', '200')
    .option('-f, --follow', 'keep printing new events')
    .addOption(outputOption(['table', 'json', 'yaml'], 'table', 'output format (json with -f: one event per line)'))
    .addHelpText(
      'after',
      examples(`
  # The last hour, every object
  orc events

  # One pod, as it happens
  orc events pod/web -f

  # Every node change this week, for a script
  orc events nodes --since 7d -o json`),
    )
    .action(
      async (
        kindOrTarget: string | undefined,
        name: string | undefined,
        opts: OutputOpts & { namespace?: string; since: string; limit: string; follow?: boolean },
        cmd: Command,
      ) => {
        const target = name === undefined ? kindOrTarget : refText(objectRef([kindOrTarget ?? '', name]))
        const limit = Number(opts.limit)
        if (!Number.isInteger(limit) || limit < 1) throw new OrcError('invalid', `--limit ${JSON.stringify(opts.limit)}: must be a positive whole number`)
        let since = opts.since === 'all' ? 0 : parseSince(opts.since, io.now())
        const c = client(cmd)
        const fetch = async () => callRoute(c, 'events', {}, { query: { target, namespace: opts.namespace, since, limit } })
        const first = await fetch()
        if (!opts.follow) {
          if (opts.output === 'json') return io.out(JSON.stringify(first.events, null, 2) + '\n')
          if (opts.output === 'yaml') return io.out(toYaml(first.events))
          if (first.events.length === 0) return io.err(`No events${target ? ` for ${target}` : ''} since ${new Date(since).toISOString()}.\n`)
          return io.out(eventsTable(first.events))
        }
        const seen = new Set<string>()
        const print = (events: ClusterEvent[], header: boolean) => {
          const fresh = events.filter((e) => !seen.has(e.id))
          for (const e of fresh) seen.add(e.id)
          if (opts.output === 'json' || opts.output === 'yaml') for (const e of fresh) io.out(JSON.stringify(e) + '\n')
          else if (fresh.length > 0 || header) io.out(eventsTable(fresh, header).replace(/^(?=TIME)/, ''))
          const newest = events.reduce((t, e) => Math.max(t, e.time), since)
          // Events of the same millisecond may still arrive: keep that millisecond in the window.
          since = newest
        }
        print(first.events, opts.output === 'table')
        for (;;) {
          await new Promise((r) => setTimeout(r, 1000))
          print((await fetch()).events, false)
        }
      },
    )

  // ---- version
  program
    .command('version')
    .description('Show the versions of this client, the node it talks to and every node of the cluster; warn on skew')
    .option('--client', 'only the client (no agent needed)')
    .addOption(outputOption(['table', 'json', 'yaml']))
    .action(async (opts: OutputOpts & { client?: boolean }, cmd: Command) => {
      const out: { client: string; node?: { name: string; version: string }; nodes?: Record<string, string>; skew?: string[] } = { client: ORC_VERSION }
      let unreachable: string | undefined
      if (!opts.client) {
        try {
          const c = client(cmd)
          const s = await callRoute(c, 'status')
          out.node = { name: s.node.name, version: s.node.version }
          const nodes = await callRoute(c, 'listObjects', { kind: 'Node' })
          out.nodes = Object.fromEntries(nodes.items.map((n) => [n.metadata.name, (n.status?.version as string | undefined) ?? 'unknown']))
          const skew: string[] = []
          if (s.node.version !== ORC_VERSION) skew.push(`client ${ORC_VERSION} and node ${s.node.name} ${s.node.version} differ`)
          for (const [name, v] of Object.entries(out.nodes))
            if (v !== s.node.version) skew.push(`node ${name} runs ${v}, node ${s.node.name} runs ${s.node.version}`)
          if (skew.length > 0) out.skew = skew
        } catch (err) {
          if (!(err instanceof OrcError) || err.code !== 'unavailable') throw err
          unreachable = err.message.split('\n')[0]
        }
      }
      if (opts.output === 'json') io.out(JSON.stringify(out, null, 2) + '\n')
      else if (opts.output === 'yaml') io.out(toYaml(out))
      else {
        io.out(`Client: orc ${out.client} (Node.js ${process.versions.node})\n`)
        if (out.node) io.out(`Node:   orc ${out.node.version} (${out.node.name})\n`)
        if (out.nodes && Object.keys(out.nodes).length > 1) {
          io.out(
            `Cluster: ${Object.entries(out.nodes)
              .map(([n, v]) => `${n} ${v}`)
              .join(', ')}\n`,
          )
        }
      }
      if (unreachable !== undefined) io.err(`warning: node version unknown: ${unreachable}\n`)
      for (const s of out.skew ?? []) io.err(`warning: version skew: ${s}\n`)
    })

  // ---- metrics
  program
    .command('metrics')
    .description("Print the node's Prometheus metrics (what https://NODE:7418/metrics serves)")
    .action(async (_opts, cmd: Command) => {
      io.out((await callRoute(client(cmd), 'metrics')).text)
    })

  // ---- completion
  program
    .command('completion')
    .description('Print a shell completion script (bash, zsh or fish)')
    .argument('<shell>', 'bash, zsh or fish')
    .addHelpText(
      'after',
      examples(`
  # bash, this shell only / for every shell
  source <(orc completion bash)
  orc completion bash > /etc/bash_completion.d/orc

  # zsh, fish
  orc completion zsh > "\${fpath[1]}/_orc"
  orc completion fish > ~/.config/fish/completions/orc.fish`),
    )
    .action((shell: string) => {
      if (shell === 'bash') return io.out(bashCompletion(program))
      if (shell === 'zsh') return io.out(zshCompletion(program))
      if (shell === 'fish') return io.out(fishCompletion(program))
      throw new OrcError('invalid', `completion for ${JSON.stringify(shell)}: choose bash, zsh or fish`)
    })
}
