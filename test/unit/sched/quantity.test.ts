import assert from 'node:assert/strict'
import { test } from 'node:test'
import { isOrcError } from '../../../src/model/index.ts'
import { formatCpu, formatMemory, parseCpu, parseMemory, podRequests } from '../../../src/sched/index.ts'

const isOrcErrorLike = (e: unknown): e is Error => isOrcError(e, 'invalid')

test('cpu quantities become millicores', () => {
  assert.equal(parseCpu('500m'), 500)
  assert.equal(parseCpu('2'), 2000)
  assert.equal(parseCpu('0.3'), 300)
  assert.equal(parseCpu('2.5'), 2500)
  assert.equal(parseCpu(1), 1000)
  assert.equal(parseCpu(undefined), 0)
})

test('memory quantities become bytes, binary and decimal suffixes', () => {
  assert.equal(parseMemory('128Mi'), 128 * 2 ** 20)
  assert.equal(parseMemory('1Gi'), 2 ** 30)
  assert.equal(parseMemory('1G'), 1e9)
  assert.equal(parseMemory('64k'), 64000)
  assert.equal(parseMemory('1.5Gi'), 1.5 * 2 ** 30)
  assert.equal(parseMemory('1000'), 1000)
})

test('bad quantities are refused with an OrcError naming the value', () => {
  for (const bad of ['', 'lots', '-1', '1.5.2', '10 Gi', '1gb']) {
    assert.throws(
      () => parseMemory(bad),
      (e: unknown) => isOrcErrorLike(e) && e.message.includes(JSON.stringify(bad)),
    )
  }
  assert.throws(
    () => parseCpu(-1),
    (e: unknown) => isOrcErrorLike(e),
  )
})

test('quantities print back the way a user writes them', () => {
  assert.equal(formatCpu(500), '500m')
  assert.equal(formatCpu(2000), '2')
  assert.equal(formatMemory(2 * 2 ** 30), '2Gi')
  assert.equal(formatMemory(512 * 2 ** 20), '512Mi')
  assert.equal(formatMemory(1.5 * 2 ** 30), '1.5Gi')
  assert.equal(formatMemory(1000), '1000')
  assert.equal(formatMemory(0), '0')
})

test('container requests add up', () => {
  const r = podRequests([{ resources: { requests: { cpu: '250m', memory: '64Mi' } } }, { resources: { requests: { cpu: '1', memory: '1Gi' } } }, {}])
  assert.equal(parseCpu(r.cpu), 1250)
  assert.equal(parseMemory(r.memory), 64 * 2 ** 20 + 2 ** 30)
})
