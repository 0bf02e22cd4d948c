import { OrcError } from './errors.ts'
import type { KindDef } from './kind.ts'
import { type Cluster, clusterKind } from './kinds/cluster.ts'
import { type Config, configKind, type Secret, secretKind } from './kinds/config.ts'
import { type Federation, federationKind } from './kinds/federation.ts'
import { type Ingress, ingressKind } from './kinds/ingress.ts'
import { type CronJob, cronJobKind, type Job, jobKind } from './kinds/job.ts'
import { type Node, nodeKind } from './kinds/node.ts'
import { type PinnedDeployment, pinnedDeploymentKind } from './kinds/pinned-deployment.ts'
import { type Pod, podKind } from './kinds/pod.ts'
import { type Role, type RoleBinding, roleBindingKind, roleKind, type User, userKind } from './kinds/rbac.ts'
import { type SecurityPolicy, securityPolicyKind } from './kinds/security-policy.ts'
import { type Service, serviceKind } from './kinds/service.ts'
import { type VirtualMachine, virtualMachineKind } from './kinds/virtual-machine.ts'
import { type Volume, volumeKind } from './kinds/volume.ts'
import type { OrcObject } from './object.ts'
import { OwnershipTable } from './ownership.ts'
import { closestWords, didYouMeanOf } from './suggest.ts'

/** Every kind orc knows. Adding a kind: write `kinds/<kind>.ts` and list it here. */
export const KINDS: readonly KindDef[] = [
  podKind,
  nodeKind,
  clusterKind,
  securityPolicyKind,
  pinnedDeploymentKind,
  federationKind,
  userKind,
  roleKind,
  roleBindingKind,
  configKind,
  secretKind,
  jobKind,
  cronJobKind,
  volumeKind,
  serviceKind,
  ingressKind,
  virtualMachineKind,
] as readonly KindDef[]

/** Each kind's object type by name: `store.list('Pod')` returns Pods. Add a line with the kind. */
export interface KindTypes {
  Pod: Pod
  Node: Node
  Cluster: Cluster
  SecurityPolicy: SecurityPolicy
  PinnedDeployment: PinnedDeployment
  Federation: Federation
  User: User
  Role: Role
  RoleBinding: RoleBinding
  Config: Config
  Secret: Secret
  Job: Job
  CronJob: CronJob
  Volume: Volume
  Service: Service
  Ingress: Ingress
  VirtualMachine: VirtualMachine
}
export type KindName = keyof KindTypes
/**
 * A kind name as an argument: a name known at compile time must be a registered kind, so a
 * misspelt `'Pdo'` fails the build; a name only known at run time (a `string`) passes.
 */
export type KindArg<K extends string> = string extends K ? K : K extends KindName ? K : never
/** The object type of a kind name; a name not known at compile time gives the generic OrcObject. */
export type ObjectOf<K extends string> = K extends KindName ? KindTypes[K] : OrcObject

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
    const hint = didYouMeanOf(suggestKinds(name))
    throw new OrcError('invalid', `unknown kind ${JSON.stringify(name)}${hint ? `: ${hint}` : ''} (known: ${KINDS.map((x) => x.plural).join(', ')})`, {
      kind: name,
    })
  }
  return k
}

/**
 * The kinds a mistyped kind name most likely meant, each once (as the form closest to what was
 * typed: `pdo` → pod, `pdos` → pods); the short aliases are matched but never suggested.
 */
export function suggestKinds(name: string): string[] {
  const forms = KINDS.flatMap((k) => [k.plural, k.kind.toLowerCase()])
  const out: string[] = []
  const seen = new Set<KindDef>()
  for (const w of closestWords(name, forms, forms.length)) {
    const k = findKind(w)!
    if (seen.has(k)) continue
    seen.add(k)
    out.push(w)
  }
  return out.slice(0, 3)
}

/** The ownership table built from every kind's declared controller fields. */
export function defaultOwnership(): OwnershipTable {
  return new OwnershipTable(KINDS.flatMap((k) => k.owned.map((o) => ({ kind: k.kind, path: o.path, owner: o.owner }))))
}
