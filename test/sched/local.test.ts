// Local scheduling with real agents (three processes, real mesh, real sandboxes): every node plans on
// its own view and only the chosen node binds; nodeSelector; an ha pod moves off a killed node after
// haAfterSeconds; a best-effort pod stays bound to the lost node until `orc node forget`; a node that
// comes back stops the copy that moved away and reports it.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { type NodeProcess, newNode, orc, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { TEST_TUNABLES as POD_TUNABLES, pidsRunning, skipReason } from '../pods/helpers.ts'
import { podOn, sharedBusybox, sleepPod } from './helpers.ts'

const skip = skipReason()

async function apply(node: NodeProcess, text: string): Promise<void> {
  const r = await orc(node.socket, ['apply', '-f', '-'], {}, text)
  assert.equal(r.exitCode, 0, r.stderr)
}

test('local scheduling on three real agents', { skip, timeout: 240_000 }, async (t) => {
  const ws = new Workspace()
  const markers = ['4711101', '4711102', '4711103', '4711104']
  t.after(async () => {
    await ws.close()
    for (const m of markers)
      for (const pid of pidsRunning(['sleep', m]))
        try {
          process.kill(pid, 'SIGKILL')
        } catch {}
  })
  // One image every node can read (the nodes share this machine; a join needs an empty data dir).
  const image = await sharedBusybox(ws)

  const nodes = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]
  const [a, b, c] = nodes as [NodeProcess, NodeProcess, NodeProcess]
  // Whichever node survives forgets the lost one: every node's socket is the cluster's admin here
  // (a joined node's root is node-admin by default, docs/security.md).
  for (const n of nodes) n.env = { ORC_POD_TUNABLES: JSON.stringify(POD_TUNABLES), ORC_SOCKET_USER: 'admin' }
  await a.up().ready()
  await b.join(a.addr, await tokenFrom(a)).ready()
  await c.join(a.addr, await tokenFrom(a), ['--labels', 'disk=ssd']).ready()
  for (const n of nodes) {
    await waitFor(
      `${n.name} to see three alive members`,
      async () => {
        const s = JSON.parse((await n.cli(['status', '-o', 'json'])).stdout)
        return s.mesh.members.alive === 3
      },
      30_000,
    )
  }
  const byName = new Map(nodes.map((n) => [n.name, n]))
  // One survivor of three is left below, which hears no majority: this test opts out of quorum
  // fencing (fenceQuorum 1), as a two-machine lab would. test/sched/fencing.test.ts tests fencing.
  const clusters = JSON.parse((await a.cli(['get', 'clusters', '-o', 'json'])).stdout)
  const cluster = (clusters.items ?? clusters)[0]
  await apply(
    a,
    JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Cluster',
      metadata: { name: cluster.metadata.name },
      spec: { ...cluster.spec, scheduling: { ...cluster.spec.scheduling, fenceQuorum: 1 } },
    }),
  )
  for (const n of nodes) {
    await waitFor(
      `${n.name} to have fencing off`,
      async () => {
        const r = JSON.parse((await n.cli(['get', 'clusters', '-o', 'json'])).stdout)
        return (r.items ?? r)[0]?.spec?.scheduling?.fenceQuorum === 1 ? true : undefined
      },
      30_000,
    )
  }

  await t.test('a nodeSelector pod lands on the labelled node; an impossible one is explained', async () => {
    await apply(a, sleepPod('ssd', image, markers[0]!, { nodeSelector: { disk: 'ssd' } }))
    await waitFor(
      'pod ssd to run on c',
      async () => {
        const p = await podOn(a, 'ssd')
        return p?.status?.node === 'c' && p.status.phase === 'Running'
      },
      30_000,
    )
    await apply(a, sleepPod('nowhere', image, 'x', { nodeSelector: { disk: 'tape' } }))
    const why = await waitFor('orc why to explain the pending pod', async () => {
      const r = await a.cli(['why', 'pod/nowhere'])
      return /pending/.test(r.stdout) && /a: .*disk=tape/i.test(r.stdout) ? r.stdout : undefined
    })
    assert.match(why, /c: /, 'every node is accounted for')
    assert.equal((await a.cli(['delete', 'pod/nowhere'])).exitCode, 0)
  })

  await t.test('an everyNode PinnedDeployment runs one copy on each node, spread by the real agents', async () => {
    const tpl = (m: string) => ({ spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sleep', m] }] } })
    await apply(
      b,
      JSON.stringify({
        apiVersion: 'orc/v1',
        kind: 'PinnedDeployment',
        metadata: { name: 'agent' },
        spec: { placement: { everyNode: true }, previous: tpl('4711104') },
      }),
    )
    await waitFor(
      'a copy running on each node',
      async () => {
        for (const n of ['a', 'b', 'c']) {
          const p = await podOn(c, `agent-${n}`)
          if (p?.status?.phase !== 'Running' || p.status.node !== n) return undefined
        }
        return true
      },
      40_000,
    )
    const r = await c.cli(['rollout', 'status', 'agent', '-o', 'json'])
    assert.equal(r.exitCode, 0, r.stderr)
    const s = JSON.parse(r.stdout)
    assert.equal(s.everyNode, true)
    assert.deepEqual([s.previous.desired, s.previous.created], [3, 3])
    assert.equal((await a.cli(['delete', 'pinneddeployment/agent'])).exitCode, 0)
    await waitFor(
      'its pods to be deleted',
      async () => ((await podOn(a, 'agent-a')) === undefined && (await podOn(a, 'agent-c')) === undefined ? true : undefined),
      30_000,
    )
    await waitFor('its copies to stop', async () => (pidsRunning(['sleep', '4711104']).length === 0 ? true : undefined), 30_000)
  })

  let lost: NodeProcess
  await t.test('an ha pod moves when its node is killed; a best-effort pod stays until orc node forget', async () => {
    // Both pods avoid c (the ssd pod's node stays up): the one left on a or b is killed.
    await apply(a, sleepPod('keeper', image, markers[1]!, { policy: 'best-effort' }))
    const keeperNode = await waitFor(
      'keeper to run',
      async () => {
        const p = await podOn(a, 'keeper')
        return p?.status?.phase === 'Running' ? (p.status.node as string) : undefined
      },
      30_000,
    )
    await apply(a, sleepPod('mover', image, markers[2]!, { policy: 'ha', haAfterSeconds: 2 }))
    const moverNode = await waitFor(
      'mover to run',
      async () => {
        const p = await podOn(a, 'mover')
        return p?.status?.phase === 'Running' ? (p.status.node as string) : undefined
      },
      30_000,
    )
    // Kill the keeper's node; if the mover is elsewhere, kill the mover's node as well (one survivor).
    lost = byName.get(keeperNode)!
    const killed = new Set([keeperNode, moverNode])
    for (const name of killed) await byName.get(name)!.kill('SIGKILL')
    const survivor = nodes.find((n) => !killed.has(n.name))!
    const moved = await waitFor(
      'the ha pod to be rebound and run on a live node',
      async () => {
        const p = await podOn(survivor, 'mover')
        return p?.status?.phase === 'Running' && !killed.has(p.status.node) ? p : undefined
      },
      40_000,
    )
    assert.equal(moved.status.scheduling.from, moverNode, 'the binding says where it came from')
    let last = ''
    const why = await waitFor('orc why to say the best-effort pod waits for its node', async () => {
      const r = await survivor.cli(['why', 'pod/keeper'])
      last = r.stdout + r.stderr
      return /best-effort pod moves when the node is forgotten/.test(r.stdout) ? r.stdout : undefined
    }).catch((err) => assert.fail(`${err.message}\n${last}`))
    assert.match(why, new RegExp(`on node ${keeperNode}`))
    assert.equal((await podOn(survivor, 'keeper'))!.status.node, keeperNode, 'still bound to the lost node')

    const f = await survivor.cli(['node', 'forget', keeperNode, '--reason', 'test'])
    assert.equal(f.exitCode, 0, f.stderr)
    assert.match(f.stdout, new RegExp(`node/${keeperNode} forgotten`))
    await waitFor(
      'the best-effort pod to move after forget',
      async () => {
        const p = await podOn(survivor, 'keeper')
        return p?.status?.phase === 'Running' && !killed.has(p.status.node)
      },
      30_000,
    )
    // Bring the other killed node back first (if any) so the cluster has its members again.
    for (const name of killed) if (name !== keeperNode) await byName.get(name)!.up().ready()
  })

  await t.test('the lost node comes back: its mark is cleared and it reports the copy it stopped', async () => {
    await lost.up().ready()
    await waitFor('the forgotten mark to be cleared', async () => {
      const r = JSON.parse((await lost.cli(['get', 'node', lost.name, '-o', 'json'])).stdout)
      return r.status?.forgotten === undefined
    })
    const report = await waitFor(
      'the lost node to report the copy it stopped in its own Node',
      async () => {
        const r = JSON.parse((await lost.cli(['get', 'node', lost.name, '-o', 'json'])).stdout)
        return (r.status?.stoppedCopies ?? []).find((c: { pod: string }) => c.pod === 'default/keeper')
      },
      // A restarted node catches up through the checks on receipt; on a loaded machine that took over 30 s.
      60_000,
    )
    const p = (await podOn(lost, 'keeper'))!
    assert.notEqual(p.status.node, lost.name)
    assert.equal(report.boundTo, p.status.node)
    assert.equal(p.status.scheduling?.stoppedCopies, undefined, "the pod's status is left to the node running it")
    await waitFor('one copy of keeper on this machine', async () => pidsRunning(['sleep', markers[1]!]).length === 1)
  })
})
