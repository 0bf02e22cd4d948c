/**
 * Directories on a tmpfs for what must never reach the node's disk: runc bundles (their
 * config.json holds a container's environment) and the files of Config and Secret volumes.
 */
import { createHash } from 'node:crypto'
import { statfsSync } from 'node:fs'
import { join } from 'node:path'

/** statfs(2) f_type of a tmpfs. */
const TMPFS_MAGIC = 0x01021994

/** Whether `path` is on a tmpfs (false when it cannot be read). */
export function isTmpfs(path: string): boolean {
  try {
    return Number(statfsSync(path).type) === TMPFS_MAGIC
  } catch {
    return false
  }
}

/** `/dev/shm/<prefix>-<12 hex of sha256(owner)>`: one directory per agent data dir (or runtime state dir). */
export function shmDirOf(prefix: string, owner: string): string {
  return join('/dev/shm', `${prefix}-${createHash('sha256').update(owner).digest('hex').slice(0, 12)}`)
}
