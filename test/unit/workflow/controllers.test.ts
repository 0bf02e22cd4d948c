import assert from 'node:assert/strict'
import { test } from 'node:test'
import { isOrcError, OwnershipTable, USERS } from '../../../src/model/index.ts'
import { buildControllerGraph, type ControllerDecl, checkControllers, controllerClaims, formatControllerGraph } from '../../../src/workflow/index.ts'

const scheduler: ControllerDecl = {
  name: 'controller:scheduler',
  reads: ['Pod.spec', 'Node.status'],
  writes: ['Pod.status.node'],
}
const lifecycle: ControllerDecl = {
  name: 'controller:lifecycle',
  reads: ['Pod.spec', 'Pod.status.node'],
  writes: ['Pod.status'],
}

test('a controller set that settles is accepted and shown as who feeds whom', () => {
  const g = checkControllers([scheduler, lifecycle])
  // lifecycle writes Pod.status (which covers status.node) but reads its own write only; scheduler
  // does not read Pod.status, so no loop.
  assert.deepEqual(g.edges, [{ from: 'controller:scheduler', to: 'controller:lifecycle', via: [{ written: 'Pod.status.node', read: 'Pod.status.node' }] }])
  assert.deepEqual(g.loops, [])
  assert.equal(
    formatControllerGraph(g),
    [
      'controller:scheduler',
      '  reads   Pod.spec, Node.status',
      '  writes  Pod.status.node',
      '  feeds   controller:lifecycle via Pod.status.node',
      'controller:lifecycle',
      '  reads   Pod.spec, Pod.status.node',
      '  writes  Pod.status',
    ].join('\n'),
  )
  assert.deepEqual(JSON.parse(JSON.stringify(g)), g)
  // the writes become ownership claims: nested claims resolve to the longest prefix
  const table = new OwnershipTable(controllerClaims([scheduler, lifecycle]))
  assert.equal(table.ownerOf('Pod', ['status', 'node']), 'controller:scheduler')
  assert.equal(table.ownerOf('Pod', ['status', 'phase']), 'controller:lifecycle')
  assert.equal(table.ownerOf('Pod', ['spec', 'image']), USERS)
})

test('a read/write loop is refused, naming the loop field by field', () => {
  const a: ControllerDecl = { name: 'controller:a', reads: ['Pod.status.y'], writes: ['Pod.status.x'] }
  const b: ControllerDecl = { name: 'controller:b', reads: ['Pod.status.x'], writes: ['Node.status.load'] }
  const c: ControllerDecl = { name: 'controller:c', reads: ['Node.status'], writes: ['Pod.status.y'] }
  assert.throws(
    () => checkControllers([a, b, c]),
    (err: unknown) => {
      assert.ok(isOrcError(err, 'conflict'))
      assert.equal(
        err.message,
        'read/write loop that may never settle: controller:a writes Pod.status.x read by controller:b, ' +
          'which writes Node.status.load read (as Node.status) by controller:c, which writes Pod.status.y read by controller:a',
      )
      return true
    },
  )
  const g = buildControllerGraph([a, b, c])
  assert.deepEqual(g.loops[0]!.controllers, ['controller:a', 'controller:b', 'controller:c'])
  assert.match(formatControllerGraph(g), /\nproblems:\n {2}loop: controller:a writes Pod\.status\.x/)
})

test('reading a field it writes itself does not make a controller a loop', () => {
  const reconciler: ControllerDecl = { name: 'controller:routes', reads: ['Node.status.routes', 'Node.spec'], writes: ['Node.status.routes'] }
  assert.deepEqual(checkControllers([reconciler]).loops, [])
  // …but two controllers that each react to the other's write are a loop, even if one also reads itself
  const other: ControllerDecl = { name: 'controller:echo', reads: ['Node.status.routes'], writes: ['Node.spec.echo'] }
  assert.throws(
    () => checkControllers([reconciler, other]),
    /controller:echo writes Node\.spec\.echo read \(as Node\.spec\) by controller:routes, which writes Node\.status\.routes read by controller:echo/,
  )
})

test('two controllers writing the same field are refused, naming both', () => {
  const other: ControllerDecl = { name: 'controller:placer', reads: ['Pod.spec'], writes: ['Pod.status.node'] }
  assert.throws(
    () => checkControllers([scheduler, lifecycle, other]),
    (err: unknown) => isOrcError(err, 'conflict') && err.message === 'Pod.status.node is written by both controller:scheduler and controller:placer',
  )
})

test('malformed declarations are refused', () => {
  assert.throws(() => buildControllerGraph([{ name: 'scheduler', reads: [], writes: [] }]), /must be controller:<name>/)
  assert.throws(() => buildControllerGraph([{ name: 'controller:x', reads: ['pod.spec'], writes: [] }]), /reads field "pod.spec"/)
  assert.throws(() => buildControllerGraph([{ name: 'controller:x', reads: [], writes: ['Pod'] }]), /a whole kind cannot be owned/)
  assert.throws(() => buildControllerGraph([scheduler, scheduler]), /declared twice/)
})

test('a gate read (when to write, not what) is no loop edge, and orc controllers lists it', () => {
  const lifecycle: ControllerDecl = { name: 'controller:lifecycle', reads: ['Pod.spec'], writes: ['Pod.status'] }
  const asRead: ControllerDecl = { name: 'controller:deployment', reads: ['PinnedDeployment.spec', 'Pod.status.conditions'], writes: ['Pod.spec'] }
  assert.throws(() => checkControllers([lifecycle, asRead]), /read\/write loop/)
  const gated: ControllerDecl = { name: 'controller:deployment', reads: ['PinnedDeployment.spec'], gates: ['Pod.status.conditions'], writes: ['Pod.spec'] }
  const g = checkControllers([lifecycle, gated])
  assert.deepEqual(g.loops, [])
  assert.match(
    formatControllerGraph(g),
    /controller:deployment\n {2}reads {3}PinnedDeployment\.spec\n {2}writes {2}Pod\.spec\n {2}waits on Pod\.status\.conditions/,
  )
  assert.throws(() => buildControllerGraph([{ ...gated, gates: ['bad field'] }]), /gates field "bad field"/)
})

test('a creation counts as a write of the spec; a read that settles is listed but makes no loop', () => {
  const job = { name: 'controller:job', reads: ['Job.spec', 'Pod.status.phase'], writes: ['Job.status'], creates: ['Pod'] }
  const lifecycle = { name: 'controller:lifecycle', reads: ['Pod.spec'], writes: ['Pod.status.phase'] }
  // Without `settles`, creating pods and reading their phase is a loop through the lifecycle.
  assert.throws(() => checkControllers([job, lifecycle]), /read\/write loop.*controller:job/)
  const g = checkControllers([{ ...job, settles: { 'Pod.status.phase': 'finished pods never change' } }, lifecycle])
  assert.deepEqual(g.loops, [])
  assert.ok(g.edges.some((e) => e.from === 'controller:job' && e.to === 'controller:lifecycle' && e.via[0]?.written === 'Pod.spec'))
  assert.ok(g.edges.some((e) => e.from === 'controller:lifecycle' && e.to === 'controller:job' && e.via[0]?.settles === true))
  assert.throws(() => checkControllers([{ ...job, settles: { 'Pod.spec': 'x' } }]), /settles "Pod.spec" is not one of its reads/)
  // Creating objects claims no field: two creators of pods are not two writers.
  assert.doesNotThrow(() => checkControllers([job, { name: 'controller:other', reads: [], writes: [], creates: ['Pod'] }]))
})
