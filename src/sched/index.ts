/**
 * Scheduling: pure decisions from a view of the cluster. Nothing here reads a clock, a random source
 * or the network; every node computes the same operations from the same view.
 */
export type {
  Affinity,
  ClusterView,
  LabelSelector,
  MemberState,
  NodeAffinity,
  NodeView,
  PodAffinityTerm,
  PodPolicy,
  PodView,
  Resources,
  SelectorOperator,
  SelectorRequirement,
  Taint,
  TaintEffect,
  Toleration,
  WeightedPodAffinityTerm,
} from './view.ts'
export { podKey, podRequests } from './view.ts'
export { parseQuantity, parseCpu, parseMemory, formatCpu, formatMemory, type Quantity } from './quantity.ts'
export { DEFAULT_SCHED_OPTIONS, resolveOptions, type SchedOptions, type SchedOptionsInput, type ScoreWeights } from './options.ts'
export { BindOp, UnbindOp, EvictOp, formatPlan, type Operation } from './operations.ts'
export { plan, planPlacements, feasibleToFind, type PlanResult, type PendingPod } from './placement.ts'
export { Reason, REASON_SUMMARY, type ReasonCode } from './constraints.ts'
export { NODE_TOPOLOGY_KEY } from './state.ts'
export { canonicalJson } from './hash.ts'
export { decideBoundPod, nextDecisionTime, haAfterMs, type BoundDecision } from './policy.ts'
export { explainPod, formatExplanation, type PodExplanation, type NodeVerdict } from './explain.ts'
export {
  resolveBinding,
  decideLocalCopy,
  compareClaims,
  type BindingClaim,
  type BindingResolution,
  type LocalCopyAction,
  type LocalCopyDecision,
} from './binding.ts'
export {
  rolloutCounts,
  desiredRolloutPods,
  rolloutStatus,
  setRollout,
  promoteRollout,
  abortRollout,
  validateRollout,
  templateHash,
  everyNodePods,
  planDeploymentPods,
  deploymentStatus,
  DEPLOYMENT_LABEL,
  TEMPLATE_LABEL,
  type PinnedDeploymentSpec,
  type PodTemplate,
  type DesiredPod,
  type RolloutStatus,
  type RolloutVersion,
  type EveryNodePod,
  type DeploymentPlanSpec,
  type PlannedPod,
  type DeploymentStatus,
  type VersionCounts,
  type ObservedPod,
} from './rollout.ts'
export { matchSelector, formatSelector } from './selector.ts'
export { reasonDuration } from './duration.ts'
export {
  DEFAULT_FENCING,
  MIN_FENCE_WINDOW_MS,
  MIN_FENCE_TERM_MS,
  FENCE_SETTLE_MS,
  decideFence,
  fenceTermMs,
  fenceWindowMs,
  quorumNeeded,
  quorumState,
  resolveFencing,
  type FenceDecision,
  type FencingOptions,
  type QuorumMember,
  type QuorumState,
} from './fencing.ts'
