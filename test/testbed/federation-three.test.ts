/**
 * Three federated clusters of one node each, real agents in network namespaces with real
 * WireGuard: `home1` (h1 behind router A) and `home2` (h2 behind router B, another NAT; both
 * routers masquerade with a random port per connection, so h1 and h2 can never reach each other)
 * and `cloud` (c1, public). They share the namespace `shared`. What a user would notice:
 *
 * - a Service of the shared namespace selects an `ha` pod placed in home1 (`preferClusters`); a
 *   client pod in cloud resolves `web.shared.svc.cluster.local` (AAAA, through the nameserver of
 *   its resolv.conf: c1's resolver, which answers from the federation's document) to the
 *   service's shared virtual address and connects to it over TCP: c1 sends it to the pod on h1;
 * - with a shared pod on home2 too, the pair h1–h2 (NAT'd on both ends) gets no relay: cloud, a
 *   third cluster, never relays it (docs/federation.md, "Relays between clusters"); its tunnel
 *   stays down and cloud still reaches home1's pod;
 * - home1 is lost (its network cut, its agent killed): the ha pod moves to home2, and the same
 *   client pod, still running in cloud, connects to the same name and address and is answered by
 *   the pod on h2.
 *
 * Each home node reaches cloud directly (a NAT'd node dials a public one), and the service's
 * traffic never needs home1–home2. Both homes still see each other alive in the federation's
 * membership (heartbeats travel by gossip through cloud), which is what lets home2 decide home1 is
 * lost.
 */

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { sharedServiceVirtualAddress } from '../../src/net/index.ts'
import { imageStoresEnv, sharedPod, skipReason, Testbed, TWO_RANDOM_NATS, waitFor } from './helpers.ts'

const NS = 'shared'
const NAME = `web.${NS}.svc.cluster.local`

async function waitRunning(tb: Testbed, on: string, name: string, node: string, timeoutMs = 120_000): Promise<string> {
  return waitFor(
    `pod ${name} Running on ${node} with an address`,
    async () => {
      const st = (await tb.orcJson(on, ['get', 'pod', name, '-n', NS]).catch(() => undefined))?.status ?? {}
      return st.phase === 'Running' && typeof st.network?.ipv6 === 'string' && st.node === node ? (st.network.ipv6 as string) : undefined
    },
    timeoutMs,
  )
}

/**
 * The client: every half second it resolves the service name through the nameserver of its
 * /etc/resolv.conf (busybox nslookup, AAAA), connects to the first address with nc and prints a
 * line whenever what it sees changes: `resolved [ADDRS] reached ADDR: ANSWER`.
 */
const CLIENT = [
  'dns=$(sed -n "s/^nameserver *//p" /etc/resolv.conf | head -1)',
  'echo "nameserver $dns"',
  'last=',
  'while :; do',
  `  addrs=$(nslookup -type=AAAA ${NAME} 2>/dev/null | sed -n "s/^Address:[[:space:]]*\\([0-9a-f:]*\\)$/\\1/p" | grep : | grep -vx "$dns" | sort | tr "\\n" " ")`,
  '  addr=$(echo $addrs | cut -d " " -f 1)',
  '  ans=',
  '  if [ -n "$addr" ]; then ans=$(nc -w 2 "$addr" 8080 </dev/null); fi',
  '  line="resolved [$(echo $addrs)] reached $addr: $ans"',
  '  if [ "$line" != "$last" ]; then echo "$line"; last=$line; fi',
  '  sleep 0.5',
  'done',
].join('\n')

