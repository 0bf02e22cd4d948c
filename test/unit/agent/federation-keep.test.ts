// What a cluster keeps of a shared namespace when it stops sharing it (leave, removal, unshare):
// every kind the document holds there, placement kept for this cluster, finished work and Secrets
// it cannot open left behind with the reason.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { keptObjects, keptSpec } from '../../../src/agent/federation/keep.ts'
import type { OrcObject } from '../../../src/model/index.ts'

const obj = (kind: string, name: string, spec: Record<string, unknown>, extra: Record<string, unknown> = {}): OrcObject =>
  ({ apiVersion: 'orc/v1', kind, metadata: { name, namespace: 'web', labels: { app: name }, revisionId: 'r1', uid: 'u' }, spec, ...extra }) as never

/** What cloud keeps of `doc` (kind → objects) when it leaves federation lab. */
const keepOf = (doc: Map<string, OrcObject[]>, canOpen: (s: OrcObject) => boolean = () => true, why = 'left') =>
  keptObjects((k) => doc.get(k) ?? [], ['web'], 'cloud', 'lab', why, canOpen)

const template = (placement: Record<string, unknown>) => ({ spec: { containers: [{ name: 'm', image: 'x' }], placement } })

test('every shared kind is copied in order, with status and system metadata left out', () => {
  const doc = new Map<string, OrcObject[]>([
    ['Pod', [obj('Pod', 'p', { containers: [] }, { status: { phase: 'Running', node: 'n1@home' } })]],
    ['Config', [obj('Config', 'cfg', { data: { a: '1' } })]],
    ['Service', [obj('Service', 'svc', { selector: { app: 'p' } })]],
    ['CronJob', [obj('CronJob', 'nightly', { schedule: '0 3 * * *', jobTemplate: { spec: { template: template({}) } } })]],
    ['Job', [obj('Job', 'once', { template: template({}) }, { status: { active: 1 } })]],
    ['Secret', [obj('Secret', 'db', { sealed: {}, shareable: true })]],
  ])
  const { copies, left } = keepOf(doc)
  assert.deepEqual(left, [])
  assert.deepEqual(
    copies.map((c) => `${c.copy.kind}/${c.copy.metadata.name}`),
    ['Config/cfg', 'Secret/db', 'Service/svc', 'CronJob/nightly', 'Job/once', 'Pod/p'],
  )
  const pod = copies.at(-1)!.copy as OrcObject & { status?: unknown }
  assert.equal(pod.status, undefined, 'a copy starts afresh')
  assert.deepEqual(pod.metadata, { name: 'p', namespace: 'web', labels: { app: 'p' } })
  assert.ok(copies.every((c) => c.reason === 'kept from federation lab (left)'))
})

test('objects of other namespaces stay where they are', () => {
  const other = { ...obj('Config', 'elsewhere', {}), metadata: { name: 'elsewhere', namespace: 'shared' } } as OrcObject
  const { copies } = keepOf(new Map([['Config', [other, obj('Config', 'mine', {})]]]), undefined, 'namespace web unshared')
  assert.deepEqual(
    copies.map((c) => c.copy.metadata.name),
    ['mine'],
  )
})

test('finished Jobs and pods, and Secrets this cluster cannot open, are left with the reason', () => {
  const done = { conditions: [{ type: 'Complete', status: 'True' }] }
  const doc = new Map<string, OrcObject[]>([
    ['Job', [obj('Job', 'done', { template: template({}) }, { status: done }), obj('Job', 'running', { template: template({}) }, { status: { active: 1 } })]],
    [
      'Pod',
      [
        obj('Pod', 'done-0', { restartPolicy: 'Never', containers: [] }, { status: { phase: 'Succeeded' } }),
        obj('Pod', 'failed-0', { restartPolicy: 'OnFailure', containers: [] }, { status: { phase: 'Failed' } }),
        // A restartPolicy Always pod is never finished: it runs again as a copy.
        obj('Pod', 'server', { containers: [] }, { status: { phase: 'Failed' } }),
      ],
    ],
    ['Secret', [obj('Secret', 'theirs', { sealed: {} }), obj('Secret', 'ours', { sealed: {} })]],
  ])
  const { copies, left } = keepOf(doc, (s) => s.metadata.name === 'ours')
  assert.deepEqual(
    copies.map((c) => `${c.copy.kind}/${c.copy.metadata.name}`),
    ['Secret/ours', 'Job/running', 'Pod/server'],
  )
  assert.deepEqual(
    left.map((l) => `${l.ref.kind}/${l.ref.name}: ${l.why}`),
    [
      'Secret/theirs: sealed by another cluster: this cluster cannot open it',
      'Job/done: finished (Complete): a copy would run it again',
      'Pod/done-0: finished (Succeeded): a copy would run it again',
      'Pod/failed-0: finished (Failed): a copy would run it again',
    ],
  )
})

test("the placement in every pod template is kept for this cluster: its own clusters dropped, a pin to it made bare, another cluster's kept", () => {
  const mine = { clusters: ['home', 'cloud'], preferClusters: ['home'] }
  const job = keptSpec('Job', { template: template(mine), parallelism: 2 }, 'cloud')
  assert.equal(job.spec!.template.spec.placement.clusters, undefined)
  assert.equal(job.spec!.template.spec.placement.preferClusters, undefined)
  assert.equal(job.spec!.parallelism, 2)
  assert.deepEqual(job.changed, ['template: placement.clusters [home, cloud] dropped'])
  const cron = keptSpec('CronJob', { schedule: '* * * * *', jobTemplate: { spec: { template: template({ node: 'n1@cloud' }) } } }, 'cloud')
  assert.equal(cron.spec!.jobTemplate.spec.template.spec.placement.node, 'n1')
  assert.deepEqual(cron.changed, ['jobTemplate: pin n1@cloud is now n1'])
  const pd = keptSpec('PinnedDeployment', { previous: template(mine), next: template({ clusters: ['home'] }) }, 'cloud')
  assert.deepEqual(pd.changed, ['previous: placement.clusters [home, cloud] dropped'])
  assert.deepEqual(pd.spec!.next.spec.placement.clusters, ['home'], 'a template only home may run stays as written')
  const pod = keptSpec('Pod', { containers: [], placement: { node: 'n2@home' } }, 'cloud')
  assert.deepEqual(pod.changed, [])
  const unchanged = { template: template({ clusters: ['home'] }) }
  assert.equal(keptSpec('Job', unchanged, 'cloud').spec, unchanged, 'nothing to change: the same spec')
  assert.equal(keptSpec('Service', { selector: {} }, 'cloud').changed.length, 0)
})
