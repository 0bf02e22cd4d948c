import assert from 'node:assert/strict'
import { test } from 'node:test'
import { checkAgentControllers } from '../../../src/agent/controllers.ts'
import { changedSpec, planDeploymentWrites } from '../../../src/agent/deployments/index.ts'
import { isOrcError, normalizeManifest } from '../../../src/model/index.ts'
import { templateHash } from '../../../src/sched/index.ts'

const tpl = (marker = '1') => ({ metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'main', image: '/img', command: ['sleep', marker] }] } })
const dep = (spec: Record<string, unknown>, name = 'web'): any => ({ apiVersion: 'orc/v1', kind: 'PinnedDeployment', metadata: { name }, spec })

function issues(m: unknown): string {
  try {
    normalizeManifest(m)
    return ''
  } catch (err) {
    return (err as Error).message
  }
}

test('PinnedDeployment validation names the field', () => {
  assert.equal(issues(dep({ replicas: 2, previous: tpl() })), '')
  assert.equal(issues(dep({ placement: { everyNode: true }, previous: tpl() })), '')
  assert.match(issues(dep({ previous: tpl() })), /spec\.replicas: required \(or set spec\.placement\.everyNode: true\)/)
  assert.match(issues(dep({ replicas: 2 })), /spec\.previous: required/)
  assert.match(issues(dep({ replicas: 2, previous: tpl(), next: tpl('2'), nextReplicas: 3 })), /spec\.nextReplicas: must be <= spec\.replicas \(2\)/)
  assert.match(
    issues(dep({ replicas: 2, previous: tpl(), next: tpl('2'), nextReplicas: 1, nextPercent: 5 })),
    /spec\.nextPercent: set either nextReplicas or nextPercent/,
  )
  assert.match(issues(dep({ replicas: 2, previous: tpl(), nextPercent: 5 })), /spec\.nextPercent: needs spec\.next/)
  assert.match(issues(dep({ replicas: 2, previous: tpl(), next: tpl(), nextPercent: 101 })), /spec\.nextPercent: must be <= 100/)
  assert.match(issues(dep({ replicas: 2, previous: { spec: { containers: [] } } })), /spec\.previous\.spec\.containers: must have at least one container/)
  assert.match(issues(dep({ replicas: 2, previous: { spec: { containers: [{ name: 'm' }] } } })), /spec\.previous\.spec\.containers\[0\]\.image: required/)
  assert.match(
    issues(dep({ replicas: 2, previous: { metadata: { labels: { 'orc/template': 'x' } }, spec: tpl().spec } })),
    /spec\.previous\.metadata\.labels\["orc\/template"\]: is set by orc/,
  )
  assert.match(
    issues(dep({ placement: { everyNode: true }, previous: { spec: { ...tpl().spec, placement: { node: 'a' } } } })),
    /spec\.previous\.spec\.placement\.node: cannot be set with placement\.everyNode/,
  )
  assert.match(issues(dep({ replicas: 1, previous: tpl() }, 'a'.repeat(51))), /metadata\.name: must be at most 50 characters/)
})

test('Pod affinity and tolerations are validated with the field named', () => {
  const pod = (spec: Record<string, unknown>) => ({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: 'p' },
    spec: { containers: [{ name: 'm', image: '/img' }], ...spec },
  })
  const ok = {
    affinity: {
      nodeAffinity: {
        required: [{ matchExpressions: [{ key: 'site', operator: 'In', values: ['eu'] }] }],
        preferred: [{ weight: 10, selector: { matchLabels: { disk: 'ssd' } } }],
      },
      podAntiAffinity: { required: [{ labelSelector: { matchLabels: { app: 'db' } }, topologyKey: 'site' }] },
      podAffinity: { preferred: [{ weight: 50, term: { labelSelector: { matchLabels: { app: 'cache' } }, topologyKey: 'node' } }] },
    },
    tolerations: [
      { key: 'gpu', operator: 'Exists', effect: 'NoSchedule' },
      { key: 'maint', value: 'yes', effect: 'NoExecute', tolerationSeconds: 60 },
    ],
    priority: 10,
  }
  assert.equal(issues(pod(ok)), '')
  assert.match(
    issues(pod({ affinity: { nodeAffinity: { required: [{ matchExpressions: [{ key: 'site', operator: 'In' }] }] } } })),
    /spec\.affinity\.nodeAffinity\.required\[0\]\.matchExpressions\[0\]\.values: operator In needs at least one value/,
  )
  assert.match(
    issues(pod({ affinity: { podAntiAffinity: { required: [{ labelSelector: {} }] } } })),
    /spec\.affinity\.podAntiAffinity\.required\[0\]\.topologyKey: required/,
  )
  assert.match(
    issues(pod({ affinity: { podAffinity: { preferred: [{ weight: 500, term: { labelSelector: {}, topologyKey: 'node' } }] } } })),
    /spec\.affinity\.podAffinity\.preferred\[0\]\.weight: must be <= 100/,
  )
  assert.match(issues(pod({ tolerations: [{ operator: 'Equal', value: 'x' }] })), /spec\.tolerations\[0\]\.key: required unless operator is Exists/)
  assert.match(
    issues(pod({ tolerations: [{ key: 'k', effect: 'NoSchedule', tolerationSeconds: 5 }] })),
    /spec\.tolerations\[0\]\.tolerationSeconds: only for effect NoExecute/,
  )
  assert.match(
    issues(pod({ tolerations: [{ key: 'k', effect: 'Sometimes' }] })),
    /spec\.tolerations\[0\]\.effect: must be one of NoSchedule, PreferNoSchedule, NoExecute/,
  )
})

