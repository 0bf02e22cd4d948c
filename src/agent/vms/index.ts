export { type VmApiComponents, vmRoutes } from './api.ts'
export { consoleSocketPath, vmConsoleRoutes } from './console.ts'
export {
  guestCmdline,
  markerScanner,
  resolveBootFile,
  staleVmDirs,
  VM_CONTROLLER,
  VM_TUNABLES,
  VmController,
  type VmControllerComponents,
  type VmTunables,
  vmSpecHash,
} from './controller.ts'
export { authorizedKeyLines, guestNetworkConfig, noCloudFiles, prepareVmDisks, secretValueOf, type VmDiskStatus, type VmVolumeHooks } from './disks.ts'
export { ensureVmTap, guestMac, VM_BRIDGE, VM_TAP } from './tap.ts'
