// The binder's membership tick: a full pass (plan over every pod) runs when some member's state
// changed, and every 10th tick as a safety net — not every tick. With `membershipVersion` the tick
// compares that one value instead of every member's state (what a 5,000-node federation needs).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { pino } from 'pino'
import { Binder, type BinderComponents } from '../../../../src/agent/pods/binder.ts'
import type { NodeMember } from '../../../../src/agent/sched/index.ts'
import type { ObjectStore } from '../../../../src/store/index.ts'

/** A binder over an empty store that counts its passes (each lists the pods once). */
function counted(extra: Partial<BinderComponents> & { members: () => NodeMember[] }) {
  let passes = 0
  const store = {
    list: (kind: string) => {
      if (kind === 'Pod') passes++
      return []
    },
    get: () => undefined,
  } as unknown as ObjectStore
  const b = new Binder({ store, nodeName: 'a', now: () => 0, setTimeout: () => 0, clearTimeout: () => {}, log: pino({ level: 'silent' }), ...extra })
  return { b, passes: () => passes }
}

const tick = async (b: Binder, n: number) => {
  for (let i = 0; i < n; i++) await b.watchMembership()
}

test('a pass when a member changes state, else only every 10th tick', async () => {
  let state: NodeMember['state'] = 'alive'
  const { b, passes } = counted({
    members: () => [
      { name: 'a', state: 'alive', self: true },
      { name: 'b', state },
    ],
  })
  await tick(b, 1)
  assert.equal(passes(), 1, 'the first tick plans')
  await tick(b, 8)
  assert.equal(passes(), 1, 'nothing changed: no pass')
  state = 'suspect'
  await tick(b, 1)
  assert.equal(passes(), 2, 'b went suspect: a pass')
  await tick(b, 9)
  assert.equal(passes(), 3, 'the safety net: one pass in ten ticks')
})

test('with membershipVersion the tick compares the version, never the members', async () => {
  let version = 1
  let listed = 0
  const { b, passes } = counted({
    members: () => {
      listed++
      return [{ name: 'a', state: 'alive', self: true }]
    },
    membershipVersion: () => version,
  })
  await tick(b, 5)
  assert.equal(passes(), 1)
  const before = listed
  await tick(b, 3)
  assert.equal(listed, before, 'ticks without a pass do not list the members')
  version = 2
  await tick(b, 1)
  assert.equal(passes(), 2, 'the version changed: a pass')
})
