// The ops part's face for tools outside the agent: the testbed starts agents with the node flags
// and bundles the sources with the options of dist/orc.mjs.
export { NODE_ENV, NODE_ENV_WORDS, NODE_FLAGS } from './node-flags.ts'
export type { BundleOptionsModule } from './package.ts'
