// The replication message codec, for layers that vet what peers send (a federation checks authorship).
export { decodeUpdateMessage, parseRevisionId } from './codec.ts'
export { BACKDATE_SLACK_MS, EVIDENCE_WINDOW_MS, type UserEvidenceOptions, unsignedRefused, userSignaturePolicy } from './evidence.ts'
export type { CompactionPolicy, StoreOptions } from './options.ts'
export { DEFAULT_COMPACTION, MAX_REMOTE_UPDATE_BYTES } from './options.ts'
export { openStore, type RefusalReason, Store } from './store.ts'
export type { Authorize, ObjectsView, RecordSigner, RecordVerifier, SignerInfo, UserMay, Verb } from './trust.ts'
export { defaultAuthorize } from './trust.ts'
export type * from './types.ts'
