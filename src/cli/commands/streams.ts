/**
 * Operating a running pod from any node: `orc exec` (a command in a container, interactive with
 * `-it`), `orc port-forward` (a local TCP port carried to a port of the pod) and `orc top` (CPU and
 * memory of pods and nodes). exec and port-forward drive sessions on the pod's node
 * (agent/pods/streams.ts): a reader long-polls for output while a writer sends input.
 */
import { createServer, type Socket } from 'node:net'
import { constants as osConstants } from 'node:os'
import type { Command } from 'commander'
import { objectParams, type PodStreamIoAnswer, type PodStreamIoBody, type TopAnswer } from '../../agent/index.ts'
import { OrcError, type Pod, parseRef, type Service, serviceEndpoints } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { examples, formatTable } from '../format.ts'
import { outputOption, takesObjects } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

export interface StreamCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
}

function podTarget(target: string, namespace: string | undefined): { ns: string; name: string } {
  const ref = parseRef(target.includes('/') ? target : `pod/${target}`, namespace || undefined)
  if (ref.kind !== 'Pod') throw new OrcError('invalid', `${target}: name a pod (pod/NAME or NAME)`)
  return { ns: ref.namespace, name: ref.name }
}

/** port-forward's target: a pod, or a service (`service/NAME`, `svc/NAME`, `service NAME`) whose ready endpoint each connection picks. */
export function forwardTarget(
  target: string,
  specs: readonly string[],
  namespace: string | undefined,
): { kind: 'Pod' | 'Service'; ns: string; name: string; specs: string[] } {
  let text = target
  let rest = [...specs]
  // `KIND NAME PORTS…`: a kind word alone, the name next.
  if (!target.includes('/') && /^(pods?|po|services?|svc)$/i.test(target) && rest.length > 1 && !/^\d/.test(rest[0]!)) {
    text = `${target}/${rest[0]}`
    rest = rest.slice(1)
  }
  const ref = parseRef(text.includes('/') ? text : `pod/${text}`, namespace || undefined)
  if (ref.kind !== 'Pod' && ref.kind !== 'Service') throw new OrcError('invalid', `${target}: name a pod (pod/NAME or NAME) or a service (service/NAME)`)
  return { kind: ref.kind, ns: ref.namespace, name: ref.name, specs: rest }
}

/**
 * The ready endpoints of a service's port (its number or name), shuffled: the pods a forwarded
 * connection may go to and the port on each.
 */
async function serviceBackends(c: ApiCaller, svc: { ns: string; name: string }, port: number): Promise<{ pod: string; port: number }[]> {
  const { object } = (await callRoute(c, 'getObject', objectParams({ kind: 'Service', namespace: svc.ns, name: svc.name }))) as { object: Service }
  const sp = (object.spec?.ports ?? []).find((p) => p.port === port)
  if (sp === undefined) {
    const have = (object.spec?.ports ?? []).map((p) => String(p.port)).join(', ') || 'none'
    throw new OrcError('invalid', `service/${svc.name} has no port ${port} (its ports: ${have})`)
  }
  const pods = (await callRoute(c, 'listObjects', { kind: 'Pod' }, { query: { namespace: svc.ns } })).items as unknown as Pod[]
  const out = serviceEndpoints(object, pods)
    // port-forward enters the pod's namespace on its node: a ready pod without a cluster address (no pod network) serves too.
    .endpoints.filter((e) => e.ready || e.reason?.startsWith('no pod address') === true)
    .flatMap((e) => {
      const p = e.ports.find((x) => x.port === port && x.protocol === (sp.protocol ?? 'TCP'))
      return p === undefined ? [] : [{ pod: e.pod, port: p.targetPort }]
    })
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}

type Exchange = (body: PodStreamIoBody) => Promise<PodStreamIoAnswer>

/**
 * Drive a session: `input` chunks go out in order through a writer (no output taken), a reader
 * long-polls and hands output to `onOutput` until the exit arrives.
 */
