// Sharing a namespace after create with real agents (separate processes, real meshes, real
// sandboxes) and the real CLI: cluster home (h1) and cluster cloud (c1) federate `shared`, then
// share `web` with `orc federation propose lab share-namespace web` (with two clusters, one
// approval is the quorum: it passes at once). What a user would notice: a pod home ran in `web`
// before stops while `web` is shared; a pod applied in `web` on cloud is listed on home and runs
// there; after `unshare-namespace` home's own pod runs again, each cluster keeps a copy of the
// shared pod, and a pod applied in `web` on cloud stays in cloud. Bad requests are refused with
// the reason.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { type NodeProcess, orc, waitFor } from '../cluster/helpers.ts'
import { pidsRunning, skipReason } from '../pods/helpers.ts'
import { homeAndCloud, ok } from './agents.ts'

const skip = skipReason()

const podOf = async (n: NodeProcess, name: string, ns: string): Promise<any> => {
  const r = await orc(n.socket, ['get', `pod/${name}`, '-n', ns, '-o', 'json'])
  return r.exitCode === 0 ? JSON.parse(r.stdout) : undefined
}

test('two clusters: share a namespace after create, a pod applied in it on cloud runs in home; unshare keeps copies', { skip, timeout: 180_000 }, async (t) => {
  const markers = ['4713301', '4713302', '4713303', '4713304', '4713305']
  const { image, h1, h2, c1 } = await homeAndCloud(t, markers)
  const sleeper = (name: string, marker: string, spec: Record<string, unknown> = {}) => ({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name, namespace: 'web' },
    spec: { terminationGracePeriodSeconds: 1, ...spec, containers: [{ name: 'main', image, command: ['sleep', marker] }] },
  })
  const runs = (marker: string) => () => pidsRunning(['sleep', marker]).length > 0

  // Home's own pod in `web`, running before `web` is shared.
  await ok(h1, ['apply', '-f', '-'], JSON.stringify(sleeper('early', markers[0]!)))
  await waitFor('home’s own pod running', runs(markers[0]!), 30_000)
  await ok(h1, ['federation', 'create', 'lab', '--namespace', 'shared'])
  const token = (await ok(h1, ['federation', 'token', 'lab'])).split('\n')[0]!.trim()
  await ok(c1, ['federation', 'join', '--token', token])

  // Refused with the reason: the default namespace, one shared already, not a DNS label, unsharing one not shared.
  for (const [args, why] of [
    [['share-namespace', 'default'], /namespace default holds every object applied without -n/],
    [['share-namespace', 'shared'], /namespace shared is already shared in federation lab/],
    [['share-namespace', 'Web'], /namespace: must be a DNS label/],
    [['unshare-namespace', 'web'], /namespace web is not shared in federation lab/],
  ] as const) {
    const r = await orc(h1.socket, ['federation', 'propose', 'lab', ...args], { USER: 'alice' })
    assert.notEqual(r.exitCode, 0, args.join(' '))
    assert.match(r.stderr, why)
  }

  // Share `web`: with two clusters, home's approval alone passes it.
  const t0 = Date.now()
  const out = await ok(h1, ['federation', 'propose', 'lab', 'share-namespace', 'web'])
  assert.match(out, /^proposal share-namespace-web-[0-9a-f]{6} passed \(1\/1\): namespace web is shared by every member cluster$/m)
  await waitFor('cloud shares web', async () => JSON.parse(await ok(c1, ['federation', 'status', 'lab', '-o', 'json'])).namespaces?.includes('web'), 30_000)
  assert.match(await ok(c1, ['get', 'federations']), /lab\s+\S+\s+shared,web\s+cloud/)
  await waitFor(
    'home’s second node shares web too',
    async () => JSON.parse(await ok(h2, ['federation', 'status', 'lab', '-o', 'json'])).namespaces?.includes('web'),
    45_000,
  )
  await waitFor('home’s own pod stopped while web is shared (dormant)', () => !runs(markers[0]!)(), 30_000)
  assert.equal((await ok(h1, ['get', 'pods', '-n', 'web', '-o', 'name'])).trim(), '', 'home’s own pod is hidden behind the federation')

  // A pod applied in `web` on cloud, which only home may run: listed on home, runs there.
  await ok(c1, ['apply', '-f', '-'], JSON.stringify(sleeper('from-cloud', markers[1]!, { placement: { clusters: ['home'] } })))
  const running = await waitFor(
    'the pod applied on cloud running on a node of home',
    async () => {
      const p = await podOf(h1, 'from-cloud', 'web')
      return p?.status?.phase === 'Running' && runs(markers[1]!)() ? p : undefined
    },
    45_000,
  )
  t.diagnostic(`shared, then a pod applied on cloud running in home, ${Date.now() - t0} ms after the propose`)
  assert.match(running.status.node, /^h[12]@home$/)
  assert.equal((await podOf(h2, 'from-cloud', 'web'))?.status?.node, running.status.node, 'home’s second node reads it from the federation too')
  const hist = await ok(h1, ['history', 'pod/from-cloud', '-n', 'web'])
  assert.match(hist, /user:\w+@cloud +create/, 'written by a user of cloud')

  // Unshare on cloud: passes at once; home keeps a copy (it runs as home's own) and its own pod runs again.
  const un = await ok(c1, ['federation', 'propose', 'lab', 'unshare-namespace', 'web'])
  assert.match(un, /passed \(1\/1\): namespace web is no longer shared: each member cluster keeps copies of its objects/)
  await waitFor('home’s own pod running again after the unshare', runs(markers[0]!), 45_000)
  const kept = await waitFor(
    'home’s kept copy of the pod running in home',
    async () => {
      const p = await podOf(h1, 'from-cloud', 'web')
      return p?.status?.phase === 'Running' && /^h[12]$/.test(p.status.node) ? p : undefined
    },
    45_000,
  )
  assert.equal(kept.spec.placement?.clusters, undefined, 'placement.clusters [home] dropped in home’s copy')
  assert.match(await ok(h1, ['history', 'pod/from-cloud', '-n', 'web']), /kept from federation lab \(namespace web unshared\)/)
  // Cloud keeps its copy too (only home may run it: pending there with its placement).
  const cloudCopy = await waitFor('cloud’s kept copy', () => podOf(c1, 'from-cloud', 'web'), 30_000)
  assert.deepEqual(cloudCopy.spec.placement?.clusters, ['home'])
  assert.match(await ok(c1, ['get', 'federations']), /lab\s+\S+\s+shared\s+cloud/)
  // From now on `web` is each cluster's own: a pod applied on cloud stays there.
  await ok(c1, ['apply', '-f', '-'], JSON.stringify(sleeper('cloud-only', markers[2]!)))
  await ok(c1, ['apply', '-f', '-'], JSON.stringify({ ...sleeper('probe', markers[3]!), metadata: { name: 'probe', namespace: 'shared' } }))
  await waitFor('the federation still replicates shared', async () => (await podOf(h1, 'probe', 'shared')) !== undefined, 30_000)
  assert.equal(await podOf(h1, 'cloud-only', 'web'), undefined)

  // A namespace only home's users write: cloud reads it, its users are refused with the reason.
  assert.match(
    await ok(h1, ['federation', 'propose', 'lab', 'share-namespace', 'docs', '--writers', 'home']),
    /passed \(1\/1\): namespace docs is shared by every member cluster, written by the users of home only/,
  )
  await waitFor('cloud shares docs, written by home', async () => /docs \(written by home\)/.test(await ok(c1, ['federation', 'status', 'lab'])), 30_000)
  await ok(h1, ['apply', '-f', '-'], JSON.stringify({ ...sleeper('notes', markers[4]!), metadata: { name: 'notes', namespace: 'docs' } }))
  await waitFor('cloud reads home’s pod in docs', async () => (await podOf(c1, 'notes', 'docs')) !== undefined, 30_000)
  const refused = await orc(c1.socket, ['delete', 'pod/notes', '-n', 'docs'], { USER: 'alice' })
  assert.notEqual(refused.exitCode, 0)
  assert.match(refused.stderr, /namespace docs of federation lab is written by the users of home only: cluster cloud reads it/)
  assert.ok(await podOf(h1, 'notes', 'docs'), 'nothing was deleted')

  // The writers change while docs stays shared: cloud's users write there too, and cloud's write
  // names the writers it was made under.
  const set = await ok(h1, ['federation', 'propose', 'lab', 'set-writers', 'docs', '--writers', 'home,cloud'])
  assert.match(set, /passed \(1\/1\): namespace docs is written by the users of cloud, home only/)
  const setId = /proposal (set-writers-docs-[0-9a-f]{6})/.exec(set)![1]!
  await waitFor('cloud has the new writers', async () => /docs \(written by cloud, home\)/.test(await ok(c1, ['federation', 'status', 'lab'])), 30_000)
  await ok(c1, ['delete', 'pod/notes', '-n', 'docs'])
  await waitFor('home has cloud’s delete', async () => (await podOf(h1, 'notes', 'docs')) === undefined, 30_000)
  assert.match(await ok(h1, ['history', 'pod/notes', '-n', 'docs']), new RegExp(`@cloud\\s+delete\\s+\\[writers ${setId}\\]`))
})
