/**
 * The files behind a VM's disks (docs/runtimes.md, "Disks"): a sparse raw file for an empty disk, a
 * qcow2 overlay over an image of the node's stores (the image itself is never written), and the
 * cloud-init NoCloud seed (a small vfat image labelled CIDATA, made with dosfstools' mkfs.vfat and
 * mtools' mcopy: no root, no loop mount). `qemu-img` comes from Debian qemu-utils.
 */
import { chmodSync, closeSync, existsSync, fstatSync, ftruncateSync, mkdirSync, openSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { CommandRunner } from '../effects/index.ts'
import { OrcError } from '../model/index.ts'

export type DiskFormat = 'raw' | 'qcow2'

async function must(run: CommandRunner, cmd: string, args: string[], what: string, env?: Record<string, string>): Promise<string> {
  const r = await run(cmd, args, { timeoutMs: 60_000, ...(env ? { env } : {}) }).catch((err: Error) => ({ exitCode: -1, stdout: '', stderr: err.message }))
  if (r.exitCode !== 0) {
    const hint = r.exitCode === -1 && /ENOENT|not found/.test(r.stderr) ? ` (is ${cmd} installed? scripts/setup.sh)` : ''
    throw new OrcError('unavailable', `${what}: ${cmd} exited ${r.exitCode}: ${(r.stderr || r.stdout).trim().split('\n').slice(-2).join(' ')}${hint}`)
  }
  return r.stdout
}

/**
 * A sparse raw file of `bytes` (mode 0600): made once, kept afterwards with what the guest wrote. A
 * larger size grows it (the guest sees the new size at its next boot); a smaller one is refused.
 */
export function ensureEmptyDisk(path: string, bytes: number): { created: boolean; grew: boolean } {
  const fd = openSync(path, existsSync(path) ? 'r+' : 'wx+', 0o600)
  try {
    const size = fstatSync(fd).size
    const created = size === 0
    if (size > bytes)
      throw new OrcError('invalid', `disk ${path} holds ${size} bytes: an empty disk cannot shrink to ${bytes} (make a new disk, or delete the VM)`)
    if (size < bytes) ftruncateSync(fd, bytes)
    return { created, grew: !created && size < bytes }
  } finally {
    closeSync(fd)
  }
}

interface ImgInfo {
  format?: string
  'backing-filename'?: string
  'full-backing-filename'?: string
  'format-specific'?: { data?: { 'data-file'?: string } }
}

async function imgInfo(run: CommandRunner, path: string): Promise<ImgInfo> {
  const out = await must(run, 'qemu-img', ['info', '--output=json', path], `read disk image ${path}`)
  try {
    return JSON.parse(out) as ImgInfo
  } catch {
    throw new OrcError('unavailable', `read disk image ${path}: qemu-img info gave no JSON`)
  }
}

/**
 * The format of an image of the node's stores: raw or qcow2 only, and never a qcow2 that names a
 * backing or data file of its own (it would make qemu, running as root, open any host file for the guest).
 */
export async function diskImageFormat(run: CommandRunner, image: string): Promise<DiskFormat> {
  const info = await imgInfo(run, image)
  if (info.format !== 'raw' && info.format !== 'qcow2')
    throw new OrcError('invalid', `disk image ${image} is ${info.format ?? 'of an unknown format'}: raw or qcow2 only`)
  if (info['backing-filename'] !== undefined || info['format-specific']?.data?.['data-file'] !== undefined)
    throw new OrcError('forbidden', `disk image ${image} names another file (a backing or data file): refused, the guest would read it`)
  return info.format
}

/**
 * A qcow2 overlay (mode 0600) over `image` (its format `format`): the guest's writes go to the
 * overlay, the image is only read. Kept while it is over the same image (the guest's writes survive a
 * restart); made afresh over another image. Returns whether it was (re)made.
 */
export async function ensureImageOverlay(run: CommandRunner, overlay: string, image: string, format: DiskFormat): Promise<boolean> {
  if (existsSync(overlay)) {
    const info = await imgInfo(run, overlay).catch(() => undefined)
    if (info?.format === 'qcow2' && info['backing-filename'] === image) return false
    rmSync(overlay, { force: true })
  }
  const tmp = `${overlay}.new`
  rmSync(tmp, { force: true })
  await must(run, 'qemu-img', ['create', '-q', '-f', 'qcow2', '-b', image, '-F', format, tmp], `make the overlay of ${image}`)
  chmodSync(tmp, 0o600)
  renameSync(tmp, overlay)
  return true
}

/**
 * The cloud-init NoCloud seed: a vfat image labelled CIDATA holding `meta-data`, `user-data` (and `network-config`),
 * written to `file` (mode 0600). The clear files exist only in a 0700 directory beside it while it is made.
 */
export async function buildNoCloudSeed(run: CommandRunner, file: string, files: { metaData: string; userData: string; networkConfig?: string }): Promise<void> {
  const work = `${file}.d`
  rmSync(work, { recursive: true, force: true })
  mkdirSync(work, { mode: 0o700 })
  const tmp = `${file}.new`
  try {
    writeFileSync(join(work, 'meta-data'), files.metaData, { mode: 0o600 })
    writeFileSync(join(work, 'user-data'), files.userData, { mode: 0o600 })
    const names = ['meta-data', 'user-data']
    if (files.networkConfig !== undefined) {
      writeFileSync(join(work, 'network-config'), files.networkConfig, { mode: 0o600 })
      names.push('network-config')
    }
    rmSync(tmp, { force: true })
    // FAT12 of at least 1 MiB; the user-data is at most 64 KiB.
    const kib = Math.max(1024, Math.ceil((files.metaData.length + files.userData.length + (files.networkConfig?.length ?? 0)) / 1024) * 2 + 256)
    await must(run, 'mkfs.vfat', ['-n', 'CIDATA', '-C', tmp, String(kib)], 'make the cloud-init seed')
    chmodSync(tmp, 0o600)
    await must(run, 'mcopy', ['-o', '-i', tmp, ...names.map((n) => join(work, n)), '::'], 'copy the cloud-init files into the seed', {
      MTOOLS_SKIP_CHECK: '1',
    })
    renameSync(tmp, file)
  } finally {
    rmSync(work, { recursive: true, force: true })
    rmSync(tmp, { force: true })
  }
}
