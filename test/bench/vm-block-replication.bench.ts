/**
 * Block-level replication of a VM's Volume disk (docs/storage.md, "Replication of VM disks"): the
 * time and bytes of (a) the full first sync of a 64 MiB volume and (b) an incremental sync after 1 MiB
 * was written. Real qemu (TCG, no guest: the writes go through qemu's block layer with its HMP
 * `qemu-io`, as a guest's would), real ext4 images on loop devices, the real primary (VolumeReplication
 * .syncOne → takeDelta → pieces) and replica (receiveBlocks → journal → image) code; the member API
 * between them is an in-process call whose JSON bodies are counted (the bytes a mesh request carries).
 * At the end the replica's image is compared with the primary's, byte for byte.
 * Needs root (loop mounts, qemu -runas nobody) and qemu-system-x86 + qemu-utils.
 * Run: node --import tsx --import ./test/setup.ts test/bench/vm-block-replication.bench.ts [SIZE_MIB] [WRITE_MIB] [FILL_MIB]
 */
import { execFileSync, spawn } from 'node:child_process'
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pino from 'pino'
import { LocalVolumes } from '../../src/agent/volumes/index.ts'
import { VolumeReplication } from '../../src/agent/volumes/replicas.ts'
import { createExecaRunner, systemClock } from '../../src/effects/index.ts'
import { QmpClient } from '../../src/runtime/qmp.ts'
import { tempStore } from '../helpers/store.ts'
import { waitFor } from '../helpers/wait.ts'

const SIZE_MIB = Number(process.argv[2] ?? 64)
const WRITE_MIB = Number(process.argv[3] ?? 1)
/** MiB of random files written in the volume before the first sync (the worst case of a full sync: a volume full of data). */
const FILL_MIB = Number(process.argv[4] ?? 1)
if (process.getuid?.() !== 0 || !existsSync('/dev/loop-control')) {
  console.error('skipped: needs root and loop devices')
  process.exit(0)
}

const dir = mkdtempSync(join(tmpdir(), 'orc-bench-blk-'))
chmodSync(dir, 0o711)
const { store, cleanup } = await tempStore()
let qemuPid: number | undefined
try {
  const v = await store.apply(
    { apiVersion: 'orc/v1', kind: 'Volume', metadata: { name: 'disk', namespace: 'default' }, spec: { size: `${SIZE_MIB}Mi`, replicas: 2 } } as never,
    { author: 'user:admin', now: 1 },
  )
  const uid = v.object!.metadata.uid
  await store.patch({ kind: 'Volume', namespace: 'default', name: 'disk' }, [{ path: ['status'], value: { node: 'a', replicas: { b: {} } } }], {
    author: 'controller:volume',
    now: 2,
  })
  const run = createExecaRunner()
  const log = pino({ level: 'silent' })
  const locals = {
    a: new LocalVolumes({ base: join(dir, 'a', 'volumes'), run, isRoot: true }),
    b: new LocalVolumes({ base: join(dir, 'b', 'volumes'), run, isRoot: true }),
  }
  for (const d of [join(dir, 'a'), join(dir, 'b')]) execFileSync('mkdir', ['-p', '-m', '0711', d])
  // The primary's volume: an ext4 image with a few files, then unmounted (the VM's disk).
  await locals.a.ensure({ uid, namespace: 'default', name: 'disk', sizeBytes: SIZE_MIB << 20 })
  execFileSync('sh', ['-c', `for i in $(seq 1 ${FILL_MIB * 4}); do head -c 262144 /dev/urandom > ${locals.a.dataOf(uid)}/f$i; done; sync`])
  await locals.a.unmount(uid)
  const image = locals.a.imageOf(uid)
  const qmpSock = join(dir, 'qmp-block.sock')
  const q = spawn(
    'qemu-system-x86_64',
    [
      ...['-nodefaults', '-no-user-config', '-display', 'none', '-machine', 'q35', '-accel', 'tcg', '-m', '64'],
      ...['-qmp', `unix:${qmpSock},server=on,wait=off`, '-sandbox', 'on,obsolete=deny,spawn=deny,resourcecontrol=deny', '-runas', 'nobody'],
      ...['-drive', `file=${image},format=raw,if=none,id=disk0,discard=unmap`, '-device', 'virtio-blk-pci,drive=disk0,serial=data'],
    ],
    { stdio: 'ignore' },
  )
  qemuPid = q.pid
  await waitFor('qemu QMP', async () => existsSync(qmpSock) || undefined, 20_000)

  let bodyBytes = 0
  let requests = 0
  const mk = (node: 'a' | 'b', peer?: () => VolumeReplication) =>
    new VolumeReplication({
      store,
      nodeName: node,
      dataDir: join(dir, node),
      clock: systemClock,
      log,
      local: locals[node],
      run,
      peer: {
        request: async (_to, req): Promise<unknown> => {
          const text = JSON.stringify(req.body ?? {})
          bodyBytes += text.length
          requests++
          const body = JSON.parse(text) as Record<string, unknown>
          const r = peer!()
          if (req.path.endsWith('/block')) return r.blockBase('default', 'disk', req.query?.uid, 'peer-a')
          if (req.path.endsWith('/blocksync')) return r.receiveBlocks('default', 'disk', body, 'peer-a')
          throw new Error(`unexpected ${req.path}`)
        },
        aliveNodes: () => ['a', 'b'],
        nodeOfPeer: (p) => ({ 'peer-a': 'a' })[p],
      },
      writeStatus: async () => {},
      heldHere: () => false,
      heldByVm: node === 'a' ? () => ({ vm: 'g', qmp: qmpSock }) : () => undefined,
    })
  const b = mk('b')
  const a = mk('a', () => b)
  const vol = store.get({ kind: 'Volume', namespace: 'default', name: 'disk' })!
  const measure = async (what: string) => {
    bodyBytes = 0
    requests = 0
    const t0 = performance.now()
    const r = await a.syncOne(vol as never, 'b')
    const ms = performance.now() - t0
    console.log(
      `${what}: ${r.blocks} in ${ms.toFixed(0)} ms; ${r.changed} ranges, ${(r.bytes / 2 ** 20).toFixed(2)} MiB of data, ${(bodyBytes / 2 ** 20).toFixed(2)} MiB of request bodies in ${requests} requests`,
    )
  }
  await measure(`(a) first sync of a ${SIZE_MIB} MiB volume holding ${FILL_MIB} MiB of files`)
  const qmp = await QmpClient.connect(qmpSock)
  await qmp.execute('human-monitor-command', { 'command-line': `qemu-io disk0 "write -P 0x5a 16M ${WRITE_MIB}M"` })
  qmp.close()
  await measure(`(b) incremental after ${WRITE_MIB} MiB written`)
  await measure('(c) incremental with nothing written')
  // The replica's copy is the primary's image, byte for byte (qemu flushed: its writes are in the file).
  const qmp2 = await QmpClient.connect(qmpSock)
  await qmp2.execute('stop')
  qmp2.close()
  const same = readFileSync(image).equals(readFileSync(locals.b.imageOf(uid)))
  console.log(`replica image identical to the primary's: ${same}`)
  if (!same) process.exitCode = 1
} finally {
  if (qemuPid !== undefined) process.kill(qemuPid, 'SIGKILL')
  await new Promise((r) => setTimeout(r, 300))
  await cleanup()
  for (const n of ['a', 'b']) execFileSync('sh', ['-c', `umount ${join(dir, n, 'volumes', '*', 'mnt')} 2>/dev/null || true`])
  rmSync(dir, { recursive: true, force: true })
}
