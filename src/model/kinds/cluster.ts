import { s } from '../schema.ts'
import type { KindDef } from '../kind.ts'
import { age, field, text } from './common.ts'

export const clusterKind: KindDef = {
  kind: 'Cluster',
  plural: 'clusters',
  aliases: ['cluster'],
  namespaced: false,
  spec: s.object({
    id: s.string({ pattern: /^[0-9a-f]{16,64}$/, patternName: 'a hex cluster id' }),
    description: s.string({ maxLength: 1024 }),
    /** Scheduler defaults for every node (all nodes must agree). */
    scheduling: s.object({
      haAfterSeconds: s.int({ min: 1, max: 30 * 24 * 3600 }),
      goneAfterSeconds: s.int({ min: 1, max: 365 * 24 * 3600 }),
      /** Nodes (this one included) a node must hear to run ha pods; 0 = a majority, 1 = no fencing. */
      fenceQuorum: s.int({ min: 0, max: 10_000 }),
      /** An ha pod's copy is dead this long before another node may start one (src/sched/fencing.ts). */
      fenceMarginSeconds: s.int({ min: 0, max: 3600 }),
    }),
  }),
  status: s.object({}, { open: true }),
  owned: [{ path: 'status', owner: 'controller:cluster' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'ID', value: (o) => text(field(o, 'spec.id')) },
    { header: 'AGE', value: (o, now) => age(field(o, 'metadata.createdAt'), now) },
  ],
}
