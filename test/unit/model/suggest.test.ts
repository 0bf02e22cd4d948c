import assert from 'node:assert/strict'
import { test } from 'node:test'
import { closestWords, editDistance, getKind } from '../../../src/model/index.ts'

test('edit distance counts insertions, deletions, substitutions and neighbour swaps', () => {
  assert.equal(editDistance('pods', 'pods'), 0)
  assert.equal(editDistance('pdos', 'pods'), 1)
  assert.equal(editDistance('pod', 'pods'), 1)
  assert.equal(editDistance('secrts', 'secrets'), 1)
  assert.equal(editDistance('', 'abc'), 3)
  assert.equal(editDistance('kitten', 'sitting'), 3)
})

test('closest words: near in edits, or starting with / containing what was typed; nothing far', () => {
  assert.deepEqual(closestWords('wbe', ['web', 'db', 'api']), ['web'])
  assert.deepEqual(closestWords('web', ['web-1', 'web-2', 'api']), ['web-1', 'web-2'])
  assert.deepEqual(closestWords('zzzz', ['web', 'db']), [])
  assert.deepEqual(closestWords('web', ['web']), [], 'the word itself is no suggestion')
})

test('an unknown kind names the closest kind, once, and only when one is close', () => {
  assert.throws(() => getKind('pdos'), /^OrcError: unknown kind "pdos": did you mean pods\? \(known: pods, /)
  assert.throws(() => getKind('pinneddeploymnet'), /did you mean pinneddeployment\?/)
  assert.throws(() => getKind('gizmo'), /^OrcError: unknown kind "gizmo" \(known: /)
})
