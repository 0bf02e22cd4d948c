/**
 * Unpinned VirtualMachines on three real agents (real mesh, real qemu, the test's busybox guest;
 * TCG where /dev/kvm does not work). Capacity is set per node (ORC_NODE_CAPACITY) so that where a
 * VM fits is known: a offers 256Mi (no 256Mi guest fits: it needs 384Mi with qemu's allowance), b
 * 1Gi, c 512Mi. A VM too big for every node stays unplaced and `orc why` says why per node; an `ha`
 * VM is placed on b (the most room) and boots there; b's agent is killed with -9: the guest's
 * watchdog stops its qemu (no agent needed), c binds the VM after haAfter and boots it, and `orc
 * history` records the move; with a paused too, c fences it and boots it again when a is back. A
 * best-effort VM on b stays bound to b after its agent is killed (its guest runs on) until b is
 * forgotten, then boots on c; b, back, stops its old copy.
 */
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { readProcStat } from '../../src/runtime/procfs.ts'
import type { NodeProcess } from '../cluster/helpers.ts'
import { waitFor } from '../cluster/helpers.ts'
import { GUEST_READY, guestVmSpec, vmGuestMissing, vmManifest } from '../fixtures/vm-guest.ts'
import { startVmCluster } from './cluster.ts'

const skip = vmGuestMissing()