test('rollout set / promote / abort: the new spec, and clear errors', () => {
  const d = dep({ replicas: 4, previous: tpl('1'), next: tpl('2'), nextReplicas: 1 })
  assert.deepEqual(changedSpec(d, 'set', { nextPercent: 50 }).spec, { replicas: 4, previous: tpl('1'), next: tpl('2'), nextPercent: 50 })
  assert.deepEqual(changedSpec(d, 'promote', {}).spec, { replicas: 4, previous: tpl('2') })
  assert.deepEqual(changedSpec(d, 'abort', {}).spec, { replicas: 4, previous: tpl('1') })
  assert.throws(() => changedSpec(d, 'set', { nextReplicas: 5 }), /nextReplicas: must be a whole number from 0 to 4, got 5/)
  assert.throws(() => changedSpec(d, 'set', {}), /exactly one of nextReplicas/)
  const plain = dep({ replicas: 4, previous: tpl('1') })
  for (const a of ['set', 'promote', 'abort']) {
    assert.throws(
      () => changedSpec(plain, a, { nextPercent: 5 }),
      (e: unknown) => isOrcError(e, 'conflict') && /has no spec\.next/.test((e as Error).message),
    )
  }
})

test('the deployment controllers join the agent graph without a loop', () => {
  const g = checkAgentControllers()
  assert.deepEqual(g.loops, [])
  assert.ok(g.edges.some((e) => e.from === 'controller:deployment' && e.to === 'controller:scheduler'))
  assert.ok(g.edges.some((e) => e.from === 'controller:lifecycle' && e.to === 'controller:rollout'))
})

test('the PinnedDeployment examples are valid', async () => {
  const { readManifests } = await import('../../../src/cli/manifests.ts')
  const root = new URL('../../..', import.meta.url).pathname
  for (const f of ['examples/pinned-deployment.yaml', 'examples/log-shipper.yaml']) {
    const docs = await readManifests([`${root}${f}`])
    assert.equal(docs.length, 1)
    assert.doesNotThrow(() => normalizeManifest(docs[0]!.value), f)
  }
})

test('a rollout step waits for new pods to be Ready, and an aborted next template is planned away', () => {
  const spec = { replicas: 2, maxSurge: 1, maxUnavailable: 0, previous: tpl('1'), next: tpl('2'), nextReplicas: 2 }
  const hp = templateHash({ labels: { app: 'web' }, spec: tpl('1').spec })
  const hn = templateHash({ labels: { app: 'web' }, spec: tpl('2').spec })
  const d = (status?: Record<string, unknown>): any => ({ ...dep(spec), metadata: { name: 'web', namespace: 'default' }, ...(status ? { status } : {}) })
  const pod = (h: string, i: number, ready: boolean, t = tpl(h === hp ? '1' : '2')): any => ({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name: `web-${h}-${i}`, namespace: 'default', labels: { app: 'web', 'orc/deployment': 'web', 'orc/template': h } },
    spec: t.spec,
    status: {
      phase: 'Running',
      node: 'n1',
      containers: [{ name: 'main', state: 'running' }],
      conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', reason: 'x', lastTransitionTime: '2026-01-01T00:00:00Z' }],
    },
  })
  const text = (ws: ReturnType<typeof planDeploymentWrites>) =>
    ws.map((w) => (w.op === 'apply' ? `create ${w.manifest.metadata.name}` : `delete ${w.ref.name}`))
  // Both previous pods Ready: one next pod (maxSurge 1), no previous pod deleted.
  assert.deepEqual(text(planDeploymentWrites([d()], [pod(hp, 0, true), pod(hp, 1, true)], [])), [`create web-${hn}-0`])
  // The next pod is not Ready: nothing moves.
  assert.deepEqual(text(planDeploymentWrites([d()], [pod(hp, 0, true), pod(hp, 1, true), pod(hn, 0, false)], [])), [])
  // Ready: one previous pod goes (the next creation waits for room).
  assert.deepEqual(text(planDeploymentWrites([d()], [pod(hp, 0, true), pod(hp, 1, true), pod(hn, 0, true)], [])), [`delete web-${hp}-1`])
  // Aborted (status.rollout of controller:rollout): previous restored, the next pod deleted.
  const aborted = d({ rollout: { template: hn, state: 'Aborted', marker: 'm', lastProgress: '2026-01-01T00:00:00Z', reason: 'no progress' } })
  assert.deepEqual(text(planDeploymentWrites([aborted], [pod(hp, 0, true), pod(hn, 0, false)], [])), [`create web-${hp}-1`, `delete web-${hn}-0`])
})

test('maxSurge and maxUnavailable cannot both be 0', () => {
  assert.match(
    issues(dep({ replicas: 2, previous: tpl(), maxSurge: 0, maxUnavailable: 0 })),
    /spec\.maxUnavailable: maxSurge and maxUnavailable cannot both be 0/,
  )
  assert.equal(issues(dep({ replicas: 2, previous: tpl(), maxSurge: 0, maxUnavailable: 1, progressDeadlineSeconds: 60 })), '')
})
