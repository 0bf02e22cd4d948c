/**
 * Block-level replication of a VM's Volume disk (docs/storage.md, "Replication of VM disks"): the
 * time and bytes of (a) the full first sync of a volume of SIZE_MIB (64) holding FILL_MIB (1) MiB
 * of random files and (b) an incremental sync after WRITE_MIB (1) MiB was written, then (c) one with
 * nothing written. test/fixtures/block-replication.ts: real qemu (TCG, no guest: the writes go
 * through qemu's block layer with HMP `qemu-io`, as a guest's would), real ext4 images on loop
 * devices, the agent's primary (syncOne → takeDelta → pieces) and replica (receiveBlocks → journal →
 * image) code, joined by an in-process member API whose JSON bodies are counted. At the end the
 * replica's image is compared with the primary's, byte for byte.
 * Run: node --import tsx --import ./test/setup.ts test/bench/vm-block-replication.bench.ts [SIZE_MIB] [WRITE_MIB] [FILL_MIB]
 */
import { readFileSync } from 'node:fs'
import { blockRig, blockRigMissing } from '../fixtures/block-replication.ts'

const SIZE_MIB = Number(process.argv[2] ?? 64)
const WRITE_MIB = Number(process.argv[3] ?? 1)
const FILL_MIB = Number(process.argv[4] ?? 1)
const missing = blockRigMissing()
if (missing) {
  console.error(`skipped: ${missing}`)
  process.exit(0)
}

const rig = await blockRig(SIZE_MIB, FILL_MIB)
try {
  await rig.startQemu()
  rig.vmHolds = true
  const measure = async (what: string) => {
    rig.sent.bytes = 0
    rig.sent.requests = 0
    const t0 = performance.now()
    const r = await rig.sync()
    const ms = performance.now() - t0
    console.log(
      `${what}: ${r.blocks} in ${ms.toFixed(0)} ms; ${r.changed} ranges, ${(r.bytes / 2 ** 20).toFixed(2)} MiB of data, ${(rig.sent.bytes / 2 ** 20).toFixed(2)} MiB of request bodies in ${rig.sent.requests} requests`,
    )
  }
  await measure(`(a) first sync of a ${SIZE_MIB} MiB volume holding ${FILL_MIB} MiB of files`)
  await rig.qmp('human-monitor-command', { 'command-line': `qemu-io disk0 "write -P 0x5a 16M ${WRITE_MIB}M"` })
  await measure(`(b) incremental after ${WRITE_MIB} MiB written`)
  await measure('(c) incremental with nothing written')
  await rig.stopQemu()
  const same = readFileSync(rig.locals.a.imageOf(rig.uid)).equals(readFileSync(rig.locals.b.imageOf(rig.uid)))
  console.log(`replica image identical to the primary's: ${same}`)
  if (!same) process.exitCode = 1
} finally {
  await rig.close()
}
