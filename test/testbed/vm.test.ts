/**
 * A VirtualMachine on the pod network, on a two-node testbed (real agents in network namespaces,
 * real WireGuard, real qemu): the guest (Debian's kernel + the test's busybox initramfs, TCG here)
 * boots on node a with its own IPv6 address from a's /64 — a tap in the VM's pod namespace, bridged
 * to its pod interface — and a pod on node b reaches it over the mesh (TCP to the guest's port,
 * answered by the guest); the guest's IPv4 connection to a host outside the cluster leaves masqueraded
 * as node a, as a pod's does. `orc logs vm/NAME` from node b is forwarded to a; the guest and its address
 * survive a restart of a's agent; deleting the VM stops the guest by ACPI power-down and frees its address.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { test } from 'node:test'
import { busyboxImages } from '../fixtures/busybox-image.ts'
import { buildGuest, GUEST_BANNER, GUEST_PORT, GUEST_READY, vmGuestMissing } from '../fixtures/vm-guest.ts'
import { startTcpServer } from '../net/netns.ts'
import { applyPod, podManifest, skipReason, Testbed, waitFor, waitMesh } from './helpers.ts'

test('testbed: a VM on node a gets an address from its /64 and a pod on node b reaches it over the mesh', { timeout: 900_000 }, async (t) => {
  const why = (await skipReason()) ?? vmGuestMissing()
  if (why) return t.skip(`skipped: ${why}`)
  const guestDir = mkdtempSync(join(tmpdir(), 'orc-tb-guest-'))
  t.after(() => rmSync(guestDir, { recursive: true, force: true }))
  const guest = buildGuest(guestDir)
  // The guest's initramfs is in an image store the operator named (ORC_IMAGE_STORES), beside busybox's.
  const tb = await Testbed.create({
    hosts: [{ name: 'a' }, { name: 'b' }],
    env: { ORC_IMAGE_STORES: `${dirname(busyboxImages().rootfs)}:${guestDir}` },
  })
  t.after(() => tb.destroy())
  let failed = true
  t.after(() => {
    if (failed) for (const h of tb.hosts.values()) t.diagnostic(`--- ${h.name} log tail ---\n${tb.tail(h, 40)}`)
  })
  await tb.up('a')
  await tb.join('b', 'a')
  const nodes = await waitMesh(tb, 'a', ['a', 'b'])
  const prefixA = String(nodes.get('a').network.prefix)
  // An IPv4 host outside the cluster: it answers with the address it sees.
  const outside = await startTcpServer(tb.external.ns, tb.external.ip, 9100)
  t.after(() => outside.stop())

  await tb.orc('a', ['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'VirtualMachine',
      metadata: { name: 'guest' },
      spec: {
        node: 'a',
        memory: '256Mi',
        kernel: { path: guest.kernel, cmdline: `panic=-1 orc.test.egress=${tb.external.ip}:9100` },
        initrd: { image: 'initramfs.gz' },
        network: 'pod',
        readyMarker: GUEST_READY,
      },
    }),
  })
  const st = await waitFor(
    'vm/guest Running with an address',
    async () => {
      const o = await tb.orcJson('a', ['get', 'vm', 'guest'])
      if (o.status?.phase === 'Failed') throw new Error(`vm failed: ${o.status.reason}`)
      return o.status?.phase === 'Running' && typeof o.status.ipv6 === 'string' ? o.status : undefined
    },
    300_000,
  )
  t.diagnostic(`guest at ${st.ipv6} on a (${st.accel}: ${st.accelReason})`)
  assert.ok(st.ipv6.startsWith(prefixA.split('::')[0]), `the guest's address ${st.ipv6} is in a's /64 ${prefixA}`)

  // The console, asked of node b (forwarded to a).
  const logs = await tb.orc('b', ['logs', 'vm/guest'])
  assert.ok(logs.includes(GUEST_READY))
  assert.ok(logs.includes(`guest address ${st.ipv6} via fe80::1`), 'the guest took the address orc gave it on the command line')
  // IPv4 egress as a pod's: the guest takes the VM's node-local 10.88.x.y, and the outside host sees node a's address.
  assert.match(logs, /guest ipv4 10\.88\.\d+\.\d+ via 10\.88\.0\.1/)
  const egress = await waitFor(
    "the guest's IPv4 connection out answered",
    async () => /guest egress answer: (\S+)/.exec(await tb.orc('a', ['logs', 'vm/guest']))?.[1],
    60_000,
  )
  assert.equal(egress, tb.host('a').ip, "the outside host sees node a, not the guest's 10.88 address")

  // A pod on b connects to the guest's port over the mesh; the guest answers.
  const script = `for i in $(seq 1 60); do if nc -w 3 ${st.ipv6} ${GUEST_PORT}; then echo CONNECTED; break; fi; sleep 1; done; exec sleep 3600`
  await applyPod(tb, 'a', podManifest('client', 'b', script))
  const out = await waitFor(
    "the pod on b got the guest's banner",
    async () => {
      const l = await tb.orc('a', ['logs', 'pod/client']).catch(() => '')
      return l.includes('CONNECTED') ? l : undefined
    },
    120_000,
  )
  assert.ok(out.includes(GUEST_BANNER), out)

  // An agent restart on a: the guest keeps running, its namespace and address stay, b still reaches it.
  await tb.stopAgent('a')
  await tb.up('a')
  await waitFor(
    'vm/guest re-adopted with the same qemu pid',
    async () => {
      const o = await tb.orcJson('a', ['get', 'vm', 'guest']).catch(() => undefined)
      return o?.status?.phase === 'Running' && o.status.pid === st.pid && o.status.ipv6 === st.ipv6 ? true : undefined
    },
    120_000,
  )
  const again = `for i in $(seq 1 60); do if nc -w 3 ${st.ipv6} ${GUEST_PORT}; then echo AGAIN; break; fi; sleep 1; done; exec sleep 3600`
  await applyPod(tb, 'a', podManifest('client2', 'b', again))
  const out2 = await waitFor(
    'the guest answers b again after the restart of a',
    async () => {
      const l = await tb.orc('a', ['logs', 'pod/client2']).catch(() => '')
      return l.includes('AGAIN') ? l : undefined
    },
    120_000,
  )
  assert.ok(out2.includes(GUEST_BANNER), out2)

  // Delete: the guest powers off over ACPI and a's address table forgets it.
  assert.ok(JSON.stringify(await tb.orcJson('a', ['get', 'routes'])).includes(st.ipv6), "a's pod network lists the guest's address")
  await tb.orc('a', ['delete', 'vm/guest'])
  await waitFor(
    "the guest's address gone from a's pod network",
    async () => {
      const r = await tb.orcJson('a', ['get', 'routes'])
      return JSON.stringify(r).includes(st.ipv6) ? undefined : true
    },
    60_000,
  )
  failed = false
})
