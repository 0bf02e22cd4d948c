/**
 * The `oci` runtime: runc with a bundle generated here. The container runs as the unprivileged
 * uid (65534 by default) inside a user namespace that maps container ids 0..65535 onto host ids
 * `ociHostUidBase + n`, so it is non-root inside and out; new pid, net (or the pod's), ipc, uts,
 * mount and cgroup namespaces; read-only rootfs with a tmpfs /tmp; no capabilities;
 * noNewPrivileges; Docker's masked and read-only /proc paths; the default seccomp denylist.
 * Needs root (runc as root creates the namespaces and cgroups).
 *
 * runc runs in the foreground (`runc run`) under the wrapper: it forwards signals, reports the
 * exit status and removes its state when the container ends.
 */
import { mkdirSync, rmdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { OrcError } from '../model/index.ts'
import { type CgroupLayout, cgroupDirsOfPid, removeRuntimeParents } from './cgroups.ts'
import { type ExecLaunch, resolveBinary } from './exec.ts'
import { ensureMountPoint, type ResolvedImage } from './image.ts'
import { ociSeccompProfile } from './seccomp.ts'
import { isTmpfs, shmDirOf } from './shm.ts'
import { type ContainerRecord, containerArgv, containerEnv, type LaunchPlan, type PlanContext, SupervisedRuntime } from './supervisor.ts'
import type { ContainerRunSpec, EnforcedLimits, ExecSpec } from './types.ts'

/** statfs(2) f_type of a tmpfs. */

export const MASKED_PATHS = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
]
export const READONLY_PATHS = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger']

export interface OciConfigInput {
  spec: ContainerRunSpec
  image: ResolvedImage
  uid: number
  gid: number
  hostIdBase: number
  seccomp: boolean
  /** Controllers runc may use (relative cgroupsPath is placed under runc's own cgroup). */
  layout: CgroupLayout
  /** Relative cgroup parent, e.g. `orc-oci-1a2b3c4d`. */
  cgroupName: string
}

/** Generate the OCI runtime config.json for a container (pure). */
export function buildOciConfig(input: OciConfigInput): { config: Record<string, unknown>; enforced: EnforcedLimits } {
  const { spec, image, uid, gid } = input
  if (uid < 1 || uid > 65535 || gid < 1 || gid > 65535) throw new OrcError('invalid', `oci runtime needs a non-root uid/gid in 1..65535, got ${uid}:${gid}`)
  const namespaces: { type: string; path?: string }[] = [
    { type: 'pid' },
    { type: 'ipc' },
    { type: 'uts' },
    { type: 'mount' },
    { type: 'user' },
    { type: 'cgroup' },
    spec.netnsPath ? { type: 'network', path: spec.netnsPath } : { type: 'network' },
  ]
  // Defaults too: runc enforces only through cgroups (no rlimit fallback to avoid).
  const res = { ...spec.defaultResources, ...spec.resources }
  const enforced: EnforcedLimits = {}
  const resources: Record<string, unknown> = { devices: [{ allow: false, access: 'rwm' }] }
  if (res.memoryBytes !== undefined && input.layout.places.memory) {
    resources.memory = { limit: Math.floor(res.memoryBytes) }
    enforced.memoryBytes = 'oci'
  }
  if (res.cpu !== undefined && input.layout.places.cpu) {
    resources.cpu = { quota: Math.max(1000, Math.round(res.cpu * 100_000)), period: 100_000 }
    enforced.cpu = 'oci'
  }
  if (res.pids !== undefined && input.layout.places.pids) {
    resources.pids = { limit: res.pids }
    enforced.pids = 'oci'
  }
  const env = Object.entries(containerEnv(spec, image)).map(([k, v]) => `${k}=${v}`)
  const config = {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      // rootInside: container id 0, which the user namespace maps to an unprivileged host id
      user: spec.rootInside ? { uid: 0, gid: 0, additionalGids: [] } : { uid, gid, additionalGids: [] },
      args: containerArgv(spec, image),
      env,
      cwd: spec.workingDir ?? image.config.workingDir ?? '/',
      capabilities: { bounding: [], effective: [], inheritable: [], permitted: [], ambient: [] },
      rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1024, soft: 1024 }],
      noNewPrivileges: true,
    },
    root: { path: image.rootfs, readonly: true },
    hostname: (spec.hostname ?? spec.id).slice(0, 63),
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      // sysfs can only be mounted by the owner of the network namespace: a pod network namespace
      // belongs to the host's user namespace, so such a container gets an empty read-only /sys.
      spec.netnsPath
        ? { destination: '/sys', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'noexec', 'nodev', 'ro', 'size=4k'] }
        : { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] },
      ...(spec.mounts ?? []).map((m) => ({
        destination: m.destination,
        type: 'bind',
        source: m.source,
        options: ['rbind', 'nosuid', 'nodev', 'noexec', m.readOnly ? 'ro' : 'rw'],
      })),
    ],
    linux: {
      uidMappings: [{ containerID: 0, hostID: input.hostIdBase, size: 65536 }],
      gidMappings: [{ containerID: 0, hostID: input.hostIdBase, size: 65536 }],
      namespaces,
      // relative: runc places it under its own cgroup, per controller (nested under the agent)
      cgroupsPath: `${input.cgroupName}/${spec.id}`,
      resources,
      maskedPaths: MASKED_PATHS,
      readonlyPaths: READONLY_PATHS,
      ...(input.seccomp ? { seccomp: ociSeccompProfile() } : {}),
    },
  }
  return { config, enforced }
}

