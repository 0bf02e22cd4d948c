/**
 * Pod commands: `orc why`, `orc logs`, `orc controllers`, and `orc image …` (local images under
 * `<data-dir>/images`, no registry).
 */
import { cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { gunzipSync } from 'node:zlib'
import type { Command } from 'commander'
import type { ClusterEvent, LogsQuery, ResponseOf } from '../../agent/index.ts'
import { defaultDataDir, objectParams, podIndex } from '../../agent/index.ts'
import { JOB_LABEL, type Node, type ObjectRef, OrcError, type Pod, type VirtualMachine } from '../../model/index.ts'
import { buildBusyboxRootfs, readTar } from '../../runtime/index.ts'
import type { Stored } from '../../store/index.ts'
import { criticalChain, explainWhy, parseWorkflowSnapshot, type WorkflowSnapshot } from '../../workflow/index.ts'
import { callRoute } from '../call.ts'
import { examples, formatTable, runSnapshotText } from '../format.ts'
import { fetchMembers, podNodeOf, unreachableNodes, withLiveness } from '../liveness.ts'
import { createProgress } from '../progress.ts'
import { getObjectOf, objectRef, outputOption, takesObjects, withNameHint } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'
import { formatBytes, registerImageCommands, registryImageTable } from './images.ts'
import { ingressWhyOutput } from './ingress.ts'
import { nodeWhyOutput } from './network.ts'
import { serviceWhyOutput } from './services.ts'
import { vmLogs, vmTarget, vmWhyOutput } from './vms.ts'

export interface PodCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
  now(): number
}

/** A Job's newest pod (the highest index: the latest attempt), and how many it has. */
async function newestJobPod(c: ApiCaller, namespace: string, job: string): Promise<{ name: string; of: number }> {
  const items = (await callRoute(c, 'listObjects', { kind: 'Pod' }, { query: { namespace } })).items as unknown as Pod[]
  const mine = items
    .filter((p) => p.metadata.labels?.[JOB_LABEL] === job)
    .map((p) => ({ name: p.metadata.name, index: podIndex(job, p.metadata.name) ?? -1 }))
    .sort((a, b) => b.index - a.index)
  if (mine.length === 0) throw new OrcError('not_found', `job/${job} has no pods in namespace ${namespace} (orc get job ${job} -n ${namespace})`)
  return { name: mine[0]!.name, of: mine.length }
}

function podRef(target: string, namespace: string | undefined, name?: string): ObjectRef {
  const ref = objectRef([target, name ?? ''], { namespace, implied: 'Pod' })
  if (ref.kind !== 'Pod') throw new OrcError('invalid', `${target}: only pods have a lifecycle to explain (try pod/NAME)`)
  return ref
}

