import type { ManualClock } from '../../../src/effects/index.ts'
import { addPodTargets, type UnitSpec, WorkflowGraph } from '../../../src/workflow/index.ts'

/** Resolves after `ms` of the given clock's time; rejects with the signal's reason when aborted. */
export function sleep(clock: ManualClock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const h = clock.setTimeout(resolve, ms)
    signal?.addEventListener('abort', () => {
      clock.clearTimeout(h)
      reject(signal.reason)
    })
  })
}

/** A unit that takes `ms` of clock time. */
export function timed(clock: ManualClock, name: string, ms: number, extra: Partial<UnitSpec> = {}): UnitSpec {
  return { name, run: ({ signal }) => sleep(clock, ms, signal), ...extra }
}

/** Never settles unless aborted (it ignores the abort on purpose when `deaf`). */
export function hang(deaf = false): UnitSpec['run'] {
  return ({ signal }) =>
    new Promise((_resolve, reject) => {
      if (!deaf) signal.addEventListener('abort', () => reject(signal.reason))
    })
}

/** The pod graph the examples talk about: storage/network stages, then pull-image and start-containers. */
export function podGraph(clock: ManualClock, pull: UnitSpec['run'], pullOpts: Partial<UnitSpec> = {}): WorkflowGraph {
  const g = addPodTargets(new WorkflowGraph())
  g.addUnit(timed(clock, 'mount-volumes', 120, { wantedBy: ['storage'] }))
  g.addUnit(timed(clock, 'create-netns', 80, { wantedBy: ['network'] }))
  g.addUnit(timed(clock, 'assign-address', 50, { wantedBy: ['network'], requires: ['create-netns'] }))
  g.addUnit({ name: 'pull-image', run: pull, after: ['storage'], timeoutMs: 30_000, ...pullOpts })
  g.addUnit(timed(clock, 'start-containers', 894, { wantedBy: ['running'], requires: ['pull-image', 'network', 'storage'] }))
  return g
}
