export { openStore, Store } from './store.ts'
export type * from './types.ts'
export type { StoreOptions, CompactionPolicy } from './options.ts'
export { DEFAULT_COMPACTION, MAX_REMOTE_UPDATE_BYTES } from './options.ts'
