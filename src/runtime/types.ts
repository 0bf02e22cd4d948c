/**
 * The pod runtime contract. A runtime starts one process tree per container from a local image,
 * confines it, captures its output into rotated log files and reports how it ended. Its state
 * lives in a directory on disk so that a restarted agent re-adopts the containers still running.
 */

/** Limits a caller may ask for; each is enforced only where the host can (see detectCapabilities). */
export interface ContainerResources {
  /** CPU in cores (0.5 = half a core), enforced as a CFS quota. */
  cpu?: number
  /** Memory ceiling in bytes (cgroup memory limit; RLIMIT_AS as a coarse fallback). */
  memoryBytes?: number
  /** Maximum number of processes/threads (cgroup pids; RLIMIT_NPROC as a fallback). */
  pids?: number
}

export interface ContainerRunSpec {
  /** Unique per runtime state dir: [a-z0-9][a-z0-9_.-]{0,127}. The agent uses `<pod uid>.<container>`. */
  id: string
  /**
   * Local image: a rootfs directory, an OCI image layout directory (has `oci-layout`/`index.json`)
   * or an OCI layout tar. Layouts are imported once into the runtime's image cache.
   */
  image: string
  /** Entry point; when empty, args alone are run (args[0] is the program). */
  command?: string[]
  args?: string[]
  env?: Record<string, string>
  /** Working directory inside the container (default `/`). */
  workingDir?: string
  resources?: ContainerResources
  /**
   * Limits the container gets when `resources` sets none (the Cluster's pod defaults): applied only
   * where a cgroup controller enforces them, never through a per-uid rlimit fallback.
   */
  defaultResources?: ContainerResources
  /** Directory for this container's log files (created if missing). */
  logDir: string
  /** Pod revision that this process runs; logs go to a per-revision file. Default 0. */
  revision?: number
  /**
   * Network namespace of the pod (e.g. `/run/netns/orc-<pod>`), joined with nsenter (needs root).
   * When absent the container gets a fresh namespace holding only loopback.
   */
  netnsPath?: string
  /**
   * Unprivileged uid/gid the process runs as, inside and (for the sandbox) outside its user
   * namespace. Default: the runtime's `uid`/`gid` option (65534, "nobody"). The agent may hand out
   * one uid per pod from a reserved range so pods cannot touch each other's processes by uid.
   */
  uid?: number
  gid?: number
  /**
   * Run as uid/gid 0 inside the container's user namespace (the pod asked for `root` and a
   * SecurityPolicy granted it). On the host the process keeps its unprivileged identity and gains
   * no capabilities: root inside owns only what the user namespace maps.
   */
  rootInside?: boolean
  /**
   * Host directories bound into the container (a pod's Config and Secret volumes: directories on
   * a tmpfs the agent filled). Mounted after the image, /tmp and /run, in this order; a missing
   * mount point is created in the image's rootfs (as runc does), never through a symlink.
   */
  mounts?: ContainerMount[]
  /** Hostname inside the container (UTS namespace). Default: the id, truncated to 63 chars. */
  hostname?: string
  /**
   * A watchdog beside the container stops it when the agent stops renewing a lease: the file holds
   * the last time (epoch seconds) the agent heard a quorum of its cluster. Once that time is
   * `termAfterSeconds` old the container gets SIGTERM, at `killAfterSeconds` SIGKILL (the whole
   * tree). A missing or unreadable lease counts as expired. This is how the `ha` pods of an agent
   * that died or was cut off stop before another node may start them (src/sched/fencing.ts).
   */
  fence?: ContainerFence
}

export interface ContainerMount {
  /** Absolute host path (a directory, or a file with `file`). */
  source: string
  /** Absolute path inside the container. */
  destination: string
  readOnly: boolean
  /** A single file (the pod's /etc/resolv.conf and /etc/hosts): its mount point is an empty file. */
  file?: boolean
}

export interface ContainerFence {
  leaseFile: string
  termAfterSeconds: number
  killAfterSeconds: number
}

export type ContainerState = 'running' | 'exited' | 'unknown'

export interface ExitStatus {
  /** Exit code when the process exited normally. */
  code: number | null
  /** Signal name when the process was killed by a signal. */
  signal: NodeJS.Signals | null
  /** When the runtime noticed the end (ms since epoch, from the injected clock). */
  finishedAt: number
}

export interface ContainerStatus {
  id: string
  state: ContainerState
  /** Host pid of the supervising process (stable identity together with startedAt). */
  pid: number
  startedAt: number
  /** Present once state is `exited`; `unknown` means it vanished without a recorded status. */
  exit?: ExitStatus
  revision: number
  image: string
  /** Which mechanism enforces each requested limit; absent = not enforced on this host. */
  enforced: EnforcedLimits
}

export interface EnforcedLimits {
  cpu?: 'cgroup-v1' | 'cgroup-v2' | 'oci'
  memoryBytes?: 'cgroup-v1' | 'cgroup-v2' | 'rlimit-as' | 'oci'
  pids?: 'cgroup-v1' | 'cgroup-v2' | 'rlimit-nproc' | 'oci'
}

export interface ContainerHandle {
  readonly id: string
  readonly pid: number
  readonly startedAt: number
  /** Resolves once when the container's process tree has ended (our child or an adopted one). */
  readonly exited: Promise<ExitStatus>
  status(): ContainerStatus
}

