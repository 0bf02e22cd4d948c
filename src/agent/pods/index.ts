// The pods part's face for tools outside the agent: netsim runs each simulated node's real binder.
export { Binder, type ViewBuilder } from './binder.ts'
