// Federation of clusters (docs/federation.md): what the agent wires.
export { FederationManager, FEDERATION_CONTROLLER, FEDERATION_SCOPE, encodeFederationToken, decodeFederationToken, type FederationView, type FederationComponents } from './manager.ts'
export { routedStore, type ScopeRouter, type FederatedScope } from './routed-store.ts'
export { federationRoutes } from './routes.ts'
export { federationRouteSource } from './routes-export.ts'
export { FederationDirectory, clusterOfMemberName, clusterOfAuthor, replicaOfPeer, tagAuthor } from './membership.ts'
export { checkAuthorship, verifiedReplica } from './replica.ts'
export { type FederationPodHost } from './manager.ts'
export {
  ORIGIN_CLUSTER_ANNOTATION,
  NodeSummaryPublisher,
  nodeSummaryOf,
  federationNodesOf,
  federatedView,
  buildFederatedSchedView,
  clusterOwnership,
  taggedStore,
  type NodeSummary,
} from './scheduling.ts'
