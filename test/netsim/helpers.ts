import assert from 'node:assert/strict'
import { replayCommand, SCENARIOS, type ScenarioResult } from '../../netsim/scenarios.ts'

/** Run a scenario and fail with its seed, its violations and the command that replays it. */
export async function runChecked(scenario: string, nodes: number, seed: number): Promise<ScenarioResult> {
  const r = await SCENARIOS[scenario]!.run({ nodes, seed })
  const msg = [
    `${scenario} nodes=${nodes} seed=${seed}: ${r.violations.length} invariant violations`,
    ...r.violations.slice(0, 10).map((v) => `  at ${(v.at / 1000).toFixed(1)}s: ${v.what}`),
    `replay: ${replayCommand(scenario, nodes, seed)}`,
  ].join('\n')
  assert.equal(r.violations.length, 0, msg)
  return r
}
