/**
 * The effects a component may have besides computing: time, randomness and running commands. One
 * set, passed in through each component's options and never reached for, so the same component
 * runs in the agent, in unit tests and in the simulator. A leaf: imports nothing of the project.
 */
export { type Clock, every, ManualClock, sleep, systemClock, type TimerHandle, unrefTimers } from './clock.ts'
export { type CommandOptions, type CommandResult, type CommandRunner, createExecaRunner, execaRunner } from './exec.ts'
export { type Random, randomHex, systemRandom } from './random.ts'
