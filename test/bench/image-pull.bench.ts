/**
 * Pull of a multi-layer image (random, incompressible data) from a local Debian docker-registry:
 * orc's ImagePuller into a fresh blob store vs `skopeo copy docker://… dir:…`, alternating, each
 * run from scratch. skopeo verifies digests too, and neither unpacks (orc's unpack is timed apart).
 * Run: node --import tsx test/bench/image-pull.bench.ts   (MB=50 LAYERS=5 RUNS=5; needs docker-registry, skopeo)
 * Prints: median ms of each, the ratio skopeo/orc (≥ 1: orc is as fast or faster), orc's unpack ms.
 */

import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { execa } from 'execa'
import { BlobStore, ImagePuller, parseReference } from '../../src/images/index.ts'
import type { TarEntry } from '../../src/runtime/index.ts'
import { pushImage, registryMissing, startRegistry } from '../helpers/registry.ts'
import { pct } from './proc.ts'

const MB = Number(process.env.MB ?? 50)
const LAYERS = Number(process.env.LAYERS ?? 5)
const RUNS = Number(process.env.RUNS ?? 5)
const missing = registryMissing()
if (missing) {
  console.error(missing)
  process.exit(0)
}

const dir = mkdtempSync(join(tmpdir(), 'orc-bench-pull-'))
const reg = await startRegistry()
try {
  const perLayer = Math.floor((MB << 20) / LAYERS)
  const layers: TarEntry[][] = Array.from({ length: LAYERS }, (_, i) => [
    { path: `data/layer-${i}.bin`, type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, data: randomBytes(perLayer) },
  ])
  await pushImage(reg, 'bench/big:1', { layers, config: { Cmd: ['/bin/true'] } })
  const ref = parseReference(`${reg.host}/bench/big:1`)
  const orc: number[] = []
  const skopeo: number[] = []
  let unpackMs = 0
  let pulledBytes = 0
  for (let i = 0; i < RUNS; i++) {
    const runOrc = async () => {
      const base = join(dir, `orc-${i}`)
      const puller = new ImagePuller(new BlobStore(join(base, 'blobs')), join(base, 'cache'))
      const t0 = performance.now()
      const digest = await puller.resolveDigest(ref)
      if (process.env.VERBOSE) console.error(`  resolve ${(performance.now() - t0).toFixed(0)} ms`)
      const res = await puller.pull({ ...ref, digest })
      orc.push(performance.now() - t0)
      if (process.env.VERBOSE) console.error(`orc run ${i}: ${(performance.now() - t0).toFixed(0)} ms`)
      pulledBytes = res.bytes.registry
      if (i === 0) {
        const t1 = performance.now()
        puller.unpack(digest)
        unpackMs = performance.now() - t1
      }
      rmSync(base, { recursive: true, force: true })
    }
    // Not spawnSync: a pull right after the event loop was blocked for the whole copy ran at half
    // speed (measured: 520 ms after spawnSync('sleep 0.4') vs 220 ms after a 400 ms timer).
    const runSkopeo = async () => {
      const out = join(dir, `skopeo-${i}`)
      const t0 = performance.now()
      const r = await execa('skopeo', ['copy', '-q', '--src-tls-verify=false', `docker://${reg.host}/bench/big:1`, `dir:${out}`], { reject: false })
      if (r.exitCode !== 0) throw new Error(`skopeo copy: ${r.stderr}`)
      skopeo.push(performance.now() - t0)
      if (process.env.VERBOSE) console.error(`skopeo run ${i}: ${(performance.now() - t0).toFixed(0)} ms`)
      rmSync(out, { recursive: true, force: true })
    }
    // Alternate which goes first, so neither always finds the registry's page cache warmer.
    if (i % 2 === 0) {
      await runOrc()
      await runSkopeo()
    } else {
      await runSkopeo()
      await runOrc()
    }
  }
  const o = pct(orc, 50)
  const s = pct(skopeo, 50)
  console.log(`image_pull_bytes ${pulledBytes}`)
  console.log(`image_pull_orc_median_ms ${o.toFixed(0)}`)
  console.log(`image_pull_skopeo_median_ms ${s.toFixed(0)}`)
  console.log(`image_pull_speed_ratio_orc_vs_skopeo ${(s / o).toFixed(2)}`)
  console.log(`image_unpack_orc_ms ${unpackMs.toFixed(0)}`)
} finally {
  await reg.stop()
  rmSync(dir, { recursive: true, force: true })
}