export interface StopOptions {
  /** Time between SIGTERM and SIGKILL. Default 10 s (pod terminationGracePeriodSeconds). */
  graceMs?: number
}

export interface RecoverResult {
  /** Containers still running from a previous agent; now observed again. */
  adopted: ContainerHandle[]
  /** Containers whose process is gone (or whose pid was reused); their last status. */
  gone: ContainerStatus[]
}

export type ExitListener = (id: string, exit: ExitStatus) => void

/** A command to run inside a running container (`orc exec`). */
export interface ExecSpec {
  /** argv; argv[0] is looked up in the container's PATH. */
  command: string[]
  /** Added to (and overriding) the environment the container's main process started with. */
  env?: Record<string, string>
  /** Run on a pseudo-terminal (stdout and stderr then arrive merged on stdout). */
  tty?: boolean
  /** Initial terminal size (tty only). */
  rows?: number
  cols?: number
}

/** A running exec: its streams and how it ended. */
export interface ExecProcess {
  /** The command's stdin; end() it to send EOF. */
  readonly stdin: NodeJS.WritableStream
  readonly stdout: NodeJS.ReadableStream
  /** Empty with a tty. */
  readonly stderr: NodeJS.ReadableStream
  /**
   * Resolves once the command ended (a signal death is `signal`). Output may still be on its way:
   * a caller that needs all of it waits for stdout and stderr to end too (runExec does).
   */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  /** Kill the command's whole process tree (default SIGKILL). */
  kill(signal?: NodeJS.Signals): void
}

export interface ExecRunOptions extends ExecSpec {
  /** Written to the command's stdin, then EOF (default: EOF at once). */
  stdin?: Buffer | string
  /** Kill the command after this long (default 60 s); the result then has `timedOut`. */
  timeoutMs?: number
  /** Keep at most this many bytes of each of stdout and stderr (default 4 MiB); the rest is dropped. */
  maxOutputBytes?: number
}

export interface ExecResult {
  /** Exit code; null when killed by a signal. */
  code: number | null
  signal: NodeJS.Signals | null
  stdout: Buffer
  stderr: Buffer
  timedOut: boolean
  /** True when output beyond maxOutputBytes was dropped. */
  truncated: boolean
}

export interface Runtime {
  readonly name: 'sandbox' | 'oci' | 'gvisor' | 'fake'
  /** Start a container. Fails with `conflict` if the id is already known (remove it first). */
  start(spec: ContainerRunSpec): Promise<ContainerHandle>
  /** SIGTERM the container's main process, wait graceMs, then SIGKILL the whole tree. Idempotent. */
  stop(id: string, opts?: StopOptions): Promise<ExitStatus>
  /** Forget an ended container: its state, cgroups and runtime bookkeeping (logs are kept). */
  remove(id: string): Promise<void>
  status(id: string): ContainerStatus | undefined
  list(): ContainerStatus[]
  /** Re-read the state dir after an agent restart: adopt live containers, report the gone ones. */
  recover(): Promise<RecoverResult>
  /** Called once per container end; returns an unsubscribe function. */
  onExit(listener: ExitListener): () => void
  /** Stop watching (timers, log rotation); containers keep running. */
  close(): Promise<void>
  /**
   * The host uid/gid a container started with this identity runs as: files it alone must read
   * (its Secret volumes) are owned by them.
   */
  hostIdsOf(spec: Pick<ContainerRunSpec, 'uid' | 'gid' | 'rootInside'>): { uid: number; gid: number }
  /**
   * Start `spec.command` inside running container `id`: its namespaces, root, identity, cgroups and
   * environment. Fails with `not_found` for an unknown id, `conflict` when it is not running.
   */
  execStream(id: string, spec: ExecSpec): Promise<ExecProcess>
  /** execStream to completion: argv in, exit code and output out, bounded by a timeout. */
  exec(id: string, opts: ExecRunOptions): Promise<ExecResult>
  /**
   * A TCP connection to `port` on localhost inside the container's network namespace (`orc
   * port-forward`): what is written to stdin is sent, what the port answers comes out of stdout;
   * ending stdin half-closes the connection; `exited` resolves when it closed (code 1 and a line on
   * stderr when it could not connect).
   */
  connectPort(id: string, port: number): Promise<ExecProcess>
  /** CPU and memory the running container uses, from its cgroups; undefined when it is not running. */
  usage(id: string): Promise<ContainerUsage | undefined>
}

export interface ContainerUsage {
  /** CPU time since the container started, in seconds (null: this host gives it no accounting cgroup). */
  cpuSeconds: number | null
  /** Working set in bytes (memory in use minus inactive file cache; null: no memory cgroup). */
  memoryBytes: number | null
}

/** A spawned child as the runtime needs it; injected so unit tests need no processes. */
export interface SpawnedProcess {
  pid: number
  /** Resolves when the child exits, with its raw status. */
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

export interface SpawnRequest {
  file: string
  args: string[]
  env: Record<string, string>
  /** File descriptors for the child's fds 0.. (null = /dev/null for 0, ignored otherwise). */
  fds: (number | null)[]
  /**
   * Pipes the child reads at the next fds after `fds` (in order): each is written with its data and
   * closed. What must not show in the child's argv (`ps`, /proc/PID/cmdline are world-readable)
   * goes here, e.g. a container's environment (Secrets).
   */
  inputs?: Buffer[]
  cwd?: string
}

/** Starts a detached child (own session) that survives the agent. */
export type Spawner = (req: SpawnRequest) => SpawnedProcess
