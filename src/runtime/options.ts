import type { Logger } from 'pino'
import type { Clock, CommandRunner } from '../effects/index.ts'
import type { Spawner } from './types.ts'

export interface LogRotation {
  /** Rotate the live file once it exceeds this size. Default 1 MiB. */
  maxBytes: number
  /** Files kept per revision, the live one included (`N.log`, `N.log.1` … ). Default 3. */
  maxFiles: number
  /** How often sizes are checked besides inotify wake-ups. Default 1000 ms. */
  checkIntervalMs: number
}

export interface RuntimeOptions {
  /** Per-runtime state: one directory per container with its record and exit status. */
  stateDir: string
  /** Where imported OCI layouts are unpacked. Default `<stateDir>/images`. */
  imageCacheDir?: string
  /**
   * Default unprivileged identity of container processes. 65534 ("nobody") is the conventional
   * unprivileged uid; the sandbox runs as it both inside its user namespace and on the host (the
   * agent drops from root with setpriv before bwrap), so even an escape lands in an unprivileged
   * account. The oci runtime maps it through a user namespace to `ociHostUidBase + uid`.
   */
  uid: number
  gid: number
  /** First host uid of the 65536-id range the oci runtime maps container ids 0..65535 onto. */
  ociHostUidBase: number
  logs: LogRotation
  /** Poll period for the liveness of adopted (non-child) processes. */
  pollIntervalMs: number
  /** Apply the built-in seccomp denylist (sandbox: bwrap --seccomp; oci: in config.json). */
  seccomp: boolean
  bwrapPath: string
  runcPath: string
  runscPath: string
  /**
   * gVisor platform (how the Sentry intercepts the container's system calls): `ptrace` works on any
   * kernel that allows ptrace, `kvm` needs a usable /dev/kvm, `systrap` a runsc from 2023 on.
   * `auto` (default) probes once, KVM first where /dev/kvm exists (capabilities.ts).
   */
  runscPlatform: 'auto' | 'ptrace' | 'kvm' | 'systrap'
  shPath: string
  setprivPath: string
  nsenterPath: string
  prlimitPath: string
  clock: Clock
  spawn: Spawner
  run: CommandRunner
  logger: Logger
}

export const DEFAULT_LOG_ROTATION: LogRotation = { maxBytes: 1 << 20, maxFiles: 3, checkIntervalMs: 1000 }

export type RuntimeOptionsInput = Pick<RuntimeOptions, 'stateDir'> &
  Partial<Omit<RuntimeOptions, 'logs'>> & {
    logs?: Partial<LogRotation>
  }
