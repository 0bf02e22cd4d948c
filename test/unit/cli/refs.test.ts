import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Command } from 'commander'
import { objectRef, objectRefs, outputOption } from '../../../src/cli/refs.ts'

test('an object is KIND/NAME, KIND NAME, or a bare NAME where the command implies the kind', () => {
  const pod = { kind: 'Pod', namespace: 'default', name: 'web' }
  assert.deepEqual(objectRef(['pod/web']), pod)
  assert.deepEqual(objectRef(['pods', 'web']), pod)
  assert.deepEqual(objectRef(['web'], { implied: 'Pod' }), pod)
  assert.deepEqual(objectRef(['pd', 'web'], { namespace: 'prod' }), { kind: 'PinnedDeployment', namespace: 'prod', name: 'web' })
  assert.deepEqual(objectRef(['node/n1'], { namespace: 'prod' }), { kind: 'Node', namespace: '', name: 'n1' })
  assert.throws(() => objectRef(['web']), /"web": give its kind too, as KIND\/NAME \(like pod\/web\) or KIND NAME/)
  assert.throws(() => objectRef(['pods'], { implied: 'Pod' }), /pods: which one\?/)
  assert.throws(() => objectRef(['pdo', 'web']), /unknown kind "pdo": did you mean pod\?/)
  assert.throws(() => objectRef(['pod/web', 'db']), /give either KIND\/NAME or KIND NAME/)
  assert.deepEqual(
    objectRefs(['pod', 'a', 'b']).map((r) => r.name),
    ['a', 'b'],
  )
  assert.deepEqual(
    objectRefs(['pod/a', 'pd/b']).map((r) => r.kind),
    ['Pod', 'PinnedDeployment'],
  )
  assert.throws(() => objectRefs(['a', 'b'], { implied: 'Pod' }), /unknown kind "a"/)
})

test('-o takes the formats given, text meaning table, and names them when refused', () => {
  const parse = (args: string[]) => {
    const c = new Command('x')
      .exitOverride()
      .configureOutput({ writeErr: () => {} })
      .addOption(outputOption(['table', 'wide', 'json']))
    c.parse(args, { from: 'user' })
    return c.opts().output
  }
  assert.equal(parse([]), 'table')
  assert.equal(parse(['-o', 'text']), 'table')
  assert.equal(parse(['-o', 'WIDE']), 'wide')
  assert.equal(parse(['--output', 'json']), 'json')
  assert.throws(() => parse(['-o', 'yaml']), /argument 'yaml' is invalid\. choose one of table, wide, json, text/)
})
