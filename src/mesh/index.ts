// Public surface of the mesh layer. Other modules (the agent) import only from here.
export { createCluster, startMesh, joinMesh, Mesh, type MeshOptions, type JoinOptions, type MeshEvents } from './mesh.ts'
export type { JoinProgress } from './join.ts'
export { JOIN_PROTOCOL } from './join.ts'
export { SYNC_PROTOCOL, type SyncResult } from './sync.ts'
export { API_PROTOCOL, type ApiHandler, type ApiRequest, type ApiResponse, type ApiCallContext } from './rpc.ts'
export type { MemberInfo, MemberView, MemberState, MemberTransition } from './membership.ts'
export { MemoryMemberDirectory, JsonFileMemberDirectory, type MemberDirectory } from './members.ts'
export {
  MemoryTokenBook,
  JsonFileTokenBook,
  TokenAuthority,
  decodeToken,
  formatDuration,
  type TokenBook,
  type TokenRecord,
  type TokenClaims,
  type IssueTokenOptions,
} from './token.ts'
export { initCluster, loadCluster, decodeAdminCredential, type ClusterState, type ClusterConfig } from './cluster.ts'
export { loadOrCreateIdentity } from './identity.ts'
export { meshDefaults, systemClock, systemRandom, type Clock, type RandomSource, type MeshTunables } from './options.ts'
export { storeTopic, membersTopic } from './gossip.ts'