export async function pumpSession(
  exchange: Exchange,
  io: {
    onStdout(b: Buffer): void
    onStderr(b: Buffer): void
    /** Subscribe to local input: data, then end. Absent: stdin is closed at once. */
    input?: (onData: (b: Buffer) => void, onEnd: () => void) => void
  },
): Promise<{ code: number | null; signal: string | null }> {
  let writing: Promise<void> = Promise.resolve()
  let failed: unknown
  const send = (body: PodStreamIoBody) => {
    writing = writing.then(() =>
      exchange({ ...body, read: false }).then(
        () => undefined,
        (err) => {
          failed ??= err
        },
      ),
    )
  }
  if (io.input) {
    io.input(
      (b) => send({ stdin: b.toString('base64') }),
      () => send({ eof: true }),
    )
  } else send({ eof: true })
  for (;;) {
    if (failed !== undefined) throw failed
    const r = await exchange({ waitMs: 10_000 })
    if (r.stdout) io.onStdout(Buffer.from(r.stdout, 'base64'))
    if (r.stderr) io.onStderr(Buffer.from(r.stderr, 'base64'))
    if (r.exit) return r.exit
  }
}

/** The exit code `orc exec` ends with: the command's, or 128+N for a death by signal N. */
export function execExitCode(exit: { code: number | null; signal: string | null }): number {
  if (exit.code !== null) return exit.code
  const n = exit.signal ? osConstants.signals[exit.signal as NodeJS.Signals] : undefined
  return 128 + (n ?? 9)
}

