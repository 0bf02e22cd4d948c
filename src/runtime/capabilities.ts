/**
 * What this host can do for pods, and why not where it cannot. The agent reports this on its Node
 * object and refuses (or warns about) what a pod asks for but the host cannot enforce.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type CommandRunner, execaRunner } from '../effects/index.ts'
import { type CgroupLayout, detectCgroupLayout } from './cgroups.ts'

export interface Capability {
  ok: boolean
  /** Why not, or how (one line). */
  detail: string
}

export interface LimitCapability extends Capability {
  via?: 'cgroup-v1' | 'cgroup-v2' | 'rlimit-nproc' | 'rlimit-as'
}

export interface RuntimeCapabilities {
  root: boolean
  sandbox: Capability & { version?: string }
  oci: Capability & { version?: string }
  /** runsc, and the gVisor platform that works on this host (ok: a container started on it). */
  gvisor: Capability & { version?: string; platform?: RunscPlatform; tried?: PlatformProbe[] }
  seccomp: Capability
  /** Joining a pod network namespace (nsenter, root). */
  podNetns: Capability
  limits: { cpu: LimitCapability; memory: LimitCapability; pids: LimitCapability }
}

export interface DetectOptions {
  run?: CommandRunner
  bwrapPath?: string
  runcPath?: string
  runscPath?: string
  setprivPath?: string
  prlimitPath?: string
  nsenterPath?: string
  cgroupRoot?: string
  uid?: number
}

async function version(run: CommandRunner, file: string): Promise<{ ok: boolean; text: string }> {
  try {
    const r = await run(file, ['--version'], { timeoutMs: 5000 })
    const line = (r.stdout || r.stderr).split('\n')[0]?.trim() ?? ''
    // 127: the runner could not start it (the runner resolves rather than throws).
    return { ok: r.exitCode === 0, text: r.exitCode === 0 ? line : r.exitCode === 127 ? `${file} not found` : `${file} --version exited ${r.exitCode}` }
  } catch (_err) {
    return { ok: false, text: `${file} not found` }
  }
}

function limitFromLayout(layout: CgroupLayout, c: 'cpu' | 'memory' | 'pids', fallback: LimitCapability | undefined): LimitCapability {
  const place = layout.places[c]
  if (place) return { ok: true, via: place.version === 1 ? 'cgroup-v1' : 'cgroup-v2', detail: `cgroup v${place.version} under ${place.parent}` }
  if (fallback) return { ...fallback, detail: `${fallback.detail} (${layout.reasons[c]})` }
  return { ok: false, detail: layout.reasons[c] ?? 'unavailable' }
}

export type RunscPlatform = 'kvm' | 'systrap' | 'ptrace'

export interface PlatformProbe {
  platform: RunscPlatform
  ok: boolean
  /** Why not (one line), or how long the probe container took. */
  detail: string
}

export interface RunscPlatformResult {
  /** The first platform that ran a container; undefined when none did. */
  platform?: RunscPlatform
  detail: string
  tried: PlatformProbe[]
}

/**
 * Which gVisor platform runs here: start `true` in a throwaway sandbox (`runsc do`, no network) on
 * each candidate in order — KVM where /dev/kvm exists (fastest where it works; under nested
 * virtualisation it may hang, hence the timeout), then systrap (runsc from 2023 on), then ptrace
 * (any kernel that allows ptrace). Needs root.
 */
