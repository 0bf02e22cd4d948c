/**
 * `orc console vm/NAME`: the VM's serial console, interactive. qemu serves the console on a unix
 * socket in the VM's directory (and still appends what the guest writes to the console log, so
 * `orc logs vm/NAME` misses nothing). The node that runs the VM connects to it and holds the
 * connection as a session of the asking user, driven by the same request/answer exchanges as
 * `orc exec` (pods/streams.ts); other nodes forward the exchanges there (cluster.ts).
 *
 * qemu takes one client at a time, so one session per VM: a second is refused, naming who holds
 * the first.
 */
import { existsSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { OrcError, type Principal, vmNodeOf } from '../../model/index.ts'
import type { ExecProcess } from '../../runtime/index.ts'
import { MAX_UNIX_PATH } from '../../runtime/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import type { PodStreams } from '../pods/streams.ts'
import type { RouteHandlers } from '../router.ts'
import type { PodStreamOpened } from '../routes.ts'

/** Where qemu serves a VM's console (`<data-dir>/vms/<uid>/console.sock`). */
export function consoleSocketPath(vmDir: string): string {
  return join(vmDir, 'console.sock')
}

/** A connection to a console socket, as the sessions hold processes: what it reads is stdout. */
export async function connectConsole(path: string): Promise<ExecProcess> {
  const sock = connect(path)
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', () => resolve())
    sock.once('error', reject)
  })
  const stderr = new PassThrough()
  stderr.end()
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => sock.once('close', () => resolve({ code: 0, signal: null })))
  // A write after qemu went away is an error of the socket, which then closes: the session ends.
  sock.on('error', () => sock.destroy())
  return { stdin: sock, stdout: sock, stderr, exited, kill: () => sock.destroy() }
}

export interface VmConsoleComponents {
  store: Pick<ObjectStore, 'get'>
  nodeName: string
  streams(): PodStreams
  vmDir(uid: string): string
}

export async function startConsole(c: VmConsoleComponents, principal: Principal | undefined, ns: string, name: string): Promise<PodStreamOpened> {
  const ref = { kind: 'VirtualMachine' as const, namespace: ns, name }
  const vm = c.store.get(ref)
  if (vm === undefined) throw new OrcError('not_found', `virtualmachine/${name} in namespace ${ns} not found`, { ...ref })
  const node = vmNodeOf(vm)
  if (node !== c.nodeName) throw new OrcError('unavailable', `vm/${name} does not run on node ${c.nodeName}`, { ...ref, node: c.nodeName })
  if (vm.status?.phase !== 'Running' && vm.status?.phase !== 'Starting')
    throw new OrcError(
      'conflict',
      `vm/${name} is ${vm.status?.phase ?? 'not started'}: its console is open only while the guest runs (orc logs vm/${name} has what it wrote)`,
      { ...ref },
    )
  const path = consoleSocketPath(c.vmDir(vm.metadata.uid))
  if (Buffer.byteLength(path) > MAX_UNIX_PATH)
    throw new OrcError('unavailable', `vm/${name}: the console socket path ${path} is too long for a unix socket (a shorter data dir allows it)`, { ...ref })
  if (!existsSync(path))
    throw new OrcError('unavailable', `vm/${name} has no console socket: its qemu was started by an orc without consoles (restart the VM to get one)`, {
      ...ref,
    })
  const open = c.streams().openOn('console', ns, name)
  if (open.length > 0)
    throw new OrcError('conflict', `the console of vm/${name} is in use (a session of ${open[0]!.owner}); one at a time: close it or wait for it to end`, {
      ...ref,
    })
  let proc: ExecProcess
  try {
    proc = await connectConsole(path)
  } catch (err) {
    throw new OrcError('unavailable', `vm/${name}: cannot connect to its console: ${(err as Error).message}`, { ...ref }, err)
  }
  return { session: c.streams().attach('console', principal, { namespace: ns, name, uid: vm.metadata.uid }, proc), container: 'console', node: c.nodeName }
}

export function vmConsoleRoutes(c: VmConsoleComponents) {
  return {
    vmConsole: ({ params, principal }) => startConsole(c, principal, params.ns, params.name),
    vmConsoleIo: ({ params, body, principal }) => c.streams().io('console', principal, params.ns, params.name, params.session, body),
  } satisfies RouteHandlers
}
