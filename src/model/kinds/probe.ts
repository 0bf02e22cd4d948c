/**
 * Container health probes (Kubernetes names and defaults): `startupProbe` gates the other two,
 * `readinessProbe` sets the pod's Ready condition, `livenessProbe` restarts the container. One
 * handler each: `tcpSocket`, `httpGet` or `exec` (a command run inside the running
 * sandbox). docs/lifecycle.md, "Probes".
 */
import type { Issue } from '../schema.ts'
import { s } from '../schema.ts'

const port = s.int({ min: 1, max: 65535 })

export const probeSchema = s.object({
  exec: s.object({ command: s.required(s.array(s.string({ maxLength: 4096 }), { maxItems: 256 })) }),
  tcpSocket: s.object({ port: s.required(port) }),
  httpGet: s.object({
    path: s.string({ maxLength: 2048 }),
    port: s.required(port),
    scheme: s.enum('HTTP', 'HTTPS'),
    httpHeaders: s.array(
      s.object({
        name: s.required(s.string({ minLength: 1, maxLength: 256, pattern: /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, patternName: 'an HTTP header name' })),
        value: s.required(s.string({ maxLength: 4096 })),
      }),
      { maxItems: 32 },
    ),
  }),
  /** Seconds after the container started before the first probe (default 0). */
  initialDelaySeconds: s.int({ min: 0, max: 3600 }),
  /** Seconds between probes (default 10). */
  periodSeconds: s.int({ min: 1, max: 3600 }),
  /** Seconds one probe may take (default 1). */
  timeoutSeconds: s.int({ min: 1, max: 3600 }),
  /** Consecutive successes that count as passing after a failure (default 1; must be 1 for liveness and startup). */
  successThreshold: s.int({ min: 1, max: 100 }),
  /** Consecutive failures that count as failing (default 3). */
  failureThreshold: s.int({ min: 1, max: 100 }),
})

export type Probe = {
  exec?: { command: string[] }
  tcpSocket?: { port: number }
  httpGet?: { path?: string; port: number; scheme?: 'HTTP' | 'HTTPS'; httpHeaders?: { name: string; value: string }[] }
  initialDelaySeconds?: number
  periodSeconds?: number
  timeoutSeconds?: number
  successThreshold?: number
  failureThreshold?: number
}

export const PROBE_KINDS = ['startupProbe', 'readinessProbe', 'livenessProbe'] as const
export type ProbeKind = (typeof PROBE_KINDS)[number]
export const PROBE_HANDLERS = ['exec', 'tcpSocket', 'httpGet'] as const

/** Kubernetes' defaults. */
export const PROBE_DEFAULTS = { initialDelaySeconds: 0, periodSeconds: 10, timeoutSeconds: 1, successThreshold: 1, failureThreshold: 3 } as const

/** Whether this agent can run `exec` probes (a command run inside the running sandbox: Runtime.exec). */
export const EXEC_PROBES_SUPPORTED = true

/** Rules of one container's probes the schema cannot say (exactly one handler; thresholds). */
export function probeIssues(container: unknown, base: string): Issue[] {
  const issues: Issue[] = []
  const c = (container ?? {}) as Record<string, unknown>
  for (const kind of PROBE_KINDS) {
    const p = c[kind] as Record<string, unknown> | undefined
    if (p === undefined || p === null || typeof p !== 'object') continue
    const path = `${base}.${kind}`
    const handlers = PROBE_HANDLERS.filter((h) => p[h] !== undefined)
    if (handlers.length !== 1)
      issues.push({ path, rule: `exactly one handler (${PROBE_HANDLERS.join(', ')}); got ${handlers.length === 0 ? 'none' : handlers.join(', ')}` })
    if (handlers.includes('exec') && !EXEC_PROBES_SUPPORTED)
      issues.push({ path: `${path}.exec`, rule: 'exec probes are not supported yet (use tcpSocket or httpGet)' })
    const cmd = (p.exec as { command?: unknown } | undefined)?.command
    if (Array.isArray(cmd) && cmd.length === 0) issues.push({ path: `${path}.exec.command`, rule: 'must name a program' })
    if (kind !== 'readinessProbe' && p.successThreshold !== undefined && p.successThreshold !== 1)
      issues.push({ path: `${path}.successThreshold`, rule: `must be 1 for ${kind}` })
    const http = p.httpGet as { path?: unknown } | undefined
    if (typeof http?.path === 'string' && http.path !== '' && !http.path.startsWith('/'))
      issues.push({ path: `${path}.httpGet.path`, rule: 'must start with /' })
  }
  return issues
}

/** A probe with every default filled in (milliseconds). */
export interface ProbeTiming {
  initialDelayMs: number
  periodMs: number
  timeoutMs: number
  successThreshold: number
  failureThreshold: number
}

export function probeTiming(p: Probe): ProbeTiming {
  return {
    initialDelayMs: (p.initialDelaySeconds ?? PROBE_DEFAULTS.initialDelaySeconds) * 1000,
    periodMs: (p.periodSeconds ?? PROBE_DEFAULTS.periodSeconds) * 1000,
    timeoutMs: (p.timeoutSeconds ?? PROBE_DEFAULTS.timeoutSeconds) * 1000,
    successThreshold: p.successThreshold ?? PROBE_DEFAULTS.successThreshold,
    failureThreshold: p.failureThreshold ?? PROBE_DEFAULTS.failureThreshold,
  }
}

/** The Ready condition of a pod (`status.conditions`, written by controller:lifecycle). */
export interface PodCondition {
  type: 'Ready'
  status: 'True' | 'False'
  /** `ContainersReady`, `ReadinessProbeFailed`, `ContainersNotRunning`, `StartupProbePending`, … */
  reason: string
  message?: string
  lastTransitionTime: string
}

/**
 * Whether a stored pod is Ready: its `Ready` condition, or, for a status written by an agent that
 * knew no conditions, Running with every container running. This is what rollouts (and services)
 * read.
 */
export function podIsReady(pod: { status?: unknown }): boolean {
  const st = (pod.status ?? {}) as { phase?: unknown; conditions?: unknown; containers?: unknown }
  if (st.phase !== 'Running') return false
  if (Array.isArray(st.conditions)) {
    const c = (st.conditions as { type?: unknown; status?: unknown }[]).find((x) => x?.type === 'Ready')
    if (c !== undefined) return c.status === 'True'
  }
  const cs = Array.isArray(st.containers) ? (st.containers as { state?: unknown }[]) : []
  return cs.length > 0 && cs.every((c) => c?.state === 'running')
}

/** `READY` column: ready containers / containers (`1/1`). */
export function readyColumn(pod: { status?: unknown; spec?: unknown }): string {
  const st = (pod.status ?? {}) as { phase?: unknown; containers?: unknown }
  const cs = Array.isArray(st.containers) ? (st.containers as { state?: unknown; ready?: unknown }[]) : []
  const total =
    cs.length > 0
      ? cs.length
      : Array.isArray((pod.spec as { containers?: unknown } | undefined)?.containers)
        ? (pod.spec as { containers: unknown[] }).containers.length
        : 0
  const ready = st.phase === 'Running' ? cs.filter((c) => (typeof c?.ready === 'boolean' ? c.ready : c?.state === 'running')).length : 0
  return `${ready}/${total}`
}
