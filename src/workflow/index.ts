/**
 * The lifecycle workflow engine: controllers register units and targets into a `WorkflowGraph`;
 * a `WorkflowRun` reaches a target, running every unit whose dependencies are met in parallel, with
 * per-attempt timeouts and retries on an injected `Clock`; `snapshot()` is plain JSON that
 * `renderWhy` / `renderCriticalChain` turn into what `orc why` prints, on any node.
 *
 * Semantics (systemd-like, with two deliberate differences):
 * - `after`: ordering only; the unit starts once those have finished, whatever their result.
 * - `before`: the reverse of `after`.
 * - `requires`: pulls the dependency in, implies `after` (unlike systemd), and skips this unit if
 *   the dependency fails or is skipped; the skip reason names the failed unit.
 * - `wantedBy: [t]`: reaching `t` pulls the unit in and `t` waits for it and requires it (unlike
 *   systemd's soft Wants), so a pod's `running` is never reported reached with a failed unit.
 * - Controllers declare reads/writes; `checkControllers` refuses duplicate writers and read/write
 *   loops of two or more controllers.
 */

export {
  buildControllerGraph,
  type ControllerDecl,
  type ControllerEdge,
  type ControllerGraph,
  type ControllerLink,
  type ControllerLoop,
  checkControllers,
  controllerClaims,
  formatControllerGraph,
  type WriterConflict,
} from './controllers.ts'
export { WorkflowRun } from './engine.ts'
export {
  type CriticalChain,
  type CriticalStep,
  criticalChain,
  describeUnit,
  type ExplainOptions,
  explainWhy,
  formatCriticalChain,
  formatWhy,
  renderCriticalChain,
  renderWhy,
  type WhyExplanation,
  type WhyStep,
  type WhyUnit,
} from './explain.ts'
export { formatDuration, formatSeconds } from './format.ts'
export { type UnitDef, WorkflowGraph } from './graph.ts'
export {
  backoffDelay,
  DEFAULT_RETRY,
  DEFAULT_TIMEOUT_MS,
  type WorkflowLogger,
  type WorkflowRunOptions,
} from './options.ts'
export { parseWorkflowSnapshot } from './snapshot.ts'
export { addNodeTargets, addPodTargets, NODE_TARGETS, POD_TARGETS } from './targets.ts'
export {
  type ReachResult,
  type RetryPolicy,
  type TargetSpec,
  UNIT_STATES,
  type UnitChangeEvent,
  type UnitContext,
  type UnitKind,
  type UnitSnapshot,
  type UnitSpec,
  type UnitState,
  type WorkflowSnapshot,
} from './types.ts'
