/**
 * The node's Prometheus metrics: gossip, heartbeats, anti-entropy, replication lag, unit durations
 * (counted from events while started) and gauges read at each scrape (peers, objects, pods, disk).
 */
import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { type Mesh, membersTopic, storeTopic } from '../../mesh/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { parseWorkflowSnapshot } from '../../workflow/index.ts'
import type { Component } from '../component.ts'
import type { MetricsRegistry } from './metrics.ts'
import type { PeerRow } from './peers.ts'

export interface NodeMetricsComponents {
  metrics: MetricsRegistry
  store: ObjectStore
  nodeName: string
  dataDir: string
  version: string
  clusterId: () => string
  now: () => number
  mesh?: Mesh
  peers: () => PeerRow[]
  /** Readings of the pods' cgroups (pods/top.ts): refreshed in the background, read at each scrape. */
  podUsage?: () => {
    refresh(): Promise<void>
    latest(): { namespace: string; pod: string; container: string; cpuSeconds: number | null; memoryBytes: number | null }[]
  }
}

/** How often the per-pod CPU and memory readings behind the metrics are renewed. */
const POD_USAGE_REFRESH_MS = 10_000

function dirBytes(dir: string): number {
  let n = 0
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name)
      n += e.isDirectory() ? dirBytes(p) : e.isFile() ? statSync(p).size : 0
    }
  } catch {
    // vanished while walking: count what is left
  }
  return n
}

