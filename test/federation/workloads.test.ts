// Workloads in a shared namespace with real agents (separate processes, real meshes, real
// sandboxes): cluster home (h1) and cluster cloud (c1) share the namespace `shared`.
// What a user would notice: a PinnedDeployment applied on home gets its pods (created by the
// federation's deployment controller, run in the cluster its template allows); `orc rollout status`
// on either cluster counts them; a Job applied on cloud completes in home; `orc logs` on home reads a pod running in cloud and the other way
// round; a pod pinned to `h1@home`, applied on cloud, runs on h1, and `orc exec` reaches it from
// both home nodes but not from cloud; a pod home had in the namespace before sharing it stops while
// it is shared and runs again when home leaves, beside the copies home keeps; a pin to another cluster's node in
// a namespace that is not shared is refused with the reason.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { orc, waitFor } from '../cluster/helpers.ts'
import { pidsRunning, skipReason } from '../pods/helpers.ts'
import { homeAndCloud, ok } from './agents.ts'

const skip = skipReason()

test('shared namespace workloads: PinnedDeployment pods and rollout status, a Job, logs across clusters, pins to node@cluster', {
  skip,
  timeout: 120_000,
}, async (t) => {
  const markers = ['4712201', '4712202', '4712203']
  const { image, h1, h2, c1 } = await homeAndCloud(t, markers)
  // A pod home had in `shared` before sharing it: dormant while the namespace is federated.
  const container = (marker: string, word: string) => ({
    name: 'main',
    image,
    command: ['sh', '-c', `echo ${word} from $(hostname); exec sleep ${marker}`],
  })
  const early = {
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'early', namespace: 'shared' },
    spec: { terminationGracePeriodSeconds: 1, containers: [container(markers[2]!, 'early')] },
  }
  await ok(h1, ['apply', '-f', '-'], JSON.stringify(early))
  const earlyRuns = () => pidsRunning(['sleep', markers[2]!]).length > 0
  await waitFor('the early pod running in home', earlyRuns, 30_000)
  await ok(h1, ['federation', 'create', 'lab', '--namespace', 'shared'])
  await waitFor('the early pod stopped once its namespace is shared (hidden)', () => !earlyRuns(), 30_000)
  const token = (await ok(h1, ['federation', 'token', 'lab'])).split('\n')[0]!.trim()
  await ok(c1, ['federation', 'join', '--token', token])

  // 1. A PinnedDeployment applied on home whose pods may run only in cloud.
  const deployment = {
    apiVersion: 'orc/v1',
    kind: 'PinnedDeployment',
    metadata: { name: 'web', namespace: 'shared' },
    spec: {
      replicas: 2,
      previous: { spec: { terminationGracePeriodSeconds: 1, placement: { clusters: ['cloud'] }, containers: [container(markers[0]!, 'hello-web')] } },
    },
  }
  const t0 = Date.now()
  await ok(h1, ['apply', '-f', '-'], JSON.stringify(deployment))
  const status = await waitFor(
    'orc rollout status on home to count 2 ready replicas',
    async () => {
      const v = JSON.parse(await ok(h1, ['rollout', 'status', 'web', '-n', 'shared', '-o', 'json']))
      return v.previous?.ready === 2 && v.done === true ? v : undefined
    },
    45_000,
  )
  t.diagnostic(`2 replicas ready ${Date.now() - t0} ms after the apply on home`)
  assert.equal(status.pods.length, 2)
  for (const p of status.pods) assert.equal(p.node, 'c1@cloud', `${p.name} runs in cloud, as its template allows`)
  const pods = JSON.parse(await ok(h1, ['get', 'pods', '-n', 'shared', '-o', 'json'])) as { items?: any[] } | any[]
  const items = Array.isArray(pods) ? pods : (pods.items ?? [])
  assert.equal(items.length, 2, JSON.stringify(pods).slice(0, 300))
  for (const p of items) assert.equal(p.metadata.annotations?.['orc/cluster'], 'home', 'the deployment pods carry the cluster that created the deployment')
  // The same rollout as cloud sees it.
  const fromCloud = JSON.parse(await ok(c1, ['rollout', 'status', 'web', '-n', 'shared', '-o', 'json']))
  assert.equal(fromCloud.previous.ready, 2)

  // 2. Logs of a pod running in cloud, read on home (over the federation's mesh).
  const podName = status.pods[0].name as string
  const logs = await waitFor(
    'orc logs on home of a pod in cloud',
    async () => {
      const r = await orc(h1.socket, ['logs', `pod/${podName}`, '-n', 'shared'])
      return r.exitCode === 0 && /hello-web/.test(r.stdout) ? r.stdout : undefined
    },
    15_000,
  )
  assert.match(logs, /hello-web/)

  // 3. A pod pinned to h1@home, applied on cloud: it runs on h1; its logs read on cloud.
  const pinned = {
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'pinned', namespace: 'shared' },
    spec: { terminationGracePeriodSeconds: 1, placement: { node: 'h1@home' }, containers: [container(markers[1]!, 'hello-pin')] },
  }
  await ok(c1, ['apply', '-f', '-'], JSON.stringify(pinned))
  await waitFor(
    'the pinned pod to run on h1@home',
    async () => {
      const p = JSON.parse(await ok(c1, ['get', 'pod/pinned', '-n', 'shared', '-o', 'json']))
      return p.status?.phase === 'Running' && p.status.node === 'h1@home'
    },
    30_000,
  )
  const pinLogs = await waitFor(
    'orc logs on cloud of the pod on home',
    async () => {
      const r = await orc(c1.socket, ['logs', 'pod/pinned', '-n', 'shared'])
      return r.exitCode === 0 && /hello-pin/.test(r.stdout) ? r.stdout : undefined
    },
    15_000,
  )
  assert.match(pinLogs, /hello-pin/)
  // exec reaches a shared pod from the node that runs it and from another node of its cluster
  // (forwarded over home's mesh); from cloud it is refused with the reason, never "not found".
  for (const n of [h1, h2]) {
    const r = await orc(n.socket, ['exec', 'pinned', '-n', 'shared', '--', 'sh', '-c', 'echo exec-in-$(hostname)'], { USER: 'alice' })
    assert.equal(r.exitCode, 0, `exec from ${n.name}: ${r.stderr}`)
    assert.match(r.stdout, /^exec-in-pinned$/m, `exec from ${n.name} ran in the pod`)
  }
  const exec = await orc(c1.socket, ['exec', 'pinned', '-n', 'shared', '--', 'true'], { USER: 'alice' })
  assert.notEqual(exec.exitCode, 0)
  assert.match(
    exec.stderr,
    /pod\/pinned in shared namespace shared runs on node h1@home, in cluster home: orc exec and port-forward reach only pods on this cluster's \(cloud\) nodes/,
  )
  // A bare pin in a shared namespace names a node of the pod's cluster (here the creating one, cloud).
  await ok(
    c1,
    ['apply', '-f', '-'],
    JSON.stringify({ ...pinned, metadata: { name: 'bare-pin', namespace: 'shared' }, spec: { ...pinned.spec, placement: { node: 'c1' } } }),
  )
  await waitFor(
    'the bare-pinned pod to run on c1@cloud',
    async () => {
      const p = JSON.parse(await ok(h1, ['get', 'pod/bare-pin', '-n', 'shared', '-o', 'json']))
      return p.status?.phase === 'Running' && p.status.node === 'c1@cloud'
    },
    30_000,
  )

  // 4. A Job applied on cloud whose pods may run only in home: it completes there.
  const job = {
    apiVersion: 'orc/v1',
    kind: 'Job',
    metadata: { name: 'once', namespace: 'shared' },
    spec: { template: { spec: { placement: { clusters: ['home'] }, containers: [{ name: 'main', image, command: ['sh', '-c', 'echo job-done'] }] } } },
  }
  await ok(c1, ['apply', '-f', '-'], JSON.stringify(job))
  const done = await waitFor(
    'the shared Job to complete',
    async () => {
      const j = JSON.parse(await ok(h1, ['get', 'job/once', '-n', 'shared', '-o', 'json']))
      return j.status?.succeeded === 1 ? j : undefined
    },
    30_000,
  )
  assert.equal(done.metadata.annotations?.['orc/cluster'], 'cloud')
  const jobPod = JSON.parse(await ok(h1, ['get', 'pod/once-0', '-n', 'shared', '-o', 'json']))
  assert.match(jobPod.status.node, /^h[12]@home$/, 'the Job pod ran in home, as its template allows')

  // 5. A pin to another cluster's node in a namespace that is not shared: refused, nothing stored.
  const bad = await orc(c1.socket, ['apply', '-f', '-'], { USER: 'alice' }, JSON.stringify({ ...pinned, metadata: { name: 'pinned', namespace: 'default' } }))
  assert.notEqual(bad.exitCode, 0)
  assert.match(bad.stderr, /spec\.placement\.node: h1@home names a node of cluster home, but namespace default is not shared/)
  assert.notEqual((await orc(c1.socket, ['get', 'pod/pinned'])).exitCode, 0)

  // 6. Home leaves: its own pods of `shared` run again beside the copies it keeps; the deployment
  // pods only cloud may run stay pending in home with that reason.
  assert.equal(earlyRuns(), false)
  await ok(h1, ['federation', 'leave', 'lab'])
  await waitFor('the early pod running again in home after the leave', earlyRuns, 30_000)
  const kept = await waitFor(
    'the kept pod pinned to h1@home running in home as pinned to h1',
    async () => {
      const p = JSON.parse(await ok(h2, ['get', 'pod/pinned', '-n', 'shared', '-o', 'json']))
      return p.status?.phase === 'Running' ? p : undefined
    },
    30_000,
  )
  assert.equal(kept.spec.placement.node, 'h1')
})
