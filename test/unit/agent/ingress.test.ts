/**
 * The tcp-proxy ingress controller against a real store and real TCP: two "pods" are servers on
 * ::1 (their containers name port http differently, so the service's named targetPort resolves to
 * each one's own port). Connections through the ingress reach both; a pod that dies before the
 * store knows (its server closed) costs no failed connection; a pod that is not ready gets none;
 * status reports the listener and the backend count; bad input (a port already in use, a backend
 * service that does not exist, a selector matching no node) is reported in status and by why.
 */
import assert from 'node:assert/strict'
import { connect, createServer, type Server } from 'node:net'
import { test } from 'node:test'
import { pino } from 'pino'
import { explainIngress, IngressController } from '../../../src/agent/index.ts'
import { systemClock } from '../../../src/effects/index.ts'
import type { Ingress } from '../../../src/model/index.ts'
import { seededBytes, tempStore } from '../../helpers/store.ts'
import { waitFor } from '../../helpers/wait.ts'

const user = () => ({ author: 'user:admin', reason: 't', now: Date.now() })

/** A server on [::1]:0 answering each connection with its name once the client has shut its side (like HTTP/1.0 through `nc`). */
async function server(name: string): Promise<{ port: number; srv: Server }> {
  const srv = createServer({ allowHalfOpen: true }, (s) => {
    s.resume()
    s.on('end', () => s.end(`hello-from-${name}`))
  })
  await new Promise<void>((r) => srv.listen(0, '::1', r))
  return { port: (srv.address() as { port: number }).port, srv }
}

function request(port: number, host = '127.0.0.1'): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({ host, port, allowHalfOpen: true })
    s.end('GET /\r\n')
    let out = ''
    s.on('data', (d) => (out += d))
    s.on('end', () => resolve(out))
    s.on('error', (e) => resolve(`error ${(e as NodeJS.ErrnoException).code}`))
  })
}

async function freePort(): Promise<number> {
  const s = createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const port = (s.address() as { port: number }).port
  await new Promise((r) => s.close(r))
  return port
}

