// Shared by the in-process federation tests: clusters of one node each (real LevelDB stores, real
// libp2p hosts on loopback), each with its FederationManager and the API's routed store.

import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pino from 'pino'
import { FederationManager, routedStore } from '../../src/agent/federation/index.ts'
import { systemClock } from '../../src/effects/index.ts'
import type { MeshTunables } from '../../src/mesh/index.ts'
import { type ObjectStore, openStore } from '../../src/store/index.ts'
import { fastTunables, waitFor } from '../mesh/helpers.ts'

// ORC_LOG_LEVEL=warn shows the federations' refusals and repairs when a test hangs.
const silent = pino({ level: process.env.ORC_LOG_LEVEL ?? 'silent' })

export interface Side {
  dir: string
  store: ObjectStore
  fm: FederationManager
  api: ObjectStore
  /** Stop this node's federations and start them again from disk (an agent restart). */
  restart(): Promise<void>
}

type After = { after(fn: () => Promise<void>): void }

export async function side(t: After, node: string, cluster: string, tunables: Partial<MeshTunables> = {}): Promise<Side> {
  const dir = await mkdtemp(join(tmpdir(), `orc-fed-${cluster}-`))
  const store = await openStore({ dir: join(dir, 'db') })
  const make = () =>
    new FederationManager({
      dataDir: dir,
      nodeName: node,
      store,
      cluster: () => ({ name: cluster, id: Buffer.from(cluster.padEnd(16, '0')).toString('hex').slice(0, 32) }),
      listen: ['/ip4/127.0.0.1/tcp/0'],
      logger: silent,
      clock: systemClock,
      tunables: { ...fastTunables, ...tunables },
    })
  const s: Side = {
    dir,
    store,
    fm: make(),
    api: store,
    async restart() {
      await s.fm.stop()
      s.fm = make()
      await s.fm.start()
      s.api = routedStore(store, s.fm)
    },
  }
  await s.fm.start()
  s.api = routedStore(store, s.fm)
  t.after(async () => {
    await s.fm.stop()
    await store.close()
    await rm(dir, { recursive: true, force: true })
  })
  return s
}

export const inNs = (ns: string, o: any) => ({ ...o, metadata: { ...o.metadata, namespace: ns } })
export const ref = (ns: string, name: string) => ({ kind: 'Pod', namespace: ns, name })
export const clusterRef = (name: string) => ({ kind: 'Cluster', namespace: '', name })

/** Home creates federation `shared` (namespace `shared`) and cloud joins it with a token. */
export async function federated(t: After): Promise<{ a: Side; b: Side }> {
  const a = await side(t, 'a1', 'home')
  const b = await side(t, 'b1', 'cloud')
  await a.fm.create({ name: 'shared', namespaces: ['shared'], author: 'user:alice' })
  const { token } = await a.fm.token('shared', { author: 'user:alice' })
  const view = await b.fm.join({ token, author: 'user:bob' })
  assert.equal(view.name, 'shared')
  assert.deepEqual(view.namespaces, ['shared'])
  await waitFor('home sees cloud in the federation', () => (a.fm.status('shared').clusters ?? []).some((c) => c.name === 'cloud'))
  return { a, b }
}

/** home and cloud (federated), then edge joins with a token of cloud's: every member sees all three. */
export async function three(t: { after(fn: () => Promise<void>): void }): Promise<{ a: Side; b: Side; c: Side }> {
  const { a, b } = await federated(t)
  const c = await side(t, 'c1', 'edge')
  // With two clusters any one admits a third: cloud (not the creator) issues the token.
  const { token } = await b.fm.token('shared', { author: 'user:bob' })
  await c.fm.join({ token, author: 'user:erin' })
  for (const [s, who] of [
    [a, 'home'],
    [b, 'cloud'],
    [c, 'edge'],
  ] as const)
    await waitFor(
      `${who} sees three clusters, connected`,
      () => (s.fm.status('shared').clusters ?? []).filter((x) => x.self || x.connected > 0).length === 3,
      60_000,
    )
  return { a, b, c }
}
