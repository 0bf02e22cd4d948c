/** Helpers for testbed scenarios: pods from the busybox fixture, waiting on what `orc` reports. */
import assert from 'node:assert/strict'
import { dirname } from 'node:path'
import type { TestContext } from 'node:test'
import type { RouterSpec, Testbed } from '../../netsim/testbed/testbed.ts'
import { busyboxImages, busyboxMissing } from '../fixtures/busybox-image.ts'
import { waitFor } from '../helpers/wait.ts'

export { netemUnavailable, Testbed, testbedUnavailable } from '../../netsim/testbed/testbed.ts'
export { waitFor }

/** Two home routers, rtra and rtrb, each masquerading with a random port per connection (symmetric NATs: their LANs never reach each other). */
export const TWO_RANDOM_NATS: RouterSpec[] = [
  { name: 'rtra', nat: 'random' },
  { name: 'rtrb', nat: 'random' },
]

/** Why testbed scenarios cannot run here (for `skipped: <reason>`), or undefined. */
export async function skipReason(): Promise<string | undefined> {
  const { testbedUnavailable } = await import('../../netsim/testbed/testbed.ts')
  return testbedUnavailable() ?? busyboxMissing()
}

/** The agents' env naming the busybox fixture's directory an image store (ORC_IMAGE_STORES): no hostPath grant needed. */
export function imageStoresEnv(): Record<string, string> {
  return { ORC_IMAGE_STORES: dirname(busyboxImages().rootfs) }
}

export function podManifest(name: string, node: string, script: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name },
    spec: {
      placement: { node },
      containers: [{ name: 'main', image: busyboxImages().rootfs, command: ['sh', '-c', script] }],
      ...extra,
    },
  })
}

/** A pod of a federation-shared namespace (`ns`) running `script` in busybox; `spec` adds placement etc. */
export function sharedPod(name: string, script: string, spec: Record<string, unknown>, ns = 'shared'): string {
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, labels: { app: name } },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: busyboxImages().rootfs, command: ['sh', '-c', script] }], ...spec },
  })
}

export async function applyPod(tb: Testbed, on: string, manifest: string): Promise<void> {
  await tb.orc(on, ['apply', '-f', '-'], { input: manifest })
}

/** Wait until the pod runs and has its IPv6 address; returns its status. */
export async function waitPodRunning(tb: Testbed, on: string, name: string, timeoutMs = 120_000): Promise<{ ipv6: string; node: string }> {
  return waitFor(
    `pod ${name} Running with an address`,
    async () => {
      const p = await tb.orcJson(on, ['get', 'pod', name])
      const st = p.status ?? {}
      return st.phase === 'Running' && typeof st.network?.ipv6 === 'string'
        ? { ipv6: st.network.ipv6 as string, node: String(st.node ?? p.spec.placement.node) }
        : undefined
    },
    timeoutMs,
  )
}

/**
 * A server pod on each of `a` and `b` (answering `hello-from-NODE` on TCP 8080), then on each a
 * client pod that connects to the other's server until it gets through; resolves once both clients
 * got the other's answer (pods reach each other over TCP, both ways). Pods `srv-NODE`, `to-NODE`.
 */
export async function podsTalkBothWays(
  tb: Testbed,
  on: string,
  a: string,
  b: string,
  timeoutMs = 150_000,
): Promise<Map<string, { ipv6: string; node: string }>> {
  for (const n of [a, b]) await applyPod(tb, on, podManifest(`srv-${n}`, n, `exec nc -ll -p 8080 -e echo hello-from-${n}`))
  const srv = new Map<string, { ipv6: string; node: string }>()
  for (const n of [a, b]) srv.set(n, await waitPodRunning(tb, on, `srv-${n}`))
  const client = (addr: string) =>
    `for i in $(seq 1 90); do if nc -w 2 ${addr} 8080 </dev/null; then echo connected; exec sleep 3600; fi; sleep 1; done; exit 1`
  await applyPod(tb, on, podManifest(`to-${b}`, a, client(srv.get(b)!.ipv6)))
  await applyPod(tb, on, podManifest(`to-${a}`, b, client(srv.get(a)!.ipv6)))
  for (const n of [b, a]) {
    const logs = await waitFor(
      `to-${n} connected`,
      async () => {
        const l = await tb.orc(on, ['logs', `pod/to-${n}`]).catch(() => '')
        return l.includes('connected') ? l : undefined
      },
      timeoutMs,
    )
    assert.match(logs, new RegExp(`hello-from-${n}`))
  }
  return srv
}

/**
 * On failure, each host's `wg show`, its log's warnings and its log's tail as diagnostics. Call
 * before `t.after(() => tb.destroy())` (hooks run in order; destroy removes the logs); call the
 * returned function when the scenario passed.
 */
export function diagnoseOnFailure(t: TestContext, tb: Testbed): () => void {
  let failed = true
  t.after(async () => {
    if (!failed) return
    for (const h of tb.hosts.values())
      t.diagnostic(`--- ${h.name} ---\n${(await tb.exec(h.name, 'wg', ['show'])).stdout}\n${tb.warnings(h)}\n${tb.tail(h, 30)}`)
  })
  return () => {
    failed = false
  }
}

export async function nodeStatuses(tb: Testbed, on: string): Promise<Map<string, any>> {
  const r = await tb.orcJson(on, ['get', 'nodes'])
  return new Map(((r.items ?? r) as any[]).map((n) => [n.metadata.name as string, n.status ?? {}]))
}

/** Every listed node Ready with all its tunnels up (as `on` sees the replicated Node objects). */
export async function waitMesh(tb: Testbed, on: string, names: string[], timeoutMs = 180_000): Promise<Map<string, any>> {
  return waitFor(
    `full tunnel mesh of ${names.join(', ')}`,
    async () => {
      const st = await nodeStatuses(tb, on)
      const ok = names.every((n) => {
        const s = st.get(n)
        return (
          s?.state === 'Ready' && s.network?.state === 'Ready' && s.network?.tunnels?.up === names.length - 1 && s.network?.tunnels?.total === names.length - 1
        )
      })
      return ok ? st : undefined
    },
    timeoutMs,
  )
}

/** IPv6 routes in a host's namespace (`ip -6 route show PREFIX`). */
export async function routeTo(tb: Testbed, host: string, prefix: string): Promise<string> {
  const r = await tb.exec(host, 'ip', ['-6', 'route', 'show', prefix])
  return r.stdout.trim()
}
