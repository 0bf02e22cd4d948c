export * from './api.ts'
export { byCodeUnits } from './compare.ts'
export { type CronSchedule, isTimeZone, lastRunBetween, nextRun, parseCron, type WallClock, wallClock } from './cron.ts'
export * from './diff.ts'
export { type DurationFormat, type DurationRounding, formatDuration } from './duration.ts'
export {
  type Endpoint,
  type EndpointPod,
  type EndpointPort,
  type EndpointService,
  type ServiceEndpoints,
  selectorMatches,
  serviceEndpoints,
  targetPortOn,
} from './endpoints.ts'
export * from './errors.ts'
export { formatReference, type ImageReference, isLoopbackRegistry, isRegistryReference, parseReference, registryEndpoint } from './image-reference.ts'
export * from './kind.ts'
export { type Cluster, type ClusterSpec, type ClusterStatus, clusterKind } from './kinds/cluster.ts'
export { age, labelsText, text } from './kinds/common.ts'
export {
  type Config,
  configKind,
  DATA_KEY,
  dataIssues,
  MAX_DATA_BYTES,
  SEALED_VALUE,
  type SealedValue,
  type Secret,
  secretKind,
} from './kinds/config.ts'
export { type Federation, federationKind } from './kinds/federation.ts'
export {
  type Ingress,
  type IngressBackend,
  type IngressNodeStatus,
  type IngressSpec,
  type IngressStatus,
  ingressKind,
  ingressPorts,
  ingressPortsText,
} from './kinds/ingress.ts'
export {
  CRONJOB_LABEL,
  type CronJob,
  type CronJobSpec,
  type CronJobStatus,
  cronJobKind,
  JOB_LABEL,
  type Job,
  type JobCondition,
  type JobConditionType,
  type JobSpec,
  type JobStatus,
  jobFinished,
  jobKind,
  jobSuspended,
  MAX_CRONJOB_NAME,
  MAX_JOB_NAME,
  SCHEDULED_LABEL,
} from './kinds/job.ts'
export { type Node, type NodeNetworkStatus, type NodeSpec, type NodeStatus, nodeKind, type Taint } from './kinds/node.ts'
export {
  DEFAULT_PROGRESS_DEADLINE_SECONDS,
  type PinnedDeployment,
  type PinnedDeploymentSpec,
  type PinnedDeploymentStatus,
  type PodTemplate,
  pinnedDeploymentKind,
  type RolloutProgress,
} from './kinds/pinned-deployment.ts'
export {
  type Container,
  type ContainerStatusEntry,
  dataRefsOf,
  ENV_NAME,
  hostPathVolumesOf,
  type LabelSelector,
  ORIGIN_CLUSTER_ANNOTATION,
  type Pod,
  type PodAffinityTerm,
  type PodImagePin,
  type PodPhase,
  type PodSpec,
  type PodStatus,
  type PodVolume,
  podKind,
  type Toleration,
  VOLUME_SOURCES,
  type VolumeMount,
  volumeRefsOf,
} from './kinds/pod.ts'
export {
  EXEC_PROBES_SUPPORTED,
  type PodCondition,
  PROBE_DEFAULTS,
  PROBE_KINDS,
  type Probe,
  type ProbeKind,
  type ProbeTiming,
  podIsReady,
  probeTiming,
  readyColumn,
} from './kinds/probe.ts'
export { type Role, type RoleBinding, type RoleRule, roleBindingKind, roleKind, USER_NAME, type User, userKind } from './kinds/rbac.ts'
export { POD_RUNTIMES, type PodRuntime, type SecurityPolicy, securityPolicyKind, UNSAFE_FEATURES, type UnsafeFeature } from './kinds/security-policy.ts'
export { MAX_SERVICE_PORTS, PORT_NAME, portsText, type Service, type ServicePort, type ServiceSpec, serviceKind } from './kinds/service.ts'
export {
  isCloudConfig,
  type VirtualMachine,
  type VirtualMachinePhase,
  type VirtualMachineSpec,
  type VirtualMachineStatus,
  VM_DEFAULT_GRACE_SECONDS,
  VM_DEFAULT_MEMORY,
  VM_MAX_DISKS,
  VM_MEMORY_OVERHEAD_BYTES,
  VM_SEED_SERIAL,
  virtualMachineKind,
  vmMemoryBytes,
  vmNodeOf,
  vmNodeRequests,
  vmWantsToRun,
} from './kinds/virtual-machine.ts'
export {
  MIN_VOLUME_BYTES,
  replicaLag,
  replicaNodes,
  VOLUME_DRIVER_NAME,
  type Volume,
  type VolumeBacking,
  type VolumePhase,
  type VolumeReplicaStatus,
  type VolumeSnapshotEntry,
  type VolumeSpec,
  type VolumeStatus,
  volumeBytes,
  volumeKind,
} from './kinds/volume.ts'
export * from './object.ts'
export * from './ownership.ts'
export { parseQuantity, type Quantity } from './quantity.ts'
export * from './rbac.ts'
export * from './registry.ts'
export * from './schema.ts'
export { closestWords, didYouMean, didYouMeanOf, editDistance } from './suggest.ts'
export * from './validate.ts'