test('testbed: three federated clusters (two homes behind NATs, one public): a service reached by name from cloud fails over between the homes', {
  timeout: 900_000,
}, async (t) => {
  const why = await skipReason()
  if (why) return t.skip(`skipped: ${why}`)
  const tb = await Testbed.create({
    routers: TWO_RANDOM_NATS,
    hosts: [{ name: 'c1' }, { name: 'h1', site: 'home', router: 'rtra' }, { name: 'h2', site: 'home', router: 'rtrb' }],
    env: {
      ORC_MESH_TUNABLES: JSON.stringify({ syncIntervalMs: 5000 }),
      ORC_POD_TUNABLES: JSON.stringify({ restartBackoffMs: 200, maxRestartBackoffMs: 1000 }),
      ...imageStoresEnv(),
    },
  })
  let failed = true
  t.after(async () => {
    if (!failed) return
    for (const h of tb.hosts.values()) {
      t.diagnostic(`--- ${h.name} warnings ---\n${tb.warnings(h)}\n--- ${h.name} log tail ---\n${tb.tail(h, 30)}`)
      if (h.agent) t.diagnostic(`${h.name} routes:\n${await tb.orc(h.name, ['get', 'routes']).catch((e) => String(e))}`)
    }
  })
  t.after(() => tb.destroy())
  const t0 = Date.now()
  await Promise.all([tb.up('c1', ['--cluster', 'cloud']), tb.up('h1', ['--cluster', 'home1']), tb.up('h2', ['--cluster', 'home2'])])

  // cloud creates the federation (its join host is public); each home joins with a token of its own.
  await tb.orc('c1', ['federation', 'create', 'lab', '--namespace', NS])
  for (const home of ['h1', 'h2']) {
    const token = (await tb.orc('c1', ['federation', 'token', 'lab'])).split('\n')[0]!.trim()
    await tb.orc(home, ['federation', 'join', '--token', token])
  }
  // Every node sees all three clusters' nodes alive, the two homes included, although they cannot
  // connect to each other (their heartbeats reach each other by gossip through cloud).
  await waitFor(
    'every node sees the three clusters connected',
    async () => {
      for (const on of ['c1', 'h1', 'h2']) {
        const v = await tb.orcJson(on, ['federation', 'status', 'lab'])
        if (!['cloud', 'home1', 'home2'].every((c) => v.clusters?.find((x: any) => x.name === c)?.connected === 1)) return undefined
      }
      return true
    },
    120_000,
  )
  const cloudNet = await waitFor(
    "c1's network up",
    async () => ((await tb.orcJson('c1', ['get', 'node', 'c1'])).status?.network?.prefix as string | undefined)?.split(':').slice(0, 3).join(':'),
    60_000,
  )
  t.diagnostic(`three clusters up and federated in ${Date.now() - t0} ms`)

  // The server: an ha pod allowed in both homes, preferring home1; a Service selecting it.
  const a0 = Date.now()
  await tb.orc('c1', ['apply', '-f', '-'], {
    input: sharedPod('web', 'exec nc -ll -p 8080 -e echo hello-web', {
      policy: 'ha',
      haAfterSeconds: 3,
      placement: { clusters: ['home1', 'home2'], preferClusters: ['home1', 'home2'] },
    }),
  })
  await tb.orc('c1', ['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Service',
      metadata: { name: 'web', namespace: NS },
      spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 8080 }] },
    }),
  })
  const first = await waitRunning(tb, 'c1', 'web', 'h1@home1')
  t.diagnostic(`web (ha) Running on h1@home1 at ${first} ${Date.now() - a0} ms after it was applied on cloud`)

  // The name resolves on cloud's node resolver (dig from the node, against the cluster DNS address)
  // to the service's shared virtual address: derived from the federation id, whatever the pods do.
  const vip = sharedServiceVirtualAddress({ metadata: { name: 'web', namespace: NS } }, (await tb.orcJson('c1', ['get', 'federation', 'lab'])).spec.id)!
  const dig = async () =>
    (await tb.exec('c1', 'dig', [`@${cloudNet}::53`, '+short', '+tries=1', '+time=2', NAME, 'AAAA'])).stdout.trim().split('\n').filter(Boolean).sort().join(',')
  const r0 = Date.now()
  await waitFor(`${NAME} answers ${vip} on c1`, async () => ((await dig()) === vip ? true : undefined), 60_000)
  t.diagnostic(`${NAME} resolved on c1 (cloud) to its shared virtual address ${vip} ${Date.now() - r0} ms after the pod was seen Running`)

  // The client pod in cloud finds web by name and connects.
  const c0 = Date.now()
  await tb.orc('c1', ['apply', '-f', '-'], { input: sharedPod('client', CLIENT, { placement: { clusters: ['cloud'] } }) })
  const client = await waitRunning(tb, 'c1', 'client', 'c1@cloud')
  const logs = () => tb.orc('c1', ['logs', 'pod/client', '-n', NS]).catch(() => '')
  const reached = new RegExp(`^resolved \\[${vip}\\] reached ${vip}: hello-web$`, 'm')
  const before = await waitFor(
    'the client pod in cloud reached web on home1 by name',
    async () => {
      const l = await logs()
      return reached.test(l) ? l : undefined
    },
    120_000,
  )
  // `nft list` prints the rule as `dnat to [ADDR]:PORT` (older versions: `dnat ip6 to`).
  const dnatTo = async (addr: string) => new RegExp(`dnat (ip6 )?to \\[${addr}\\]:8080`).test((await tb.exec('c1', 'nft', ['list', 'ruleset'])).stdout)
  assert.ok(await dnatTo(first), "c1 balances the virtual address to home1's pod")
  assert.match(before, new RegExp(`^nameserver ${cloudNet}::53$`, 'm'), 'the pod asks its node resolver (resolv.conf)')
  t.diagnostic(`client pod (${client}) on c1 resolved ${NAME} and got web's answer from home1 ${Date.now() - c0} ms after it was applied`)

  // The paths: both homes talk to cloud directly (a NAT'd node dials the public one); nothing is
  // relayed, and home2 (no shared pod yet) has no federated peer at all.
  const routes = (on: string) => tb.orcJson(on, ['get', 'routes'])
  const onC1 = await waitFor(
    'c1 routes web on h1 directly, h1 routes the client on c1 directly',
    async () => {
      const [c, h] = await Promise.all([routes('c1'), routes('h1')])
      const cp = (c.federated ?? []).find((p: any) => p.node === 'h1@home1')
      const hp = (h.federated ?? []).find((p: any) => p.node === 'c1@cloud')
      return cp?.path !== 'relayed' &&
        cp?.state === 'up' &&
        cp.routes.includes(`${first}/128`) &&
        hp?.path !== 'relayed' &&
        hp?.routes.includes(`${client}/128`)
        ? c
        : undefined
    },
    60_000,
  )
  assert.deepEqual(
    onC1.federated.map((p: any) => p.node),
    ['h1@home1'],
  )
  assert.equal((await routes('h2')).federated, undefined, 'home2 runs no shared pod: no federated peer')

  // A shared pod on home2 as well. The pair h1–h2 is behind NAT on both ends and neither reaches
  // the other (the underlay cannot: the routers drop what the LAN did not start); its relay could
  // only be a node of home1 or home2 not behind NAT, and there is none. cloud, a third cluster,
  // never relays it: the pair keeps its direct tunnel, which stays down, and nothing else changes
  // (cloud keeps reaching home1's pod).
  assert.notEqual((await tb.exec('h1', 'ping', ['-c', '1', '-W', '1', tb.host('h2').ip])).exitCode, 0, 'h1 cannot reach h2 (two NATs)')
  await tb.orc('c1', ['apply', '-f', '-'], { input: sharedPod('idle', 'exec sleep 3600', { placement: { clusters: ['home2'] } }) })
  const idle = await waitRunning(tb, 'c1', 'idle', 'h2@home2')
  const h2Net = ((await tb.orcJson('h2', ['get', 'node', 'h2'])).status.network.prefix as string).replace(/::\/64$/, '')
  const pair = await waitFor(
    'h1 plans h2 (runs idle) and c1 plans both homes',
    async () => {
      const [h, c] = await Promise.all([routes('h1'), routes('c1')])
      const p = (h.federated ?? []).find((x: any) => x.node === 'h2@home2')
      const both = ['h1@home1', 'h2@home2'].every((n) => (c.federated ?? []).some((x: any) => x.node === n))
      return p?.routes.includes(`${idle}/128`) && both ? { p, c } : undefined
    },
    60_000,
  )
  assert.notEqual(pair.p.path, 'relayed', `no relay for h1–h2: ${JSON.stringify(pair.p)}`)
  assert.notEqual(pair.p.state, 'up', 'the direct tunnel h1–h2 does not come up')
  assert.ok(!(pair.c.federated as any[]).some((x) => x.relayFor !== undefined), `c1 relays nothing: ${JSON.stringify(pair.c.federated)}`)
  const clientNs = (pair.c.pods as any[]).find((p) => p.ipv6 === client)?.netns as string
  const fromClient = await tb.exec('c1', 'ip', ['netns', 'exec', clientNs, 'busybox', 'nc', '-w', '3', first, '8080'])
  assert.match(fromClient.stdout, /hello-web/, 'cloud still reaches home1 with the unreachable h1–h2 pair planned')
  for (const on of ['c1', 'h1']) for (const line of `${on}: orc get routes\n${await tb.orc(on, ['get', 'routes'])}`.split('\n')) t.diagnostic(line)

  // home1 is lost: its network cut, its agent killed. The ha pod moves to home2, and the client
  // in cloud — the same pod, still running — reaches it on the same name and virtual address.
  const k0 = Date.now()
  await tb.partition(['h1'], ['c1', 'h2'])
  await tb.killAgent('h1')
  const bound = await waitFor(
    'web bound to h2@home2',
    async () => ((await tb.orcJson('c1', ['get', 'pod', 'web', '-n', NS]).catch(() => undefined))?.status?.node === 'h2@home2' ? Date.now() - k0 : undefined),
    180_000,
  )
  const moved = await waitFor(
    `web Running on h2@home2 with an address in ${h2Net}::/64`,
    async () => {
      const st = (await tb.orcJson('c1', ['get', 'pod', 'web', '-n', NS]).catch(() => undefined))?.status ?? {}
      const ip = st.network?.ipv6
      return st.phase === 'Running' && st.node === 'h2@home2' && typeof ip === 'string' && ip.startsWith(`${h2Net}:`) ? (ip as string) : undefined
    },
    180_000,
  )
  const failover = Date.now() - k0
  t.diagnostic(`web failed over to h2@home2 (${moved}): bound there ${bound} ms and Running there ${failover} ms after home1 was cut off (haAfter 3 s)`)
  const d0 = Date.now()
  await waitFor(`c1 balances ${vip} to ${moved} only`, async () => ((await dnatTo(moved)) && !(await dnatTo(first)) ? true : undefined), 60_000)
  const natLag = Date.now() - d0
  assert.equal(await dig(), vip, 'the name still answers the same address')
  // The client saw the outage (connections unanswered while home1 was gone), then web again.
  const down = `resolved [${vip}] reached ${vip}: `
  await waitFor(
    'the client pod in cloud reached web on home2 by the same name and address',
    async () => {
      const l = (await logs()).split('\n')
      const gap = l.lastIndexOf(down)
      return gap >= 0 && l.slice(gap).some((x) => reached.test(x)) ? true : undefined
    },
    120_000,
  )
  t.diagnostic(
    `after the failover: c1 balanced ${vip} to the home2 pod ${natLag} ms after the pod was seen Running there; the client pod reached it by name ${Date.now() - k0} ms after home1 was cut off`,
  )
  for (const line of `client log:\n${await logs()}`.split('\n')) t.diagnostic(line)
  // The pod's history: right after the bind to h2, h2 wrote its own status (starting, no address),
  // not the lost copy's phase and address until the pod ran there.
  const history = await tb.orc('c1', ['history', 'pod/web', '-n', NS])
  for (const line of `orc history pod/web -n ${NS} (on c1)\n${history}`.split('\n')) t.diagnostic(line)
  const rows = history.split('\n')
  const bindRow = rows.findIndex((l) => /bind to h2@home2 \(from h1@home1\)/.test(l))
  assert.ok(bindRow > 0, history)
  assert.match(rows[bindRow + 1] ?? '', /controller:lifecycle@home2 +update +start revision \d+ \(phase (Starting|Pending)\)/, history)

  // cloud ↔ home2 directly, and nothing relayed anywhere: home2 needs no path to home1.
  const [c, h] = await Promise.all([routes('c1'), routes('h2')])
  const toH2 = (c.federated ?? []).find((p: any) => p.node === 'h2@home2')
  assert.ok(toH2?.routes.includes(`${moved}/128`), JSON.stringify(c.federated))
  assert.notEqual(toH2.path, 'relayed')
  const toC1 = (h.federated ?? []).find((p: any) => p.node === 'c1@cloud')
  assert.ok(toC1?.routes.includes(`${client}/128`), JSON.stringify(h.federated))
  assert.notEqual(toC1.path, 'relayed')
  assert.ok(!(h.federated ?? []).some((p: any) => p.node === 'h1@home1' && p.routes.length > 0), `h2 routes nothing to h1: ${JSON.stringify(h.federated)}`)
  assert.ok(!(c.federated as any[]).some((x) => x.relayFor !== undefined), `c1 relays nothing: ${JSON.stringify(c.federated)}`)
  for (const line of `h2: orc get routes\n${await tb.orc('h2', ['get', 'routes'])}`.split('\n')) t.diagnostic(line)
  t.diagnostic(`scenario ${Date.now() - t0} ms`)
  failed = false
})