/**
 * What runc and runsc share: both take an OCI bundle (config.json + rootfs) and the same
 * `run/state/kill/exec/delete` commands; a subclass names the binary, its global flags and how the
 * generated config is adjusted for it.
 */
export abstract class BundleRuntime extends SupervisedRuntime {
  abstract override readonly name: 'oci' | 'gvisor'
  /** The runtime binary (runc, runsc). */
  protected abstract binary(): string
  /** Flags before the subcommand (`--root`, and for runsc its platform and network). */
  protected abstract globalArgs(spec?: ContainerRunSpec): string[]
  /** Adjust the generated config.json for this runtime (default: as generated). */
  protected adjustConfig(config: Record<string, unknown>, _spec: ContainerRunSpec): Record<string, unknown> {
    return config
  }
  /** Checked before a container is planned: throws a clear error when the runtime cannot work here. */
  protected async preflight(): Promise<void> {}

  /** The runtime binary's own state (`--root`). */
  protected stateRoot(): string {
    return join(this.opts.stateDir, this.name === 'oci' ? 'runc' : this.name)
  }

  /** Run a subcommand of the runtime binary (global flags first). */
  protected cli(args: string[]) {
    return this.opts.run(this.binary(), [...this.globalArgs(), ...args])
  }

  hostIdsOf(spec: Pick<ContainerRunSpec, 'uid' | 'gid' | 'rootInside'>): { uid: number; gid: number } {
    const base = this.opts.ociHostUidBase
    if (spec.rootInside) return { uid: base, gid: base }
    return { uid: base + (spec.uid ?? this.opts.uid), gid: base + (spec.gid ?? this.opts.gid) }
  }

  protected async plan(spec: ContainerRunSpec, ctx: PlanContext): Promise<LaunchPlan> {
    if (process.getuid?.() !== 0) throw new OrcError('forbidden', `the ${this.name} runtime needs root`)
    await this.preflight()
    // runc inside the user namespace may not create a missing mount point in the root-owned image.
    for (const m of spec.mounts ?? []) ensureMountPoint(ctx.image.rootfs, m.destination, m.file === true)
    const bundle = this.bundleDir(spec.id, ctx.dir)
    rmSync(bundle, { recursive: true, force: true })
    mkdirSync(bundle, { recursive: true, mode: 0o700 })
    const { config, enforced } = buildOciConfig({
      spec,
      image: ctx.image,
      uid: ctx.uid,
      gid: ctx.gid,
      hostIdBase: this.opts.ociHostUidBase,
      seccomp: this.opts.seccomp,
      layout: ctx.layout,
      cgroupName: this.cgroupName(),
    })
    writeFileSync(join(bundle, 'config.json'), JSON.stringify(this.adjustConfig(config, spec), null, 2), { mode: 0o600 })
    mkdirSync(this.stateRoot(), { recursive: true })
    return {
      file: this.binary(),
      args: [...this.globalArgs(spec), 'run', '--bundle', bundle, spec.id],
      extraFds: [],
      cgroupProcs: [],
      cgroupDirs: [],
      enforced,
      // runsc exec does not take the container's user from its config (runc exec does)
      extra: { bundle, user: (config.process as { user: { uid: number; gid: number } }).user },
    }
  }

