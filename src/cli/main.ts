/**
 * The `orc` command. Each subcommand is a thin shell over the local API; all decisions are in the
 * agent. Errors print as one line (`error: …`) and exit non-zero; `--debug` adds the cause chain.
 */
import { Command, CommanderError } from 'commander'
import {
  type ApplyResultItem,
  agentOptionsFromEnv,
  defaultDataDir,
  ORC_VERSION,
  objectParams,
  resolveSocketPath,
  socketPathOf,
  startAgent,
  stopOnSignals,
} from '../agent/index.ts'
import { didYouMeanOf, findKind, formatDuration, getKind, type KindDef, type Node, OrcError, parseRef } from '../model/index.ts'
import type { Stored, StoredObject } from '../store/index.ts'
import { callRoute } from './call.ts'
import { ApiClient } from './client.ts'
import { JOIN_LISTEN_HELP, meshBanner, meshSetupFromFlags, nodesWideTable, registerClusterCommands } from './commands/cluster.ts'
import { registerCompleteCommand } from './commands/complete.ts'
import { registerDashboardCommand } from './commands/dashboard.ts'
import { registerDescribeCommand } from './commands/describe.ts'
import { registerDownCommand } from './commands/down.ts'
import { registerEditCommand } from './commands/edit.ts'
import { registerFederationCommands } from './commands/federation.ts'
import { getAll, getEvents, watchObjects } from './commands/get.ts'
import { withServiceAddressColumns } from './commands/ingress.ts'
import { registerJobCommands } from './commands/jobs.ts'
import { NETWORK_FLAG_HELP, networkSetupFromFlags, routesOutput } from './commands/network.ts'
import { HTTP_LISTEN_HELP, httpOptionFromFlags, peersTable, registerOpsCommands } from './commands/ops.ts'
import { registerPodCommands } from './commands/pods.ts'
import { registerRolloutCommands } from './commands/rollout.ts'
import { registerScaleCommand } from './commands/scale.ts'
import { registerSecretKeyCommands } from './commands/secret-keys.ts'
import { registerSecretCommands } from './commands/secrets.ts'
import { endpointsOutput } from './commands/services.ts'
import { registerStreamCommands } from './commands/streams.ts'
import { registerVolumeCommands } from './commands/volumes.ts'
import { authorFrom, changeLines, examples, historyTable, normalizeAuthor, objectsYaml, objectTable, parseLabels, parseSince, toYaml } from './format.ts'
import { fetchMembers, unreachableNodes, withLiveness } from './liveness.ts'
import { describeDoc, readManifests } from './manifests.ts'
import { closestNames, getObjectOf, objectRef, objectRefs, outputOption, refText, takesObjects, withNameHint } from './refs.ts'
import { type ApiCaller, RemoteApiClient, readCredential } from './remote.ts'

export interface CliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
  now(): number
}

const processIO: CliIO = {
  out: (t) => void process.stdout.write(t),
  err: (t) => void process.stderr.write(t),
  env: process.env,
  now: () => Date.now(),
}

function collect(v: string, prev: string[]): string[] {
  return [...prev, v]
}

/** The client the last command used, for the "did you mean" of a name that does not exist (main). */
const callers = new WeakMap<Command, () => ApiCaller>()

