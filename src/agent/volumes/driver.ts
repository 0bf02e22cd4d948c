/**
 * The external storage driver contract (docs/storage.md, "Drivers"): an executable named after
 * `Volume.spec.driver` in the node's volume driver directory, called as
 *
 *   DRIVER attach|mount|unmount|detach   < request JSON   > answer JSON
 *
 * Request: `{ "op", "volume": { "namespace", "name", "uid", "sizeBytes", "options" }, "node",
 * "target" }` (`target`: an empty directory the driver mounts the volume on, for mount/unmount).
 * Answer: `{}` or `{ "message": "…" }`; exit 0 on success, anything else is a failure whose
 * message is the answer's `message` or the last line of stderr. Every call must be idempotent
 * (an agent restart calls attach and mount again) and ends after `timeoutMs`: a driver that hangs
 * fails the call, the pod stays Pending with the reason, and nothing is deleted.
 */
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import type { CommandRunner } from '../../effects/index.ts'
import { OrcError, VOLUME_DRIVER_NAME } from '../../model/index.ts'

export type DriverOp = 'attach' | 'mount' | 'unmount' | 'detach'

export interface DriverRequest {
  op: DriverOp
  volume: { namespace: string; name: string; uid: string; sizeBytes: number; options: Record<string, string> }
  node: string
  target?: string
}

export interface ExecDriversComponents {
  /** Where driver executables are (`<dataDir>/volume-drivers` unless the operator sets another). */
  dir: string
  run: CommandRunner
  timeoutMs: number
}

export class ExecDrivers {
  constructor(private readonly c: ExecDriversComponents) {}

  pathOf(driver: string): string {
    if (!VOLUME_DRIVER_NAME.test(driver)) throw new OrcError('invalid', `volume driver ${JSON.stringify(driver)} is not a driver name`)
    return join(this.c.dir, driver)
  }

  /** One call; throws OrcError `unavailable` naming the driver, the operation and why. */
  async call(driver: string, req: DriverRequest): Promise<Record<string, unknown>> {
    const path = this.pathOf(driver)
    if (!existsSync(path)) throw new OrcError('unavailable', `volume driver ${driver} is not installed on node ${req.node} (no ${path})`)
    // timeout(1) runs the driver in its own process group and kills all of it: a hung driver's
    // children would otherwise keep its pipes open past any timeout of ours.
    const secs = Math.max(1, Math.ceil(this.c.timeoutMs / 1000))
    const r = await this.c.run('timeout', ['-k', '2', String(secs), path, req.op], { input: JSON.stringify(req), timeoutMs: (secs + 5) * 1000 })
    let answer: Record<string, unknown> = {}
    try {
      const parsed = r.stdout.trim() === '' ? {} : JSON.parse(r.stdout)
      if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) answer = parsed as Record<string, unknown>
    } catch {
      if (r.exitCode === 0) throw new OrcError('unavailable', `volume driver ${driver} ${req.op}: its answer is not JSON`)
    }
    if (r.exitCode !== 0) {
      const timedOut = r.exitCode === 124 || r.exitCode === 137 || /timed out/i.test(r.stderr)
      const why = timedOut
        ? `no answer in ${secs} s (killed)`
        : typeof answer.message === 'string'
          ? answer.message
          : r.stderr.trim().split('\n').pop() || `exit ${r.exitCode}`
      throw new OrcError('unavailable', `volume driver ${driver} ${req.op} of volume ${req.volume.name}: ${why.slice(0, 300)}`)
    }
    return answer
  }
}