  /**
   * `runc exec`: runc builds the process from the container's own config (environment, user,
   * capabilities, no_new_privs, seccomp, cgroups) and joins its namespaces. With a tty runc wants a
   * terminal on its stdin, which the tty wrapper (exec.ts, `script`) provides.
   */
  protected async execLaunch(rec: ContainerRecord, spec: ExecSpec): Promise<Omit<ExecLaunch, 'tty' | 'rows' | 'cols'>> {
    const extra = Object.entries(spec.env ?? {}).flatMap(([k, v]) => ['--env', `${k}=${v}`])
    const argv = [resolveBinary(this.binary()), ...this.globalArgs(), 'exec', ...(spec.tty ? ['--tty'] : []), ...extra, '--', rec.id, ...spec.command]
    return { argv, env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' } }
  }

  protected override async accountingDirs(rec: ContainerRecord): Promise<string[]> {
    const pid = await this.namespacePid(rec)
    return pid === undefined ? [] : cgroupDirsOfPid(pid)
  }

  /** The container's pid 1 as runc records it (`runc state`). */
  protected async namespacePid(rec: ContainerRecord): Promise<number | undefined> {
    try {
      const r = await this.cli(['state', rec.id])
      const pid = (JSON.parse(r.stdout) as { pid?: number; status?: string }).pid
      return typeof pid === 'number' && pid > 0 ? pid : undefined
    } catch {
      return undefined
    }
  }

  protected async signalMain(rec: ContainerRecord, signal: NodeJS.Signals): Promise<void> {
    // The command is pid 1 of its namespace: like Docker, a SIGTERM it does not handle is ignored
    // and the grace period ends in SIGKILL.
    await this.cli(['kill', rec.id, signal.replace(/^SIG/, '')])
  }

  protected override killTree(rec: ContainerRecord): void {
    void this.cli(['kill', '--all', rec.id, 'KILL'])
    super.killTree(rec)
  }

  /**
   * The bundle's config.json holds the container's environment (Secrets among them): it goes on a
   * tmpfs (`/dev/shm/orc-oci-<hash of the state dir>/<id>`, 0700) so it never reaches the disk;
   * in the container's state dir only where there is no tmpfs.
   */
  private shmBase(): string {
    return shmDirOf(`orc-${this.name}`, this.opts.stateDir)
  }

  private bundleDir(id: string, stateDir: string): string {
    const base = this.shmBase()
    if (isTmpfs('/dev/shm')) {
      try {
        mkdirSync(base, { recursive: true, mode: 0o700 })
        return join(base, id)
      } catch {}
    }
    return join(stateDir, 'bundle')
  }

  override async remove(id: string): Promise<void> {
    await super.remove(id)
    // A container that ended while no agent watched had no cleanup: its bundle goes now.
    this.removeBundle(id)
  }

  private removeBundle(id: string): void {
    rmSync(join(this.shmBase(), id), { recursive: true, force: true })
    // The runtime's directory goes with its last bundle (rmdir refuses while one is left).
    try {
      rmdirSync(this.shmBase())
    } catch {}
  }

  protected override async cleanup(rec: ContainerRecord): Promise<void> {
    await this.cli(['delete', '--force', rec.id])
    this.removeBundle(rec.id)
    removeRuntimeParents(this.cgroupName())
  }
}

export class OciRuntime extends BundleRuntime {
  readonly name = 'oci' as const

  protected binary(): string {
    return this.opts.runcPath
  }

  protected globalArgs(): string[] {
    return ['--root', this.stateRoot()]
  }
}
