/**
 * Watches every process's /proc/PID/cmdline while something runs: what `ps` shows to every user
 * of the machine. Tests use it to show a secret never appears there.
 */
import { readdirSync, readFileSync } from 'node:fs'

export interface CmdlineWatch {
  /** Stop watching; the command lines that contained the secret, and every one seen that matched `seen`. */
  stop(): Promise<{ leaks: string[]; seen: string[] }>
}

function cmdlines(): string[] {
  const out: string[] = []
  for (const pid of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(pid)) continue
    try {
      out.push(readFileSync(`/proc/${pid}/cmdline`).toString('utf8').split('\0').join(' ').trim())
    } catch {
      // the process ended meanwhile
    }
  }
  return out
}

/** Scan /proc about every 10 ms until stop(). `seen` picks the command lines to report (proof the watch saw the process). */
export function watchCmdlines(secret: string, seen: RegExp): CmdlineWatch {
  const leaks = new Set<string>()
  const matched = new Set<string>()
  let running = true
  const loop = (async () => {
    while (running) {
      for (const c of cmdlines()) {
        if (c.includes(secret)) leaks.add(c)
        if (seen.test(c)) matched.add(c)
      }
      await new Promise((r) => setTimeout(r, 10))
    }
  })()
  return {
    async stop() {
      running = false
      await loop
      return { leaks: [...leaks], seen: [...matched] }
    },
  }
}
