/** PinnedDeployments in the agent: the controllers that create their pods and report their status, and `orc rollout`'s routes. */

export { changedSpec, type RolloutApiComponents, type RolloutView, rolloutRoutes, rolloutView } from './api.ts'
export { type DeploymentComponents, DeploymentController } from './controller.ts'
export { deploymentWriter, type LeaderlessComponents, LeaderlessController } from './leaderless.ts'
export { DEPLOYMENT_CONTROLLER, type DeploymentWrite, observePod, planDeploymentWrites, ROLLOUT_CONTROLLER, statusOf } from './plan.ts'
