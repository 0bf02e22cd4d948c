// Federation of clusters (docs/federation.md): what the agent wires.

export {
  checkMembershipChanges,
  checkNamespaceWriters,
  type Governance,
  JOIN_RACE_WINDOW_MS,
  MAX_GOVERNANCE_CLOCK_SKEW_MS,
  PROPOSAL_TTL_MS,
  type Proposal,
  proposalState,
  replay as replayGovernance,
  required as requiredApprovals,
  sharedNamespaces,
  writersAt,
  writersMark,
  writersProposal,
} from './governance.ts'
export { type SharedLogsComponents, sharedPodLogs, sharedPodStreams } from './logs.ts'
export {
  decodeFederationToken,
  encodeFederationToken,
  FEDERATION_CONTROLLER,
  FEDERATION_SCOPE,
  type FederationComponents,
  type FederationGovernanceView,
  FederationManager,
  type FederationPodHost,
  type FederationProposalView,
  type FederationView,
} from './manager.ts'
export { clusterOfAuthor, clusterOfMemberName, FederationDirectory, replicaOfPeer, tagAuthor } from './membership.ts'
export { checkAuthorship, verifiedReplica } from './replica.ts'
export { type FederatedScope, routedStore, type ScopeRouter, withoutShared } from './routed-store.ts'
export { federationRoutes } from './routes.ts'
export { federationRouteSource } from './routes-export.ts'
export {
  buildFederatedSchedView,
  clusterOwnership,
  federatedView,
  federationNodesOf,
  type NodeSummary,
  NodeSummaryPublisher,
  nodeSummaryOf,
  ORIGIN_CLUSTER_ANNOTATION,
  overcommitYields,
  qualifiedPin,
  sharedPodNode,
  taggedStore,
} from './scheduling.ts'