test('tcp-proxy: forwards to ready endpoints only, skips a dead one, reports status; bad input is named', async (t) => {
  const { store, cleanup } = await tempStore()
  const servers = [await server('a'), await server('b')]
  const ctl = new IngressController({
    store,
    nodeName: 'n1',
    clock: systemClock,
    random: seededBytes(5),
    log: pino({ level: 'silent' }),
    tickMs: 200,
    bindHosts: { IPv4: '127.0.0.1', IPv6: '::1' },
    interfaces: () => ({
      eth0: [
        { address: '198.51.100.7', family: 'IPv4', internal: false, netmask: '255.255.255.0', mac: '', cidr: null },
        { address: '2001:db8::7', family: 'IPv6', internal: false, netmask: 'ffff:ffff:ffff:ffff::', mac: '', cidr: null, scopeid: 0 },
        { address: 'fe80::7', family: 'IPv6', internal: false, netmask: 'ffff:ffff:ffff:ffff::', mac: '', cidr: null, scopeid: 2 },
      ],
    }),
  })
  const blocker = createServer()
  t.after(async () => {
    await ctl.stop()
    for (const s of servers) s.srv.close()
    blocker.close()
    await cleanup()
  })
  await store.apply(
    { apiVersion: 'orc/v1', kind: 'Node', metadata: { name: 'n1', labels: { edge: 'yes' } }, spec: {} },
    { ...user(), author: 'controller:node' },
  )
  await store.apply(
    {
      apiVersion: 'orc/v1',
      kind: 'Service',
      metadata: { name: 'web' },
      spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http' }] },
    },
    user(),
  )
  for (const [i, name] of ['a', 'b'].entries()) {
    await store.apply(
      {
        apiVersion: 'orc/v1',
        kind: 'Pod',
        metadata: { name: `web-${name}`, labels: { app: 'web' } },
        spec: { containers: [{ name: 'c', image: 'busybox', ports: [{ name: 'http', containerPort: servers[i]!.port }] }] },
      },
      user(),
    )
    await store.patch(
      { kind: 'Pod', namespace: 'default', name: `web-${name}` },
      [{ path: ['status'], value: { phase: 'Running', containers: [{ name: 'c', state: 'running' }], network: { ipv6: '::1' } } }],
      { ...user(), author: 'controller:lifecycle' },
    )
  }
  const applyIngress = (name: string, spec: Record<string, unknown>) =>
    store.apply({ apiVersion: 'orc/v1', kind: 'Ingress', metadata: { name }, spec } as never, user())
  const port = await freePort()
  await applyIngress('web', {
    controller: 'tcp-proxy',
    nodeSelector: { edge: 'yes' },
    listen: { ports: [port] },
    backend: { service: 'web', port: 'http' },
  })
  await ctl.start()
  const status = (name: string) => (store.get({ kind: 'Ingress', namespace: '', name })?.status as any)?.nodes?.n1
  await waitFor('ingress ready on n1', () => status('web')?.ready === true)
  assert.deepEqual(status('web').addresses, [`198.51.100.7:${port}`, `[2001:db8::7]:${port}`], "the node's own addresses, not link-local ones")
  assert.equal(status('web').backends, 2)

  const seen = new Set<string>()
  for (let i = 0; i < 40 && seen.size < 2; i++) seen.add(await request(port))
  assert.deepEqual([...seen].sort(), ['hello-from-a', 'hello-from-b'], 'both ready endpoints serve')
  assert.match(await request(port, '::1'), /^hello-from-[ab]$/, 'IPv6 clients too (both families by default)')

  // web-a dies before the store says so: every connection still succeeds (retried on web-b).
  await new Promise((r) => servers[0]!.srv.close(r))
  for (let i = 0; i < 10; i++) assert.equal(await request(port), 'hello-from-b')

  // web-b is not ready (a readiness probe failing): only web-a — now back — gets connections.
  const a2 = createServer({ allowHalfOpen: true }, (s) => {
    s.resume()
    s.on('end', () => s.end('hello-from-a'))
  })
  await new Promise<void>((r) => a2.listen(servers[0]!.port, '::1', r))
  servers[0]!.srv = a2
  await store.patch({ kind: 'Pod', namespace: 'default', name: 'web-b' }, [{ path: ['status', 'phase'], value: 'Pending' }], {
    ...user(),
    author: 'controller:lifecycle',
  })
  await waitFor('one backend', () => status('web')?.backends === 1)
  for (let i = 0; i < 10; i++) assert.equal(await request(port), 'hello-from-a')

  // A port already in use on the node.
  const busy = await freePort()
  await new Promise<void>((r) => blocker.listen(busy, '127.0.0.1', r))
  await applyIngress('clash', { controller: 'tcp-proxy', listen: { ports: [busy], families: ['IPv4'] }, backend: { service: 'web', port: 80 } })
  await waitFor('clash reported', () => status('clash')?.ready === false)
  assert.equal(status('clash').reason, `port ${busy} (IPv4) is already in use on this node`)
  // Once the port is free, the next pass takes it.
  await new Promise((r) => blocker.close(r))
  await waitFor('clash listening after the port was freed', () => status('clash')?.ready === true, 10_000)

  // A backend service that does not exist.
  const ghostPort = await freePort()
  await applyIngress('ghost', { controller: 'tcp-proxy', listen: { ports: [ghostPort], families: ['IPv4'] }, backend: { service: 'nosuch', port: 80 } })
  await waitFor('ghost reported', () => status('ghost')?.ready === false)
  assert.match(status('ghost').reason, /service default\/nosuch does not exist/)
  assert.match(await request(ghostPort), /^(|error ECONNRESET)$/, 'a connection with no backend is closed at once')
  const nodes = store.list('Node')
  const why = explainIngress(store.get({ kind: 'Ingress', namespace: '', name: 'ghost' }) as Ingress, nodes, store.list('Service'), store.list('Pod'))
  assert.ok(why.includes(`port ${ghostPort}: service default/nosuch does not exist`), why.join('\n'))

  // A selector matching no node: nobody serves it, and why says so.
  await applyIngress('nowhere', {
    controller: 'tcp-proxy',
    nodeSelector: { edge: 'no' },
    listen: { ports: [ghostPort + 1] },
    backend: { service: 'web', port: 80 },
  })
  const nowhere = explainIngress(store.get({ kind: 'Ingress', namespace: '', name: 'nowhere' }) as Ingress, nodes, store.list('Service'), store.list('Pod'))
  assert.ok(nowhere.includes('spec.nodeSelector edge=no matches no node'), nowhere.join('\n'))

  // Deleting the Ingress closes its listener.
  await store.delete({ kind: 'Ingress', namespace: '', name: 'web' }, user())
  await waitFor('listener closed', async () => (await request(port)) === 'error ECONNREFUSED')
})

