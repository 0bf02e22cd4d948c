import { s } from '../schema.ts'
import type { KindDef } from '../kind.ts'
import { age, field, labelsText, text } from './common.ts'

export const nodeKind: KindDef = {
  kind: 'Node',
  plural: 'nodes',
  aliases: ['node', 'no'],
  namespaced: false,
  spec: s.object({
    unschedulable: s.bool(),
    taints: s.array(
      s.object({
        key: s.required(s.string({ minLength: 1, maxLength: 253 })),
        value: s.string({ maxLength: 63 }),
        effect: s.required(s.enum('NoSchedule', 'PreferNoSchedule', 'NoExecute')),
      }),
      { maxItems: 64 },
    ),
  }),
  status: s.object({}, { open: true }),
  owned: [{ path: 'status', owner: 'controller:node' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'STATUS', value: (o) => text(field(o, 'status.state'), 'Unknown') },
    { header: 'ADDRESSES', value: (o) => text((field(o, 'status.addresses') as string[] | undefined)?.join(','), '<none>'), wide: true },
    { header: 'VERSION', value: (o) => text(field(o, 'status.version')) },
    { header: 'LABELS', value: (o) => labelsText(o.metadata.labels), wide: true },
    { header: 'AGE', value: (o, now) => age(field(o, 'metadata.createdAt'), now) },
  ],
}