export function registerStreamCommands(program: Command, io: StreamCliIO, client: (cmd: Command) => ApiCaller): void {
  // ---- exec
  takesObjects(program.command('exec'), 'Pod')
    .description("Run a command in a running pod's container, from any node (the node that runs the pod runs it); exits with the command's code")
    .argument('<pod>', 'pod/NAME or NAME')
    .argument('<command...>', 'the command and its arguments, after --')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('-c, --container <name>', 'container (default: the first)')
    .option('-i, --stdin', 'pass stdin to the command (without it, the command reads an empty stdin)')
    .option('-t, --tty', 'run the command on a terminal (with -i: an interactive shell)')
    .addHelpText(
      'after',
      examples(`
  orc exec web -- cat /etc/hostname
  orc exec pod/web -c sidecar -- sh -c 'echo $HOSTNAME'
  echo hello | orc exec -i web -- cat
  orc exec -it web -- sh`),
    )
    .action(async (target: string, command: string[], opts, cmd: Command) => {
      const pod = podTarget(target, opts.namespace)
      const c = client(cmd)
      const tty = Boolean(opts.tty)
      const stdin = process.stdin
      const rawTerminal = tty && Boolean(opts.stdin) && stdin.isTTY === true
      const size = process.stdout.isTTY ? { rows: process.stdout.rows, cols: process.stdout.columns } : {}
      const opened = await callRoute(c, 'podExec', pod, {
        body: {
          command,
          ...(opts.container ? { container: opts.container } : {}),
          ...(tty ? { tty: true, ...size, env: { TERM: io.env.TERM || 'xterm' } } : {}),
        },
      })
      const session = { ...pod, session: opened.session }
      if (rawTerminal) stdin.setRawMode(true)
      try {
        const exit = await pumpSession((body) => callRoute(c, 'podExecIo', session, { body }), {
          onStdout: (b) => process.stdout.write(b),
          onStderr: (b) => process.stderr.write(b),
          ...(opts.stdin
            ? {
                input: (onData: (b: Buffer) => void, onEnd: () => void) => {
                  stdin.on('data', onData)
                  stdin.once('end', onEnd)
                },
              }
            : {}),
        })
        process.exitCode = execExitCode(exit)
      } finally {
        if (rawTerminal) stdin.setRawMode(false)
        // stdin may still be open (a terminal): let the process end
        stdin.pause()
        stdin.unref?.()
        ;(stdin as unknown as { destroy?: () => void }).destroy?.()
      }
    })

  // ---- console
  takesObjects(program.command('console'), 'VirtualMachine')
    .description(
      "Attach to a VM's serial console, from any node (the node that runs the VM holds the connection); one session per VM. On a terminal Ctrl-] leaves; with stdin piped, leaves --wait seconds after stdin ends",
    )
    .argument('<vm>', 'vm/NAME or NAME')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--wait <seconds>', 'stdin not a terminal: keep printing the console this long after stdin ends', '2')
    .addHelpText(
      'after',
      examples(`
  orc console vm/tiny                          # interactive; Ctrl-] leaves
  printf 'uname -r\\n' | orc console vm/tiny --wait 3`),
    )
    .action(async (target: string, opts, cmd: Command) => {
      const ref = parseRef(target.includes('/') ? target : `vm/${target}`, opts.namespace || undefined)
      if (ref.kind !== 'VirtualMachine') throw new OrcError('invalid', `${target}: name a VM (vm/NAME or NAME)`)
      const waitS = Number(opts.wait)
      if (!Number.isFinite(waitS) || waitS < 0 || waitS > 3600) throw new OrcError('invalid', `--wait ${opts.wait}: seconds, 0 to 3600`)
      const vm = { ns: ref.namespace, name: ref.name }
      const c = client(cmd)
      const opened = await callRoute(c, 'vmConsole', vm, { body: {} })
      const session = { ...vm, session: opened.session }
      const exchange: Exchange = (body) => callRoute(c, 'vmConsoleIo', session, { body })
      const stdin = process.stdin
      const terminal = stdin.isTTY === true
      let leave = false
      let writing: Promise<unknown> = Promise.resolve()
      let failed: unknown
      const send = (b: Buffer) => {
        writing = writing.then(() => exchange({ stdin: b.toString('base64'), read: false }).catch((err) => (failed ??= err)))
      }
      if (terminal) {
        io.err(`connected to the console of vm/${vm.name} on node ${opened.node} (Ctrl-] leaves)\r\n`)
        stdin.setRawMode(true)
        stdin.on('data', (b: Buffer) => {
          const at = b.indexOf(0x1d)
          if (at >= 0) {
            if (at > 0) send(b.subarray(0, at))
            leave = true
          } else send(b)
        })
      } else {
        stdin.on('data', (b: Buffer) => send(b))
        stdin.once('end', () => setTimeout(() => (leave = true), waitS * 1000).unref())
      }
      try {
        while (!leave) {
          if (failed !== undefined) throw failed
          const r = await exchange({ waitMs: 1000 })
          if (r.stdout) process.stdout.write(Buffer.from(r.stdout, 'base64'))
          if (r.exit) {
            io.err(`${terminal ? '\r\n' : ''}the console of vm/${vm.name} closed (the guest stopped)\n`)
            break
          }
        }
        await writing
      } finally {
        await exchange({ close: true }).catch(() => undefined)
        if (terminal) stdin.setRawMode(false)
        stdin.pause()
        stdin.unref?.()
        ;(stdin as unknown as { destroy?: () => void }).destroy?.()
      }
    })

  // ---- port-forward
  takesObjects(program.command('port-forward'), 'Pod')
    .description(
      'Listen on a local port and carry each connection to a port of a pod, or of a service (a ready endpoint picked per connection, another tried when one fails), through any node',
    )
    .argument('<target>', 'pod/NAME, NAME, service/NAME (svc/NAME), or KIND NAME')
    .argument('<ports...>', 'LOCAL:REMOTE (or PORT for the same number on both sides); for a service, REMOTE is the service port')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('-c, --container <name>', 'container whose network namespace to enter (default: the first; pod containers share one when the pod has a network)')
    .option('--address <addr>', 'local address to listen on', '127.0.0.1')
    .addHelpText(
      'after',
      examples(`
  orc port-forward web 8080:80        # then: curl http://127.0.0.1:8080/
  orc port-forward pod/db 5432
  orc port-forward web 0:80           # a free local port, printed
  orc port-forward service/web 8080:80  # a ready pod of the service, on whichever node it runs`),
    )
    .action(async (target: string, args: string[], opts, cmd: Command) => {
      const t = forwardTarget(target, args, opts.namespace)
      const pod = { ns: t.ns, name: t.name }
      const c = client(cmd)
      const pairs = t.specs.map(parsePortPair)
      if (t.kind === 'Service') for (const { remote } of pairs) await serviceBackends(c, pod, remote) // a port the service lacks fails now, not per connection
      const servers = await Promise.all(
        pairs.map(
          ({ local, remote }) =>
            new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
              const server = createServer((sock) =>
                t.kind === 'Service' ? void carryToService(c, pod, remote, sock, io) : void carry(c, pod, remote, opts.container, sock, io),
              )
              server.once('error', (err) => reject(new OrcError('unavailable', `listen on ${opts.address}:${local}: ${err.message}`)))
              server.listen(local, opts.address, () => {
                const a = server.address()
                const port = typeof a === 'object' && a !== null ? a.port : local
                io.out(`Forwarding from ${opts.address}:${port} -> ${t.kind.toLowerCase()}/${pod.name}:${remote}\n`)
                resolve(server)
              })
            }),
        ),
      )
      // until interrupted
      await new Promise<void>((resolve) => {
        const stop = () => {
          for (const s of servers) s.close()
          resolve()
        }
        process.once('SIGINT', stop)
        process.once('SIGTERM', stop)
      })
    })

  // ---- top
  program
    .command('top')
    .description("CPU and memory of pods (from each pod's cgroups), VMs (from their qemu's cgroup) or nodes (from /proc), across the cluster")
    .argument('<what>', 'pods, vms or nodes')
    .option('-n, --namespace <ns>', 'only pods (or VMs) of this namespace')
    .option('-A, --all-namespaces', 'pods (or VMs) of every namespace (default: only the default namespace, unless -n)')
    .option('--containers', 'one line per container')
    .addOption(outputOption(['table', 'json']))
    .addHelpText(
      'after',
      examples(`
  orc top pods
  orc top pods -A --containers
  orc top vms
  orc top nodes
  orc top pods -o json`),
    )
    .action(async (what: string, opts, cmd: Command) => {
      const kind = what.replace(/^(pod|node|vm)$/, '$1s')
      if (kind !== 'pods' && kind !== 'nodes' && kind !== 'vms') throw new OrcError('invalid', `top: ${what}: expected pods, vms or nodes`)
      const r = await callRoute(client(cmd), 'top')
      for (const u of r.unreachable) io.err(`warning: node ${u.node} did not answer: ${u.error}\n`)
      if (kind === 'nodes') {
        if (opts.output === 'json') return io.out(JSON.stringify(r.nodes, null, 2) + '\n')
        return io.out(topNodesTable(r))
      }
      const ns = opts.allNamespaces ? undefined : (opts.namespace ?? 'default')
      const pods = (kind === 'vms' ? (r.vms ?? []) : r.pods).filter((p) => ns === undefined || p.namespace === ns)
      if (opts.output === 'json') return io.out(JSON.stringify(pods, null, 2) + '\n')
      io.out(topPodsTable({ ...r, pods }, { containers: Boolean(opts.containers), namespaces: ns === undefined }))
    })
}