test('Ingress validation names what is wrong', async (t) => {
  const { store, cleanup } = await tempStore()
  t.after(cleanup)
  const bad = (spec: unknown) =>
    store.apply({ apiVersion: 'orc/v1', kind: 'Ingress', metadata: { name: 'x' }, spec } as any, user()).then(
      () => 'accepted',
      (err: Error) => err.message,
    )
  assert.match(await bad({ controller: 'tcp-proxy', listen: { ports: [80] } }), /spec\.backend: required to serve spec\.listen\.ports/)
  assert.match(await bad({ controller: 'tcp-proxy', backend: { service: 'web', port: 80 } }), /at least one port to listen on/)
  assert.match(
    await bad({
      controller: 'tcp-proxy',
      rules: [{ port: 80, backend: { service: 'a', port: 1 } }],
      listen: { ports: [80] },
      backend: { service: 'b', port: 2 },
    }),
    /spec\.listen\.ports\[0\]: duplicates spec\.rules\[0\]\.port/,
  )
  assert.match(await bad({ controller: 'tcp-proxy', listen: { ports: [80] }, backend: { service: 'web', port: 'Not A Name' } }), /spec\.backend\.port/)
  assert.match(
    await bad({ controller: 'tcp-proxy', nodes: ['n1'], nodeSelector: { a: 'b' }, listen: { ports: [80] }, backend: { service: 'w', port: 1 } }),
    /not both/,
  )
  assert.equal(store.list('Ingress').length, 0, 'nothing stored')
})

test('examples/ingress.yaml is valid and serves the web service of examples/service.yaml on every node', async () => {
  const { readManifests } = await import('../../../src/cli/manifests.ts')
  const { normalizeManifest } = await import('../../../src/model/index.ts')
  const { planIngressListeners } = await import('../../../src/agent/ingress/index.ts')
  const read = async (f: string) => (await readManifests([new URL(`../../../examples/${f}`, import.meta.url).pathname])).map((d) => normalizeManifest(d.value))
  const [ing] = await read('ingress.yaml')
  const [svc, pod] = await read('service.yaml')
  const running = { ...pod!, status: { phase: 'Running', containers: [{ name: 'main', state: 'running', restarts: 0 }], network: { ipv6: 'fd00::2' } } }
  const plan = planIngressListeners('tcp-proxy', { metadata: { name: 'any' } }, [ing as never], [svc as never], [running as never])
  assert.deepEqual(
    plan.map((l) => [l.key, l.backends.map((b) => `${b.address}:${b.port}`)]),
    [
      ['web/IPv4/8080', ['fd00::2:8080']],
      ['web/IPv6/8080', ['fd00::2:8080']],
    ],
  )
})

test("a shared service's backends are its ready pods in this cluster only; with none here the reason names the other clusters", async () => {
  const { clusterEndpointReach, planIngressListeners } = await import('../../../src/agent/ingress/index.ts')
  const { clusterPrefix, formatIPv6 } = await import('../../../src/net/index.ts')
  const home = clusterPrefix('home-id')
  const cloud = clusterPrefix('cloud-id')
  const at = (p: typeof home, host: string) => formatIPv6(p.addr).replace(/::$/, `:1::${host}`)
  const running = (name: string, ns: string, node: string, ipv6: string) => ({
    metadata: { name, namespace: ns, labels: { app: 'web' } },
    spec: { containers: [{ name: 'c', image: 'busybox' }] },
    status: { node, phase: 'Running', containers: [{ name: 'c', state: 'running', restarts: 0 }], network: { ipv6 } },
  })
  const svc = (ns: string) => ({
    metadata: { name: 'web', namespace: ns },
    spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] },
  })
  const ing = (ns: string) => ({
    metadata: { name: `web-${ns}` },
    spec: { controller: 'tcp-proxy', listen: { ports: [80], families: ['IPv4'] }, backend: { service: 'web', namespace: ns, port: 'http' } },
  })
  // On a home node: "shared" is shared with the federation, in which this cluster is "home".
  const reach = clusterEndpointReach(home, (ns) => (ns === 'shared' ? 'home' : undefined))
  const plan = (pods: unknown[]) =>
    planIngressListeners(
      'tcp-proxy',
      { metadata: { name: 'h1' } },
      [ing('shared') as never, ing('default') as never],
      [svc('shared') as never, svc('default') as never],
      pods as never,
      reach,
    ).map((l) => [l.ingress, l.backends.map((b) => b.address), l.problem])
  const inHome = running('web-h', 'shared', 'h2@home', at(home, '5'))
  const inCloud = running('web-c', 'shared', 'c1@cloud', at(cloud, '6'))
  // A pod said to run in cloud with an address in home's /48 (a hostile or stale status): not a backend.
  const forged = running('web-x', 'shared', 'c1@cloud', at(home, '7'))
  const priv = running('web-p', 'default', 'h1', at(home, '8'))
  assert.deepEqual(plan([inHome, inCloud, forged, priv]), [
    ['web-default', [at(home, '8')], undefined],
    ['web-shared', [at(home, '5')], undefined],
  ])
  const [, shared] = plan([inCloud, forged])
  assert.deepEqual(shared!.slice(0, 2), ['web-shared', []])
  assert.match(String(shared![2]), /^service shared\/web has no ready endpoint in this cluster \(2 in other member clusters/)
})
