/** The agent's side of scheduling: the view `plan()` runs on, built from the store and membership. */

export { type SchedApiComponents, schedRoutes } from './api.ts'
export {
  buildSchedView,
  clusterSchedulingOf,
  finishedForGood,
  isForgotten,
  type NodeAllocation,
  type NodeMember,
  nodeAllocation,
  nodeViewOf,
  podViewOf,
  podVolumeUses,
  schedOptionsOf,
  type TaintSince,
  vmHolds,
  vmPodViewOf,
  vmSchedKey,
  vmUsesByNode,
  withVmUses,
  withVolumeConstraints,
} from './view.ts'
