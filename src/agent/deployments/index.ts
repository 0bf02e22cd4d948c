/** PinnedDeployments in the agent: the controllers that create their pods and report their status, and `orc rollout`'s routes. */
export { DeploymentController, deploymentWriter, type DeploymentComponents } from './controller.ts'
export { rolloutRoutes, changedSpec, rolloutView, type RolloutApiComponents, type RolloutView } from './api.ts'
export { planDeploymentWrites, statusOf, observePod, DEPLOYMENT_CONTROLLER, ROLLOUT_CONTROLLER, type DeploymentWrite } from './plan.ts'