export function parsePortPair(spec: string): { local: number; remote: number } {
  const m = /^(\d+)(?::(\d+))?$/.exec(spec)
  const local = Number(m?.[1])
  const remote = Number(m?.[2] ?? m?.[1])
  if (!m || local > 65535 || remote < 1 || remote > 65535)
    throw new OrcError('invalid', `port ${JSON.stringify(spec)}: expected LOCAL:REMOTE or PORT (1..65535; LOCAL 0 picks a free port)`)
  return { local, remote }
}

/** One accepted local connection to a service: the first ready endpoint whose node opens a session. */
async function carryToService(c: ApiCaller, svc: { ns: string; name: string }, port: number, sock: Socket, io: StreamCliIO): Promise<void> {
  sock.pause()
  let backends: { pod: string; port: number }[]
  try {
    backends = await serviceBackends(c, svc, port)
  } catch (err) {
    io.err(`port-forward: ${err instanceof Error ? err.message : String(err)}\n`)
    sock.destroy()
    return
  }
  const errors: string[] = []
  for (const b of backends.slice(0, 3)) {
    const pod = { ns: svc.ns, name: b.pod }
    try {
      const opened = await callRoute(c, 'podPortForward', pod, { body: { port: b.port } })
      return await carry(c, pod, b.port, undefined, sock, io, opened)
    } catch (err) {
      errors.push(`pod/${b.pod}: ${err instanceof Error ? err.message : String(err)}`)
    }
  }
  io.err(`port-forward: service/${svc.name}:${port}: ${backends.length === 0 ? 'no ready endpoint' : errors.join('; ')}\n`)
  sock.destroy()
}

