// The live cluster state the pages share: pods and nodes from the watch stream, members (liveness)
// from the members poll. Pages subscribe and re-render when it changes.
import { useEffect, useState } from 'preact/hooks'
import { stream } from './api.js'

export const live = {
  pods: new Map(),
  nodes: new Map(),
  members: [],
  membersAt: 0,
  loaded: { Pod: false, Node: false },
  connected: false,
  problem: undefined,
  version: 0,
}

const listeners = new Set()
let pending = false

function changed() {
  live.version++
  // Many events in one burst render once.
  if (pending) return
  pending = true
  queueMicrotask(() => {
    pending = false
    for (const l of listeners) l(live.version)
  })
}

const keyOf = (o) => `${o.metadata.namespace ?? ''}/${o.metadata.name}`
const mapOf = (kind) => (kind === 'Pod' ? live.pods : live.nodes)

export function startLive() {
  return stream(
    '/dash/watch',
    { kinds: 'Pod,Node' },
    {
      open: () => {
        live.connected = true
        live.problem = undefined
        changed()
      },
      error: () => {
        live.connected = false
        live.problem = 'lost the connection to the dashboard server; retrying'
        changed()
      },
      snapshot: ({ kind, items }) => {
        const m = mapOf(kind)
        m.clear()
        for (const o of items) m.set(keyOf(o), o)
        live.loaded[kind] = true
        changed()
      },
      change: ({ kind, upserts, removed }) => {
        const m = mapOf(kind)
        for (const o of upserts) m.set(keyOf(o), o)
        for (const k of removed) m.delete(k)
        changed()
      },
      members: ({ members, now }) => {
        live.members = members
        live.membersAt = now
        changed()
      },
      problem: ({ source, message }) => {
        live.problem = `${source}: ${message}`
        changed()
      },
    },
  )
}

/** Re-render the calling component when the live state changes. */
export function useLive() {
  const [, set] = useState(0)
  useEffect(() => {
    listeners.add(set)
    return () => listeners.delete(set)
  }, [])
  return live
}

/** Unreachable nodes as this node sees them: name → { state: 'NotReady' | 'Unreachable', lastSeen }. */
export function downNodes() {
  const out = new Map()
  for (const m of live.members) {
    if (m.self || m.state === 'alive') continue
    out.set(m.name, { state: m.state === 'suspect' ? 'NotReady' : 'Unreachable', lastSeen: m.lastSeen })
  }
  return out
}

export function nodeState(node, down = downNodes()) {
  const d = down.get(node.metadata.name)
  if (d && node.status?.state !== 'Removed') return d.state
  return node.status?.state ?? 'Unknown'
}

export function podNode(pod) {
  return pod.status?.node ?? pod.spec?.placement?.node ?? undefined
}

/** The phase the CLI shows: Unknown while the pod's node is unreachable. */
export function podPhase(pod, down = downNodes()) {
  const phase = pod.status?.phase ?? 'Pending'
  const n = podNode(pod)
  if (n !== undefined && down.has(n) && phase !== 'Succeeded' && phase !== 'Failed') return 'Unknown'
  return phase
}

export function podRestarts(pod) {
  let n = 0
  for (const c of pod.status?.containers ?? []) n += typeof c.restarts === 'number' ? c.restarts : 0
  return n
}

export function podReady(pod) {
  const cs = pod.spec?.containers ?? []
  const st = pod.status?.containers ?? []
  const ready = st.filter((c) => c.state === 'running' && c.ready !== false).length
  return `${ready}/${cs.length}`
}
