import { defineKind, type ObjectOfKind } from '../kind.ts'
import { s } from '../schema.ts'
import { age, createdAt, labelsSchema, text } from './common.ts'

/** The unsafe features a pod may ask for in `spec.security.unsafe` and an operator may grant. */
/** The runtimes a pod may ask for (`spec.runtime`; src/runtime's RUNTIME_KINDS). */
export const POD_RUNTIMES = ['sandbox', 'oci', 'gvisor'] as const
export type PodRuntime = (typeof POD_RUNTIMES)[number]

export const UNSAFE_FEATURES = ['root', 'hostNetwork', 'devices', 'hostPath', 'capabilities'] as const
export type UnsafeFeature = (typeof UNSAFE_FEATURES)[number]

/**
 * The operator's half of the two-party rule: a pod gets an unsafe feature only when it asks for it
 * (`spec.security.unsafe`, or an image that is a host path: `hostPath`) and a SecurityPolicy in its
 * namespace, written by an admin other than the pod's author, allows it — for the pods it names
 * (`selector.names`: exact names or `prefix*`; no names = every pod of the namespace). Labels only
 * narrow: a pod's author sets them, so `selector.matchLabels` without names grants nothing.
 * `selfApprove: true` (an admin only) lets the policy's own author run such pods. `requireRuntime`
 * restricts the pods it selects to the runtimes listed (docs/runtimes.md).
 */
export const securityPolicyKind = defineKind({
  kind: 'SecurityPolicy',
  plural: 'securitypolicies',
  aliases: ['securitypolicy', 'secpol', 'sp'],
  namespaced: true,
  spec: s.object({
    allow: s.array(s.enum(...UNSAFE_FEATURES), { maxItems: 8 }),
    /**
     * The pods the policy selects must run under one of these runtimes (`[gvisor]`: untrusted code
     * only under gVisor). A restriction, not a grant: it counts whoever wrote it; a pod that asks
     * for another runtime is refused at apply and is not started (or is stopped) on its node.
     */
    requireRuntime: s.array(s.enum(...POD_RUNTIMES), { maxItems: 3 }),
    selector: s.object({
      names: s.array(s.string({ pattern: /^[a-z0-9]([-a-z0-9.]*[a-z0-9*])?$/, patternName: 'a pod name, or a prefix ending in *' }), { maxItems: 256 }),
      matchLabels: labelsSchema,
    }),
    selfApprove: s.bool(),
    description: s.string({ maxLength: 1024 }),
  }),
  owned: [],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'ALLOW', value: (o) => text(o.spec?.allow?.join(',')) },
    { header: 'RUNTIME', value: (o) => text(o.spec?.requireRuntime?.join(','), '<any>') },
    { header: 'PODS', value: (o) => text(o.spec?.selector?.names?.join(','), o.spec?.selector?.matchLabels ? '<none>' : '<all pods>') },
    { header: 'SELF-APPROVED', value: (o) => (o.spec?.selfApprove ? 'yes' : 'no') },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

// An interface (not an alias) so that type errors name it.
export interface SecurityPolicy extends ObjectOfKind<typeof securityPolicyKind> {}
