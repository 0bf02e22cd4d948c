/**
 * The parts of a node as components with a lifecycle, in the shape of js-libp2p's Startable: the
 * composition root lists them once, in dependency order; they start in that order and stop in the
 * reverse one.
 */
import { OrcError } from '../model/index.ts'

export interface Component {
  readonly name: string
  start(): Promise<void> | void
  stop(): Promise<void> | void
  /**
   * Runs for every started component (in reverse order) before any stop(): a part that must go
   * quiet before the others stop says so here — the API refuses new requests before the
   * controllers behind it stop (js-libp2p's Startable.beforeStop).
   */
  beforeStop?(): Promise<void> | void
}

export interface StartedComponents {
  /** Every started component's beforeStop, then every stop, both in reverse start order. Safe to call twice. */
  stop(): Promise<void>
}

export interface RunnerHooks {
  /** A stop that failed; the others still run (a node that cannot close one part still closes the rest). */
  onStopError?(name: string, err: unknown): void
}

/**
 * Start `list` in order. When one fails, the ones already started stop (in reverse) and its error
 * is rethrown with the component's name in its details: the message stays the one line the user
 * reads, `--debug` shows which part failed.
 */
export async function startComponents(list: readonly Component[], hooks: RunnerHooks = {}): Promise<StartedComponents> {
  const started: Component[] = []
  let stopping: Promise<void> | undefined
  const stopAll = (): Promise<void> => {
    stopping ??= (async () => {
      const order = [...started].reverse()
      for (const c of order) {
        if (c.beforeStop === undefined) continue
        await call(
          () => c.beforeStop!(),
          (err) => hooks.onStopError?.(c.name, err),
        )
      }
      for (const c of order)
        await call(
          () => c.stop(),
          (err) => hooks.onStopError?.(c.name, err),
        )
    })()
    return stopping
  }
  for (const c of list) {
    try {
      await c.start()
    } catch (err) {
      await stopAll()
      throw startError(c.name, err)
    }
    started.push(c)
  }
  return { stop: stopAll }
}

async function call(fn: () => Promise<void> | void, onError: (err: unknown) => void): Promise<void> {
  try {
    await fn()
  } catch (err) {
    onError(err)
  }
}

function startError(name: string, err: unknown): OrcError {
  if (err instanceof OrcError) return new OrcError(err.code, err.message, { ...err.details, component: name }, err)
  return new OrcError('internal', err instanceof Error ? err.message : String(err), { component: name }, err)
}