/** The header of `orc why`: where the pod is and what runs, before the workflow explanation. */
/** The copies of a pod other nodes stopped: the `CopyStopped` events (from their Nodes' stoppedCopies), oldest first. */
async function stoppedCopiesOf(c: ApiCaller, ref: { namespace: string; name: string }): Promise<{ node: string; at: string; why: string }[]> {
  const r = await callRoute(c, 'events', {}, { query: { target: `pod/${ref.name}`, namespace: ref.namespace } }).catch(() => ({ events: [] as ClusterEvent[] }))
  return r.events
    .filter((e) => e.type === 'CopyStopped')
    .map((e) => ({ node: e.source.replace(/^node\//, ''), at: new Date(e.time).toISOString(), why: e.message.replace(/^copy on [^ ]+ stopped: /, '') }))
}

function podSummary(pod: Stored<Pod>): string[] {
  const st = pod.status ?? {}
  const node = st.node ?? pod.spec?.placement?.node
  const lines = [
    `pod/${pod.metadata.name}: ${String(st.phase ?? 'Pending')}` +
      (node ? ` on node ${node}` : ', not bound to a node yet') +
      (typeof st.runningRevision === 'number' ? `, running revision ${st.runningRevision}` : '') +
      (typeof st.targetRevision === 'number' && st.targetRevision !== st.runningRevision ? `, starting revision ${st.targetRevision}` : ''),
  ]
  if (typeof st.reason === 'string') lines.push(`  reason: ${st.reason}`)
  for (const p of st.images ?? []) lines.push(`  image ${p.name}: ${p.image} is ${p.digest} (pinned for revision ${p.revision})`)
  for (const c of (st.containers as Record<string, unknown>[] | undefined) ?? []) {
    const bits = [`${c.state}`]
    if (c.pid !== undefined) bits.push(`pid ${c.pid}`)
    if (c.exitCode !== undefined) bits.push(`exit code ${c.exitCode}`)
    if (c.signal) bits.push(`signal ${c.signal}`)
    if (typeof c.restarts === 'number' && c.restarts > 0) bits.push(`${c.restarts} restarts`)
    if (c.reason) bits.push(String(c.reason))
    if (c.state === 'running' && typeof c.ready === 'boolean') bits.push(c.ready ? 'ready' : 'not ready')
    lines.push(`  container ${c.name}: ${bits.join(', ')}`)
    const last = c.lastTermination as { reason?: unknown; at?: unknown } | undefined
    if (typeof last?.reason === 'string') lines.push(`    last ended ${String(last.at)}: ${last.reason}`)
  }
  const ready = (st.conditions ?? []).find((c) => c?.type === 'Ready')
  if (ready !== undefined)
    lines.push(`  Ready: ${ready.status} (${ready.reason}${ready.message ? `: ${ready.message}` : ''}) since ${ready.lastTransitionTime}`)
  return lines
}

export function registerPodCommands(program: Command, io: PodCliIO, client: (cmd: Command) => ApiCaller): void {
  // ---- why
  takesObjects(program.command('why'), 'Pod')
    .description(
      "Explain a pod's lifecycle (or a node's network bring-up, node/NAME; a service's endpoints, service/NAME; what keeps an Ingress from serving, ingress/NAME; a VirtualMachine's boot, vm/NAME): which unit holds it up, for how long, with what error",
    )
    .argument('<pod/NAME>', 'like pod/web, pod web, or web')
    .argument('[NAME]', 'the name, when KIND is given alone')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--critical-chain', 'the chain of units that set the time to reach running, with start times and durations')
    .addOption(outputOption(['table', 'json']))
    .addHelpText(
      'after',
      examples(`
  # Why is web not running?
  orc why pod/web

  # What took the time, systemd-analyze style
  orc why pod/web --critical-chain

  # Why does the service's name answer no address?
  orc why service/web

  # Why does the ingress not answer? (nodes chosen, backend service, ready endpoints)
  orc why ingress/web

  # Where is the VM in its boot (kernel, network, tap, qemu, console marker)?
  orc why vm/builder --critical-chain`),
    )
    .action(async (target: string, nameArg: string | undefined, opts, cmd: Command) => {
      if (/^(node|nodes|no)\//i.test(target) || (/^(node|nodes|no)$/i.test(target) && nameArg !== undefined)) {
        const name = nameArg ?? target.slice(target.indexOf('/') + 1)
        const { object: node } = (await callRoute(client(cmd), 'getObject', objectParams({ kind: 'Node', namespace: '', name }))) as { object: Stored<Node> }
        return io.out(nodeWhyOutput(node, { output: opts.output, criticalChain: opts.criticalChain }, io.now()))
      }
      if (/^(ingress|ingresses|ing)\//i.test(target) || (/^(ingress|ingresses|ing)$/i.test(target) && nameArg !== undefined)) {
        const name = nameArg ?? target.slice(target.indexOf('/') + 1)
        return io.out(await ingressWhyOutput(client(cmd), name, opts.output === 'json' ? 'json' : 'table'))
      }
      if (/^(service|services|svc)\//i.test(target) || (/^(service|services|svc)$/i.test(target) && nameArg !== undefined)) {
        const name = nameArg ?? target.slice(target.indexOf('/') + 1)
        return io.out(await serviceWhyOutput(client(cmd), { namespace: opts.namespace || 'default', name }, opts.output))
      }
      const vmName = vmTarget(target, nameArg)
      if (vmName !== undefined) {
        const ns = opts.namespace || 'default'
        const vm = (await getObjectOf(client(cmd), { kind: 'VirtualMachine', namespace: ns, name: vmName })) as Stored<VirtualMachine>
        // An unpinned VM is placed by the scheduler: ask where it goes, or why nowhere.
        const placement =
          vm.spec?.node === undefined && vm.spec?.runStrategy !== 'Halted'
            ? await callRoute(client(cmd), 'vmPlacement', { ns, name: vmName }).catch(() => undefined)
            : undefined
        return io.out(vmWhyOutput(vm, { output: opts.output, criticalChain: opts.criticalChain }, io.now(), placement))
      }
      const ref = podRef(target, opts.namespace, nameArg)
      const pod = (await getObjectOf(client(cmd), ref)) as Stored<Pod>
      const raw = pod.status?.workflow
      const now = io.now()
      let snap: WorkflowSnapshot | undefined
      if (raw !== undefined) snap = parseWorkflowSnapshot(raw)
      const subject = `pod/${pod.metadata.name}`
      // Placement: for a pod with no node, or whose node is lost for it, say which node fits and why not.
      let placement: ResponseOf<'podPlacement'> | undefined
      try {
        placement = await callRoute(client(cmd), 'podPlacement', { ns: ref.namespace, name: ref.name })
      } catch {
        placement = undefined // an older agent: no placement explanation
      }
      if (opts.output === 'json') {
        const body: Record<string, unknown> = { pod: subject, namespace: ref.namespace, status: pod.status ?? {} }
        if (placement) body.placement = { explainedBy: placement.explainedBy, ...placement.explanation, text: placement.text }
        if (snap) body.explanation = opts.criticalChain ? criticalChain(snap, 'running', { subject, now }) : explainWhy(snap, 'running', { subject, now })
        return io.out(JSON.stringify(body, null, 2) + '\n')
      }
      // The node it is bound to is unreachable from here: what the status says is its last report.
      const members = await fetchMembers(client(cmd)).catch(() => undefined)
      const node = podNodeOf(pod)
      const lost = node === undefined || !members ? undefined : unreachableNodes(members, now).get(node)
      const out = podSummary(lost ? (withLiveness('Pod', [pod], new Map([[node!, lost]]))[0] as Stored<Pod>) : pod)
      if (lost)
        out.push(`  node ${node} is ${lost.text} as this node sees it: the status below is its last report (phase ${String(pod.status?.phase ?? 'Pending')})`)
      const stopped = await stoppedCopiesOf(client(cmd), ref)
      if (stopped.length > 0) out.push('', 'Copies stopped on other nodes:', ...stopped.map((s) => `  ${s.node} at ${s.at}: ${s.why}`))
      if (placement && placement.explanation.status !== 'bound') out.push('', 'Placement:', ...placement.text.split('\n').map((l) => `  ${l}`))
      else if (placement && (!snap || !placement.explanation.summary.startsWith('running on '))) out.push('', `Placement: ${placement.text.split('\n')[0]}`)
      if (!snap) {
        out.push('', 'No lifecycle run recorded yet: the node it is bound to has not started it (or no node is bound).')
        return io.out(out.join('\n') + '\n')
      }
      out.push('', runSnapshotText(snap, 'running', subject, now, opts.criticalChain === true))
      io.out(out.join('\n') + '\n')
    })

  // ---- logs
  takesObjects(program.command('logs'), 'Pod')
    .description(
      "Print a pod container's output, a Job's newest pod's (job/NAME), or a VM's serial console (vm/NAME), from any node (the request is forwarded to the node that runs it)",
    )
    .argument('<pod/NAME>', 'like pod/web, pod web, or web; job/NAME, vm/NAME')
    .argument('[NAME]', 'the name, when KIND is given alone')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('-c, --container <name>', 'container (needed when the pod has several)')
    .option('-f, --follow', 'keep printing new output until the container ends (Ctrl-C to stop)')
    .option('--revision <n>', 'logs of this pod revision (default: the running one)')
    .option('--tail <n>', 'only the last N lines')
    .addOption(
      outputOption(['table', 'json'], 'table', 'output format: table (the lines as written), json (with -f: one {container, revision, line} per line)'),
    )
    .addHelpText(
      'after',
      examples(`
  orc logs pod/web
  orc logs web -c sidecar --tail 20
  orc logs pod/web -f
  orc logs pod/web --revision 3 -o json
  orc logs job/resize
  orc logs vm/builder -f`),
    )
    .action(async (target: string, nameArg: string | undefined, opts, cmd: Command) => {
      const vmName = vmTarget(target, nameArg)
      if (vmName !== undefined) {
        const ref = { ns: opts.namespace || 'default', name: vmName }
        return vmLogs(client(cmd), ref, { revision: opts.revision, tail: opts.tail, follow: opts.follow, json: opts.output === 'json' }, (t) => io.out(t))
      }
      const c = client(cmd)
      const asked = objectRef([target, nameArg ?? ''], { namespace: opts.namespace, implied: 'Pod' })
      if (asked.kind === 'Job') {
        // As kubectl: the Job's pods are named for it; the newest is the latest attempt.
        const newest = await newestJobPod(c, asked.namespace || 'default', asked.name)
        if (newest.of > 1) io.err(`job/${asked.name} has ${newest.of} pods; showing the newest, pod/${newest.name}\n`)
        target = `pod/${newest.name}`
        nameArg = undefined
      }
      const ref = podRef(target, opts.namespace, nameArg)
      const pod = { ns: ref.namespace, name: ref.name }
      const query: LogsQuery = { container: opts.container, revision: opts.revision, tail: opts.tail }
      const json = opts.output === 'json'
      const print = (a: { container: string; revision: number | null; lines: string[] }) => {
        if (json) for (const line of a.lines) io.out(JSON.stringify({ container: a.container, revision: a.revision, line }) + '\n')
        else if (a.lines.length > 0) io.out(a.lines.join('\n') + '\n')
      }
      const first = async (q: LogsQuery) => callRoute(c, 'podLogs', pod, { query: q }).catch(async (err) => Promise.reject(await withNameHint(c, err)))
      if (!opts.follow) {
        const r = await first(query)
        if (json)
          return io.out(
            JSON.stringify({ pod: `pod/${ref.name}`, namespace: ref.namespace, container: r.container, revision: r.revision, lines: r.lines }, null, 2) + '\n',
          )
        if (r.lines.length > 0) io.out(r.lines.join('\n') + '\n')
        return
      }
      let r = await first({ ...query, follow: '1' })
      for (;;) {
        print(r)
        if (r.ended) return
        r = await callRoute(c, 'podLogs', pod, {
          query: { container: opts.container, revision: String(r.revision), follow: '1', cursor: String(r.cursor), waitMs: '10000' },
        })
      }
    })

  // ---- controllers
  program
    .command('controllers')
    .description('Show the controllers of this agent: the fields each reads and writes, and who feeds whom')
    .addOption(outputOption(['table', 'json']))
    .action(async (opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'controllers')
      if (opts.output === 'json') {
        const { text: _t, ...rest } = r
        return io.out(JSON.stringify(rest, null, 2) + '\n')
      }
      io.out(r.text + '\n')
    })

  // ---- image
  const image = program
    .command('image')
    .description("Images for pods: registry images in the node's blob store (pull, inspect, rm, prune) and local imports (rootfs directories, OCI layouts)")
  registerImageCommands(image, { ...io, sleep: (ms) => new Promise((r) => setTimeout(r, ms)), isTTY: Boolean(process.stderr.isTTY) }, client)
  // Images are imported into the data dir of the agent the CLI talks to on this machine (asked over
  // its socket), so `orc image import-busybox` next to `orc up --data-dir D` lands where that agent
  // looks; with --node (a remote agent), or no agent answering, the default data dir.
  const dataDirOf = async (o: { dataDir?: string }, cmd: Command): Promise<string> => {
    if (o.dataDir !== undefined) return o.dataDir
    const g = cmd.optsWithGlobals()
    if (g.node === undefined && !io.env.ORC_NODE) {
      const s = await callRoute(client(cmd), 'status').catch(() => undefined)
      if (s?.node?.dataDir) return s.node.dataDir
    }
    return defaultDataDir(io.env)
  }
  const checkName = (name: string) => {
    if (!/^[a-z0-9][a-z0-9._-]{0,127}$/.test(name)) throw new OrcError('invalid', `image name ${JSON.stringify(name)}: use lowercase letters, digits and . _ -`)
  }

  image
    .command('import')
    .description('Copy a rootfs directory or an OCI image layout (directory or tar) to <data-dir>/images/NAME')
    .argument('<SRC>', 'rootfs directory, OCI layout directory, or OCI layout tar (.tar, .tar.gz)')
    .requiredOption('--name <name>', 'image name; pods name it (image: NAME); any other host path needs a hostPath grant')
    .option('--data-dir <dir>', "the agent data dir (default: the local agent's, else the default data dir)")
    .addHelpText(
      'after',
      examples(`
  orc image import ./rootfs --name myapp
  orc image import ./myapp-oci.tar --name myapp`),
    )
    .action(async (src: string, opts, cmd: Command) => {
      checkName(opts.name)
      const dest = join(await dataDirOf(opts, cmd), 'images', opts.name)
      const progress = createProgress({ write: (t) => io.err(t), isTTY: Boolean(process.stderr.isTTY) })
      progress.update(`importing ${src} into ${dest} …`)
      let kind: string
      try {
        kind = importImage(resolve(src), dest)
      } finally {
        progress.done()
      }
      io.out(`image ${opts.name} imported (${kind}) into ${dest}: use image: ${opts.name}\n`)
    })

  image
    .command('import-busybox')
    .description("Build the sample busybox image from the host's static busybox (/usr/bin/busybox)")
    .option('--name <name>', 'image name', 'busybox')
    .option('--data-dir <dir>', "the agent data dir (default: the local agent's, else the default data dir)")
    .action(async (opts, cmd: Command) => {
      checkName(opts.name)
      const dest = join(await dataDirOf(opts, cmd), 'images', opts.name)
      const r = buildBusyboxRootfs(dest)
      io.out(`image ${opts.name} built (${r.applets} busybox applets) in ${dest}: use image: ${opts.name}\n`)
    })

  image
    .command('list')
    .description("List the node's images: registry images in its blob store (from the agent), and imports in <data-dir>/images")
    .option('--data-dir <dir>', "the agent data dir (default: the local agent's, else the default data dir)")
    .action(async (opts, cmd: Command) => {
      const registry = await registryImageTable(client(cmd))
      if (registry !== undefined) io.out(registry)
      const dir = join(await dataDirOf(opts, cmd), 'images')
      let names: string[] = []
      try {
        names = readdirSync(dir)
          .filter((n) => !n.includes('.tmp-'))
          .sort()
      } catch {}
      if (names.length === 0) return io.err(`No images in ${dir} (import one with orc image import, or orc image import-busybox).\n`)
      const rows = names.map((n) => {
        const p = join(dir, n)
        const layout = existsSync(join(p, 'index.json'))
        return [n, layout ? 'oci-layout' : 'rootfs', formatBytes(duSync(p)), p]
      })
      io.out(formatTable(['NAME', 'TYPE', 'SIZE', 'PATH'], rows))
    })
}

function duSync(p: string): number {
  const st = lstatSync(p)
  if (!st.isDirectory()) return st.size
  let total = 0
  for (const n of readdirSync(p)) total += duSync(join(p, n))
  return total
}

/** Copy (or unpack) an image into `dest`, atomically replacing what was there. */
export function importImage(src: string, dest: string): 'rootfs' | 'oci-layout' {
  let st
  try {
    st = statSync(src)
  } catch (err) {
    throw new OrcError('not_found', `image source ${src} not found`, { src }, err)
  }
  const tmp = `${dest}.tmp-${process.pid}`
  rmSync(tmp, { recursive: true, force: true })
  mkdirSync(join(dest, '..'), { recursive: true, mode: 0o755 })
  let kind: 'rootfs' | 'oci-layout'
  try {
    if (st.isDirectory()) {
      kind = existsSync(join(src, 'index.json')) ? 'oci-layout' : 'rootfs'
      cpSync(src, tmp, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true })
    } else {
      let raw = readFileSync(src)
      if (raw[0] === 0x1f && raw[1] === 0x8b) raw = gunzipSync(raw)
      const entries = readTar(raw)
      if (!entries.some((e) => e.path.replace(/^\.\//, '') === 'index.json')) {
        throw new OrcError('invalid', `${src} is not an OCI image layout tar (it has no index.json)`)
      }
      for (const e of entries) {
        const rel = e.path.replace(/^\.\//, '')
        if (rel === '' || rel.split('/').includes('..')) continue
        const p = join(tmp, rel)
        if (e.type === 'dir') mkdirSync(p, { recursive: true })
        else if (e.type === 'file') {
          mkdirSync(join(p, '..'), { recursive: true })
          writeFileSync(p, e.data ?? Buffer.alloc(0))
        }
      }
      kind = 'oci-layout'
    }
    rmSync(dest, { recursive: true, force: true })
    renameSync(tmp, dest)
    return kind
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true })
    throw err
  }
}
