import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { StoreOptions } from '../../src/store/options.ts'
import { openStore, type Store } from '../../src/store/store.ts'

export { seededBytes } from './random.ts'

export function tempDir(prefix = 'orc-test-'): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) }
}

export async function tempStore(opts: Partial<StoreOptions> = {}): Promise<{ store: Store; dir: string; cleanup: () => Promise<void> }> {
  const t = tempDir()
  const store = await openStore({ dir: join(t.dir, 'db'), ...opts })
  return {
    store,
    dir: join(t.dir, 'db'),
    cleanup: async () => {
      await store.close()
      t.cleanup()
    },
  }
}

export function pod(name: string, image = '/images/busybox', extra: Record<string, unknown> = {}): any {
  return {
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name, labels: { app: name } },
    spec: { containers: [{ name: 'main', image, command: ['sh', '-c', 'sleep 3600'] }], ...extra },
  }
}
