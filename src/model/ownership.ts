import { byCodeUnits } from './compare.ts'
import { OrcError } from './errors.ts'

/**
 * The field-ownership table: kind → field path → owning controller. A field path is dotted
 * (`status`, `status.node`); the owner of any field is the owner of its longest claimed prefix, so
 * `status.node` can belong to the scheduler while the rest of `status` belongs to the lifecycle
 * controller. Fields no one claims belong to users.
 */
export type Owner = `controller:${string}`
export const USERS = 'users'

export interface Claim {
  kind: string
  path: string
  owner: Owner
}

export class OwnershipTable {
  private readonly byKind = new Map<string, Map<string, Owner>>()

  constructor(claims: Iterable<Claim> = []) {
    for (const c of claims) this.claim(c)
  }

  /** Register an owner for a field. A second owner for the same field is refused. */
  claim({ kind, path, owner }: Claim): void {
    if (!/^controller:[a-z0-9][-a-z0-9]*$/.test(owner)) {
      throw new OrcError('invalid', `owner ${JSON.stringify(owner)}: must be controller:<name>`)
    }
    let fields = this.byKind.get(kind)
    if (!fields) this.byKind.set(kind, (fields = new Map()))
    const existing = fields.get(path)
    if (existing !== undefined && existing !== owner) {
      throw new OrcError('conflict', `${kind} field ${path} is already owned by ${existing}; ${owner} cannot also own it`, {
        kind,
        path,
        owner: existing,
        claimant: owner,
      })
    }
    fields.set(path, owner)
  }

  /** The owner of a field path (dotted segments), or USERS when nobody claims it. */
  ownerOf(kind: string, path: readonly (string | number)[]): Owner | typeof USERS {
    const fields = this.byKind.get(kind)
    if (!fields) return USERS
    let best: Owner | typeof USERS = USERS
    let prefix = ''
    for (const seg of path) {
      if (typeof seg === 'number') break // arrays are atomic values for ownership
      prefix = prefix === '' ? seg : `${prefix}.${seg}`
      const o = fields.get(prefix)
      if (o !== undefined) best = o
    }
    return best
  }

  /** Claimed paths of a kind, for `orc controllers` and for splitting user from controller fields. */
  claims(kind?: string): Claim[] {
    const out: Claim[] = []
    for (const [k, fields] of this.byKind) {
      if (kind !== undefined && k !== kind) continue
      for (const [path, owner] of fields) out.push({ kind: k, path, owner })
    }
    return out.sort((a, b) => byCodeUnits(a.kind + a.path, b.kind + b.path))
  }

  clone(): OwnershipTable {
    return new OwnershipTable(this.claims())
  }
}
