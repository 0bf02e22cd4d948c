/** What the real-agent scheduling tests share: one busybox image every agent can read, sleep pods. */
import assert from 'node:assert/strict'
import { chmodSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { execa } from 'execa'
import type { NodeProcess, Workspace } from '../cluster/helpers.ts'

const ROOT = new URL('../..', import.meta.url).pathname

/** The busybox image in a directory every agent of the workspace can read (a join needs an empty data dir). */
export async function sharedBusybox(ws: Workspace): Promise<string> {
  chmodSync(ws.root, 0o711)
  const shared = join(ws.root, 'shared')
  mkdirSync(shared, { mode: 0o711 })
  const imp = await execa(process.execPath, [join(ROOT, 'bin/orc.mjs'), 'image', 'import-busybox', '--data-dir', shared], { cwd: ROOT, reject: false })
  assert.equal(imp.exitCode, 0, String(imp.stderr))
  chmodSync(shared, 0o711)
  return join(shared, 'images', 'busybox')
}

/** A pod running `sleep MARKER` (counted on this machine with pidsRunning(['sleep', MARKER])). */
export function sleepPod(name: string, image: string, marker: string, spec: Record<string, unknown> = {}): string {
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name },
    spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sleep', marker] }], ...spec },
  })
}

/** The pod as `node` stores it, or undefined. */
export async function podOn(node: NodeProcess, name: string): Promise<Record<string, any> | undefined> {
  try {
    return ((await node.client.call('GET', `/v1/objects/Pod/default/${name}`)) as { object: Record<string, any> }).object
  } catch {
    return undefined
  }
}
