/** The agent's part of `orc doctor`: this host, then what only a running agent knows (peers, clocks, versions, listeners). */
import { formatDuration, type Mesh } from '../../mesh/index.ts'
import { clockFindings, type Finding, hostFindings } from './doctor.ts'
import type { PeerRow } from './peers.ts'

export interface NodeDoctorComponents {
  dataDir: string
  nodeName: string
  version: string
  now: () => number
  mesh?: Mesh
  peers: () => PeerRow[]
  httpAddress: () => string | undefined
}

/** Each alive peer's clock against ours, from the midpoint of one round trip. */
async function clockSkews(mesh: Mesh | undefined, now: () => number): Promise<Array<{ peer: string; skewMs: number | null; error?: string }>> {
  if (mesh === undefined) return []
  const peers = mesh.members().filter((m) => !m.self && m.state === 'alive')
  return Promise.all(
    peers.map(async (m) => {
      const t0 = now()
      try {
        const r = await mesh.memberRequest(m.peerId, { method: 'GET', path: '/v1/clock' }, { timeoutMs: 5000 })
        const t1 = now()
        const remote = (r.body as { now?: unknown } | null)?.now
        if (r.status !== 200 || typeof remote !== 'number')
          return { peer: m.name, skewMs: null, error: `answered HTTP ${r.status} (an older orc without /v1/clock?)` }
        return { peer: m.name, skewMs: remote - (t0 + t1) / 2 }
      } catch (err) {
        return { peer: m.name, skewMs: null, error: (err as Error).message }
      }
    }),
  )
}

export async function nodeDoctor(d: NodeDoctorComponents): Promise<Finding[]> {
  const out = await hostFindings(d.dataDir)
  out.push({ check: 'agent', status: 'ok', message: `agent ${d.nodeName} running (orc ${d.version}, pid ${process.pid})` })
  const mesh = d.mesh
  if (mesh !== undefined) {
    out.push({ check: 'ports', status: 'ok', message: `mesh listening on ${mesh.addresses().join(', ') || '<none>'}` })
    const dead = mesh.members().filter((m) => !m.self && m.state !== 'alive')
    for (const m of dead) {
      out.push({
        check: 'peers',
        status: 'warn',
        message: `${m.name} is ${m.state} (nothing heard ${m.lastSeen === null ? 'ever' : `for ${formatDuration(d.now() - m.lastSeen)}`})`,
        fix: `check that ${m.addresses[0] ?? 'its address'} is reachable on TCP from here, or remove it: orc node remove ${m.name}`,
      })
    }
    out.push(...clockFindings(await clockSkews(mesh, d.now)))
    const skewed = d.peers().filter((p) => !p.self && p.version !== null && p.version !== d.version)
    for (const p of skewed) {
      out.push({
        check: 'versions',
        status: 'warn',
        message: `${p.name} runs orc ${p.version}, this node ${d.version}`,
        fix: 'upgrade every node to one version (re-run the install one-liner from an upgraded node)',
      })
    }
  } else {
    out.push({ check: 'ports', status: 'info', message: 'this agent runs without the mesh' })
  }
  const h = d.httpAddress()
  out.push(
    h !== undefined
      ? { check: 'ports', status: 'ok', message: `install and metrics listener on https://${h}` }
      : { check: 'ports', status: 'info', message: 'HTTP listener off (no install script, no /metrics)', fix: 'orc up --http-listen 0.0.0.0:7418' },
  )
  return out
}
