/**
 * The sample image without a registry: a rootfs directory made from a static busybox binary
 * (Debian's busybox-static at /usr/bin/busybox): /bin/busybox, one symlink per applet, a minimal
 * /etc/passwd and /etc/group, and the mount points the runtimes need.
 */
import { execFileSync } from 'node:child_process'
import { chmodSync, copyFileSync, existsSync, mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { OrcError, wrapError } from '../model/index.ts'

export const BUSYBOX_PATH = '/usr/bin/busybox'

/** The image's /etc/passwd and /etc/group: root and the unprivileged user pods run as. */
export const BUSYBOX_PASSWD = 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n'
export const BUSYBOX_GROUP = 'root:x:0:\nnogroup:x:65534:\n'

/** The applets a busybox binary provides (one symlink each in the image). */
export function busyboxApplets(busybox = BUSYBOX_PATH): string[] {
  return execFileSync(busybox, ['--list'], { encoding: 'utf8' })
    .split('\n')
    .filter((a) => /^[a-z0-9_.\-[]+$/.test(a) && a !== 'busybox')
}

/** Why a busybox image cannot be built here, or undefined when it can. */
export function busyboxUnavailable(busybox = BUSYBOX_PATH): string | undefined {
  if (!existsSync(busybox)) return `${busybox} missing (apt-get install busybox-static)`
  try {
    const out = execFileSync('file', ['-L', busybox], { encoding: 'utf8' })
    if (/dynamically linked/.test(out)) return `${busybox} is dynamically linked (install busybox-static)`
  } catch {
    // no `file` command: try it anyway
  }
  return undefined
}

/**
 * Write a busybox rootfs to `dest` (replaced if present; built beside it and renamed into place,
 * so a pod never sees half an image). Returns the number of applets linked.
 */
export function buildBusyboxRootfs(dest: string, busybox = BUSYBOX_PATH): { applets: number } {
  const missing = busyboxUnavailable(busybox)
  if (missing) throw new OrcError('not_found', `build busybox image: ${missing}`, { busybox })
  const tmp = `${dest}.tmp-${process.pid}`
  try {
    rmSync(tmp, { recursive: true, force: true })
    mkdirSync(dirname(dest), { recursive: true, mode: 0o755 })
    for (const d of ['bin', 'etc', 'proc', 'dev', 'tmp', 'sys', 'run', 'root']) mkdirSync(join(tmp, d), { recursive: true, mode: 0o755 })
    chmodSync(tmp, 0o755)
    chmodSync(join(tmp, 'tmp'), 0o1777)
    copyFileSync(busybox, join(tmp, 'bin', 'busybox'))
    chmodSync(join(tmp, 'bin', 'busybox'), 0o755)
    const applets = busyboxApplets(busybox)
    for (const a of applets) symlinkSync('busybox', join(tmp, 'bin', a))
    writeFileSync(join(tmp, 'etc', 'passwd'), BUSYBOX_PASSWD, { mode: 0o644 })
    writeFileSync(join(tmp, 'etc', 'group'), BUSYBOX_GROUP, { mode: 0o644 })
    rmSync(dest, { recursive: true, force: true })
    renameSync(tmp, dest)
    return { applets: applets.length }
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true })
    throw wrapError(`build busybox image in ${dest}`, err)
  }
}
