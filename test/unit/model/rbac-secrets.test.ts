// The `Secret/reveal` part: opening a Secret's values is a right of its own, like `Pod/logs`.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { allows, BUILTIN_ROLES, type Target } from '../../../src/model/index.ts'

const reveal: Target = { kind: 'Secret', namespace: 'default', sub: 'reveal' }
const sealed: Target = { kind: 'Secret', namespace: 'default' }

test('admin, edit and node-admin may reveal a Secret; view reads its sealed form but may not reveal it', () => {
  for (const role of ['admin', 'edit', 'node-admin']) assert.equal(allows(BUILTIN_ROLES[role]!, 'get', reveal), true, role)
  assert.equal(allows(BUILTIN_ROLES.view!, 'get', sealed), true)
  assert.equal(allows(BUILTIN_ROLES.view!, 'list', sealed), true)
  assert.equal(allows(BUILTIN_ROLES.view!, 'get', reveal), false)
})

test('a Role granting the kind Secret does not grant Secret/reveal; naming the part does', () => {
  assert.equal(allows([{ verbs: ['get'], kinds: ['Secret'] }], 'get', reveal), false)
  assert.equal(allows([{ verbs: ['get'], kinds: ['Secret'] }], 'get', sealed), true)
  assert.equal(allows([{ verbs: ['get'], kinds: ['Secret/reveal'] }], 'get', reveal), true)
  assert.equal(allows([{ verbs: ['get'], kinds: ['*'], exceptKinds: ['Secret/reveal'] }], 'get', reveal), false)
})
