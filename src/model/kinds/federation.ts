import { defineKind, type ObjectOfKind } from '../kind.ts'
import { s } from '../schema.ts'
import { age, createdAt, dnsName, text } from './common.ts'

/**
 * A link between clusters that replicates the namespaces it names (docs/federation.md).
 *
 * Two copies exist, with the same shape: one in the federation's own replicated document (what
 * every member cluster sees: its id and shared namespaces), and one in each member cluster's
 * private scope (which also says under which name this cluster takes part), so that every node of
 * the cluster follows the federation.
 */
export const federationKind = defineKind({
  kind: 'Federation',
  plural: 'federations',
  aliases: ['federation', 'fed', 'feds'],
  namespaced: false,
  spec: s.object({
    id: s.string({ pattern: /^[0-9a-f]{16,64}$/, patternName: 'a hex federation id' }),
    /** The namespaces (scopes) the federated clusters share. */
    namespaces: s.array(dnsName, { maxItems: 32 }),
    /** In a cluster's private copy: this cluster's name inside the federation. */
    cluster: dnsName,
    /** In the federation's document: the cluster that created it. */
    creator: dnsName,
    /**
     * In the federation's document: approvals a membership change needs (unset: any one for two
     * clusters, a majority beyond). Mirrors the last passed quorum proposal; governance reads the
     * proposals' revisions, not this field (agent/federation/governance.ts).
     */
    quorum: s.int({ min: 1, max: 99 }),
    /** In the federation's document: membership proposals and their approvals, as written (the revisions are what counts). */
    proposals: s.open<Record<string, unknown>>(),
    description: s.string({ maxLength: 1024 }),
  }),
  /** In a cluster's private copy: `namespaces`, what the federation shares now, once that changed after create or join (governance). */
  status: s.open<Record<string, unknown>>(),
  owned: [{ path: 'status', owner: 'controller:federation' }],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'ID', value: (o) => text(o.spec?.id) },
    // A cluster's record: status.namespaces once a namespace was shared or unshared after create (a proposal).
    { header: 'NAMESPACES', value: (o) => text(((o.status?.namespaces as string[] | undefined) ?? o.spec?.namespaces)?.join(',')) },
    { header: 'AS', value: (o) => text(o.spec?.cluster) },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
})

// An interface (not an alias) so that type errors name it.
export interface Federation extends ObjectOfKind<typeof federationKind> {}
