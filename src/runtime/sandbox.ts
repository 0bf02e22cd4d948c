/**
 * The default runtime: bubblewrap. Each container gets new user, pid, net (or the pod's), mount,
 * ipc, uts and (where possible) cgroup namespaces; the image mounted read-only as `/`, a private
 * tmpfs on /tmp, a fresh /proc, bwrap's minimal /dev (null, zero, full, random, urandom, tty, pts,
 * shm — no block devices), no host paths; all capabilities dropped; no new privileges; the default
 * seccomp denylist (x86_64).
 *
 * Identity: when the agent is root it first drops to the unprivileged uid/gid (65534 by default,
 * or the pod's own uid) with setpriv, so bwrap runs unprivileged and maps that same uid inside:
 * the process is non-root inside its namespace and on the host.
 *
 * Launch chain (all exec, one pid): [nsenter --net=<pod netns>] [setpriv …] [prlimit …] bwrap … cmd
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { sleep } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'
import { createContainerCgroups } from './cgroups.ts'
import { type ExecLaunch, hostIdOf, idInside, readEnviron, resolveBinary } from './exec.ts'
import { ensureMountPoint, type ResolvedImage } from './image.ts'
import type { RuntimeOptions } from './options.ts'
import { descendants, listProcs, signalPid } from './procfs.ts'
import { buildSeccompBpf } from './seccomp.ts'
import { type ContainerRecord, containerArgv, containerEnv, type LaunchPlan, type PlanContext, SupervisedRuntime } from './supervisor.ts'
import type { ContainerRunSpec, EnforcedLimits, ExecSpec } from './types.ts'

export interface BwrapArgsInput {
  spec: ContainerRunSpec
  image: ResolvedImage
  uid: number
  gid: number
  /** fd numbers in the child for bwrap's --seccomp and --info-fd, if used. */
  seccompFd?: number
  infoFd?: number
  /**
   * fd from which bwrap reads the container's environment (`--args`, NUL-separated
   * `--setenv K V` triples: bwrapEnvArgs). Absent: they are in argv, which every host user can read.
   */
  envArgsFd?: number
}

/** The `--setenv` arguments of a container's environment, for bwrap's `--args FD` (NUL-separated). */
export function bwrapEnvArgs(spec: ContainerRunSpec, image: ResolvedImage): string[] {
  const out: string[] = []
  for (const [k, v] of Object.entries(containerEnv(spec, image))) {
    // A NUL would split the value into further bwrap arguments.
    if (k.includes('\0') || v.includes('\0'))
      throw new OrcError('invalid', `container ${spec.id}: environment variable ${k.replace(/\0/g, '')} holds a NUL byte`)
    out.push('--setenv', k, v)
  }
  return out
}

