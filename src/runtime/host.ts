/** The real process edge: a detached spawner (commands run through the injected CommandRunner). */
import { spawn } from 'node:child_process'
import type { SpawnedProcess, Spawner, SpawnRequest } from './types.ts'

/** Spawn in its own session, fds wired as given; the agent does not keep it alive nor die with it. */
export const spawnDetached: Spawner = (req: SpawnRequest): SpawnedProcess => {
  const stdio: unknown[] = req.fds.map((fd, i) => (fd === null ? (i === 0 ? 'ignore' : 'ignore') : fd))
  for (const _ of req.inputs ?? []) stdio.push('pipe')
  const child = spawn(req.file, req.args, { env: req.env, stdio: stdio as any, detached: true, cwd: req.cwd })
  ;(req.inputs ?? []).forEach((data, i) => {
    const w = child.stdio[req.fds.length + i] as NodeJS.WritableStream | null | undefined
    if (!w) return
    const sock = w as NodeJS.WritableStream & { on(e: 'error', fn: () => void): void; unref?(): void; destroy(): void }
    sock.on('error', () => {})
    // The child's side stays open as long as the container's wrapper lives: close ours once the
    // data is handed over, and never let it keep the agent's event loop alive (SIGTERM must exit).
    sock.unref?.()
    w.end(data, () => sock.destroy())
  })
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('error', () => resolve({ code: 127, signal: null }))
    child.once('exit', (code, signal) => resolve({ code, signal }))
  })
  child.unref()
  if (child.pid === undefined) {
    // spawn failed synchronously (ENOENT etc.): report as an immediate exit with pid 0
    return { pid: 0, exit }
  }
  return { pid: child.pid, exit }
}
