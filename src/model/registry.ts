import { OrcError } from './errors.ts'
import type { KindDef } from './kind.ts'
import { clusterKind } from './kinds/cluster.ts'
import { nodeKind } from './kinds/node.ts'
import { podKind } from './kinds/pod.ts'
import { securityPolicyKind } from './kinds/security-policy.ts'
import { pinnedDeploymentKind } from './kinds/pinned-deployment.ts'
import { federationKind } from './kinds/federation.ts'
import { OwnershipTable } from './ownership.ts'

/** Every kind orc knows. Adding a kind: write `kinds/<kind>.ts` and list it here. */
export const KINDS: readonly KindDef[] = [podKind, nodeKind, clusterKind, securityPolicyKind, pinnedDeploymentKind, federationKind]

const byName = new Map<string, KindDef>()
for (const k of KINDS) {
  for (const n of [k.kind, k.kind.toLowerCase(), k.plural, ...k.aliases]) byName.set(n, k)
}

/** Look up a kind by its name, plural or alias, case-insensitively (`pods`, `po`, `Pod`). */
export function findKind(name: string): KindDef | undefined {
  return byName.get(name) ?? byName.get(name.toLowerCase())
}

export function getKind(name: string): KindDef {
  const k = findKind(name)
  if (!k) {
    throw new OrcError('invalid', `unknown kind ${JSON.stringify(name)} (known: ${KINDS.map((x) => x.plural).join(', ')})`, {
      kind: name,
    })
  }
  return k
}

/** The ownership table built from every kind's declared controller fields. */
export function defaultOwnership(): OwnershipTable {
  return new OwnershipTable(KINDS.flatMap((k) => k.owned.map((o) => ({ kind: k.kind, path: o.path, owner: o.owner }))))
}
