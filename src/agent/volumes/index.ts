/** Volumes on this node: pod volume sources, persistent Volumes, drivers, snapshots (docs/storage.md). */

export { admitVolumeChange, admitVolumeDelete, podsUsingVolume } from './admit.ts'
export { lastDeleted, type VolumeApiComponents, volumeRoutes } from './api.ts'
export { type DriverOp, type DriverRequest, ExecDrivers } from './driver.ts'
export { formatBytes, type LocalVolumeInfo, LocalVolumes } from './local.ts'
export { DEFAULT_VOLUME_GRACE_MS, VOLUME_CONTROLLER, VolumeService, type VolumeServiceComponents } from './service.ts'
