/**
 * What the node network needs of this node's federations to route federated pods between clusters
 * (docs/federation.md, "Routing"): per running federation, its `Cluster` objects (each node's
 * summary carries its WireGuard key, /64 and endpoints), its pods, and where the federation mesh
 * sees each member; and, for the shared services' virtual addresses, its id, namespaces and services. Raw objects: the network's planner checks them (they come from other clusters).
 */
import type { Mesh } from '../../mesh/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { connectOver, type FederatedScopeInput, type FederationRouteSource, meshViewOf } from '../network/index.ts'

/** The part of the federation manager this needs. */
export interface RoutedFederations {
  scopes(): Array<{ namespaces: readonly string[]; scope: { store: ObjectStore; cluster: string; federation: string } }>
  get(name: string): { mesh: Mesh; id: string } | undefined
  onRunningChange(listener: () => void): () => void
}

export function federationRouteSource(fm: RoutedFederations): FederationRouteSource {
  const listeners = new Set<() => void>()
  const subscribed = new Map<ObjectStore, () => void>()
  let offRunning: (() => void) | undefined
  const notify = () => {
    for (const l of listeners) {
      try {
        l()
      } catch {
        // a listener's problem, not ours
      }
    }
  }
  const resubscribe = () => {
    const live = new Set(fm.scopes().map((s) => s.scope.store))
    for (const [store, off] of subscribed) {
      if (live.has(store)) continue
      off()
      subscribed.delete(store)
    }
    for (const store of live) {
      if (subscribed.has(store)) continue
      subscribed.set(
        store,
        store.onChange((keys) => {
          if (keys.some((k) => k.startsWith('Cluster/') || k.startsWith('Pod/') || k.startsWith('Service/'))) notify()
        }),
      )
    }
  }
  return {
    scopes(): FederatedScopeInput[] {
      const out: FederatedScopeInput[] = []
      for (const { namespaces, scope } of fm.scopes()) {
        if (scope.federation === '') continue // a join still in progress
        const running = fm.get(scope.federation)
        const mesh = running?.mesh
        const observedIps = new Map<string, string | string[]>()
        if (mesh !== undefined) {
          const ips = meshViewOf(mesh).observedIps()
          for (const m of mesh.members()) {
            const ip = ips.get(m.peerId)
            if (!m.self && ip !== undefined) observedIps.set(m.name, ip)
          }
        }
        out.push({
          federation: scope.federation,
          cluster: scope.cluster,
          clusters: scope.store.list('Cluster'),
          pods: scope.store.list('Pod'),
          observedIps,
          ...(running !== undefined && running.id !== '' ? { id: running.id } : {}),
          namespaces,
          services: scope.store.list('Service'),
        })
      }
      return out
    },
    async connectOver(federation, member, ip) {
      const mesh = fm.get(federation)?.mesh
      const m = mesh?.members().find((x) => x.name === member && !x.self)
      if (mesh === undefined || m === undefined) return false
      return connectOver(mesh, m.peerId, ip)
    },
    onChange(listener) {
      listeners.add(listener)
      if (offRunning === undefined) {
        offRunning = fm.onRunningChange(() => {
          resubscribe()
          notify()
        })
        resubscribe()
      }
      return () => {
        listeners.delete(listener)
        if (listeners.size > 0) return
        offRunning?.()
        offRunning = undefined
        for (const off of subscribed.values()) off()
        subscribed.clear()
      }
    },
  }
}
