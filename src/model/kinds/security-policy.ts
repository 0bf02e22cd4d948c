import { defineKind, type ObjectOfKind } from '../kind.ts'
import { s } from '../schema.ts'
import { age, createdAt, labelsSchema, text } from './common.ts'

/** The unsafe features a pod may ask for in `spec.security.unsafe` and an operator may grant. */
export const UNSAFE_FEATURES = ['root', 'hostNetwork', 'devices', 'hostPath', 'capabilities'] as const
export type UnsafeFeature = (typeof UNSAFE_FEATURES)[number]

/**
 * The operator's half of the two-party rule: a pod gets an unsafe feature only when it asks for it
 * (`spec.security.unsafe`) and a SecurityPolicy in its namespace allows it (for pods its selector
 * matches; no selector = every pod of the namespace).
 */
export const securityPolicyKind = defineKind({
  kind: 'SecurityPolicy',
  plural: 'securitypolicies',
  aliases: ['securitypolicy', 'secpol', 'sp'],
  namespaced: true,
  spec: s.object({
    allow: s.required(s.array(s.enum(...UNSAFE_FEATURES), { maxItems: 8 })),
    selector: s.object({ matchLabels: labelsSchema }),
    description: s.string({ maxLength: 1024 }),
  }),
  owned: [],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'ALLOW', value: (o) => text(o.spec?.allow.join(',')) },
    { header: 'SELECTOR', value: (o) => text(o.spec?.selector?.matchLabels, '<all pods>') },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

// An interface (not an alias) so that type errors name it.
export interface SecurityPolicy extends ObjectOfKind<typeof securityPolicyKind> {}
