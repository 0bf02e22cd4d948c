/** Shared helpers for the real-runtime tests (not a test file itself). */
import { execFileSync } from 'node:child_process'
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { busyboxMissing } from '../fixtures/busybox-image.ts'

export function whichMissing(bin: string): string | undefined {
  try {
    execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'ignore' })
    return undefined
  } catch {
    return `${bin} not installed`
  }
}

/** Reason to skip a real-runtime test, or undefined when it can run. */
export function skipReason(runtime: 'sandbox' | 'oci' | 'gvisor'): string | undefined {
  const bb = busyboxMissing()
  if (bb) return bb
  if (runtime === 'sandbox') return whichMissing('bwrap')
  const bin = runtime === 'oci' ? 'runc' : 'runsc'
  if (process.getuid?.() !== 0) return `${bin} needs root`
  return whichMissing(bin)
}

export async function waitFor<T>(what: string, fn: () => T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = fn()
    if (v !== undefined && v !== false) return v
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

export function tempDir(prefix: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  chmodSync(dir, 0o711) // the unprivileged container uid must reach images under it
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) }
}

/** A script that reports what the process can see and do, one `key=value` per line. */
export function probeScript(marker: string): string {
  return [
    'echo "uid=$(id -u)"',
    'echo "procs=$(ls /proc | grep -E "^[0-9]+$" | tr "\\n" " ")"',
    'if touch /bin/x 2>/dev/null; then echo rootwrite=yes; else echo rootwrite=no; fi',
    'if touch /tmp/ok 2>/dev/null; then echo tmpwrite=yes; else echo tmpwrite=no; fi',
    'echo "blockdevs=$(find /dev -type b 2>/dev/null | wc -l)"',
    'echo "chardevs=$(find /dev -type c 2>/dev/null | sort | tr "\\n" " ")"',
    `if cat ${marker} >/dev/null 2>&1; then echo marker=visible; else echo marker=hidden; fi`,
    'echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\\n" " ")"',
    'echo "capeff=$(grep CapEff /proc/self/status | cut -f2)"',
    'echo "nonewprivs=$(grep NoNewPrivs /proc/self/status | cut -f2)"',
    'echo "seccomp=$(grep "^Seccomp:" /proc/self/status | cut -f2)"',
    'echo "rootdirs=$(ls / | tr "\\n" " ")"',
  ].join('\n')
}

export function parseProbe(lines: string[]): Record<string, string> {
  const out: Record<string, string> = {}
  for (const l of lines) {
    const eq = l.indexOf('=')
    if (eq > 0) out[l.slice(0, eq)] = l.slice(eq + 1).trim()
  }
  return out
}

export function hostUidOf(pid: number): number | undefined {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Uid:'))
    return line ? Number(line.split(/\s+/)[1]) : undefined
  } catch {
    return undefined
  }
}
