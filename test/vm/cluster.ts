/**
 * Three (or more) real agents for the VM tests that need a cluster: a workspace whose shared image
 * store holds the test guest's initramfs, the nodes up and joined and seeing each other alive, and
 * the guests' qemu pids to kill at the end (a killed agent's guest may outlive it).
 */
import assert from 'node:assert/strict'
import { chmodSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { TestContext } from 'node:test'
import { type NodeProcess, newNode, orc, tokenFrom, unmountUnder, Workspace, waitFor } from '../cluster/helpers.ts'
import { buildGuest } from '../fixtures/vm-guest.ts'

export interface VmCluster {
  ws: Workspace
  nodes: NodeProcess[]
  /** The guest's kernel (the initramfs is in the shared image store as `initramfs.gz`). */
  kernel: string
  /** qemu pids to kill when the test ends. */
  qemus: number[]
  /** `orc apply -f -` of `text` on the first node; asserts it worked. */
  apply(text: string): Promise<void>
}

/** Nodes `names` (each with `env[name]` in its environment), the first one up, the others joined to it. */
export async function startVmCluster(t: TestContext, names: readonly string[], env: Record<string, Record<string, string>> = {}): Promise<VmCluster> {
  const ws = new Workspace()
  const qemus: number[] = []
  const nodes: NodeProcess[] = []
  t.after(async () => {
    for (const pid of qemus)
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
    // Volumes the agents left mounted (a replica's copy is mounted for file-level syncs) go before the files.
    for (const n of nodes) await n.kill('SIGKILL')
    unmountUnder(ws.root)
    await ws.close()
  })
  chmodSync(ws.root, 0o711)
  const shared = join(ws.root, 'shared', 'images')
  mkdirSync(shared, { recursive: true, mode: 0o711 })
  // Every node finds the initramfs by name in the workspace's shared image store.
  const { kernel } = buildGuest(shared)
  for (const name of names) {
    const n = await newNode(ws, name)
    if (env[name] !== undefined) n.env = env[name]
    nodes.push(n)
  }
  const [first, ...rest] = nodes as [NodeProcess, ...NodeProcess[]]
  await first.up().ready()
  for (const n of rest) await n.join(first.addr, await tokenFrom(first)).ready()
  for (const n of nodes)
    await waitFor(
      `${n.name} to see ${nodes.length} alive members`,
      async () => JSON.parse((await n.cli(['status', '-o', 'json'])).stdout).mesh.members.alive === nodes.length,
      30_000,
    )
  const apply = async (text: string) => {
    const r = await orc(first.socket, ['apply', '-f', '-'], {}, text)
    assert.equal(r.exitCode, 0, r.stderr)
  }
  return { ws, nodes, kernel, qemus, apply }
}
