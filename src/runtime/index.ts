/** Pod runtimes: the public surface of src/runtime. */

export {
  type Capability,
  detectCapabilities,
  detectRunscPlatform,
  type LimitCapability,
  type PlatformProbe,
  type RunscPlatform,
  type RunscPlatformResult,
  type RuntimeCapabilities,
} from './capabilities.ts'
export { type CgroupLayout, type CgroupUsage, detectCgroupLayout, readCgroupUsage } from './cgroups.ts'
export { DEFAULT_EXEC_OUTPUT_BYTES, DEFAULT_EXEC_TIMEOUT_MS, endOf, runExec, shellQuote } from './exec.ts'
export { type FakeExecHandler, FakeRuntime } from './fake.ts'
export { GVISOR_PIDS_ALLOWANCE, GvisorRuntime } from './gvisor.ts'
export { spawnDetached } from './host.ts'
export {
  applyLayer,
  choosePlatformManifest,
  ensureMountPoint,
  hostPlatform,
  type ImageConfig,
  type ImageDescriptor,
  type ImagePlatform,
  isIndexMediaType,
  type LayoutImage,
  layerTar,
  MOUNTPOINTS,
  packDirToTar,
  type ResolvedImage,
  resolveImage,
  unpackManifest,
  writeOciLayout,
} from './image.ts'
export {
  type FollowLogOptions,
  followLog,
  listLogRevisions,
  logFilePath,
  logFilesOf,
  type ReadLogOptions,
  readFileFrom,
  readLogLines,
  rotateIfNeeded,
} from './logs.ts'
export { BundleRuntime, buildOciConfig, MASKED_PATHS, OciRuntime, READONLY_PATHS } from './oci.ts'
export type { LogRotation, RuntimeOptions, RuntimeOptionsInput } from './options.ts'
export { DEFAULT_LOG_ROTATION } from './options.ts'
export { containerNetnsOf, type NetProbeResult, type NetProbeSpec, probeInNetns } from './probe.ts'
export {
  MAX_UNIX_PATH,
  newestBootKernel,
  QEMU_EXTRA_TASKS,
  QEMU_OVERHEAD_MIB,
  type QemuOptions,
  QemuRuntime,
  qemuArgs,
  qemuLimits,
  qmpSession,
  TCG_TB_MIB,
  type VmAccel,
  type VmCgroup,
  type VmDrive,
  type VmHandle,
  type VmLimits,
  type VmRecord,
  type VmRunSpec,
  type VmStopResult,
} from './qemu.ts'
export { QmpClient, type QmpEvent } from './qmp.ts'
export { parseQuantity, resourcesFromLimits } from './quantity.ts'
export { buildBwrapArgs, buildLaunchPrefix, bwrapEnvArgs, SandboxRuntime } from './sandbox.ts'
export { buildSeccompBpf, ociSeccompProfile } from './seccomp.ts'
export { isTmpfs, shmDirOf } from './shm.ts'
export { containerArgv, decodeExitCode, resolveOptions, wrapperScript } from './supervisor.ts'
export { readTar, type TarEntry, writeTar } from './tar.ts'
export type {
  ContainerFence,
  ContainerHandle,
  ContainerMount,
  ContainerResources,
  ContainerRunSpec,
  ContainerState,
  ContainerStatus,
  ContainerUsage,
  EnforcedLimits,
  ExecProcess,
  ExecResult,
  ExecRunOptions,
  ExecSpec,
  ExitListener,
  ExitStatus,
  RecoverResult,
  Runtime,
  SpawnedProcess,
  Spawner,
  SpawnRequest,
  StopOptions,
} from './types.ts'
export { buildNoCloudSeed, type DiskFormat, diskImageFormat, ensureEmptyDisk, ensureImageOverlay } from './vm-disks.ts'

import { POD_RUNTIMES, type PodRuntime } from '../model/index.ts'
import { GvisorRuntime } from './gvisor.ts'
import { OciRuntime } from './oci.ts'
import type { RuntimeOptionsInput } from './options.ts'
import { SandboxRuntime } from './sandbox.ts'
import type { Runtime } from './types.ts'

/** The runtimes a pod may ask for (`spec.runtime`). */
export const RUNTIME_KINDS = POD_RUNTIMES
export type RuntimeKind = PodRuntime

/** Construct the runtime a pod asks for (`spec.runtime`, default sandbox). */
export function createRuntime(kind: RuntimeKind, opts: RuntimeOptionsInput): Runtime {
  if (kind === 'oci') return new OciRuntime(opts)
  if (kind === 'gvisor') return new GvisorRuntime(opts)
  return new SandboxRuntime(opts)
}
export { BUSYBOX_GROUP, BUSYBOX_PASSWD, BUSYBOX_PATH, buildBusyboxRootfs, busyboxApplets, busyboxUnavailable } from './busybox.ts'
