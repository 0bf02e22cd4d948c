import { chmod, mkdir, open, readFile, rename } from 'node:fs/promises'
import { dirname } from 'node:path'
import { OrcError } from '../model/index.ts'

/** Write a file atomically (temp + fsync + rename) with the given mode (0600 for secrets). */
export async function writeFileAtomic(path: string, data: Uint8Array | string, mode = 0o600): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 })
  const tmp = `${path}.tmp-${process.pid}`
  const fh = await open(tmp, 'w', mode)
  try {
    await fh.writeFile(data)
    await fh.sync()
  } finally {
    await fh.close()
  }
  await chmod(tmp, mode)
  await rename(tmp, path)
}

/** Read a file, or undefined when it does not exist. */
export async function readFileIfExists(path: string): Promise<Buffer | undefined> {
  try {
    return await readFile(path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw new OrcError('unavailable', `read ${path}: ${(err as Error).message}`, { path }, err)
  }
}
