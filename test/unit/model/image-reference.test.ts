import assert from 'node:assert/strict'
import { test } from 'node:test'
import { formatReference, isLoopbackRegistry, isOrcError, isRegistryReference, parseReference, registryEndpoint } from '../../../src/model/index.ts'

const D = `sha256:${'ab'.repeat(32)}`

test('references that name a registry parse into registry, repository, tag and digest', () => {
  const cases: [string, ReturnType<typeof parseReference>][] = [
    ['registry.example:5000/team/app:1.2', { registry: 'registry.example:5000', repository: 'team/app', tag: '1.2' }],
    ['registry.example/team/app', { registry: 'registry.example', repository: 'team/app', tag: 'latest' }],
    [`registry.example/team/app@${D}`, { registry: 'registry.example', repository: 'team/app', digest: D }],
    [`registry.example/team/app:1.2@${D}`, { registry: 'registry.example', repository: 'team/app', tag: '1.2', digest: D }],
    ['localhost/app:v1', { registry: 'localhost', repository: 'app', tag: 'v1' }],
    ['localhost:5000/a/b/c:x_Y.z-1', { registry: 'localhost:5000', repository: 'a/b/c', tag: 'x_Y.z-1' }],
    ['127.0.0.1:5000/app', { registry: '127.0.0.1:5000', repository: 'app', tag: 'latest' }],
    ['[::1]:5000/app:1', { registry: '[::1]:5000', repository: 'app', tag: '1' }],
    ['ghcr.io/org/my-app__x.y:2', { registry: 'ghcr.io', repository: 'org/my-app__x.y', tag: '2' }],
    // Docker Hub: official images live under library/.
    ['docker.io/redis:7', { registry: 'docker.io', repository: 'library/redis', tag: '7' }],
    ['docker.io/library/redis:7', { registry: 'docker.io', repository: 'library/redis', tag: '7' }],
    ['index.docker.io/redis', { registry: 'index.docker.io', repository: 'library/redis', tag: 'latest' }],
    ['docker.io/bitnami/redis:7', { registry: 'docker.io', repository: 'bitnami/redis', tag: '7' }],
  ]
  for (const [input, want] of cases) assert.deepEqual(parseReference(input), want, input)
})

test('formatReference writes back what parses to the same reference', () => {
  for (const s of ['registry.example:5000/team/app:1.2', `ghcr.io/a/b@${D}`, `localhost/x:y@${D}`, 'docker.io/library/redis:7', '[::1]:5000/app:1']) {
    assert.equal(formatReference(parseReference(s)), s)
    assert.deepEqual(parseReference(formatReference(parseReference(s))), parseReference(s))
  }
})

test('names without a registry stay store images, not Docker Hub pulls', () => {
  for (const s of ['busybox', 'busybox:1.36', 'team/app:1.2', 'library/redis', '/var/lib/images/x', './x/y', 'x']) {
    assert.equal(isRegistryReference(s), false, s)
  }
  for (const s of ['localhost/app', 'localhost:5000/app', 'reg.lab/app', 'reg:5000/app', '[::1]:5000/app']) assert.equal(isRegistryReference(s), true, s)
})

test('malformed references are invalid, naming the bad part', () => {
  const cases: [string, RegExp][] = [
    ['busybox:1.0', /names no registry/],
    ['reg.example/', /has no repository/],
    ['reg.example/Team/app', /repository component "Team"/],
    ['reg.example/team//app', /repository component ""/],
    ['reg.example/team/app-', /repository component "app-"/],
    ['reg.example/app:', /tag ""/],
    ['reg.example/app:-x', /tag "-x"/],
    [`reg.example/app:${'t'.repeat(129)}`, /tag/],
    ['reg.example/app@sha256:abc', /digest "sha256:abc"/],
    [`reg.example/app@sha256:${'AB'.repeat(32)}`, /digest/],
    [`reg.example/app@md5:${'ab'.repeat(16)}`, /digest/],
    ['reg.example:0/app', /port 0 is out of range/],
    ['reg.example:70000/app', /port 70000 is out of range/],
    ['reg_x.example/app', /registry "reg_x.example"/],
    ['-reg.example/app', /registry "-reg.example"/],
    [`reg.example/${'a'.repeat(600)}`, /longer than 512/],
    [`reg.example/${'a/'.repeat(130)}a`, /repository longer than 255/],
  ]
  for (const [input, why] of cases) {
    assert.throws(
      () => parseReference(input),
      (err: unknown) => isOrcError(err, 'invalid') && why.test((err as Error).message) && (err as Error).message.includes(JSON.stringify(input)),
      input,
    )
  }
})

test('registry endpoints and loopback registries', () => {
  assert.equal(registryEndpoint('docker.io'), 'registry-1.docker.io')
  assert.equal(registryEndpoint('index.docker.io'), 'registry-1.docker.io')
  assert.equal(registryEndpoint('ghcr.io'), 'ghcr.io')
  assert.equal(registryEndpoint('reg.lab:5000'), 'reg.lab:5000')
  for (const r of ['localhost', 'localhost:5000', 'LocalHost:5000', '127.0.0.1:5000', '127.1.2.3', '[::1]:5000', '[::1]'])
    assert.equal(isLoopbackRegistry(r), true, r)
  for (const r of ['reg.lab:5000', '10.0.0.1:5000', 'localhost.example:5000', '[::2]:5000', '127.example:5000']) assert.equal(isLoopbackRegistry(r), false, r)
})