/** bwrap arguments for a container (pure: same input, same argv). */
export function buildBwrapArgs(input: BwrapArgsInput): string[] {
  const { spec, image, uid, gid } = input
  const a: string[] = ['--unshare-user', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try']
  if (!spec.netnsPath) a.push('--unshare-net')
  a.push('--uid', String(spec.rootInside ? 0 : uid), '--gid', String(spec.rootInside ? 0 : gid))
  a.push('--hostname', (spec.hostname ?? spec.id).slice(0, 63))
  a.push('--die-with-parent', '--new-session')
  a.push('--ro-bind', image.rootfs, '/')
  a.push('--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp')
  if (existsSync(join(image.rootfs, 'run'))) a.push('--tmpfs', '/run')
  for (const m of spec.mounts ?? []) a.push(m.readOnly ? '--ro-bind' : '--bind', m.source, m.destination)
  a.push('--cap-drop', 'ALL')
  a.push('--clearenv')
  // The values (Secrets among them) go through a pipe, not argv: /proc/PID/cmdline is world-readable.
  if (input.envArgsFd !== undefined) a.push('--args', String(input.envArgsFd))
  else a.push(...bwrapEnvArgs(spec, image))
  a.push('--chdir', spec.workingDir ?? image.config.workingDir ?? '/')
  if (input.seccompFd !== undefined) a.push('--seccomp', String(input.seccompFd))
  if (input.infoFd !== undefined) a.push('--info-fd', String(input.infoFd))
  a.push('--', ...containerArgv(spec, image))
  return a
}

/** The prefix that enters the pod netns, drops privileges and applies rlimit fallbacks. */
export function buildLaunchPrefix(
  opts: Pick<RuntimeOptions, 'nsenterPath' | 'setprivPath' | 'prlimitPath'>,
  p: { isRoot: boolean; netnsPath?: string; uid: number; gid: number; rlimits: { nproc?: number; asBytes?: number } },
): string[] {
  const out: string[] = []
  if (p.netnsPath) {
    if (!p.isRoot) throw new OrcError('forbidden', 'joining a pod network namespace needs root')
    out.push(opts.nsenterPath, `--net=${p.netnsPath}`, '--')
  }
  if (p.rlimits.nproc !== undefined || p.rlimits.asBytes !== undefined) {
    out.push(opts.prlimitPath)
    if (p.rlimits.nproc !== undefined) out.push(`--nproc=${p.rlimits.nproc}`)
    if (p.rlimits.asBytes !== undefined) out.push(`--as=${p.rlimits.asBytes}`)
    out.push('--')
  }
  if (p.isRoot) out.push(opts.setprivPath, `--reuid=${p.uid}`, `--regid=${p.gid}`, '--clear-groups', '--inh-caps=-all', '--')
  return out
}

export class SandboxRuntime extends SupervisedRuntime {
  readonly name = 'sandbox' as const

  hostIdsOf(spec: Pick<ContainerRunSpec, 'uid' | 'gid'>): { uid: number; gid: number } {
    // An unprivileged agent runs bwrap as itself: its own uid is the one mapped inside.
    if (process.getuid?.() !== 0) return { uid: process.getuid?.() ?? this.opts.uid, gid: process.getgid?.() ?? this.opts.gid }
    return { uid: spec.uid ?? this.opts.uid, gid: spec.gid ?? this.opts.gid }
  }
  private seccompFile: string | undefined

  private seccompPath(): string {
    if (!this.seccompFile) {
      this.seccompFile = join(this.opts.stateDir, 'seccomp.bpf')
      writeFileSync(this.seccompFile, buildSeccompBpf())
    }
    return this.seccompFile
  }

  protected async plan(spec: ContainerRunSpec, ctx: PlanContext): Promise<LaunchPlan> {
    const isRoot = process.getuid?.() === 0
    const res = spec.resources ?? {}
    const cg = createContainerCgroups(ctx.layout, spec.id, { ...spec.defaultResources, ...res })
    const enforced: EnforcedLimits = { ...cg.enforced }
    const rlimits: { nproc?: number; asBytes?: number } = {}
    // Fallbacks where no cgroup controller is usable. RLIMIT_NPROC counts every process of the uid,
    // so it is only a per-pod bound when each pod has its own uid.
    if (res.pids !== undefined && !enforced.pids) {
      rlimits.nproc = res.pids
      enforced.pids = 'rlimit-nproc'
    }
    if (res.memoryBytes !== undefined && !enforced.memoryBytes) {
      rlimits.asBytes = res.memoryBytes
      enforced.memoryBytes = 'rlimit-as'
    }
    for (const m of spec.mounts ?? []) ensureMountPoint(ctx.image.rootfs, m.destination, m.file === true)
    const extraFds: number[] = []
    let seccompFd: number | undefined
    if (this.opts.seccomp) {
      this.seccompPath()
      extraFds.push(this.openStateFile(this.opts.stateDir, 'seccomp.bpf', 'r'))
      seccompFd = 3
    }
    extraFds.push(this.openStateFile(ctx.dir, 'info.json', 'w'))
    const infoFd = 3 + extraFds.length - 1
    const envArgsFd = 3 + extraFds.length
    const envArgs = Buffer.from(
      bwrapEnvArgs(spec, ctx.image)
        .map((x) => `${x}\0`)
        .join(''),
      'utf8',
    )
    const prefix = buildLaunchPrefix(this.opts, { isRoot, netnsPath: spec.netnsPath, uid: ctx.uid, gid: ctx.gid, rlimits })
    const bwrap = buildBwrapArgs({ spec, image: ctx.image, uid: ctx.uid, gid: ctx.gid, seccompFd, infoFd, envArgsFd })
    const argv = [...prefix, this.opts.bwrapPath, ...bwrap]
    return { file: argv[0]!, args: argv.slice(1), extraFds, inputs: [envArgs], cgroupProcs: cg.procsFiles, cgroupDirs: cg.dirs, enforced }
  }

  /** pid (host view) of the pid namespace's init, from bwrap's --info-fd. */
  private nsInit(rec: ContainerRecord): number | undefined {
    try {
      const info = JSON.parse(readFileSync(join(this.containerDir(rec.id), 'info.json'), 'utf8')) as { 'child-pid'?: number }
      return info['child-pid']
    } catch {
      return undefined
    }
  }

  protected namespacePid(rec: ContainerRecord): Promise<number | undefined> {
    return this.mainPid(rec)
  }

  /** The container's main process (host pid): the child of the pid namespace's init. */
  private async mainPid(rec: ContainerRecord): Promise<number | undefined> {
    const clock = this.opts.clock
    const deadline = clock.now() + 2000
    for (;;) {
      const init = this.nsInit(rec)
      if (init !== undefined && descendants(rec.pid).includes(init)) {
        const main = listProcs().find((p) => p.ppid === init)
        if (main !== undefined) return main.pid
      }
      if (clock.now() >= deadline || rec.exit !== undefined) return undefined
      await sleep(clock, 20)
    }
  }

  /**
   * nsenter into every namespace of the main process (user first, so the rest are entered as its
   * owner), its root and working directory, as its uid/gid inside; the launcher first joins the
   * container's cgroups and sets no_new_privs. The environment is the one the main process started
   * with (read from /proc, never stored: it holds Secrets). What bwrap's own launch adds and this
   * one cannot: the seccomp denylist, and for a `rootInside` container the dropped capabilities
   * (docs/decisions.md).
   */
  protected async execLaunch(rec: ContainerRecord, spec: ExecSpec): Promise<Omit<ExecLaunch, 'tty' | 'rows' | 'cols'>> {
    const main = await this.mainPid(rec)
    if (main === undefined) throw new OrcError('conflict', `container ${rec.id} has no running main process to exec beside`, { id: rec.id })
    let env: Record<string, string>
    let uid: number | undefined
    let gid: number | undefined
    try {
      env = readEnviron(main)
      uid = idInside(main, 'uid', hostIdOf(main, 'uid'))
      gid = idInside(main, 'gid', hostIdOf(main, 'gid'))
    } catch (err) {
      throw new OrcError('conflict', `container ${rec.id}: its main process ${main} went away`, { id: rec.id }, err)
    }
    if (uid === undefined || gid === undefined) throw new OrcError('internal', `container ${rec.id}: its ids are not mapped in its user namespace`)
    const procs = rec.cgroupDirs.map((d) => join(d, 'cgroup.procs'))
    const joinCgroups = 'for f in $ORC_CGROUPS; do echo $$ > "$f" || exit 125; done; unset ORC_CGROUPS; exec "$@"'
    const argv = [
      this.opts.shPath,
      '-c',
      joinCgroups,
      'orc-exec',
      resolveBinary(this.opts.setprivPath),
      '--no-new-privs',
      '--',
      resolveBinary(this.opts.nsenterPath),
      `--target=${main}`,
      '--user',
      '--mount',
      '--pid',
      '--ipc',
      '--uts',
      '--net',
      '--cgroup',
      '--root',
      '--wd',
      `--setuid=${uid}`,
      `--setgid=${gid}`,
      '--',
      ...spec.command,
    ]
    return { argv, env: { ...env, ...spec.env, ORC_CGROUPS: procs.join(' ') } }
  }

  /**
   * bwrap does not forward signals, so the main process (the command, pid 2 inside, child of
   * bwrap's pid-1 init) is signalled directly; its exit ends the namespace and bwrap.
   */
  protected async signalMain(rec: ContainerRecord, signal: NodeJS.Signals): Promise<void> {
    const clock = this.opts.clock
    const deadline = clock.now() + 2000
    let init = this.nsInit(rec)
    while (init === undefined && clock.now() < deadline && rec.exit === undefined) {
      await sleep(clock, 20)
      init = this.nsInit(rec)
    }
    if (init === undefined) return
    const procs = listProcs()
    const mains = procs.filter((p) => p.ppid === init).map((p) => p.pid)
    if (mains.length === 0 && !descendants(rec.pid, procs).includes(init)) return
    for (const pid of mains) signalPid(pid, signal)
  }

  protected override killTree(rec: ContainerRecord): void {
    // SIGKILL to the namespace's init takes every process in the namespace with it
    const init = this.nsInit(rec)
    if (init !== undefined && descendants(rec.pid).includes(init)) signalPid(init, 'SIGKILL')
    super.killTree(rec)
  }
}
