/**
 * The `gvisor` runtime: runsc with the same OCI bundle as the `oci` runtime (oci.ts). The
 * container's system calls go to gVisor's Sentry, a kernel written in Go that runs as an ordinary
 * process under a seccomp filter of its own; files come through its gofer. What the container can
 * reach of the host kernel is what the Sentry itself may call, not the whole syscall table.
 *
 * Network: with the pod's network namespace, runsc starts its sandbox inside it and the Sentry
 * serves the container's sockets with the host kernel's stack of that namespace (`--network=host`:
 * the pod's own interfaces, IPv6 address and routes, nothing of the host's). gVisor's own stack
 * (`--network=sandbox`) is out of reach with the runsc Debian ships (20221219): it takes any
 * namespace whose /proc/sys/net/core/rmem_default exists for the host's, and kernels since 5.x show
 * that file in every namespace (docs/decisions.md). Without a pod namespace, `--network=none`:
 * loopback only, inside gVisor.
 */
import { mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { OrcError, wrapError } from '../model/index.ts'
import { detectRunscPlatform, type RunscPlatform } from './capabilities.ts'
import { type ExecLaunch, resolveBinary } from './exec.ts'
import { BundleRuntime } from './oci.ts'
import { isTmpfs, shmDirOf } from './shm.ts'
import { type ContainerRecord, DEFAULT_PATH } from './supervisor.ts'
import type { ContainerRunSpec, ExecProcess, ExecSpec } from './types.ts'

/**
 * Host threads the sandbox needs besides the container's own: the Sentry's Go runtime, the gofer
 * and the platform's stub processes all sit in the container's cgroup, and a sandbox that cannot
 * start a thread dies (runsc cannot start at all under pids.max 8; gVisor issue #2490). The pod's
 * pids limit is applied on top of this allowance.
 */
export const GVISOR_PIDS_ALLOWANCE = 128

/** One probe per runsc binary and process: the host does not change under a running agent. */
const probes = new Map<string, Promise<RunscPlatform>>()

export class GvisorRuntime extends BundleRuntime {
  readonly name = 'gvisor' as const
  private platform: RunscPlatform | undefined

  /**
   * No user namespace in the bundle: the Sentry keeps its own ids, the gofer serves files with the
   * host's, so a file the container alone must read belongs to its uid as such (as in the sandbox).
   */
  override hostIdsOf(spec: Pick<ContainerRunSpec, 'uid' | 'gid' | 'rootInside'>): { uid: number; gid: number } {
    if (spec.rootInside) return { uid: 0, gid: 0 }
    return { uid: spec.uid ?? this.opts.uid, gid: spec.gid ?? this.opts.gid }
  }

  /**
   * runsc keeps each container's whole spec in its state directory, the environment (Secrets)
   * included: that directory goes on the tmpfs (`/dev/shm/orc-gvisor-state-<hash of the state
   * dir>`, 0700) so it never reaches the disk; in the state dir only where there is no tmpfs.
   * It outlives an agent restart (adoption needs it), not a reboot (nor do the containers).
   */
  protected override stateRoot(): string {
    if (isTmpfs('/dev/shm')) {
      const dir = shmDirOf('orc-gvisor-state', this.opts.stateDir)
      try {
        mkdirSync(dir, { recursive: true, mode: 0o700 })
        return dir
      } catch {}
    }
    return super.stateRoot()
  }

  protected override async cleanup(rec: ContainerRecord): Promise<void> {
    await super.cleanup(rec)
    // The state directory goes with its last container (rmdir refuses while one is left; runsc
    // makes it again for the next).
    try {
      rmdirSync(shmDirOf('orc-gvisor-state', this.opts.stateDir))
    } catch {}
  }

  protected binary(): string {
    return this.opts.runscPath
  }

  protected globalArgs(spec?: ContainerRunSpec): string[] {
    const args = ['--root', this.stateRoot()]
    // Only `run` needs the sandbox's flags; state/kill/exec/delete read them from runsc's own state.
    if (spec) args.push(`--platform=${this.platform ?? 'ptrace'}`, `--network=${spec.netnsPath ? 'host' : 'none'}`)
    return args
  }

  /**
   * The pids limit bounds the whole sandbox (see GVISOR_PIDS_ALLOWANCE). The seccomp denylist goes:
   * the container's system calls are the Sentry's to serve and never reach the host kernel, and
   * this runsc ignores `linux.seccomp` (the Sentry runs under runsc's own host filter instead).
   * The user namespace goes too: runsc puts the Sentry in one of its own (as nobody) where it can,
   * and with a bundle user namespace it cannot set up host networking in a pod's namespace (its
   * chroot's /proc mount is refused).
   */
  protected override adjustConfig(config: Record<string, unknown>): Record<string, unknown> {
    const linux = config.linux as {
      resources?: { pids?: { limit: number } }
      seccomp?: unknown
      namespaces: { type: string }[]
      uidMappings?: unknown
      gidMappings?: unknown
    }
    const pids = linux.resources?.pids
    if (pids) pids.limit += GVISOR_PIDS_ALLOWANCE
    delete linux.seccomp
    linux.namespaces = linux.namespaces.filter((n) => n.type !== 'user')
    delete linux.uidMappings
    delete linux.gidMappings
    return config
  }

  private execSeq = 0

  /**
   * `runsc exec --process`: the command runs under the Sentry as the container's own process does
   * (user, working directory, environment, capabilities from the bundle's config.json) with the
   * extra environment; with a tty the process is marked `terminal` and runsc hands it the terminal
   * on its stdin (the tty wrapper's, exec.ts). The command is a task of the sandbox, not a host
   * child of the launcher: a kill goes to it through `runsc kill --pid`.
   */
  protected override async execLaunch(rec: ContainerRecord, spec: ExecSpec): Promise<Omit<ExecLaunch, 'tty' | 'rows' | 'cols'>> {
    const bundle = rec.extra?.bundle
    if (typeof bundle !== 'string') throw new OrcError('internal', `container ${rec.id} has no bundle recorded`)
    let base: { env?: string[] } & Record<string, unknown>
    try {
      base = (JSON.parse(readFileSync(join(bundle, 'config.json'), 'utf8')) as { process: typeof base }).process
    } catch (err) {
      throw wrapError(`read the bundle of container ${rec.id}`, err)
    }
    const extra = spec.env ?? {}
    const env = [...(base.env ?? []).filter((kv) => !Object.hasOwn(extra, kv.slice(0, kv.indexOf('=')))), ...Object.entries(extra).map(([k, v]) => `${k}=${v}`)]
    const n = ++this.execSeq
    // beside the config on the tmpfs: it holds the container's environment (Secrets) too
    const processFile = join(bundle, `exec-${process.pid}-${n}.json`)
    const pidFile = join(bundle, `exec-${process.pid}-${n}.pid`)
    writeFileSync(processFile, JSON.stringify({ ...base, terminal: spec.tty === true, args: spec.command, env }), { mode: 0o600 })
    const argv = [resolveBinary(this.binary()), ...this.globalArgs(), 'exec', '--process', processFile, '--internal-pid-file', pidFile, rec.id]
    return {
      argv,
      env: { PATH: process.env.PATH ?? DEFAULT_PATH },
      beforeKill: () => {
        let pid = ''
        try {
          pid = readFileSync(pidFile, 'utf8').trim()
        } catch {}
        if (/^[0-9]+$/.test(pid)) void this.cli(['kill', '--pid', pid, rec.id, 'KILL'])
      },
      afterExit: () => {
        rmSync(processFile, { force: true })
        rmSync(pidFile, { force: true })
      },
    }
  }

  /**
   * The connection is made from inside, by `nc` of the image (busybox has one). Without a pod
   * network namespace the container's loopback lives in gVisor's own stack, out of reach of a host
   * process; with one, a host client entering the namespace (what the other runtimes do) reaches
   * the port, but a request sent together with its end (what port-forward's stdin often is) was
   * answered with a bare close about half the time by this runsc's host networking, never from
   * inside (docs/decisions.md). An image without `sh` and `nc` cannot be port-forwarded under
   * gVisor; the error says so.
   */
  override async connectPort(id: string, port: number): Promise<ExecProcess> {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new OrcError('invalid', `port must be 1..65535, got ${port}`)
    const script = 'nc 127.0.0.1 "$1" 2>/dev/null || { echo "connect to port $1 failed (under gvisor port-forward needs nc in the image)" >&2; exit 1; }'
    return this.execStream(id, { command: ['/bin/sh', '-c', script, 'orc-port-forward', String(port)] })
  }

  /** The platform to run on: the configured one, or the first that works here (probed once). */
  protected override async preflight(): Promise<void> {
    if (this.platform) return
    const want = this.opts.runscPlatform
    if (want !== 'auto') {
      this.platform = want
      return
    }
    const key = this.opts.runscPath
    let probe = probes.get(key)
    if (!probe) {
      probe = detectRunscPlatform({ run: this.opts.run, runscPath: key }).then((r) => {
        if (!r.platform) throw new OrcError('unavailable', `gVisor cannot run here: ${r.detail}`, { tried: r.tried })
        this.log.info({ platform: r.platform, tried: r.tried }, 'gvisor platform chosen')
        return r.platform
      })
      probes.set(key, probe)
      // a failure is not remembered: runsc may be installed, or /dev/kvm fixed, while the agent runs
      probe.catch(() => probes.delete(key))
    }
    this.platform = await probe
  }
}
