import assert from 'node:assert/strict'
import { test } from 'node:test'
import { allows, BUILTIN_ROLES, type OrcObject, rolesOf, userMay } from '../../../src/model/index.ts'

const objects = (byKind: Record<string, OrcObject[]>) => ({ list: (k: string) => byKind[k] ?? [] })
const binding = (name: string, role: string, users: string[]): OrcObject => ({
  apiVersion: 'orc/v1',
  kind: 'RoleBinding',
  metadata: { name },
  spec: { role, users },
})

test('built-in roles: admin everything, edit no admin verb and no protected kinds, view reads without logs', () => {
  const { admin, edit, view } = BUILTIN_ROLES as Record<string, any>
  assert.equal(allows(admin, 'admin', {}), true)
  assert.equal(allows(admin, 'apply', { kind: 'RoleBinding', namespace: '' }), true)
  assert.equal(allows(edit, 'apply', { kind: 'Pod', namespace: 'web' }), true)
  assert.equal(allows(edit, 'delete', { kind: 'PinnedDeployment', namespace: 'web' }), true)
  for (const kind of ['Role', 'RoleBinding', 'User', 'SecurityPolicy', 'Cluster']) {
    assert.equal(allows(edit, 'apply', { kind, namespace: '' }), false, `edit may not write ${kind}`)
  }
  assert.equal(allows(edit, 'admin', { kind: 'Node', namespace: '' }), false, 'edit may not remove a node')
  assert.equal(allows(edit, 'admin', {}), false, 'edit may not stop an agent')
  assert.equal(allows(edit, 'get', { kind: 'Pod', namespace: 'x', sub: 'logs' }), true)
  assert.equal(allows(view, 'apply', { kind: 'Pod', namespace: 'default' }), false)
  assert.equal(allows(view, 'list', { kind: 'Pod' }), true, 'every namespace')
  assert.equal(allows(view, 'get', { kind: 'Pod', namespace: 'default', sub: 'history' }), true)
  assert.equal(allows(view, 'get', { kind: 'Pod', namespace: 'default', sub: 'logs' }), false, 'logs carry what programs print')
})

test('a stored Role limits by verb, kind and namespace; bindings give roles; built-in names cannot be redefined', () => {
  const role: OrcObject = {
    apiVersion: 'orc/v1',
    kind: 'Role',
    metadata: { name: 'web-deployer' },
    spec: { rules: [{ verbs: ['apply', 'get'], kinds: ['Pod', 'PinnedDeployment'], namespaces: ['web'] }] },
  }
  const fake: OrcObject = { apiVersion: 'orc/v1', kind: 'Role', metadata: { name: 'view' }, spec: { rules: [{ verbs: ['*'], kinds: ['*'] }] } }
  const src = objects({ Role: [role, fake], RoleBinding: [binding('bob', 'web-deployer', ['bob']), binding('carol', 'view', ['carol'])] })
  assert.equal(userMay(src, 'bob', 'apply', 'Pod', 'web'), true)
  assert.equal(userMay(src, 'bob', 'apply', 'Pod', 'default'), false, 'another namespace')
  assert.equal(userMay(src, 'bob', 'delete', 'Pod', 'web'), false, 'another verb')
  assert.equal(userMay(src, 'bob', 'apply', 'SecurityPolicy', 'web'), false, 'another kind')
  assert.equal(userMay(src, 'bob', 'list', 'Pod', undefined), false, 'not every namespace')
  assert.equal(userMay(src, 'carol', 'apply', 'Pod', 'default'), false, 'a Role named view does not widen the built-in view')
  assert.equal(userMay(src, 'nobody', 'get', 'Pod', 'default'), false, 'no binding, no rights')
  assert.deepEqual(rolesOf(src, 'admin'), ['admin'], 'the first user is always admin')
  assert.deepEqual(rolesOf(src, 'root.n2'), ['node-admin'], "a joined node's root")
  assert.equal(userMay(src, 'root.n2', 'admin', 'Node', ''), false, "a joined node's root cannot remove nodes")
  assert.equal(userMay(src, 'root.n2', 'apply', 'Pod', 'default'), true)
})
