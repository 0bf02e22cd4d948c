/**
 * `orc doctor`: what on this machine stands between it and a working node, each finding with the
 * command that fixes it. Host checks read /proc, /sys and PATH through an injected `DoctorHost`
 * (tests give a fake one); the agent adds what only a running node knows (clock skew against its
 * peers, the ports it listens on, version skew).
 */
import { accessSync, constants, existsSync, readFileSync, statfsSync, statSync } from 'node:fs'
import { release, tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { detectCapabilities, newestBootKernel, QemuRuntime, type RuntimeCapabilities } from '../../runtime/index.ts'
import type { Finding, Severity } from '../api-types.ts'

export type { Finding, Severity } from '../api-types.ts'

export interface DoctorHost {
  read(path: string): string | undefined
  exists(path: string): boolean
  which(bin: string): string | undefined
  statfs(path: string): { freeBytes: number; totalBytes: number } | undefined
  stat(path: string): { mode: number; uid: number; isDirectory: boolean } | undefined
  kernelRelease(): string
  uid(): number
  nodeVersion(): string
}

export const realDoctorHost: DoctorHost = {
  read: (p) => {
    try {
      return readFileSync(p, 'utf8')
    } catch {
      return undefined
    }
  },
  exists: (p) => existsSync(p),
  which: (bin) => {
    const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin', '/usr/bin', '/bin']
    for (const d of dirs) {
      if (d === '') continue
      const p = join(d, bin)
      try {
        accessSync(p, constants.X_OK)
        return p
      } catch {
        // not here
      }
    }
    return undefined
  },
  statfs: (p) => {
    try {
      const s = statfsSync(p)
      return { freeBytes: s.bavail * s.bsize, totalBytes: s.blocks * s.bsize }
    } catch {
      return undefined
    }
  },
  stat: (p) => {
    try {
      const s = statSync(p)
      return { mode: s.mode & 0o7777, uid: s.uid, isDirectory: s.isDirectory() }
    } catch {
      return undefined
    }
  },
  kernelRelease: () => release(),
  uid: () => process.getuid?.() ?? -1,
  nodeVersion: () => process.versions.node,
}

function versionAtLeast(v: string, min: number[]): boolean {
  const p = v.split('.').map((x) => Number.parseInt(x, 10) || 0)
  for (let i = 0; i < min.length; i++) {
    if ((p[i] ?? 0) !== min[i]) return (p[i] ?? 0) > min[i]!
  }
  return true
}

/** How this host would run WireGuard: the kernel module, else wireguard-go, else not at all. */
export function wireguardMode(h: DoctorHost): 'kernel' | 'wireguard-go' | 'none' {
  if (h.exists('/sys/module/wireguard')) return 'kernel'
  const rel = h.kernelRelease()
  for (const f of [
    'kernel/drivers/net/wireguard/wireguard.ko',
    'kernel/drivers/net/wireguard/wireguard.ko.xz',
    'kernel/drivers/net/wireguard/wireguard.ko.zst',
  ]) {
    if (h.exists(`/lib/modules/${rel}/${f}`)) return 'kernel'
  }
  if (h.which('wireguard-go') !== undefined && h.exists('/dev/net/tun')) return 'wireguard-go'
  return 'none'
}

export function kernelFindings(h: DoctorHost): Finding[] {
  const out: Finding[] = []
  const rel = h.kernelRelease()
  out.push(
    versionAtLeast(rel, [5, 4])
      ? { check: 'kernel', status: 'ok', message: `Linux ${rel}` }
      : {
          check: 'kernel',
          status: 'warn',
          message: `Linux ${rel} is older than 5.4; WireGuard and cgroup v2 need a newer kernel`,
          fix: 'upgrade the kernel (5.4 or newer)',
        },
  )
  const maxNs = h.read('/proc/sys/user/max_user_namespaces')?.trim()
  const clone = h.read('/proc/sys/kernel/unprivileged_userns_clone')?.trim()
  if (maxNs === '0' || clone === '0') {
    out.push({
      check: 'user-namespaces',
      status: 'error',
      message: 'user namespaces are disabled: sandboxed pods cannot start',
      fix: maxNs === '0' ? 'sysctl -w user.max_user_namespaces=15000' : 'sysctl -w kernel.unprivileged_userns_clone=1',
    })
  } else out.push({ check: 'user-namespaces', status: 'ok', message: 'user namespaces enabled' })
  out.push(
    h.exists('/sys/fs/cgroup/cgroup.controllers')
      ? { check: 'cgroups', status: 'ok', message: 'cgroup v2 (unified hierarchy)' }
      : {
          check: 'cgroups',
          status: 'warn',
          message: 'no cgroup v2: pod CPU/memory limits fall back to rlimits or cgroup v1',
          fix: 'boot with systemd.unified_cgroup_hierarchy=1',
        },
  )
  const v6 = h.read('/proc/sys/net/ipv6/conf/all/disable_ipv6')?.trim()
  out.push(
    v6 === undefined || v6 === '1'
      ? { check: 'ipv6', status: 'error', message: 'IPv6 is disabled: the pod network is IPv6 only', fix: 'sysctl -w net.ipv6.conf.all.disable_ipv6=0' }
      : { check: 'ipv6', status: 'ok', message: 'IPv6 enabled' },
  )
  out.push(
    h.exists('/dev/net/tun')
      ? { check: 'tun', status: 'ok', message: '/dev/net/tun present' }
      : { check: 'tun', status: 'warn', message: 'no /dev/net/tun: wireguard-go cannot run', fix: 'modprobe tun (in a container: pass --device /dev/net/tun)' },
  )
  return out
}

export function wireguardFindings(h: DoctorHost): Finding[] {
  const out: Finding[] = []
  const mode = wireguardMode(h)
  if (mode === 'kernel') out.push({ check: 'wireguard', status: 'ok', message: 'WireGuard mode: kernel module' })
  else if (mode === 'wireguard-go') {
    out.push({
      check: 'wireguard',
      status: 'ok',
      message: 'WireGuard mode: wireguard-go (userspace; the kernel has no WireGuard module — slower, but works)',
    })
  } else {
    out.push({
      check: 'wireguard',
      status: 'error',
      message: 'no WireGuard: no kernel module and no wireguard-go',
      fix: 'apt-get install wireguard-go (or load the kernel module: modprobe wireguard)',
    })
  }
  out.push(
    h.which('wg') !== undefined
      ? { check: 'wireguard-tools', status: 'ok', message: `wg at ${h.which('wg')}` }
      : { check: 'wireguard-tools', status: 'error', message: 'wg (wireguard-tools) is missing', fix: 'apt-get install wireguard-tools' },
  )
  for (const [bin, pkg] of [
    ['ip', 'iproute2'],
    ['nft', 'nftables'],
  ] as const) {
    if (h.which(bin) === undefined)
      out.push({ check: bin, status: 'error', message: `${bin} is missing (orc drives it for the pod network)`, fix: `apt-get install ${pkg}` })
  }
  return out
}

/** Sandbox, OCI and gVisor runtimes: present, and actually able to start (the runtime's own probe). */
export async function sandboxFindings(): Promise<Finding[]> {
  return podRuntimeFindings(await detectCapabilities())
}

/** What the runtimes' probes found, as findings (pure: unit-tested with made-up capabilities). */
export function podRuntimeFindings(caps: Pick<RuntimeCapabilities, 'sandbox' | 'oci' | 'gvisor'>): Finding[] {
  const out: Finding[] = []
  out.push(
    caps.sandbox.ok
      ? { check: 'sandbox', status: 'ok', message: `bubblewrap sandbox available (${caps.sandbox.detail})` }
      : { check: 'sandbox', status: 'error', message: `bubblewrap sandbox unavailable: ${caps.sandbox.detail}`, fix: 'apt-get install bubblewrap' },
  )
  out.push(
    caps.oci.ok
      ? { check: 'oci', status: 'ok', message: `runc available (${caps.oci.detail})` }
      : { check: 'oci', status: 'warn', message: `runc unavailable: ${caps.oci.detail} (pods with runtime: oci cannot start)`, fix: 'apt-get install runc' },
  )
  const g = caps.gvisor
  const others = (g.tried ?? []).filter((t) => !t.ok).map((t) => `${t.platform}: ${t.detail}`)
  if (g.ok) {
    out.push({
      check: 'gvisor',
      status: 'ok',
      message: `gVisor available: ${g.version}, platform ${g.detail}${others.length > 0 ? ` (not usable here: ${others.join('; ')})` : ''}`,
    })
  } else if (g.version === undefined) {
    out.push({
      check: 'gvisor',
      status: 'warn',
      message: `gVisor unavailable: ${g.detail} (pods with runtime: gvisor cannot start)`,
      fix: 'apt-get install runsc',
    })
  } else {
    out.push({
      check: 'gvisor',
      status: 'warn',
      message: `gVisor (${g.version}) cannot start a container on any platform here: ${g.detail} (pods with runtime: gvisor cannot start)`,
      fix:
        g.detail === 'runsc needs root'
          ? 'run the agent as root'
          : 'allow ptrace for root (kernel.yama.ptrace_scope below 3; a container host must not filter ptrace), or give root a working /dev/kvm',
    })
  }
  return out
}

/** qemu for VirtualMachines: present, and the accelerator a guest gets here (KVM only when a kernel boots under it). */
export async function vmFindings(kernel = newestBootKernel()): Promise<Finding[]> {
  const rt = new QemuRuntime({ stateDir: tmpdir() })
  const missing = await rt.unavailable()
  if (missing !== undefined)
    return [{ check: 'qemu', status: 'warn', message: `qemu unavailable: ${missing} (VirtualMachines cannot start)`, fix: 'apt-get install qemu-system-x86' }]
  if (kernel === undefined) return [{ check: 'qemu', status: 'ok', message: 'qemu available (no kernel in /boot to probe KVM with)' }]
  const a = await rt.accel(kernel)
  return [{ check: 'qemu', status: 'ok', message: `qemu available: VirtualMachines run under ${a.accel} (${a.reason})` }]
}

const GiB = 1024 ** 3

export function diskFindings(h: DoctorHost, dataDir: string): Finding[] {
  let probe = dataDir
  while (!h.exists(probe) && probe !== '/') probe = probe.replace(/\/[^/]*$/, '') || '/'
  const s = h.statfs(probe)
  if (s === undefined) return [{ check: 'disk', status: 'warn', message: `cannot read free space of ${probe}` }]
  const free = s.freeBytes
  const pct = s.totalBytes > 0 ? (100 * free) / s.totalBytes : 100
  const text = `${(free / GiB).toFixed(1)} GiB free (${pct.toFixed(0)}%) on the file system of ${dataDir}`
  if (free < 0.2 * GiB)
    return [{ check: 'disk', status: 'error', message: text, fix: `free space under ${probe}: the store refuses writes when the disk is full` }]
  if (free < 1 * GiB || pct < 5) return [{ check: 'disk', status: 'warn', message: text, fix: `free space under ${probe} (images and pod logs grow)` }]
  return [{ check: 'disk', status: 'ok', message: text }]
}

/** The data dir's modes as the agent sets them (docs/decisions.md: 0711, db/ 0700, secrets 0600). */
export function dataDirFindings(h: DoctorHost, dataDir: string): Finding[] {
  const st = h.stat(dataDir)
  if (st === undefined) return [{ check: 'data-dir', status: 'info', message: `${dataDir} does not exist yet (orc up or orc join creates it)` }]
  if (!st.isDirectory) return [{ check: 'data-dir', status: 'error', message: `${dataDir} is not a directory`, fix: `move it away, or pass --data-dir` }]
  const out: Finding[] = []
  const uid = h.uid()
  if (uid >= 0 && st.uid !== uid) {
    out.push({
      check: 'data-dir',
      status: 'error',
      message: `${dataDir} belongs to uid ${st.uid}, not to this user (uid ${uid})`,
      fix: `chown -R ${uid} ${dataDir} (or run as its owner)`,
    })
  }
  if ((st.mode & 0o022) !== 0) {
    out.push({ check: 'data-dir', status: 'error', message: `${dataDir} is writable by others (mode ${st.mode.toString(8)})`, fix: `chmod 0711 ${dataDir}` })
  }
  for (const [name, want] of [
    ['db', 0o700],
    ['peer.key', 0o600],
    ['swarm.key', 0o600],
    ['admin.credential', 0o600],
    ['tokens.json', 0o600],
  ] as const) {
    const s = h.stat(join(dataDir, name))
    if (s === undefined) continue
    if ((s.mode & 0o077) !== 0) {
      out.push({
        check: 'data-dir',
        status: 'error',
        message: `${join(dataDir, name)} is readable by others (mode ${s.mode.toString(8)})`,
        fix: `chmod ${want.toString(8)} ${join(dataDir, name)}`,
      })
    }
  }
  if (out.length === 0) out.push({ check: 'data-dir', status: 'ok', message: `${dataDir}: owner and modes as expected` })
  return out
}

export function runtimeFindings(h: DoctorHost): Finding[] {
  const v = h.nodeVersion()
  return [
    versionAtLeast(v, [20, 10])
      ? { check: 'node', status: 'ok', message: `Node.js ${v}` }
      : {
          check: 'node',
          status: 'error',
          message: `Node.js ${v} is too old (orc needs 20.10 or newer)`,
          fix: 'install Node.js 20 LTS or newer (the bootstrap script does)',
        },
  ]
}

/** Clock skew against peers: warn from 1 s (history order, token expiry), error from 30 s. */
export function clockFindings(skews: Array<{ peer: string; skewMs: number | null; error?: string }>): Finding[] {
  if (skews.length === 0) return [{ check: 'clock', status: 'info', message: 'no peers reachable to compare clocks with' }]
  return skews.map((s) => {
    if (s.skewMs === null) return { check: 'clock', status: 'warn' as const, message: `cannot compare clocks with ${s.peer}: ${s.error ?? 'no answer'}` }
    const abs = Math.abs(s.skewMs)
    const text = `clock ${s.skewMs >= 0 ? 'behind' : 'ahead of'} ${s.peer} by ${abs < 1000 ? `${Math.round(abs)}ms` : `${(abs / 1000).toFixed(1)}s`}`
    if (abs >= 30_000)
      return { check: 'clock', status: 'error' as const, message: text, fix: 'enable time sync on both machines: timedatectl set-ntp true (or install chrony)' }
    if (abs >= 1000) return { check: 'clock', status: 'warn' as const, message: text, fix: 'enable time sync: timedatectl set-ntp true (or install chrony)' }
    return { check: 'clock', status: 'ok' as const, message: text }
  })
}

/** Without an agent: are the mesh and HTTP ports free for one? (TCP bind test on all interfaces.) */
export async function portFindings(ports: Array<{ port: number; what: string; flag: string }>): Promise<Finding[]> {
  const { createServer } = await import('node:net')
  const free = (port: number) =>
    new Promise<string | undefined>((resolve) => {
      const s = createServer()
      s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message))
      s.listen(port, '0.0.0.0', () => s.close(() => resolve(undefined)))
    })
  const out: Finding[] = []
  for (const p of ports) {
    const err = await free(p.port)
    out.push(
      err === undefined
        ? { check: 'ports', status: 'ok', message: `TCP ${p.port} (${p.what}) is free` }
        : {
            check: 'ports',
            status: 'warn',
            message: `TCP ${p.port} (${p.what}) is not free: ${err === 'EADDRINUSE' ? 'another process listens on it' : err}`,
            fix: `find it with: ss -ltnp 'sport = :${p.port}' — or start orc with ${p.flag}`,
          },
    )
  }
  return out
}

/** Everything a machine can tell without an agent. */
export async function hostFindings(dataDir: string, h: DoctorHost = realDoctorHost): Promise<Finding[]> {
  return [
    ...kernelFindings(h),
    ...wireguardFindings(h),
    ...(await sandboxFindings()),
    ...(await vmFindings()),
    ...runtimeFindings(h),
    ...diskFindings(h, dataDir),
    ...dataDirFindings(h, dataDir),
  ]
}

export function worstOf(findings: Finding[]): Severity {
  const rank: Record<Severity, number> = { ok: 0, info: 0, warn: 1, error: 2 }
  return findings.reduce<Severity>((w, f) => (rank[f.status] > rank[w] ? f.status : w), 'ok')
}
