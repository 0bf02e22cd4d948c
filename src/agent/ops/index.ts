// The ops part's face for tools outside the agent: the testbed starts agents with the node flags.
export { NODE_ENV, NODE_ENV_WORDS, NODE_FLAGS } from './node-flags.ts'
