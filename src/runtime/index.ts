/** Pod runtimes: the public surface of src/runtime. */
export type {
  ContainerHandle, ContainerResources, ContainerRunSpec, ContainerState, ContainerStatus, EnforcedLimits, ExitListener,
  ExitStatus, RecoverResult, Runtime, StopOptions, Spawner, SpawnRequest, SpawnedProcess, ContainerFence,
} from './types.ts'
export type { RuntimeOptions, RuntimeOptionsInput, LogRotation } from './options.ts'
export { DEFAULT_LOG_ROTATION } from './options.ts'
export { SandboxRuntime, buildBwrapArgs, buildLaunchPrefix } from './sandbox.ts'
export { OciRuntime, buildOciConfig, MASKED_PATHS, READONLY_PATHS } from './oci.ts'
export { resolveOptions, containerArgv, decodeExitCode, wrapperScript } from './supervisor.ts'
export { detectCapabilities, type RuntimeCapabilities, type Capability, type LimitCapability } from './capabilities.ts'
export { detectCgroupLayout, type CgroupLayout } from './cgroups.ts'
export { resolveImage, writeOciLayout, packDirToTar, applyLayer, MOUNTPOINTS, type ResolvedImage, type ImageConfig, type LayoutImage } from './image.ts'
export { readTar, writeTar, type TarEntry } from './tar.ts'
export { followLog, readLogLines, listLogRevisions, logFilePath, logFilesOf, rotateIfNeeded, type ReadLogOptions, type FollowLogOptions } from './logs.ts'
export { buildSeccompBpf, ociSeccompProfile } from './seccomp.ts'
export { parseQuantity, resourcesFromLimits } from './quantity.ts'
export { FakeRuntime } from './fake.ts'
export { spawnDetached } from './host.ts'

import type { RuntimeOptionsInput } from './options.ts'
import type { Runtime } from './types.ts'
import { SandboxRuntime } from './sandbox.ts'
import { OciRuntime } from './oci.ts'

/** Construct the runtime a pod asks for (`spec.runtime`, default sandbox). */
export function createRuntime(kind: 'sandbox' | 'oci', opts: RuntimeOptionsInput): Runtime {
  return kind === 'oci' ? new OciRuntime(opts) : new SandboxRuntime(opts)
}
export { buildBusyboxRootfs, busyboxApplets, busyboxUnavailable, BUSYBOX_GROUP, BUSYBOX_PASSWD, BUSYBOX_PATH } from './busybox.ts'
