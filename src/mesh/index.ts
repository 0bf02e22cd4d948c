// Public surface of the mesh layer. Other modules (the agent) import only from here.
export { createCluster, startMesh, joinMesh, Mesh, type MeshOptions, type JoinOptions } from './mesh.ts'
export type { MeshEvents } from './events.ts'
export type { JoinProgress } from './join.ts'
export { JOIN_PROTOCOL } from './join.ts'
export { SYNC_PROTOCOL, type SyncResult } from './sync.ts'
export { API_PROTOCOL, type ApiHandler, type ApiRequest, type ApiResponse, type ApiCallContext } from './rpc.ts'
export { MEMBER_API_PROTOCOL, type MemberApiHandler, type MemberApiContext } from './member-api.ts'
export type { MemberInfo, MemberView, MemberState, MemberTransition } from './membership.ts'
// The liveness state machine itself: pure over an injected `now` (the simulator drives it on virtual time).
export { MembershipTable, chooseConnections } from './membership.ts'
// Out-of-turn anti-entropy and relaying of what a session brought in (the simulator drives it too).
export { AntiEntropyPlanner, antiEntropyTunables, type AntiEntropyTunables } from './antientropy.ts'
export { MemoryMemberDirectory, JsonFileMemberDirectory, type MemberDirectory } from './members.ts'
export {
  MemoryTokenBook,
  JsonFileTokenBook,
  TokenAuthority,
  decodeToken,
  formatDuration,
  checkTokenLimits,
  MAX_TOKEN_TTL_MS,
  MAX_TOKEN_USES,
  type TokenBook,
  type TokenRecord,
  type TokenClaims,
  type IssueTokenOptions,
} from './token.ts'
export { initCluster, loadCluster, decodeAdminCredential, type ClusterState, type ClusterConfig } from './cluster.ts'
export { loadOrCreateIdentity, peerIdOf } from './identity.ts'
export { writeFileAtomic } from './fsutil.ts'
export { meshDefaults, type MeshTunables } from './options.ts'
export { storeTopic, membersTopic } from './gossip.ts'
export { DEFAULT_PORT, DEFAULT_LISTEN, advertisableAddresses, parseListenAddress, resolvePeerAddress, splitHostPort, systemResolver, type Resolver } from './address.ts'
export { callRemoteApi, decodeRemoteCredential, encodeRemoteCredential, type RemoteCredential } from './remote.ts'
export { encodeAdminCredential } from './cluster.ts'
