// `orc top` joins every member's own figures: a member's answer is untrusted input. What a user
// would notice: a member cannot put rows about other nodes (or nonsense figures) into the table,
// and the table says which member answered rows that were dropped.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { memberTopRows, type PodTop, topRoutes } from '../../../src/agent/pods/top.ts'
import type { TopAnswer } from '../../../src/agent/routes.ts'

const nodeRow = (node: string) => ({ node, cpuMillis: 120, cpuCores: 2, memoryBytes: 1 << 30, memoryTotalBytes: 4 << 30, pods: 1 })
const podRow = (node: string, name: string, cpu: unknown = 5): any => ({
  namespace: 'default',
  name,
  node,
  cpuMillis: cpu,
  cpuSeconds: 1.5,
  memoryBytes: 1 << 20,
  containers: [{ name: 'main', cpuMillis: 5, cpuSeconds: 1.5, memoryBytes: 1 << 20 }],
})

test('orc top keeps a member’s rows about itself and drops rows about other nodes or with bad figures', async () => {
  const own: TopAnswer = { nodes: [nodeRow('a')], pods: [podRow('a', 'web')], vms: [], unreachable: [] }
  const top = { local: async () => own } as unknown as PodTop
  const members = async () => [
    { node: 'b', status: 200, body: { nodes: [nodeRow('b')], pods: [podRow('b', 'api')], vms: [podRow('b', 'vm1')] } },
    // c claims a's pod and a node row for a, and sends a negative and a non-numeric figure.
    {
      node: 'c',
      status: 200,
      body: { nodes: [nodeRow('c'), nodeRow('a')], pods: [podRow('c', 'db'), podRow('a', 'web'), podRow('c', 'neg', -1), podRow('c', 'str', '7')] },
    },
    { node: 'd', error: 'timed out' },
  ]
  const answer = (await topRoutes(
    () => top,
    () => members,
  ).top()) as TopAnswer
  assert.deepEqual(answer.nodes.map((n) => n.node).sort(), ['a', 'b', 'c'])
  assert.deepEqual(answer.pods.map((p) => `${p.node}/${p.name}`).sort(), ['a/web', 'b/api', 'c/db'])
  assert.deepEqual(
    answer.vms!.map((v) => v.name),
    ['vm1'],
  )
  assert.deepEqual(answer.unreachable, [
    { node: 'c', error: 'answered 4 malformed rows or rows about other nodes (not shown)' },
    { node: 'd', error: 'timed out' },
  ])
})

test('a member’s answer is capped and a row with too many containers is dropped', () => {
  const many = Array.from({ length: 10_005 }, (_, i) => podRow('b', `p${i}`))
  const fat = { ...podRow('b', 'fat'), containers: Array.from({ length: 65 }, (_, i) => ({ name: `c${i}`, cpuMillis: 1, cpuSeconds: 1, memoryBytes: 1 })) }
  const rows = memberTopRows('b', { nodes: [nodeRow('b')], pods: [fat, ...many] })
  assert.equal(rows.pods.length, 10_000)
  assert.equal(rows.dropped, 6)
  assert.ok(!rows.pods.some((p) => p.name === 'fat'))
})
