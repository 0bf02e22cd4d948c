// At most one running copy of an ha pod, with three real agents (real mesh, real sandboxes): the
// agent of the pod's node is killed with -9 (its container's watchdog stops the copy before the
// pod moves; meanwhile `orc get nodes` says NotReady and `orc get pods` Unknown); the node comes
// back and leaves the pod's status, `orc why` and history to the node running it; a node that
// hears no one (the other two agents paused) fences its ha pod and takes it back once it hears a
// quorum again. A sampler counts the pod's processes on this machine every 100 ms throughout.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { type NodeProcess, newNode, orc, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { pidsRunning, skipReason } from '../pods/helpers.ts'
import { podOn, sharedBusybox, sleepPod } from './helpers.ts'

const skip = skipReason()
const MARKER = '4712201'

/** The row of `name` in a table printed by the CLI, split on runs of spaces. */
async function row(node: NodeProcess, args: string[], name: string): Promise<string[] | undefined> {
  const r = await node.cli(args)
  const lines = r.stdout.split('\n')
  const cells = lines.find((l) => l.startsWith(`${name} `))?.split(/\s{2,}/)
  // get pods' READY column (probes) is not what these checks read: NAME, STATUS, NODE, …
  const ready = (lines[0] ?? '').split(/\s{2,}/).indexOf('READY')
  return cells && ready >= 0 ? cells.filter((_, i) => i !== ready) : cells
}

/** Counts the pod's processes on this machine until stopped; the most seen at once, and when. */
function sampler(marker: string) {
  let max = 0
  let worst = ''
  let from = 0
  let goneAt: number | undefined
  const timer = setInterval(() => {
    const n = pidsRunning(['sleep', marker]).length
    if (n === 0) goneAt ??= Date.now()
    else goneAt = undefined
    if (Date.now() >= from && n > max) {
      max = n
      worst = new Date().toISOString()
    }
  }, 100)
  return {
    /** Count only from now on. */
    arm: () => ((from = Date.now()), (max = 0)),
    stop: () => clearInterval(timer),
    get max() {
      return max
    },
    get worst() {
      return worst
    },
    /** Since when no copy has run (undefined while one runs). */
    get goneAt() {
      return goneAt
    },
  }
}

