/** Jobs and CronJobs in the agent: the leaderless controllers that run them (docs/jobs.md). */

export { type JobComponents, JobController, timeMatters } from './controller.ts'
export {
  CRONJOB_CONTROLLER,
  countJobPods,
  cronJobRun,
  JOB_CONTROLLER,
  type JobWrite,
  jobBackoffMs,
  jobPodManifest,
  ORPHAN_GRACE_MS,
  planCronJob,
  planCronJobs,
  planJob,
  planJobs,
  podIndex,
  scheduledOf,
} from './plan.ts'
