import assert from 'node:assert/strict'
import { test } from 'node:test'
import { findKind, normalizeManifest, portsText } from '../../../src/model/index.ts'

const svc = (spec: Record<string, unknown>) => ({ apiVersion: 'orc/v1', kind: 'Service', metadata: { name: 'web', namespace: 'shop' }, spec })

test('Service is a registered kind reachable as services, service and svc', () => {
  for (const n of ['services', 'service', 'svc', 'Service']) assert.equal(findKind(n)?.kind, 'Service')
})

test('a valid Service normalizes; its ports read as in the PORTS column', () => {
  const o = normalizeManifest(
    svc({
      selector: { app: 'web' },
      ports: [
        { name: 'http', port: 80, targetPort: 'http' },
        { name: 'dns', port: 53, targetPort: 5353, protocol: 'UDP' },
      ],
    }),
  )
  assert.equal(o.kind, 'Service')
  assert.equal(portsText(o.spec as never), 'http:80/TCP→http,dns:53/UDP→5353')
  assert.equal(portsText({ ports: [] }), '<none>')
})

test('a bad Service names the field and what is wrong', () => {
  assert.throws(() => normalizeManifest(svc({ ports: [{ port: 80 }] })), /spec\.selector: required/)
  assert.throws(() => normalizeManifest(svc({ selector: {} })), /spec\.selector: must name at least one label/)
  // Each list of ports, with the error it must give.
  const bad: [unknown[], RegExp][] = [
    [[{ port: 0 }], /spec\.ports\[0\]\.port: must be >= 1/],
    [[{ port: 80 }, { port: 81 }], /spec\.ports\[0\]\.name: required when a service has more than one port/],
    [
      [
        { name: 'a', port: 80 },
        { name: 'a', port: 81 },
      ],
      /spec\.ports\[1\]\.name: duplicates spec\.ports\[0\]\.name "a"/,
    ],
    [
      [
        { name: 'a', port: 80 },
        { name: 'b', port: 80, protocol: 'TCP' },
      ],
      /spec\.ports\[1\]\.port: duplicates spec\.ports\[0\] \(80\/TCP\)/,
    ],
    [[{ port: 80, targetPort: 70000 }], /spec\.ports\[0\]\.targetPort: must be a port number 1-65535/],
    [[{ port: 80, targetPort: 'Not_A_Name' }], /targetPort: must be a port number or a container port's name/],
    [[{ port: 80, targetPort: true }], /targetPort: .*got boolean/],
    [[{ name: 'way-too-long-port-name', port: 80 }], /spec\.ports\[0\]\.name: must be a port name/],
    [[{ port: 80, protocol: 'SCTP' }], /protocol: must be one of TCP, UDP/],
  ]
  for (const [ports, re] of bad) assert.throws(() => normalizeManifest(svc({ selector: { app: 'x' }, ports })), re, JSON.stringify(ports))
  // The same number over TCP and UDP is two ports (DNS on 53).
  const dns = [
    { name: 'a', port: 53 },
    { name: 'b', port: 53, protocol: 'UDP' },
  ]
  assert.doesNotThrow(() => normalizeManifest(svc({ selector: { app: 'x' }, ports: dns })))
})

test('examples/service.yaml is valid: a Service and the pod it selects, its named port resolving', async () => {
  const { readManifests } = await import('../../../src/cli/manifests.ts')
  const { serviceEndpoints } = await import('../../../src/model/index.ts')
  const docs = await readManifests([new URL('../../../examples/service.yaml', import.meta.url).pathname])
  const [svc, pod] = docs.map((d) => normalizeManifest(d.value))
  assert.equal(svc!.kind, 'Service')
  const running = { ...pod!, status: { phase: 'Running', containers: [{ name: 'main', state: 'running', restarts: 0 }], network: { ipv6: 'fd00::2' } } }
  const eps = serviceEndpoints(svc as never, [running as never])
  assert.deepEqual(eps.endpoints[0]!.ports, [{ name: 'http', protocol: 'TCP', port: 8080, targetPort: 8080 }])
})
