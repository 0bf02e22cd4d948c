/** A pod lifecycle of node `a` (b alive too) over a fresh store, with the given runtime: the real controller, no network. */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestContext } from 'node:test'
import pino from 'pino'
import { PodLifecycle } from '../../../../src/agent/pods/controller.ts'
import type { PodTunables } from '../../../../src/agent/pods/options.ts'
import { systemClock } from '../../../../src/effects/index.ts'
import type { Runtime } from '../../../../src/runtime/index.ts'
import { openStore } from '../../../../src/store/index.ts'

export async function lifecycleOnA(
  t: TestContext,
  rt: Runtime,
  tunables?: Partial<PodTunables>,
): Promise<{ store: Awaited<ReturnType<typeof openStore>>; lc: PodLifecycle }> {
  const dir = mkdtempSync(join(tmpdir(), 'orc-lifecycle-'))
  // An image of the node's image store: a directory is a rootfs.
  mkdirSync(join(dir, 'data', 'images', 'img', 'bin'), { recursive: true })
  const store = await openStore({ dir: join(dir, 'db'), sync: false })
  const lc = new PodLifecycle({
    store,
    nodeName: 'a',
    dataDir: join(dir, 'data'),
    clock: systemClock,
    logger: pino({ level: 'silent' }),
    aliveNodes: () => ['a', 'b'],
    runtime: () => rt,
    ...(tunables ? { tunables } : {}),
  })
  // One hook, in this order (t.after hooks run in the order they were registered).
  t.after(async () => {
    await lc.stop()
    await store.close()
    rmSync(dir, { recursive: true, force: true })
  })
  await lc.start()
  return { store, lc }
}
