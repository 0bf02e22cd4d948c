/**
 * Peer distribution with two real agents and one real registry (behind a counting proxy): a ~50 MB
 * image (busybox plus incompressible layers) started on node a (from the registry), then on node b
 * (from a, over the mesh), then again on a (cached), beside a pod of a store image on a.
 * Each figure is apply → Running as `orc get pod` shows it, and the bytes the registry answered.
 * Run: node --import tsx test/bench/image-peer.bench.ts   (MB=50 LAYERS=5; needs docker-registry, skopeo, bwrap)
 */
import { randomBytes } from 'node:crypto'
import { chmodSync } from 'node:fs'
import type { TarEntry } from '../../src/runtime/index.ts'
import { type NodeProcess, newNode, orc, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { busyboxLayerEntries } from '../fixtures/busybox-image.ts'
import { countingProxy, pushImage, registryMissing, startRegistry } from '../helpers/registry.ts'
import { pidsRunning, skipReason } from '../pods/helpers.ts'
import { podOn, sharedBusybox } from '../sched/helpers.ts'

const MB = Number(process.env.MB ?? 50)
const LAYERS = Number(process.env.LAYERS ?? 5)
const MARKER = '4719411'
const missing = skipReason() ?? registryMissing()
if (missing) {
  console.error(missing)
  process.exit(0)
}

const reg = await startRegistry()
const proxy = await countingProxy(reg)
const ws = new Workspace()
chmodSync(ws.root, 0o711)
try {
  const perLayer = Math.floor((MB << 20) / LAYERS)
  const layers: TarEntry[][] = [
    busyboxLayerEntries(),
    ...Array.from({ length: LAYERS }, (_, i): TarEntry[] => [
      { path: `data/layer-${i}.bin`, type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, data: randomBytes(perLayer) },
    ]),
  ]
  await pushImage(reg, 'bench/big:1', { layers })
  const store = await sharedBusybox(ws)
  const a = await newNode(ws, 'a')
  const b = await newNode(ws, 'b')
  await a.up().ready()
  await b.join(a.addr, await tokenFrom(a)).ready()
  for (const n of [a, b])
    await waitFor(`${n.name} to see two members`, async () => JSON.parse((await n.cli(['status', '-o', 'json'])).stdout).mesh.members.alive === 2, 30_000)

  const start = async (name: string, node: NodeProcess, image: string) => {
    const text = JSON.stringify({
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name },
      spec: { terminationGracePeriodSeconds: 1, placement: { node: node.name }, containers: [{ name: 'main', image, command: ['sleep', MARKER] }] },
    })
    const before = proxy.bytes
    const t0 = performance.now()
    const r = await orc(a.socket, ['apply', '-f', '-'], {}, text)
    if (r.exitCode !== 0) throw new Error(r.stderr)
    await waitFor(`${name} running`, async () => (await podOn(a, name))?.status?.phase === 'Running', 120_000)
    return { ms: performance.now() - t0, registryBytes: proxy.bytes - before }
  }
  const big = `${proxy.host}/bench/big:1`
  const first = await start('first', a, big)
  const second = await start('second', b, big)
  const cached = await start('cached', a, big)
  const local = await start('store', a, store)
  const line = (k: string, v: { ms: number; registryBytes: number }) =>
    console.log(`${k}_apply_to_running_ms ${v.ms.toFixed(0)}\n${k}_registry_bytes ${v.registryBytes}`)
  console.log(`image_bytes ${layers.length > 0 ? MB << 20 : 0}`)
  line('image_first_node_from_registry', first)
  line('image_second_node_from_peer', second)
  line('image_cached', cached)
  line('store_image', local)
} finally {
  await ws.close()
  await proxy.close()
  await reg.stop()
  for (const pid of pidsRunning(['sleep', MARKER]))
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
}
