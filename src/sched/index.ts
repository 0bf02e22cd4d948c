/**
 * Scheduling: pure decisions from a view of the cluster. Nothing here reads a clock, a random source
 * or the network; every node computes the same operations from the same view.
 */

export {
  type BindingClaim,
  type BindingResolution,
  compareClaims,
  decideLocalCopy,
  type LocalCopyAction,
  type LocalCopyDecision,
  resolveBinding,
} from './binding.ts'
export { REASON_SUMMARY, Reason, type ReasonCode } from './constraints.ts'
export { reasonDuration } from './duration.ts'
export { explainPod, formatExplanation, type NodeVerdict, type PodExplanation } from './explain.ts'
export {
  DEFAULT_FENCING,
  decideFence,
  FENCE_SETTLE_MS,
  type FenceDecision,
  type FencingOptions,
  fenceTermMs,
  fenceWindowMs,
  MIN_FENCE_TERM_MS,
  MIN_FENCE_WINDOW_MS,
  type QuorumMember,
  type QuorumState,
  quorumNeeded,
  quorumState,
  resolveFencing,
} from './fencing.ts'
export { canonicalJson, hashString, mix32 } from './hash.ts'
export { BindOp, EvictOp, formatPlan, type Operation, UnbindOp } from './operations.ts'
export { DEFAULT_SCHED_OPTIONS, resolveOptions, type SchedOptions, type SchedOptionsInput, type ScoreWeights } from './options.ts'
export { feasibleToFind, type PendingPod, type PlanResult, plan, planPlacements } from './placement.ts'
export { type BoundDecision, decideBoundPod, haAfterMs, nextDecisionTime } from './policy.ts'
export { formatCpu, formatMemory, parseCpu, parseMemory, parseQuantity, type Quantity } from './quantity.ts'
export {
  abortRollout,
  DEPLOYMENT_LABEL,
  type DeploymentPlanSpec,
  type DeploymentStatus,
  type DesiredPod,
  deploymentStatus,
  desiredRolloutPods,
  type EveryNodePod,
  everyNodePods,
  gateRolloutStep,
  type ObservedPod,
  type PinnedDeploymentSpec,
  type PlannedPod,
  type PodTemplate,
  planDeploymentPods,
  promoteRollout,
  type RolloutLimits,
  type RolloutStatus,
  type RolloutStep,
  type RolloutVersion,
  rolloutCounts,
  rolloutLimits,
  rolloutProgress,
  rolloutStatus,
  setRollout,
  TEMPLATE_LABEL,
  templateHash,
  type VersionCounts,
  validateRollout,
} from './rollout.ts'
export { formatSelector, matchSelector } from './selector.ts'
export { NODE_TOPOLOGY_KEY } from './state.ts'
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
  VmUse,
  WeightedPodAffinityTerm,
} from './view.ts'
export { podKey, podRequests } from './view.ts'
export { admitVms, type NodeRoom, type PodsHeld, type VmClaim } from './vms.ts'
export { type PodVolumeUse, type VolumeConstraint, type VolumePodView, type VolumeView, volumeConstraints } from './volumes.ts'
