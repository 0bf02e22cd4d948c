/** The real process edges: a detached spawner and a command runner (execa). */
import { spawn } from 'node:child_process'
import { execa } from 'execa'
import type { CommandRunner, SpawnRequest, SpawnedProcess, Spawner } from './types.ts'

/** Spawn in its own session, fds wired as given; the agent does not keep it alive nor die with it. */
export const spawnDetached: Spawner = (req: SpawnRequest): SpawnedProcess => {
  const stdio = req.fds.map((fd, i) => (fd === null ? (i === 0 ? 'ignore' : 'ignore') : fd))
  const child = spawn(req.file, req.args, { env: req.env, stdio: stdio as any, detached: true, cwd: req.cwd })
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

export const runCommand: CommandRunner = async (file, args, opts = {}) => {
  const r = await execa(file, args, {
    input: opts.input,
    timeout: opts.timeoutMs ?? 30_000,
    reject: false,
    stripFinalNewline: false,
  })
  const exitCode = typeof r.exitCode === 'number' ? r.exitCode : 1
  if (opts.reject !== false && exitCode !== 0) {
    const err = new Error(`${file} ${args[0] ?? ''} exited ${exitCode}: ${String(r.stderr).trim().split('\n').pop() ?? ''}`)
    throw err
  }
  return { exitCode, stdout: String(r.stdout ?? ''), stderr: String(r.stderr ?? '') }
}
