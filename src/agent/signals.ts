import type { Agent } from './agent.ts'

/** Stop the agent on SIGINT/SIGTERM; a second signal exits at once. Returns a remover. */
export function stopOnSignals(agent: Agent): () => void {
  let count = 0
  const onSignal = (sig: NodeJS.Signals): void => {
    count++
    if (count > 1) {
      agent.logger.warn({ signal: sig }, 'second signal: exiting without an orderly stop')
      process.exit(130)
    }
    agent.logger.info({ signal: sig }, 'signal received')
    void agent.stop()
  }
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  return () => {
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
  }
}
