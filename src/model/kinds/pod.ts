import { s } from '../schema.ts'
import type { KindDef } from '../kind.ts'
import type { Issue } from '../schema.ts'
import { age, dnsName, field, labelsSchema, text } from './common.ts'

const envName = s.string({ pattern: /^[A-Za-z_][A-Za-z0-9_]*$/, patternName: 'an environment variable name' })

const container = s.object({
  name: s.required(dnsName),
  image: s.required(s.string({ minLength: 1, maxLength: 4096 })),
  command: s.array(s.string({ maxLength: 4096 }), { maxItems: 256 }),
  args: s.array(s.string({ maxLength: 4096 }), { maxItems: 1024 }),
  env: s.array(s.object({ name: s.required(envName), value: s.string({ maxLength: 32768 }) }), { maxItems: 1024, uniqueBy: 'name' }),
  workingDir: s.string({ maxLength: 4096 }),
  ports: s.array(
    s.object({
      name: dnsName,
      containerPort: s.required(s.int({ min: 1, max: 65535 })),
      protocol: s.enum('TCP', 'UDP'),
    }),
    { maxItems: 64 },
  ),
  resources: s.object({
    requests: s.object({ cpu: s.quantity(), memory: s.quantity() }),
    limits: s.object({ cpu: s.quantity(), memory: s.quantity(), pids: s.int({ min: 1 }) }),
  }),
})

export const podKind: KindDef = {
  kind: 'Pod',
  plural: 'pods',
  aliases: ['pod', 'po'],
  namespaced: true,
  spec: s.object({
    containers: s.required(s.array(container, { maxItems: 32, uniqueBy: 'name' })),
    restartPolicy: s.enum('Always', 'OnFailure', 'Never'),
    policy: s.enum('ha', 'best-effort'),
    /** ha pods: rebind after the node has been unreachable this long (default: the cluster's, 30 s). */
    haAfterSeconds: s.int({ min: 1, max: 30 * 24 * 3600 }),
    runtime: s.enum('sandbox', 'oci'),
    terminationGracePeriodSeconds: s.int({ min: 0, max: 3600 }),
    nodeSelector: labelsSchema,
    placement: s.object({ node: dnsName }),
    security: s.object({ unsafe: s.array(s.enum('root', 'hostNetwork', 'devices', 'hostPath', 'capabilities'), { maxItems: 8 }) }),
  }),
  status: s.object({}, { open: true }),
  owned: [
    { path: 'status', owner: 'controller:lifecycle' },
    { path: 'status.node', owner: 'controller:scheduler' },
    { path: 'status.scheduling', owner: 'controller:scheduler' },
  ],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'STATUS', value: (o) => text(field(o, 'status.phase'), 'Pending') },
    { header: 'NODE', value: (o) => text(field(o, 'status.node') ?? field(o, 'spec.placement.node')) },
    { header: 'POLICY', value: (o) => text(field(o, 'spec.policy'), 'best-effort'), wide: true },
    // The spec revision running (or being started): status writes add revisions too; this is the
    // number users compare with `orc history`.
    { header: 'REV', value: (o) => text(field(o, 'status.runningRevision') ?? field(o, 'status.targetRevision') ?? field(o, 'metadata.revision'), '') },
    {
      header: 'RESTARTS',
      value: (o) => {
        const cs = field(o, 'status.containers')
        return String(Array.isArray(cs) ? cs.reduce((n: number, c) => n + (typeof c?.restarts === 'number' ? c.restarts : 0), 0) : 0)
      },
    },
    { header: 'AGE', value: (o, now) => age(field(o, 'metadata.createdAt'), now) },
  ],
  check(obj) {
    const issues: Issue[] = []
    const containers = field(obj, 'spec.containers')
    if (Array.isArray(containers) && containers.length === 0) {
      issues.push({ path: 'spec.containers', rule: 'must have at least one container' })
    }
    return issues
  },
}
