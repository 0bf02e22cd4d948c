/**
 * The controllers this agent runs, with the fields each reads and writes. `orc controllers` prints
 * the graph; the agent refuses to start when two controllers write one field or when their reads
 * and writes form a loop (each write would wake the next controller, possibly forever).
 *
 * Writes are listed field by field (not `Pod.status` as a whole): the lifecycle controller never
 * writes `Pod.status.node`, and declaring the prefix would make the checker see a loop with the
 * scheduler that cannot happen.
 */
import { type ControllerDecl, type ControllerGraph, checkControllers } from '../workflow/index.ts'

export const AGENT_CONTROLLERS: readonly ControllerDecl[] = [
  {
    name: 'controller:node',
    description:
      'records this node: labels, capacity, addresses, version; its network: WireGuard key, /64 claim, tunnels (Node.status.network); the copies of pods bound elsewhere it stopped (Node.status.stoppedCopies)',
    reads: ['Cluster.spec', 'Cluster.status.removedPeers', 'Node.status.network', 'Node.status.peerId'],
    writes: ['Node.status'],
  },
  {
    name: 'controller:scheduler',
    description: 'local scheduling: every node runs plan() on its view and binds to itself what plan() gives it (ha/best-effort policies)',
    reads: [
      'Pod.spec',
      'Pod.metadata.labels',
      'Pod.status.node',
      'Node.spec',
      'Node.status.capacity',
      'Node.status.forgotten',
      'Node.metadata.labels',
      'Cluster.spec',
      'Pod.status.phase',
      'Volume.spec',
      'Volume.status.node',
      // Pods are placed in what the node's VMs leave (docs/runtimes.md, "Capacity").
      'VirtualMachine.spec',
    ],
    writes: ['Pod.status.node', 'Pod.status.scheduling'],
    settles: {
      // A pod using a Volume goes to the volume's node (docs/storage.md).
      'Volume.status.node': 'set once, by the node of the first attach, and never moved: a binding can change it only from absent to that node',
      // Finished pods release their capacity (docs/jobs.md).
      'Pod.status.phase':
        'only a final phase is read (Succeeded or Failed that the restartPolicy does not rerun): such a pod holds no capacity and is never bound again',
    },
  },
  {
    name: 'controller:deployment',
    description:
      'PinnedDeployments: creates, updates and deletes their pods (replicas or one per node) from the pinned templates, a rollout step at a time as new pods become Ready',
    reads: ['PinnedDeployment.spec', 'Pod.metadata.labels', 'Node.metadata.labels', 'Node.spec', 'Node.status.forgotten'],
    writes: ['Pod.spec', 'Pod.metadata.labels'],
    // Readiness holds a rollout step back (maxSurge/maxUnavailable); an aborted rollout is a latch per template.
    gates: ['Pod.status.phase', 'Pod.status.containers', 'Pod.status.conditions', 'PinnedDeployment.status.rollout'],
  },
  {
    name: 'controller:rollout',
    description: 'PinnedDeployments: desired, created, running and ready pods per version; aborts a rollout whose pods make no progress past its deadline',
    reads: [
      'PinnedDeployment.spec',
      'Pod.metadata.labels',
      'Pod.status.node',
      'Pod.status.phase',
      'Pod.status.containers',
      'Pod.status.conditions',
      'PinnedDeployment.status.rollout',
      'Node.metadata.labels',
      'Node.spec',
      'Node.status.forgotten',
    ],
    writes: ['PinnedDeployment.status'],
  },
  {
    name: 'controller:job',
    description:
      'Jobs: creates their pods up to completions (parallelism at a time), retries up to backoffLimit, enforces the deadline, counts outcomes (Job.status), deletes a Job after its TTL',
    reads: ['Job.spec', 'Job.status', 'Pod.metadata.labels', 'Pod.status.phase', 'Pod.status.containers', 'Node.metadata.labels', 'Node.status.forgotten'],
    writes: ['Job.status'],
    creates: ['Pod'],
    settles: {
      'Pod.status.phase': 'a finished pod never changes again; a Job creates at most completions + backoffLimit pods',
      'Pod.status.containers': 'restarts only count up, to the backoffLimit',
    },
  },
  {
    name: 'controller:cronjob',
    description: 'CronJobs: one Job per schedule tick (deterministic name), concurrency policy, missed runs, history limits (CronJob.status)',
    reads: ['CronJob.spec', 'CronJob.status', 'Job.metadata.labels', 'Job.status', 'Node.metadata.labels', 'Node.status.forgotten'],
    writes: ['CronJob.status'],
    creates: ['Job'],
    settles: { 'Job.status': 'only whether a Job finished is read, and a finished Job stays finished' },
  },
  {
    name: 'controller:volume',
    description:
      'Volumes whose data is on this node: placed at their first attach, attach and detach by pods recorded (who had it when), deleted data kept for the grace period, restores, snapshots; replicas chosen and synced by the primary, a replica promoted where an ha pod failed over',
    reads: ['Volume.spec', 'Pod.spec', 'Pod.status.node', 'Pod.status.phase'],
    writes: ['Volume.status'],
  },
  {
    name: 'controller:ingress',
    description:
      'Ingresses this node serves (spec.controller tcp-proxy, spec.nodes or nodeSelector naming it): listens on its addresses, proxies to the ready endpoints of the backend service, reports its listeners in Ingress.status.nodes.<node>',
    reads: [
      'Ingress.spec',
      'Service.spec',
      'Pod.metadata.labels',
      'Pod.spec',
      'Pod.status.network',
      'Pod.status.phase',
      'Pod.status.conditions',
      'Node.metadata.labels',
    ],
    writes: ['Ingress.status'],
  },
  {
    name: 'controller:vm',
    description:
      'runs the VirtualMachines pinned to this node: kernel, pod network namespace and tap, qemu (KVM or TCG), console marker; ACPI power-down on a change, boots a powered-off guest again; starts a guest only when it fits beside the pods and other VMs (oldest first)',
    // A guest starts only in what the node's pods and other VMs leave (docs/runtimes.md, "Capacity").
    reads: ['VirtualMachine.spec', 'VirtualMachine.metadata.uid', 'Pod.spec', 'Pod.status.node', 'Pod.status.phase', 'Node.status.capacity'],
    writes: ['VirtualMachine.status'],
  },
  {
    name: 'controller:lifecycle',
    description: 'runs the pods bound to this node: image, sandbox, containers, restarts; fences its ha pods when it hears no quorum',
    // Node and Cluster: the quorum (nodes not forgotten) and the fencing options.
    reads: ['Pod.spec', 'Pod.metadata.uid', 'Pod.status.node', 'SecurityPolicy.spec', 'Node.status.forgotten', 'Node.status.state', 'Cluster.spec'],
    writes: [
      'Pod.status.phase',
      'Pod.status.reason',
      'Pod.status.runningRevision',
      'Pod.status.targetRevision',
      'Pod.status.specHash',
      'Pod.status.containers',
      'Pod.status.workflow',
      'Pod.status.network',
      'Pod.status.conditions',
    ],
  },
]

/** The checked graph; throws OrcError `conflict` on a loop or a doubly written field. */
export function checkAgentControllers(decls: readonly ControllerDecl[] = AGENT_CONTROLLERS): ControllerGraph {
  return checkControllers(decls)
}
