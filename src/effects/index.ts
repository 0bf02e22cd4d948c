/**
 * The effects a component may have besides computing: time, randomness and running commands. One
 * set, passed in through each component's options and never reached for, so the same component
 * runs in the agent, in unit tests and in the simulator. A leaf: imports nothing of the project.
 */
export { systemClock, unrefTimers, sleep, every, ManualClock, type Clock, type TimerHandle } from './clock.ts'
export { systemRandom, randomHex, type Random } from './random.ts'
export { createExecaRunner, execaRunner, type CommandRunner, type CommandOptions, type CommandResult } from './exec.ts'
