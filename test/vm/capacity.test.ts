/**
 * VirtualMachines count against their node's capacity, on a real agent offering 4 cpu and 1Gi
 * (ORC_NODE_CAPACITY) with one real guest (TCG where /dev/kvm is missing): a pod that no longer fits
 * beside the VM stays pending with the VM named in `orc why`; `orc describe node` counts the VM; a
 * second VM that does not fit is not booted, says why in status and `orc why vm/NAME`, and starts
 * once a pod leaves (it is deleted before its guest gets far: one booted guest keeps the test short).
 */
import assert from 'node:assert/strict'
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { buildGuest, getVm, guestVmSpec, vmGuestMissing, vmManifest } from '../fixtures/vm-guest.ts'
import { killSleeps, podManifest, startTestAgent, type TestAgent, waitFor } from '../pods/helpers.ts'

const why = vmGuestMissing()
const MARK = '4717'

describe('VirtualMachines hold their node’s capacity (real agent)', { skip: why ? `skipped: ${why}` : false, timeout: 600_000 }, () => {
  let a: TestAgent
  let kernel: string
  let failed = true
  const vm = (name: string) => getVm(a.orc, name)
  const requests = (memory: string) => ({
    containers: [{ name: 'main', image: a.image, command: ['sleep', MARK], resources: { requests: { cpu: '100m', memory } } }],
  })

  before(async () => {
    a = await startTestAgent('n1', { env: { ORC_NODE_CAPACITY: 'cpu=4,memory=1Gi' } })
    kernel = buildGuest(join(a.dataDir, 'images')).kernel
  })
  after(async () => {
    if (failed && a) console.error(`--- agent output ---\n${a.output().slice(-4000)}`)
    for (const n of ['vm/a', 'vm/b', 'pod/small', 'pod/big']) await a?.orc(['delete', n]).catch(() => undefined)
    // A stopping agent leaves its guests running for the next one: wait until the deleted ones are gone.
    if (a)
      await waitFor(
        'the VMs removed from the node',
        () => (existsSync(join(a.dataDir, 'vms')) && readdirSync(join(a.dataDir, 'vms')).length > 0 ? undefined : true),
        60_000,
      ).catch(() => undefined)
    await a?.stop()
    a?.remove()
    killSleeps([MARK])
  })

  it('the node records the capacity it was given', async () => {
    const n = JSON.parse((await a.orc(['get', 'node/n1', '-o', 'json'])).stdout)
    assert.deepEqual(n.status.capacity, { cpu: '4', memory: '1Gi' })
  })

  it('a pod that fits only without the VM stays pending, with the VM named in orc why and counted in describe', { timeout: 400_000 }, async () => {
    const r = await a.orc(['apply', '-f', '-'], vmManifest('a', guestVmSpec(kernel)))
    assert.equal(r.exitCode, 0, r.stderr)
    await waitFor(
      'vm/a Running',
      async () => {
        const o = await vm('a')
        if (o?.status?.phase === 'Failed') throw new Error(`vm failed: ${o.status.reason}`)
        return o?.status?.phase === 'Running' ? true : undefined
      },
      300_000,
    )
    // 1Gi less vm/a (256Mi guest + 128Mi for qemu) less this pod's 128Mi leaves 512Mi.
    assert.equal((await a.orc(['apply', '-f', '-'], podManifest('small', a.image, '', requests('128Mi')))).exitCode, 0)
    await waitFor('pod/small bound to n1', async () => ((await a.pod('small'))?.status?.node === 'n1' ? true : undefined), 60_000)
    assert.equal((await a.orc(['apply', '-f', '-'], podManifest('big', a.image, '', requests('768Mi')))).exitCode, 0)
    const text = await waitFor(
      'orc why pod/big to name vm/a',
      async () => {
        const w = await a.orc(['why', 'pod/big'])
        return /vm\/default\/a holds/.test(w.stdout) ? w.stdout : undefined
      },
      60_000,
    )
    assert.match(text, /pending: 0\/1 nodes can run it: 1 insufficient memory/)
    assert.match(text, /n1: insufficient memory \(requests 768Mi, free 512Mi; vm\/default\/a holds 384Mi\)/)
    assert.equal((await a.pod('big'))?.status?.node, undefined, 'not placed on n1')

    const d = await a.orc(['describe', 'node/n1'])
    assert.equal(d.exitCode, 0, d.stderr)
    assert.match(d.stdout, /Allocated \(what pods and VMs hold of the capacity\):/)
    assert.match(d.stdout, /1 pod\s+100m\s+128Mi/)
    assert.match(d.stdout, /vm\/default\/a\s+1\s+384Mi\s+Running; 256Mi guest \+ 128Mi qemu/)
    assert.match(d.stdout, /total\s+1100m\s+512Mi\s+28% cpu, 50% memory/)
    assert.match(d.stdout, /free\s+2900m\s+512Mi\s+of cpu 4, memory 1Gi/)
  })

  it('a second VM that does not fit is not booted, says why, and starts when a pod leaves', { timeout: 120_000 }, async () => {
    const r = await a.orc(
      ['apply', '-f', '-'],
      vmManifest('b', {
        node: 'n1',
        memory: '512Mi',
        kernel: { path: kernel, cmdline: 'panic=-1' },
        initrd: { image: 'initramfs.gz' },
        terminationGracePeriodSeconds: 0,
      }),
    )
    assert.equal(r.exitCode, 0, r.stderr)
    const reason = 'needs 640Mi memory; node n1 has 512Mi free of 1Gi (1 pod 128Mi, vm/default/a 384Mi)'
    const st = await waitFor('vm/b refused', async () => {
      const o = await vm('b')
      return o?.status?.reason === reason ? o.status : undefined
    })
    assert.equal(st.phase, 'Pending')
    assert.equal(st.pid, undefined, 'no qemu for vm/b')
    assert.equal(st.workflow, undefined, 'no lifecycle run started')
    const w = await a.orc(['why', 'vm/b'])
    assert.match(w.stdout, /^vm\/b: Pending on node n1/)
    assert.ok(w.stdout.includes(`reason: ${reason}`), w.stdout)
    assert.match(w.stdout, /Not started: node n1 has no room for it yet\. It starts by itself when room frees/)
    assert.match((await a.orc(['history', 'vm/b'])).stdout, /waiting for room: needs 640Mi memory/)
    // The waiting VM holds its room for the scheduler too: pod/big still has nowhere to go.
    assert.match((await a.orc(['why', 'pod/big'])).stdout, /vm\/default\/b holds 640Mi/)

    assert.equal((await a.orc(['delete', 'pod/small'])).exitCode, 0)
    const started = await waitFor('vm/b started once pod/small left', async () => {
      const o = await vm('b')
      return o?.status?.phase === 'Starting' || o?.status?.phase === 'Running' ? o.status : undefined
    })
    assert.equal(started.reason, undefined)
    const uid = (await vm('b'))!.metadata.uid as string
    assert.equal((await a.orc(['delete', 'vm/b'])).exitCode, 0)
    // Its guest is stopped and its files go before the agent stops (a stopping agent leaves guests running).
    await waitFor('vm/b removed from the node', () => (existsSync(join(a.dataDir, 'vms', uid)) ? undefined : true), 60_000)
    failed = false
  })
})