/** One accepted local connection: a port-forward session on the pod's node, bytes both ways. */
async function carry(
  c: ApiCaller,
  pod: { ns: string; name: string },
  port: number,
  container: string | undefined,
  sock: Socket,
  io: StreamCliIO,
  session0?: { session: string },
): Promise<void> {
  sock.pause()
  let opened: { session: string }
  try {
    opened = session0 ?? (await callRoute(c, 'podPortForward', pod, { body: { port, ...(container ? { container } : {}) } }))
  } catch (err) {
    io.err(`port-forward: ${err instanceof Error ? err.message : String(err)}\n`)
    sock.destroy()
    return
  }
  const session = { ...pod, session: opened.session }
  try {
    const exit = await pumpSession((body) => callRoute(c, 'podPortForwardIo', session, { body }), {
      onStdout: (b) => sock.write(b),
      onStderr: (b) => io.err(`port-forward: ${b.toString('utf8')}`),
      input: (onData, onEnd) => {
        sock.on('data', onData)
        sock.once('end', onEnd)
        sock.once('error', onEnd)
        sock.resume()
      },
    })
    if (exit.code !== 0 && exit.code !== null) io.err(`port-forward: connection to pod/${pod.name}:${port} ended with an error\n`)
  } catch (err) {
    io.err(`port-forward: ${err instanceof Error ? err.message : String(err)}\n`)
    await callRoute(c, 'podPortForwardIo', session, { body: { close: true } }).catch(() => undefined)
  } finally {
    sock.end()
  }
}

function cpuText(m: number | null): string {
  return m === null ? '-' : `${Math.round(m)}m`
}

function memText(b: number | null): string {
  return b === null ? '-' : `${Math.round(b / (1024 * 1024))}Mi`
}

export function topPodsTable(r: TopAnswer, opts: { containers: boolean; namespaces: boolean }): string {
  const pods = [...r.pods].sort((a, b) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name))
  const head = [...(opts.namespaces ? ['NAMESPACE'] : []), 'NAME', ...(opts.containers ? ['CONTAINER'] : []), 'CPU', 'MEMORY', 'NODE']
  const rows: string[][] = []
  for (const p of pods) {
    if (!opts.containers) rows.push([...(opts.namespaces ? [p.namespace] : []), p.name, cpuText(p.cpuMillis), memText(p.memoryBytes), p.node])
    else
      for (const ct of p.containers)
        rows.push([...(opts.namespaces ? [p.namespace] : []), p.name, ct.name, cpuText(ct.cpuMillis), memText(ct.memoryBytes), p.node])
  }
  return formatTable(head, rows)
}

export function topNodesTable(r: TopAnswer): string {
  const nodes = [...r.nodes].sort((a, b) => a.node.localeCompare(b.node))
  return formatTable(
    ['NAME', 'CPU', 'CPU%', 'MEMORY', 'MEMORY%', 'PODS'],
    nodes.map((n) => [
      n.node,
      cpuText(n.cpuMillis),
      `${Math.round(n.cpuMillis / (10 * n.cpuCores))}%`,
      memText(n.memoryBytes),
      `${n.memoryTotalBytes > 0 ? Math.round((100 * n.memoryBytes) / n.memoryTotalBytes) : 0}%`,
      String(n.pods),
    ]),
  )
}