/** Registers the metrics at once (a scrape before start sees them at zero); counts events while started. */
export function nodeMetrics(d: NodeMetricsComponents): Component {
  const metrics = d.metrics
  const unsubs: Array<() => void> = []
  const startedAt = d.now()
  const gossipMessages = metrics.counter('orc_gossip_messages_total', 'Gossip messages by direction (in: received, out: published) and topic (store, members).')
  const gossipBytes = metrics.counter('orc_gossip_bytes_total', 'Gossip payload bytes by direction and topic.')
  const heartbeats = metrics.counter('orc_heartbeats_total', 'Member heartbeats by direction (in, out) and path (direct: on the connection; gossip: relayed).')
  const syncSessions = metrics.counter('orc_sync_sessions_total', 'Anti-entropy sessions this node initiated that completed.')
  const syncBytes = metrics.counter('orc_sync_bytes_total', 'Anti-entropy bytes by direction.')
  const lag = metrics.histogram(
    'orc_replication_lag_seconds',
    'Time from a write on another node to its arrival here (writes older than 10 minutes count as catch-up instead).',
    [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
  )
  const catchup = metrics.counter(
    'orc_replication_catchup_total',
    'Writes from other nodes that arrived more than 10 minutes after they were made (a node that was away).',
  )
  const unitDuration = metrics.histogram(
    'orc_unit_duration_seconds',
    'Duration of lifecycle units of pods on this node, by unit and result.',
    [0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300],
  )
  const peersGauge = metrics.gauge('orc_peers', 'Members of the cluster other than this node, by liveness state.')
  const pathGauge = metrics.gauge('orc_peer_connections', 'Mesh connections to members, by path (direct or relayed).')
  const objectsGauge = metrics.gauge('orc_store_objects', 'Objects in the replicated store, by kind.')
  const storeBytes = metrics.gauge('orc_store_disk_bytes', 'Bytes the store (LevelDB) takes on disk.')
  const podsGauge = metrics.gauge('orc_pods', 'Pods bound to this node, by phase.')
  const clusterPods = metrics.gauge('orc_cluster_pods', 'Pods in the whole cluster, by phase.')
  const info = metrics.gauge('orc_info', 'Constant 1, labelled with the node, its orc version and cluster.')
  const up = metrics.gauge('process_start_time_seconds', 'Start time of the agent since the Unix epoch, in seconds.')
  const rss = metrics.gauge('process_resident_memory_bytes', 'Resident memory of the agent process.')
  const heap = metrics.gauge('nodejs_heap_used_bytes', 'V8 heap in use.')
  const podCpu = metrics.gauge(
    'orc_pod_cpu_usage_seconds',
    'CPU time a container of a pod on this node used since it started, from its cgroup (read at most 10 s before the scrape).',
  )
  const podMemory = metrics.gauge(
    'orc_pod_memory_working_set_bytes',
    "Working set of a container of a pod on this node (its cgroup's usage minus inactive file cache).",
  )
  let diskCache = { at: 0, bytes: 0 }
  let usageAt = -Infinity

  metrics.onCollect(() => {
    const now = d.now()
    if (d.podUsage !== undefined) {
      const usage = d.podUsage()
      podCpu.reset()
      podMemory.reset()
      for (const r of usage.latest()) {
        const labels = { namespace: r.namespace, pod: r.pod, container: r.container }
        if (r.cpuSeconds !== null) podCpu.set(labels, r.cpuSeconds)
        if (r.memoryBytes !== null) podMemory.set(labels, r.memoryBytes)
      }
      // A scrape is synchronous: the next one sees what this refresh reads.
      if (now - usageAt >= POD_USAGE_REFRESH_MS) {
        usageAt = now
        void usage.refresh().catch(() => undefined)
      }
    }
    info.set({ node: d.nodeName, version: d.version, cluster: d.clusterId() }, 1)
    up.set({}, Math.floor(startedAt / 1000))
    const mem = process.memoryUsage()
    rss.set({}, mem.rss)
    heap.set({}, mem.heapUsed)
    peersGauge.reset()
    for (const s of ['alive', 'suspect', 'dead']) peersGauge.set({ state: s }, 0)
    const counts: Record<string, number> = { alive: 0, suspect: 0, dead: 0 }
    for (const m of d.mesh?.members() ?? []) if (!m.self) counts[m.state] = (counts[m.state] ?? 0) + 1
    for (const [s, n] of Object.entries(counts)) peersGauge.set({ state: s }, n)
    pathGauge.reset()
    const paths = { direct: 0, relayed: 0 }
    for (const p of d.peers()) if (p.path === 'direct' || p.path === 'relayed') paths[p.path] += 1
    for (const [p, n] of Object.entries(paths)) pathGauge.set({ path: p }, n)
    objectsGauge.reset()
    const byKind = new Map<string, number>()
    for (const kind of ['Pod', 'Node', 'Cluster', 'SecurityPolicy', 'PinnedDeployment']) byKind.set(kind, d.store.list(kind).length)
    for (const [k, n] of byKind) objectsGauge.set({ kind: k }, n)
    if (now - diskCache.at > 10_000) diskCache = { at: now, bytes: dirBytes(join(d.dataDir, 'db')) }
    storeBytes.set({}, diskCache.bytes)
    podsGauge.reset()
    clusterPods.reset()
    const local = new Map<string, number>()
    const all = new Map<string, number>()
    for (const p of d.store.list('Pod')) {
      const st = (p.status ?? {}) as Record<string, unknown>
      const phase = typeof st.phase === 'string' ? st.phase : 'Pending'
      all.set(phase, (all.get(phase) ?? 0) + 1)
      if (st.node === d.nodeName) local.set(phase, (local.get(phase) ?? 0) + 1)
    }
    for (const ph of ['Pending', 'Running', 'Succeeded', 'Failed']) {
      podsGauge.set({ phase: ph }, local.get(ph) ?? 0)
      clusterPods.set({ phase: ph }, all.get(ph) ?? 0)
    }
    for (const [ph, n] of local) podsGauge.set({ phase: ph }, n)
    for (const [ph, n] of all) clusterPods.set({ phase: ph }, n)
  })

  const seenUnits = new Set<string>()
  const replica = (d.store as { replicaId?: string }).replicaId
  const onChanged = (keys: string[]): void => {
    const now = d.now()
    for (const key of keys) {
      const [kind, ns, ...rest] = key.split('/')
      if (kind === undefined || ns === undefined || rest.length === 0) continue
      const obj = d.store.get({ kind, namespace: ns, name: rest.join('/') })
      if (obj === undefined) continue
      const writer = obj.metadata.revisionId?.split('.')[0]
      if (replica !== undefined && writer !== undefined && writer !== replica) {
        const t = Date.parse(obj.metadata.updatedAt)
        if (!Number.isNaN(t)) {
          const s = Math.max(0, now - t) / 1000
          if (s > 600) catchup.inc()
          else lag.observe({}, s)
        }
      }
      if (kind === 'Pod') observeUnits(obj)
    }
  }
  const observeUnits = (obj: { metadata: { uid: string }; status?: Record<string, unknown> }): void => {
    const st = obj.status ?? {}
    if (st.node !== d.nodeName || st.workflow === undefined) return
    let snap
    try {
      snap = parseWorkflowSnapshot(st.workflow)
    } catch {
      return
    }
    for (const u of snap.units) {
      if (u.kind !== 'unit' || u.startedAt === undefined || u.endedAt === undefined) continue
      if (u.state !== 'done' && u.state !== 'failed') continue
      const k = `${obj.metadata.uid}:${snap.id ?? snap.startedAt}:${u.name}`
      if (seenUnits.has(k)) continue
      if (seenUnits.size > 50_000) seenUnits.clear()
      seenUnits.add(k)
      unitDuration.observe({ unit: u.name, result: u.state }, Math.max(0, u.endedAt - u.startedAt) / 1000)
    }
  }

  return {
    name: 'node-metrics',
    start() {
      unsubs.push(
        d.store.onChange((keys) => {
          const copy = [...keys]
          setImmediate(() => onChanged(copy))
        }),
      )
      const mesh = d.mesh
      if (mesh === undefined) return
      const storeT = storeTopic(mesh.clusterId, 'cluster')
      const membersT = membersTopic(mesh.clusterId)
      const topicLabel = (t: string) => (t === storeT ? 'store' : t === membersT ? 'members' : 'other')
      unsubs.push(
        d.store.onLocalUpdate((u) => {
          gossipMessages.inc({ direction: 'out', topic: 'store' })
          gossipBytes.inc({ direction: 'out', topic: 'store' }, u.length)
        }),
      )
      const pubsub = mesh.libp2p.services.pubsub as unknown as EventTarget
      const onMessage = (e: Event): void => {
        const msg = (e as CustomEvent<{ topic?: string; data?: Uint8Array }>).detail
        const t = topicLabel(msg?.topic ?? '')
        gossipMessages.inc({ direction: 'in', topic: t })
        gossipBytes.inc({ direction: 'in', topic: t }, msg?.data?.length ?? 0)
      }
      pubsub.addEventListener('message', onMessage)
      unsubs.push(() => pubsub.removeEventListener('message', onMessage))
      unsubs.push(mesh.on('heartbeat', (h) => heartbeats.inc({ direction: h.direction, path: h.path })))
      unsubs.push(
        mesh.on('sync:done', (r) => {
          syncSessions.inc()
          syncBytes.inc({ direction: 'out' }, r.sentBytes ?? 0)
          syncBytes.inc({ direction: 'in' }, r.receivedBytes ?? 0)
        }),
      )
    },
    stop() {
      for (const u of unsubs.splice(0)) u()
    },
  }
}
