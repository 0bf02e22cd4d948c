// Public surface of the mesh layer. Other modules (the agent) import only from here.

export {
  advertisableAddresses,
  DEFAULT_LISTEN,
  DEFAULT_PORT,
  JOIN_PORT_OFFSET,
  joinListenFor,
  parseListenAddress,
  type Resolver,
  resolvePeerAddress,
  splitHostPort,
  systemResolver,
} from './address.ts'
// Out-of-turn anti-entropy and relaying of what a session brought in (the simulator drives it too).
export { AntiEntropyPlanner, type AntiEntropyTunables, antiEntropyTunables } from './antientropy.ts'
export {
  BLOBS_PROTOCOL,
  type BlobBody,
  type BlobProvider,
  type BlobVia,
  blobTransferMs,
  isBlobDigest,
  isBlobVia,
  MAX_HAS_DIGESTS,
  parseBlobRequest,
} from './blobs.ts'
export {
  type ClusterConfig,
  type ClusterState,
  decodeAdminCredential,
  encodeAdminCredential,
  initCluster,
  loadCluster,
  newUserKey,
  publicKeyOfCredential,
} from './cluster.ts'
// The remote CLI is known by the peer id of its credential key (the gater lets it in without a trial slot).
export { peerIdOfCredentialKey } from './credential-peers.ts'
export type { MeshEvents } from './events.ts'
export { readFileIfExists, writeFileAtomic } from './fsutil.ts'
export { membersTopic, storeTopic } from './gossip.ts'
export { loadOrCreateIdentity, peerIdOf } from './identity.ts'
export type { JoinProgress } from './join.ts'
export { JOIN_PROTOCOL } from './join.ts'
export { KEYRING_PROTOCOL, type KeyringProvider } from './keyring.ts'
export { MEMBER_API_PROTOCOL, type MemberApiContext, type MemberApiHandler } from './member-api.ts'
export { JsonFileMemberDirectory, type MemberDirectory, MemoryMemberDirectory } from './members.ts'
export type { MemberInfo, MemberState, MemberTransition, MemberView } from './membership.ts'
// The liveness state machine itself: pure over an injected `now` (the simulator drives it on virtual time).
export { chooseConnections, MembershipTable } from './membership.ts'
export { createCluster, type JoinOptions, joinMesh, Mesh, type MeshOptions, startMesh } from './mesh.ts'
export { type MeshTunables, meshDefaults } from './options.ts'
export { callRemoteApi, decodeRemoteCredential, encodeRemoteCredential, type RemoteCredential } from './remote.ts'
export { API_PROTOCOL, type ApiCallContext, type ApiHandler, type ApiRequest, type ApiResponse, verifySignedRequest } from './rpc.ts'
export { type NodeRecordSigner, type NodeRecordVerifier, peerKeyVerifier, recordSigner } from './signing.ts'
// The SWIM failure detector (failureDetector 'swim'): pure over an injected `now` and random (the simulator runs it too).
export {
  SwimDetector,
  type SwimMessage,
  type SwimOptions,
  suspicionMinMs,
  suspicionTimeoutMs,
  swimDefaults,
} from './swim.ts'
export { SYNC_PROTOCOL, type SyncResult } from './sync.ts'
export {
  checkTokenLimits,
  decodeToken,
  formatDuration,
  type IssueTokenOptions,
  JsonFileTokenBook,
  MAX_TOKEN_TTL_MS,
  MAX_TOKEN_USES,
  MemoryTokenBook,
  TokenAuthority,
  type TokenBook,
  type TokenClaims,
  type TokenRecord,
} from './token.ts'