test('unpinned VMs: placed where there is room, an ha VM boots on another node when its node dies', { skip, timeout: 600_000 }, async (t) => {
  const capacity: Record<string, string> = { a: 'cpu=4,memory=256Mi', b: 'cpu=4,memory=1Gi', c: 'cpu=4,memory=512Mi' }
  const { nodes, kernel, qemus, apply } = await startVmCluster(
    t,
    ['a', 'b', 'c'],
    Object.fromEntries(Object.entries(capacity).map(([n, cap]) => [n, { ORC_NODE_CAPACITY: cap }])),
  )
  const [a, b, c] = nodes as [NodeProcess, NodeProcess, NodeProcess]
  const { node: _pin, ...unpinned } = guestVmSpec(kernel, { terminationGracePeriodSeconds: 0 })

  await t.test('a VM no node has room for stays unplaced; orc why names each node’s reason', async () => {
    await apply(vmManifest('huge', { ...unpinned, memory: '2Gi' }))
    const why = await waitFor(
      'orc why vm/huge to explain',
      async () => {
        const r = await c.cli(['why', 'vm/huge'])
        return /Placement/.test(r.stdout) ? r.stdout : undefined
      },
      30_000,
    )
    assert.match(why, /^vm\/huge: Pending on node <none>/)
    assert.match(why, /vm\/default\/huge: pending: 0\/3 nodes can run it: 3 insufficient memory/)
    assert.match(why, /\n {4}a: insufficient memory \(requests 2176Mi, free 256Mi\)/)
    assert.match(why, /\n {4}b: insufficient memory \(requests 2176Mi, free 1Gi\)/)
    assert.match(why, /No lifecycle run recorded yet: no node is bound/)
    const row = (await c.cli(['get', 'vms'])).stdout.split('\n').find((l) => l.startsWith('huge '))
    assert.match(row ?? '', /^huge\s+Pending\s+<none>/)
    const d = (await a.cli(['describe', 'vm/huge'])).stdout
    assert.match(d, /Placement \(a\):\n {2}vm\/default\/huge: pending: 0\/3 nodes can run it/)
    assert.equal((await c.cli(['delete', 'vm/huge'])).exitCode, 0)
  })

  let first: Record<string, any>
  let onC: Record<string, any>
  await t.test('an ha VM is bound to the node with the most room and boots there', { timeout: 300_000 }, async () => {
    await apply(vmManifest('g', { ...unpinned, policy: 'ha', haAfterSeconds: 10 }))
    first = await waitFor(
      'vm/g Running',
      async () => {
        const v = await c.getJson('vm/g')
        if (v?.status?.phase === 'Failed') throw new Error(`vm failed: ${v.status.reason}`)
        return v?.status?.phase === 'Running' ? v : undefined
      },
      240_000,
    )
    assert.equal(first.status.node, 'b', 'b has the most room; a has none')
    assert.equal(first.status.scheduling.by, 'b')
    qemus.push(first.status.pid)
    const row = (await a.cli(['get', 'vms', '-o', 'wide'])).stdout.split('\n').find((l) => l.startsWith('g '))
    assert.match(row ?? '', /^g\s+Running\s+b\s+.*\s+ha\s+/)
    // The console is on b; any node forwards the request there.
    assert.ok((await a.cli(['logs', 'vm/g'])).stdout.includes(GUEST_READY))
    const d = await a.cli(['describe', 'node/b'])
    assert.match(d.stdout, /vm\/default\/g\s+1\s+384Mi\s+Running/)
  })

  await t.test('kill -9 of its agent: the watchdog stops its qemu, the VM is rebound to c and boots there', { timeout: 300_000 }, async () => {
    const wrapper = first.status.pid as number
    await b.kill('SIGKILL')
    const killedAt = Date.now()
    // Until the move, orc why says what the policy does about the lost node.
    const waiting = await waitFor(
      'orc why vm/g to say when it moves',
      async () => {
        const r = (await c.cli(['why', 'vm/g'])).stdout
        if (/on node c/.test(r)) throw new Error(`moved before orc why said when: ${r}`)
        return /placement: node b (suspect|dead) for \d+s; ha VM moves after 10s/.test(r) ? r : undefined
      },
      10_000,
    )
    assert.match(waiting, /^vm\/g: Running on node b/)
    // The stored phase is b's last report; orc get vms says what c knows.
    const row = await waitFor('get vms to show vm/g Unknown on b', async () => {
      const r = (await c.cli(['get', 'vms'])).stdout.split('\n').find((l) => l.startsWith('g '))
      if (r !== undefined && /^g\s+\S+\s+c\s/.test(r)) throw new Error(`moved before get vms said Unknown: ${r}`)
      return r !== undefined && /^g\s+Unknown\s+b\s/.test(r) ? r : undefined
    })
    assert.ok(row)
    // No agent on b: the qemu wrapper's watchdog reads the lease and kills qemu after the fence window.
    await waitFor("b's qemu stopped by its watchdog", async () => (processAlive(wrapper) ? undefined : true), 30_000)
    const stoppedAfter = Date.now() - killedAt
    const moved = await waitFor(
      'vm/g bound to c',
      async () => {
        const v = await c.getJson('vm/g')
        return v?.status?.node === 'c' ? v : undefined
      },
      40_000,
    )
    const boundAfter = Date.now() - killedAt
    assert.equal(moved.status.scheduling.from, 'b')
    assert.ok(stoppedAfter <= boundAfter + 2_000, `the old copy stopped (${stoppedAfter} ms) before the move (${boundAfter} ms)`)
    const running = await waitFor(
      'vm/g Running on c',
      async () => {
        const v = await c.getJson('vm/g')
        if (v?.status?.phase === 'Failed') throw new Error(`vm failed on c: ${v.status.reason}`)
        // b's last report says Running until c writes its own (its qemu, another pid).
        return v?.status?.phase === 'Running' && v.status.node === 'c' && v.status.pid !== wrapper ? v : undefined
      },
      240_000,
    )
    qemus.push(running.status.pid)
    assert.ok((await c.cli(['logs', 'vm/g'])).stdout.includes(GUEST_READY))
    const hist = (await c.cli(['history', 'vm/g'])).stdout
    assert.match(hist, /controller:scheduler\s+update\s+bind to b: best of/)
    assert.match(hist, /controller:scheduler\s+update\s+bind to c \(from b\): best of/)
    const why = (await c.cli(['why', 'vm/g'])).stdout
    assert.match(why, /^vm\/g: Running on node c/)
    assert.match(why, /bound to c \(from b\)/)
    t.diagnostic(`qemu on b stopped ${stoppedAfter} ms after kill -9; bound to c after ${boundAfter} ms; running on c after ${Date.now() - killedAt} ms`)
    onC = running
  })

  await t.test('a node that hears no quorum fences its ha VM, and boots it again once it hears one', { timeout: 300_000 }, async () => {
    // b is dead; with a paused, c hears one node of three.
    a.signal('SIGSTOP')
    const pausedAt = Date.now()
    try {
      // The fence window is haAfter − margin = 10 − 5 s, at least 6 s, from the last quorum c heard.
      await waitFor("c's qemu stopped", async () => (processAlive(onC.status.pid) ? undefined : true), 30_000)
      const stoppedAfter = Date.now() - pausedAt
      const fenced = await waitFor(
        'vm/g Fenced on c',
        async () => {
          const v = await c.getJson('vm/g')
          return v?.status?.phase === 'Fenced' ? v : undefined
        },
        30_000,
      )
      assert.match(fenced.status.reason, /^fenced: this node has not heard a quorum \(2 of 3 nodes\)/)
      assert.equal(fenced.status.node, 'c', 'still bound to c: nobody else may take it')
      t.diagnostic(`c's qemu stopped ${stoppedAfter} ms after a was paused (c's last quorum)`)
    } finally {
      a.signal('SIGCONT')
    }
    const again = await waitFor(
      'vm/g Running on c again',
      async () => {
        const v = await c.getJson('vm/g')
        return v?.status?.phase === 'Running' && v.status.pid !== onC.status.pid ? v : undefined
      },
      240_000,
    )
    qemus.push(again.status.pid)
    assert.match((await c.cli(['history', 'vm/g'])).stdout, /controller:vm\s+update\s+fenced: /)
    assert.equal((await c.cli(['delete', 'vm/g'])).exitCode, 0)
    await waitFor('vm/g stopped on c', async () => (processAlive(again.status.pid) ? undefined : true), 60_000)
  })

  await t.test('a best-effort VM stays on its lost node until it is forgotten; the node, back, stops its old copy', { timeout: 300_000 }, async () => {
    // b comes back: the guest its dead agent left (stopped by the watchdog) goes, files and all.
    await b.up().ready()
    await waitFor('b to see three alive members', async () => JSON.parse((await b.cli(['status', '-o', 'json'])).stdout).mesh.members.alive === 3, 30_000)
    await waitFor("b to drop vm/g's files", async () => (existsSync(join(b.dataDir, 'vms', first.metadata.uid)) ? undefined : true), 30_000)

    await apply(vmManifest('be', unpinned))
    const onB = await waitFor(
      'vm/be Running on b',
      async () => {
        const v = await c.getJson('vm/be')
        if (v?.status?.phase === 'Failed') throw new Error(`vm failed: ${v.status.reason}`)
        return v?.status?.phase === 'Running' ? v : undefined
      },
      240_000,
    )
    assert.equal(onB.status.node, 'b')
    qemus.push(onB.status.pid)
    await b.kill('SIGKILL')
    // Not ha: no watchdog, and it stays bound to b (running through a partition is its contract).
    const why = await waitFor(
      'orc why vm/be to say it waits for b to be forgotten',
      async () => {
        const r = (await c.cli(['why', 'vm/be'])).stdout
        return /placement: node b (suspect|dead) for \d+s; best-effort VM moves when the node is forgotten or after 7d/.test(r) ? r : undefined
      },
      30_000,
    )
    assert.match(why, /^vm\/be: Running on node b/)
    assert.ok(processAlive(onB.status.pid), "b's guest runs on without its agent")
    const f = await a.cli(['node', 'forget', 'b', '--reason', 'test: b is gone'])
    assert.equal(f.exitCode, 0, f.stderr)
    const onC = await waitFor(
      'vm/be Running on c',
      async () => {
        const v = await c.getJson('vm/be')
        return v?.status?.phase === 'Running' && v.status.node === 'c' && v.status.pid !== onB.status.pid ? v : undefined
      },
      240_000,
    )
    qemus.push(onC.status.pid)
    assert.equal(onC.status.scheduling.from, 'b')
    assert.match(onC.status.scheduling.reason, /best of/)
    // b returns: its old copy is stopped (the VM is c's now), and it leaves the VM's status to c.
    const returnedAt = Date.now()
    await b.up().ready()
    await waitFor("b's old copy stopped", async () => (processAlive(onB.status.pid) ? undefined : true), 60_000)
    await waitFor("b's console logs of it removed", async () => (existsSync(join(b.dataDir, 'vms', onB.metadata.uid)) ? undefined : true), 30_000)
    const v = await b.getJson('vm/be')
    assert.deepEqual([v?.status?.node, v?.status?.phase, v?.status?.pid], ['c', 'Running', onC.status.pid])
    assert.ok(processAlive(onC.status.pid), "c's guest runs on")
    const hist = JSON.parse((await c.cli(['history', 'vm/be', '-o', 'json'])).stdout) as { time: number; author: string; reason: string }[]
    const fromB = hist.filter((r) => r.time >= returnedAt && /re-adopted|stopping|now bound to/.test(r.reason))
    assert.deepEqual(fromB, [], 'no status write from b about its old copy')
    assert.equal((await c.cli(['delete', 'vm/be'])).exitCode, 0)
    await waitFor('vm/be stopped on c', async () => (processAlive(onC.status.pid) ? undefined : true), 60_000)
  })
})

/** The process runs (a zombie waiting for its reaper has ended). */
function processAlive(pid: number): boolean {
  const st = readProcStat(pid)
  return st !== undefined && st.state !== 'Z' && st.state !== 'X'
}
