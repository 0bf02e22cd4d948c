/** The agent's side of scheduling: the view `plan()` runs on, built from the store and membership. */
export { buildSchedView, nodeViewOf, podViewOf, schedOptionsOf, clusterSchedulingOf, isForgotten, type NodeMember, type TaintSince } from './view.ts'
export { schedRoutes, type SchedApiComponents } from './api.ts'