test('ha pods: at most one copy through an agent crash and a node that hears no one', { skip, timeout: 240_000 }, async (t) => {
  const ws = new Workspace()
  const copies = sampler(MARKER)
  t.after(async () => {
    copies.stop()
    await ws.close()
    for (const pid of pidsRunning(['sleep', MARKER]))
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
  })
  const image = await sharedBusybox(ws)

  const nodes = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]
  const [a] = nodes as [NodeProcess, NodeProcess, NodeProcess]
  await a.up().ready()
  for (const n of nodes.slice(1)) await n.join(a.addr, await tokenFrom(a)).ready()
  for (const n of nodes) {
    await waitFor(
      `${n.name} to see three alive members`,
      async () => JSON.parse((await n.cli(['status', '-o', 'json'])).stdout).mesh.members.alive === 3,
      30_000,
    )
  }
  const byName = new Map(nodes.map((n) => [n.name, n]))
  const apply = async (text: string) => {
    const r = await orc(a.socket, ['apply', '-f', '-'], {}, text)
    assert.equal(r.exitCode, 0, r.stderr)
  }

  await apply(sleepPod('web', image, MARKER, { policy: 'ha', haAfterSeconds: 10 }))
  const first = await waitFor(
    'web to run',
    async () => {
      const p = await podOn(a, 'web')
      return p?.status?.phase === 'Running' ? (p.status.node as string) : undefined
    },
    60_000,
  )
  // Running means the container was started; its process execs a moment later.
  await waitFor("the pod's process to run", async () => (pidsRunning(['sleep', MARKER]).length >= 1 ? true : undefined), 10_000)
  assert.equal(pidsRunning(['sleep', MARKER]).length, 1)
  copies.arm()

  let moved: Record<string, any>
  let returnedAt = 0
  const victim = byName.get(first)!
  const others = nodes.filter((n) => n !== victim)
  await t.test('kill -9 of the agent: NotReady and Unknown while it is out, its copy stops before the pod moves', async () => {
    await victim.kill('SIGKILL')
    const killedAt = Date.now()
    const [s] = others as [NodeProcess, NodeProcess]
    // The stored status still says Running on the lost node; the tables say what this node knows.
    const nodeRow = await waitFor(
      'get nodes to show the lost node NotReady or Unreachable',
      async () => {
        const r = await row(s, ['get', 'nodes'], victim.name)
        return r && /^(NotReady|Unreachable) \(for /.test(r[1] ?? '') ? r : undefined
      },
      20_000,
    )
    assert.ok(nodeRow)
    const podRow = await waitFor(
      'get pods to show web Unknown on the lost node',
      async () => {
        const r = await row(s, ['get', 'pods'], 'web')
        if (r && r[1] !== 'Unknown' && r[2] !== victim.name) throw new Error(`web moved before Unknown was seen: ${r.join(' | ')}`)
        return r && r[1] === 'Unknown' ? r : undefined
      },
      20_000,
    )
    assert.equal(podRow[2], victim.name)
    // Each command asks the node anew; a gossip message of the lost node still in flight can make it
    // look alive for a moment, so the same display is awaited as for get pods above.
    const why = await waitFor(
      'orc why to show web Unknown',
      async () => {
        const r = await s.cli(['why', 'pod/web'])
        return /^pod\/web: Unknown on node/m.test(r.stdout) ? r : undefined
      },
      20_000,
    )
    assert.match(why.stdout, /^pod\/web: Unknown on node/m)
    assert.match(why.stdout, new RegExp(`node ${victim.name} is (NotReady|Unreachable) .*its last report \\(phase Running\\)`))
    // The watchdog stops the copy with no agent watching it, before anyone may start another.
    await waitFor("the dead agent's copy to be stopped by its watchdog", async () => (pidsRunning(['sleep', MARKER]).length === 0 ? true : undefined), 20_000)
    const stoppedAfter = (copies.goneAt ?? Date.now()) - killedAt
    moved = await waitFor(
      'web to run on another node',
      async () => {
        const p = await podOn(s, 'web')
        return p?.status?.phase === 'Running' && p.status.node !== victim.name ? p : undefined
      },
      40_000,
    )
    assert.equal(moved.status.scheduling.from, victim.name)
    assert.equal(copies.max, 1, `two copies ran at once (at ${copies.worst})`)
    t.diagnostic(`copy stopped ${stoppedAfter} ms after kill -9; pod running on ${moved.status.node} ${Date.now() - killedAt} ms after`)
  })

  await t.test('the node comes back: the status, orc why and history stay with the node running the pod', async () => {
    returnedAt = Date.now()
    await victim.up().ready()
    await waitFor(
      `${victim.name} to see three alive members`,
      async () => JSON.parse((await victim.cli(['status', '-o', 'json'])).stdout).mesh.members.alive === 3,
      30_000,
    )
    const report = await waitFor(
      'the returning node to report the stopped copy in its own Node',
      async () => {
        const r = JSON.parse((await victim.cli(['get', 'node', victim.name, '-o', 'json'])).stdout)
        return (r.status?.stoppedCopies ?? []).find((c: { pod: string }) => c.pod === 'default/web')
      },
      30_000,
    )
    assert.equal(report.boundTo, moved.status.node)
    // Give a wrong write every chance to show: anti-entropy, the binder's passes, the fence ticks.
    const settleUntil = Date.now() + 8_000
    while (Date.now() < settleUntil) {
      for (const n of nodes) {
        const r = await row(n, ['get', 'pods'], 'web')
        assert.deepEqual(r?.slice(1, 3), ['Running', moved.status.node], `orc get pods on ${n.name}: ${r?.join(' | ')}`)
      }
      await new Promise((r) => setTimeout(r, 500))
    }
    const p = (await podOn(victim, 'web'))!
    const runningPid = pidsRunning(['sleep', MARKER])
    assert.equal(runningPid.length, 1)
    const why = await victim.cli(['why', 'pod/web'])
    assert.match(why.stdout, new RegExp(`^pod/web: Running on node ${moved.status.node}`, 'm'))
    assert.match(why.stdout, new RegExp(`Copies stopped on other nodes:\\n  ${victim.name} at `))
    assert.equal(p.status.scheduling?.stoppedCopies, undefined)
    const hist = JSON.parse((await victim.cli(['history', 'pod/web', '-o', 'json'])).stdout) as {
      number: number
      time: number
      author: string
      reason: string
    }[]
    const since = hist.filter((r) => r.time >= returnedAt)
    const wrong = since.filter((r) => /adopted after agent restart|\(phase Stopping\)|is bound to/.test(r.reason))
    assert.deepEqual(wrong, [], 'no revision from the returning node about its old copy')
    assert.deepEqual(
      hist.map((r) => r.number),
      hist.map((_, i) => i + 1),
      'history is contiguous',
    )
    assert.equal(copies.max, 1, `two copies ran at once (at ${copies.worst})`)
  })

  await t.test('a node that hears no one fences its ha pod, and runs it again once it hears a quorum', async () => {
    const holder = byName.get(moved.status.node)!
    const rest = nodes.filter((n) => n !== holder)
    for (const n of rest) n.signal('SIGSTOP')
    const pausedAt = Date.now()
    try {
      const fenced = await waitFor(
        'the holder to fence web',
        async () => {
          const p = await podOn(holder, 'web')
          return p?.status?.phase === 'Fenced' ? p : undefined
        },
        30_000,
      )
      assert.match(fenced.status.reason, /fenced: this node has not heard a quorum \(2 of 3 nodes\)/)
      await waitFor('its copy to stop', async () => (pidsRunning(['sleep', MARKER]).length === 0 ? true : undefined), 10_000)
      const r = await row(holder, ['get', 'pods'], 'web')
      assert.equal(r?.[1], 'Fenced')
      t.diagnostic(`fenced ${Date.now() - pausedAt} ms after the other agents were paused`)
    } finally {
      for (const n of rest) n.signal('SIGCONT')
    }
    const back = await waitFor(
      'web to run again once a quorum is heard',
      async () => {
        const p = await podOn(holder, 'web')
        return p?.status?.phase === 'Running' ? p : undefined
      },
      60_000,
    )
    await waitFor('one copy running', async () => (pidsRunning(['sleep', MARKER]).length === 1 ? true : undefined), 20_000)
    t.diagnostic(`running again on ${back.status.node}`)
    assert.equal(copies.max, 1, `two copies ran at once (at ${copies.worst})`)
  })
})
