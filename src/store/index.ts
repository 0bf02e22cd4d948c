export { openStore, Store } from './store.ts'
export type * from './types.ts'
export type { StoreOptions, CompactionPolicy } from './options.ts'
export { DEFAULT_COMPACTION, MAX_REMOTE_UPDATE_BYTES } from './options.ts'
// The replication message codec, for layers that vet what peers send (a federation checks authorship).
export { decodeUpdateMessage, parseRevisionId } from './codec.ts'
