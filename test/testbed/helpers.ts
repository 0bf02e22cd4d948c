/** Helpers for testbed scenarios: pods from the busybox fixture, waiting on what `orc` reports. */
import { dirname } from 'node:path'
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
