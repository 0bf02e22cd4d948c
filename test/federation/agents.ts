// Shared by the real-agent federation tests: separate agent processes with sandboxed pods.

import { type NodeProcess, newNode, orc, tokenFrom, Workspace } from '../cluster/helpers.ts'
import { killSleeps, TEST_TUNABLES as POD_TUNABLES } from '../pods/helpers.ts'
import { sharedBusybox } from '../sched/helpers.ts'

/**
 * Cluster home of two agents (h1, h2) and cluster cloud of one (c1), not federated yet, with the
 * busybox image every node can run. The pods' `sleep <marker>` processes are killed after the test.
 */
export async function homeAndCloud(
  t: { after(fn: () => Promise<void>): void },
  markers: readonly string[],
): Promise<{ ws: Workspace; image: string; h1: NodeProcess; h2: NodeProcess; c1: NodeProcess }> {
  const ws = new Workspace()
  t.after(async () => {
    await ws.close()
    killSleeps([...markers])
  })
  const image = await sharedBusybox(ws)
  const h1 = await newNode(ws, 'h1')
  const h2 = await newNode(ws, 'h2')
  const c1 = await newNode(ws, 'c1')
  for (const n of [h1, h2, c1]) n.env = { ORC_POD_TUNABLES: JSON.stringify(POD_TUNABLES) }
  h1.up(['--cluster', 'home'])
  c1.up(['--cluster', 'cloud'])
  await Promise.all([h1.ready(), c1.ready()])
  h2.join(h1.addr, await tokenFrom(h1))
  await h2.ready()
  return { ws, image, h1, h2, c1 }
}

/** `orc ARGS` as alice on node `n`: its output, or an error with what it said. */
export async function ok(n: NodeProcess, args: string[], input = ''): Promise<string> {
  const r = await orc(n.socket, args, { USER: 'alice' }, input)
  if (r.exitCode !== 0) throw new Error(`orc ${args.join(' ')} on ${n.name} failed (${r.exitCode}): ${r.stderr}${r.stdout}`)
  return r.stdout
}