export async function detectRunscPlatform(
  o: { run?: CommandRunner; runscPath?: string; kvmDevice?: string; timeoutMs?: number } = {},
): Promise<RunscPlatformResult> {
  const run = o.run ?? execaRunner
  const runsc = o.runscPath ?? 'runsc'
  if (process.getuid?.() !== 0) return { detail: 'runsc needs root', tried: [] }
  const candidates: RunscPlatform[] = existsSync(o.kvmDevice ?? '/dev/kvm') ? ['kvm', 'systrap', 'ptrace'] : ['systrap', 'ptrace']
  const tried: PlatformProbe[] = []
  const root = mkdtempSync(join(tmpdir(), 'orc-runsc-probe-'))
  try {
    for (const platform of candidates) {
      const t0 = performance.now()
      const timeoutMs = o.timeoutMs ?? 8000
      let probe: PlatformProbe
      try {
        const r = await run(runsc, ['--root', root, `--platform=${platform}`, '--network=none', 'do', 'true'], { timeoutMs })
        const ms = Math.round(performance.now() - t0)
        const last = (r.stderr.trim().split('\n').pop() ?? '').replace(/^.*FATAL ERROR: /, '')
        probe =
          r.exitCode === 0
            ? { platform, ok: true, detail: `a container ran in ${ms} ms` }
            : /timed out/i.test(r.stderr)
              ? { platform, ok: false, detail: `no container within ${timeoutMs / 1000} s (hangs)` }
              : r.exitCode === 127
                ? { platform, ok: false, detail: `${runsc} not found` }
                : { platform, ok: false, detail: last || `runsc exited ${r.exitCode}` }
      } catch (err) {
        probe = { platform, ok: false, detail: String(err).split('\n')[0]! }
      }
      tried.push(probe)
      if (probe.ok) return { platform, detail: `${platform}: ${probe.detail}`, tried }
      if (probe.detail.endsWith('not found')) break
    }
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
  return { detail: tried.map((t) => `${t.platform}: ${t.detail}`).join('; '), tried }
}

export async function detectCapabilities(o: DetectOptions = {}): Promise<RuntimeCapabilities> {
  const run = o.run ?? execaRunner
  const root = process.getuid?.() === 0
  const bwrapPath = o.bwrapPath ?? 'bwrap'
  const uid = o.uid ?? 65534

  const bw = await version(run, bwrapPath)
  let sandbox: RuntimeCapabilities['sandbox'] = { ok: false, detail: bw.text }
  if (bw.ok) {
    // the real test: can bwrap, as the unprivileged uid, make its namespaces here?
    const argv = [
      ...(root ? [o.setprivPath ?? 'setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--'] : []),
      bwrapPath,
      '--unshare-user',
      '--unshare-pid',
      '--unshare-net',
      '--unshare-ipc',
      '--unshare-uts',
      '--ro-bind',
      '/',
      '/',
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--',
      'true',
    ]
    try {
      const r = await run(argv[0]!, argv.slice(1), { timeoutMs: 10_000 })
      sandbox =
        r.exitCode === 0
          ? { ok: true, version: bw.text, detail: `${bw.text}; unprivileged user namespaces work` }
          : { ok: false, version: bw.text, detail: `bwrap cannot create namespaces: ${r.stderr.trim().split('\n').pop() ?? ''}` }
    } catch (err) {
      sandbox = { ok: false, version: bw.text, detail: `bwrap probe failed: ${String(err)}` }
    }
  }

  const rc = await version(run, o.runcPath ?? 'runc')
  const oci: RuntimeCapabilities['oci'] = !rc.ok
    ? { ok: false, detail: rc.text }
    : root
      ? { ok: true, version: rc.text, detail: rc.text }
      : { ok: false, version: rc.text, detail: 'runc needs root' }

  const rs = await version(run, o.runscPath ?? 'runsc')
  let gvisor: RuntimeCapabilities['gvisor'] = { ok: false, detail: rs.text }
  if (rs.ok) {
    const p = await detectRunscPlatform({ run, runscPath: o.runscPath ?? 'runsc' })
    gvisor = p.platform
      ? { ok: true, version: rs.text, platform: p.platform, tried: p.tried, detail: p.detail }
      : { ok: false, version: rs.text, tried: p.tried, detail: p.detail }
  }

  let seccomp: Capability
  let hasSeccomp = false
  try {
    hasSeccomp = /^Seccomp:/m.test(readFileSync('/proc/self/status', 'utf8'))
  } catch {}
  if (process.arch !== 'x64') seccomp = { ok: false, detail: `no syscall table for ${process.arch}; pods run without seccomp` }
  else if (!hasSeccomp) seccomp = { ok: false, detail: 'kernel without CONFIG_SECCOMP' }
  else seccomp = { ok: true, detail: 'default denylist (bwrap --seccomp, runc linux.seccomp)' }

  const ns = await version(run, o.nsenterPath ?? 'nsenter')
  const podNetns: Capability = !root
    ? { ok: false, detail: 'joining a network namespace needs root' }
    : ns.ok
      ? { ok: true, detail: ns.text }
      : { ok: false, detail: ns.text }

  const layout = detectCgroupLayout(o.cgroupRoot)
  const pl = await version(run, o.prlimitPath ?? 'prlimit')
  const limits = {
    cpu: limitFromLayout(layout, 'cpu', undefined),
    memory: limitFromLayout(layout, 'memory', pl.ok ? { ok: true, via: 'rlimit-as', detail: 'RLIMIT_AS (address space, coarse)' } : undefined),
    pids: limitFromLayout(
      layout,
      'pids',
      pl.ok ? { ok: true, via: 'rlimit-nproc', detail: 'RLIMIT_NPROC (per uid, shared by pods with the same uid)' } : undefined,
    ),
  }
  return { root, sandbox, oci, gvisor, seccomp, podNetns, limits }
}