export function buildProgram(io: CliIO = processIO): Command {
  const program = new Command('orc')
  const socketOf = (cmd: Command): string => resolveSocketPath(cmd.optsWithGlobals().socket as string | undefined, io.env)
  const client = (cmd: Command): ApiCaller => {
    const g = cmd.optsWithGlobals()
    const node = (g.node as string | undefined) ?? (io.env.ORC_NODE || undefined)
    if (node !== undefined) return new RemoteApiClient(node, readCredential(g.credential as string | undefined, io.env))
    return new ApiClient(socketOf(cmd))
  }
  program.hook('preAction', (_p, action) => void callers.set(program, () => client(action)))

  program
    .description(
      'orc controls a peer-to-peer cluster: no control plane, every node holds the whole state.\nRun `orc up` on a machine, then use these commands against its local socket.',
    )
    .usage('[flags] COMMAND')
    .option('--socket <path>', 'agent socket (default: $ORC_SOCKET, else orc.sock in the default data dir)')
    .option('--debug', 'on error, show the error code, details and cause chain')
    .option('--node <addr>', 'run the command on a remote node (host:port or multiaddr) over the mesh; default $ORC_NODE')
    .option('--credential <cred|file>', 'admin credential for --node, or a file holding it (default: $ORC_CREDENTIAL)')
    .helpOption('-h, --help', 'help for orc or a command')
    .version(`orc ${ORC_VERSION}`, '-V, --version', 'print the client version (orc version shows the nodes too)')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s), writeErr: (s) => io.err(s) })
    .showSuggestionAfterError(true)
    .addHelpText(
      'after',
      examples(`
  # Start a node in the foreground (data in ~/.local/share/orc, or /var/lib/orc as root)
  orc up

  # Create or update the objects in a file, then list pods
  orc apply -f examples/pod.yaml
  orc get pods

  # What changed, who changed it, and undo it
  orc history pod/hello
  orc rollback pod/hello

Use "orc COMMAND --help" for more about a command.`),
    )

  // ---- up
  program
    .command('up')
    .description("Run this node's agent in the foreground")
    .option('--data-dir <dir>', `where the node keeps its state (default: ${defaultDataDir(io.env)})`)
    .option('--name <name>', 'node name (default: the host name)')
    .option('--labels <k=v,...>', "labels of this node's Node object")
    .option('--cluster <name>', 'name of the cluster created on a fresh data dir', 'default')
    .option('--listen <addr>', 'listen address, host:port or multiaddr; may repeat (default: 0.0.0.0:7419 and [::]:7419)', collect, [] as string[])
    .option('--announce <addr>', 'address peers should dial instead of the listen addresses (NAT, public IP); may repeat', collect, [] as string[])
    .option('--join-listen <addr>', JOIN_LISTEN_HELP, collect, [] as string[])
    .option('--log-level <level>', 'trace, debug, info, warn or error (default: $ORC_LOG_LEVEL, else info)')
    .option('--network <mode>', NETWORK_FLAG_HELP)
    .option('--wg-port <port>', 'WireGuard UDP port (default 51820, a free one when taken)')
    .option('--http-listen <addr>', HTTP_LISTEN_HELP)
    .addHelpText(
      'after',
      examples(`
  # Start a node with the default data dir
  orc up

  # A second node on the same machine, for experiments
  orc up --data-dir /tmp/orc2 --name node2 --labels zone=lab,disk=ssd`),
    )
    .action(async (opts, cmd: Command) => {
      const dataDir: string = opts.dataDir ?? defaultDataDir(io.env)
      const socketFlag = cmd.optsWithGlobals().socket as string | undefined
      const socketPath = socketFlag ?? socketPathOf(dataDir)
      const agent = await startAgent({
        ...agentOptionsFromEnv(io.env),
        dataDir,
        socketPath,
        nodeName: opts.name,
        labels: opts.labels !== undefined ? parseLabels(opts.labels) : undefined,
        clusterName: opts.cluster,
        logLevel: opts.logLevel,
        mesh: await meshSetupFromFlags(opts, io.env),
        network: networkSetupFromFlags(opts, io.env),
        http: httpOptionFromFlags(opts.httpListen, io.env),
      })
      const removeSignals = stopOnSignals(agent)
      const isDefault = socketPath === resolveSocketPath(undefined, { ...io.env, ORC_SOCKET: undefined })
      const i = agent.info
      io.out(
        [
          `orc ${i.version}: node ${i.name} is up in cluster ${i.cluster?.name} (id ${i.cluster?.id})`,
          `  data dir: ${dataDir}`,
          `  socket:   ${socketPath}`,
          '',
          'From another shell on this machine:',
          ...(isDefault ? [] : [`  export ORC_SOCKET=${socketPath}`]),
          '  orc status',
          '  orc apply -f examples/pod.yaml',
          '  orc get pods',
          '',
          ...meshBanner(agent, isDefault ? [] : [`export ORC_SOCKET=${socketPath}`]),
          '',
          'Stop with Ctrl-C.',
          '',
        ].join('\n'),
      )
      await agent.stopped
      removeSignals()
    })

  // ---- apply
  program
    .command('apply')
    .description('Create or update objects from files or stdin (multi-document YAML or JSON)')
    .option('-f, --filename <file>', 'file, directory or - for stdin; may repeat', collect, [] as string[])
    .option('-n, --namespace <ns>', 'namespace for objects that name none (default: default)')
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .option('--reason <text>', 'why; recorded in the history')
    .addHelpText(
      'after',
      examples(`
  # Apply the objects in a file
  orc apply -f examples/pod.yaml

  # Several files, with a reason for the history
  orc apply -f web.yaml -f db.yaml --reason "bump image to 1.2"

  # From stdin
  cat pod.json | orc apply -f -`),
    )
    .action(async (opts, cmd: Command) => {
      const files = opts.filename as string[]
      if (files.length === 0) throw new OrcError('invalid', 'apply needs -f FILE (or -f - for stdin)')
      const docs = await readManifests(files)
      if (docs.length === 0) throw new OrcError('invalid', `no objects found in ${files.join(', ')}`)
      const author = authorFrom(io.env, opts.author)
      try {
        const res = await callRoute(
          client(cmd),
          'apply',
          {},
          {
            body: { objects: docs.map((d) => d.value), author, reason: opts.reason, namespace: opts.namespace },
          },
        )
        for (const r of res.results) io.out(`${refText(r)} ${r.outcome}\n`)
      } catch (err) {
        if (err instanceof OrcError && typeof err.details.index === 'number' && docs[err.details.index]) {
          const applied = (err.details.applied as ApplyResultItem[] | undefined) ?? []
          for (const r of applied) io.out(`${refText(r)} ${r.outcome}\n`)
          throw new OrcError(err.code, `${describeDoc(docs[err.details.index]!)}: ${err.message}`, err.details, err)
        }
        throw err
      }
    })

  // ---- get
  program
    .command('get')
    .description('Display one or many objects')
    .argument(
      '<KIND>',
      "pods, nodes, services, … (or pod/NAME); all: every namespaced kind; events: the last hour (as orc events); endpoints: each service's pods",
    )
    .argument('[NAME]', 'one object by name')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('-A, --all-namespaces', 'list objects in every namespace')
    .option('-w, --watch', 'after the list, print each change as it happens (Ctrl-C to stop)')
    .addOption(outputOption(['table', 'wide', 'json', 'yaml', 'name']))
    .option('--show-secrets', 'one Secret with its values opened (as YAML, or -o json); needs a role that grants Secret/reveal')
    .addHelpText(
      'after',
      examples(`
  # List pods in the default namespace
  orc get pods

  # More columns, every namespace
  orc get pods -A -o wide

  # One pod as YAML (re-appliable)
  orc get pod hello -o yaml

  # This node and its neighbours
  orc get nodes

  # Pods as they change
  orc get pods -w

  # Everything in the namespace, grouped by kind
  orc get all

  # Services and the pods their DNS names answer with
  orc get svc
  orc get endpoints`),
    )
    .action(async (kindArg: string, nameArg: string | undefined, opts, cmd: Command) => {
      let kindText = kindArg
      let name = nameArg
      if (kindArg.includes('/')) {
        if (nameArg !== undefined) throw new OrcError('invalid', `give either KIND/NAME or KIND NAME, not ${kindArg} ${nameArg}`)
        ;[kindText, name] = [kindArg.slice(0, kindArg.indexOf('/')), kindArg.slice(kindArg.indexOf('/') + 1)]
      }
      if (kindText === 'routes' || kindText === 'route') return io.out(await routesOutput(client(cmd), opts.output, io.now()))
      if (['endpoints', 'endpoint', 'ep'].includes(kindText)) {
        if (opts.watch) throw new OrcError('invalid', 'endpoints are derived, not stored: watch the pods (orc get pods -w) or ask again')
        const r = await endpointsOutput(client(cmd), { namespace: opts.namespace, all: Boolean(opts.allNamespaces), output: opts.output, name })
        if (r.empty !== undefined) return io.err(r.empty)
        return io.out(r.text)
      }
      if ((kindText === 'events' || kindText === 'event' || kindText === 'ev') && name === undefined && !opts.watch)
        return getEvents(client(cmd), io, { namespace: opts.namespace, all: Boolean(opts.allNamespaces), output: opts.output })
      if ((kindText === 'all' || kindText === 'events') && opts.watch)
        throw new OrcError('invalid', `-w watches one kind (orc get pods -w)${kindText === 'events' ? '; for events: orc events -f' : ''}`)
      if (kindText === 'all' && name === undefined && !opts.watch)
        return getAll(client(cmd), io, { namespace: opts.namespace, all: Boolean(opts.allNamespaces), output: opts.output })
      const def = getKind(kindText)
      const c = client(cmd)
      if (opts.watch) return watchObjects(c, io, def, { namespace: opts.namespace, all: Boolean(opts.allNamespaces), output: opts.output, name })
      if (opts.showSecrets) {
        if (def.kind !== 'Secret' || name === undefined) throw new OrcError('invalid', '--show-secrets opens one Secret: orc get secret NAME --show-secrets')
        const r = await callRoute(c, 'revealSecret', { ns: opts.namespace || 'default', name })
        return io.out(opts.output === 'json' ? JSON.stringify(r.object, null, 2) + '\n' : toYaml(r.object))
      }
      let items: StoredObject[]
      if (name !== undefined) {
        const ref = parseRef(`${def.kind}/${name}`, opts.namespace || undefined)
        items = [await getObjectOf(c, ref)]
      } else {
        const r = await callRoute(
          c,
          'listObjects',
          { kind: def.kind },
          {
            query: { namespace: opts.namespace, all: opts.allNamespaces ? 1 : undefined },
          },
        )
        items = r.items
      }
      if (def.kind === 'Node' && opts.output === 'wide' && items.length > 0) return io.out(await nodesWideTable(c, items as Stored<Node>[], io.now()))
      if (
        (def.kind === 'Node' || def.kind === 'Pod' || def.kind === 'VirtualMachine') &&
        (opts.output === 'table' || opts.output === 'wide') &&
        items.length > 0
      ) {
        const members = await fetchMembers(c)
        if (members) items = withLiveness(def.kind, items, unreachableNodes(members, io.now()))
      }
      const shown =
        def.kind === 'Service' && (opts.output === 'table' || opts.output === 'wide') && items.length > 0 ? await withServiceAddressColumns(c, def) : def
      printObjects(io, shown, items, opts.output, { single: name !== undefined, all: Boolean(opts.allNamespaces), namespace: opts.namespace || 'default' })
    })

  // ---- delete
  takesObjects(program.command('delete'), 'Pod')
    .description('Delete objects by kind and name (the history is kept)')
    .argument('<KIND/NAME...>', 'pod/web, pod web [more names], or a pod by its bare name')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .option('--reason <text>', 'why; recorded in the history')
    .addHelpText(
      'after',
      examples(`
  # Delete a pod
  orc delete pod/web

  # Same, kubectl style, two pods
  orc delete pod web db

  # A pod by its name alone
  orc delete web`),
    )
    .action(async (args: string[], opts, cmd: Command) => {
      const c = client(cmd)
      const author = authorFrom(io.env, opts.author)
      for (const ref of objectRefs(args, { namespace: opts.namespace, implied: 'Pod' })) {
        await callRoute(c, 'deleteObject', objectParams(ref), { body: { author, reason: opts.reason } })
        io.out(`${refText(ref)} deleted\n`)
      }
    })

  // ---- history
  takesObjects(program.command('history'), 'Pod')
    .description('Show the revisions of an object: who changed what, when and why')
    .argument('<KIND/NAME>', 'like pod/web, pod web, or a pod by its bare name')
    .argument('[NAME]', 'the name, when KIND is given alone')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--author <author>', 'only revisions by this author (user:alice, or a prefix like controller:); may repeat', collect, [] as string[])
    .option('--exclude-author <author>', 'hide revisions by this author or prefix; may repeat', collect, [] as string[])
    .option('--since <time>', 'only revisions newer than a duration (30m, 2h, 7d) or a time (2024-05-01T10:00:00Z)')
    .addOption(outputOption(['table', 'json', 'yaml']))
    .addHelpText(
      'after',
      examples(`
  # Every change to a pod (or: orc history web)
  orc history pod/web

  # Only what people did, not controllers
  orc history pod/web --exclude-author controller:

  # What alice changed in the last day, as JSON
  orc history pod/web --author alice --since 24h -o json`),
    )
    .action(async (target: string, name: string | undefined, opts, cmd: Command) => {
      const ref = objectRef([target, name ?? ''], { namespace: opts.namespace, implied: 'Pod' })
      const q = {
        author: (opts.author as string[]).map((a) => (a.endsWith(':') ? a : normalizeAuthor(a))),
        excludeAuthor: (opts.excludeAuthor as string[]).map((a) => (a.endsWith(':') ? a : normalizeAuthor(a))),
        since: opts.since !== undefined ? parseSince(opts.since, io.now()) : undefined,
      }
      const c = client(cmd)
      const r = await callRoute(c, 'history', objectParams(ref), { query: q })
      if (opts.output === 'json') return io.out(JSON.stringify(r.revisions, null, 2) + '\n')
      if (opts.output === 'yaml') return io.out(toYaml(r.revisions))
      if (r.revisions.length === 0) {
        // No revision at all: most likely a mistyped name (a deleted object keeps its history).
        const names = q.author.length + q.excludeAuthor.length === 0 && q.since === undefined ? await closestNames(c, ref) : []
        if (names.length > 0)
          throw new OrcError('not_found', `${refText(ref)} has no revisions: ${didYouMeanOf(names.map((n) => refText({ kind: ref.kind, name: n })))}`)
        return io.err(`No revisions of ${refText(ref)} match.\n`)
      }
      io.out(historyTable(r.revisions))
    })

  // ---- diff
  takesObjects(program.command('diff'), 'Pod')
    .description('Show what changed in an object between two revisions')
    .argument('<KIND/NAME>', 'like pod/web, pod web, or a pod by its bare name')
    .argument('<REV1>', 'revision number (or id) to compare from')
    .argument('<REV2>', 'revision number (or id) to compare to')
    .argument('[REV]', '(with KIND NAME: the second revision)')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .addOption(outputOption(['table', 'json', 'yaml']))
    .addHelpText(
      'after',
      examples(`
  # What changed from revision 1 to 3 (+ added, - removed, ~ changed)
  orc diff pod/web 1 3
  orc diff web 1 3`),
    )
    .action(async (target: string, a: string, b: string, c: string | undefined, opts, cmd: Command) => {
      // pod/web 1 3, web 1 3, or pod web 1 3
      const [words, rev1, rev2] = c === undefined ? [[target], a, b] : [[target, a], b, c]
      const ref = objectRef(words, { namespace: opts.namespace, implied: 'Pod' })
      const r = await callRoute(client(cmd), 'diff', objectParams(ref), { query: { from: rev1, to: rev2 } }).catch(async (err) => {
        throw await withNameHint(client(cmd), err)
      })
      if (opts.output === 'json') return io.out(JSON.stringify(r.changes, null, 2) + '\n')
      if (opts.output === 'yaml') return io.out(toYaml(r.changes))
      io.out(changeLines(r.changes))
    })

  // ---- rollback
  takesObjects(program.command('rollback'), 'Pod')
    .description('Make an object equal to an earlier revision again (recorded as a new revision)')
    .argument('<KIND/NAME>', 'like pod/web, pod web, or a pod by its bare name')
    .argument('[NAME]', 'the name, when KIND is given alone')
    .option('--to <rev>', 'revision number or id to restore (default: the newest earlier revision whose spec, labels or annotations differ)')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .option('--reason <text>', 'why; recorded in the history')
    .addHelpText(
      'after',
      examples(`
  # Undo the last change to a pod
  orc rollback pod/web

  # Go back to revision 2, saying why
  orc rollback pod/web --to 2 --reason "1.3 leaks memory"`),
    )
    .action(async (target: string, name: string | undefined, opts, cmd: Command) => {
      const ref = objectRef([target, name ?? ''], { namespace: opts.namespace, implied: 'Pod' })
      const author = authorFrom(io.env, opts.author)
      const r = await callRoute(client(cmd), 'rollback', objectParams(ref), {
        body: { to: opts.to, author, reason: opts.reason },
      })
      const to = opts.to !== undefined ? `revision ${opts.to}` : 'the previous revision'
      if (r.revision === null) io.out(`${refText(ref)} unchanged (already equal to ${to})\n`)
      else io.out(`${refText(ref)} rolled back to ${to} (now revision ${r.revision.number})\n`)
    })

  // ---- status
  program
    .command('status')
    .description('Show this node, its cluster, its store and every peer: state, path, latency, last handshake, pods')
    .addOption(outputOption(['table', 'json', 'yaml']))
    .option('--json', 'same as -o json')
    .addHelpText(
      'after',
      examples(`
  orc status
  orc status -o json`),
    )
    .action(async (opts, cmd: Command) => {
      if (opts.json) opts.output = 'json'
      const c = client(cmd)
      const s = await callRoute(c, 'status')
      if (opts.output === 'json') return io.out(JSON.stringify(s, null, 2) + '\n')
      if (opts.output === 'yaml') return io.out(toYaml(s))
      const counts = Object.entries(s.counts)
        .map(([k, n]) => `${findKind(k)?.plural ?? k} ${n}`)
        .join(', ')
      io.out(
        [
          `Node:      ${s.node.name} (orc ${s.node.version}, pid ${s.node.pid}, up ${formatDuration(s.uptimeSeconds * 1000)})`,
          `Cluster:   ${s.node.cluster?.name ?? '<none>'} (id ${s.node.cluster?.id ?? '<none>'})`,
          `Data dir:  ${s.node.dataDir}`,
          `Socket:    ${s.node.socket}`,
          `Objects:   ${s.objects} (${counts})`,
          ...(s.mesh
            ? [
                `Mesh:      ${s.mesh.state}, peer ${s.mesh.peerId}`,
                `Members:   ${s.mesh.members.total} (${s.mesh.members.alive} alive, ${s.mesh.members.suspect} suspect, ${s.mesh.members.dead} dead)`,
                `Addresses: ${s.mesh.addresses.join(', ') || '<none>'}`,
                `Joins at:  ${(s.mesh.joinAddresses ?? []).join(', ') || 'off (this node issues no join tokens)'}`,
              ]
            : []),
          ...(s.http !== undefined ? [`HTTP:      ${s.http ? `https://${s.http.address} (install.sh, /metrics; key ${s.http.pin})` : 'off'}`] : []),
          '',
          ...(s.peers ? [peersTable(s.peers, io.now())] : []),
        ].join('\n'),
      )
    })

  registerClusterCommands(program, io, client)
  registerPodCommands(program, io, client)
  registerStreamCommands(program, io, client)
  registerOpsCommands(program, io, client)
  registerRolloutCommands(program, io, client)
  registerVolumeCommands(
    program,
    {
      ...io,
      isTTY: Boolean(process.stdout.isTTY),
      outBytes: (data) => new Promise<void>((resolve, reject) => process.stdout.write(data, (err) => (err ? reject(err) : resolve()))),
    },
    client,
  )
  registerDownCommand(program, io)
  registerFederationCommands(program, io, client)
  registerSecretKeyCommands(program, io, client)
  registerSecretCommands(program, io, client)
  // After secrets: it adds `orc create job` to the `create` command they make.
  registerJobCommands(program, io, client)
  registerEditCommand(program, io, client)
  registerDescribeCommand(program, io, client)
  registerScaleCommand(program, io, client)
  registerDashboardCommand(program, io, client)
  registerCompleteCommand(program, io, client)

  return program
}

function printObjects(io: CliIO, def: KindDef, items: StoredObject[], output: string, o: { single: boolean; all: boolean; namespace: string }): void {
  switch (output) {
    case 'yaml':
      io.out(o.single ? toYaml(items[0]) : objectsYaml(items))
      return
    case 'json':
      io.out(JSON.stringify(o.single ? items[0] : { apiVersion: 'orc/v1', kind: 'List', items }, null, 2) + '\n')
      return
    case 'name':
      io.out(items.map((i) => `${def.kind.toLowerCase()}/${i.metadata.name}\n`).join(''))
      return
    default:
      if (items.length === 0) {
        io.err(def.namespaced && !o.all ? `No resources found in ${o.namespace} namespace.\n` : 'No resources found.\n')
        return
      }
      io.out(objectTable(def, items, { wide: output === 'wide', withNamespace: o.all, now: Date.now() }))
  }
}

function printError(io: CliIO, err: unknown, debug: boolean): void {
  const msg = err instanceof Error ? err.message : String(err)
  io.err(`error: ${msg.split('\n')[0]}\n`)
  if (!debug) return
  if (err instanceof OrcError) {
    io.err(`  code: ${err.code}\n`)
    const { causes, ...details } = err.details as Record<string, unknown> & { causes?: string[] }
    if (Object.keys(details).length > 0) io.err(`  details: ${JSON.stringify(details)}\n`)
    for (const c of causes ?? []) io.err(`  agent cause: ${c}\n`)
  }
  let c: unknown = err
  for (let depth = 0; c instanceof Error && depth < 10; depth++) {
    io.err(`  ${depth === 0 ? 'at' : 'caused by'}: ${c.stack ?? c.message}\n`.replace(/\n(?!$)/g, '\n    '))
    c = c.cause
  }
}

/** Entry point of bin/orc.mjs. Never throws; sets process.exitCode. */
export async function main(argv: string[], io: CliIO = processIO): Promise<void> {
  const program = buildProgram(io)
  try {
    await program.parseAsync(argv, { from: 'user' })
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode
      return
    }
    const debug = Boolean(program.opts().debug) || argv.includes('--debug')
    // The hint needs a client; one that cannot be made (--node without a credential) gives none.
    let caller: ApiCaller | undefined
    try {
      caller = callers.get(program)?.()
    } catch {
      caller = undefined
    }
    printError(io, await withNameHint(caller, err).catch(() => err), debug)
    process.exitCode = 1
  }
}
