import type { ObjectMeta, OrcObject } from './object.ts'
import type { Owner } from './ownership.ts'
import type { Issue, Typed } from './schema.ts'

/** An object of one kind, typed from its kind's schema (`Pod`, `Node`, …). */
export interface TypedObject<K extends string = string, Spec = unknown, Status = unknown> {
  apiVersion: string
  kind: K
  metadata: ObjectMeta
  spec?: Spec
  status?: Status
}

/** A column in `orc get` output. */
export interface Column<O = OrcObject> {
  header: string
  value(obj: O, now: number): string
  wide?: boolean // only with -o wide
}

/**
 * Everything orc knows about a kind. Adding a kind is one file in `kinds/` exporting a KindDef (made
 * with `defineKind`, so its object type is derived from its schema) and one line in `registry.ts`.
 */
export interface KindDef<K extends string = string, Spec = unknown, Status = unknown> {
  kind: K // `Pod`
  plural: string // `pods`
  aliases: string[] // `pod`, `po`
  namespaced: boolean
  spec: Typed<Spec>
  /** Controller-written; its type is declared by the kind (users cannot write it). */
  status?: Typed<Status>
  /** Fields owned by controllers (see ownership.ts). */
  owned: { path: string; owner: Owner }[]
  columns: Column<TypedObject<K, Spec, Status>>[]
  /** Cross-field rules the schema cannot say. */
  check?(obj: TypedObject<K, Spec, Status>): Issue[]
}

/** The object type of a kind definition: `ObjectOfKind<typeof podKind>` is `Pod`. */
export type ObjectOfKind<D> = D extends KindDef<infer K, infer Spec, infer Status> ? TypedObject<K, Spec, Status> : never

/** Identity, for type inference: the kind's name, spec and status types come from the definition. */
export function defineKind<K extends string, Spec, Status = Record<string, never>>(def: KindDef<K, Spec, Status>): KindDef<K, Spec, Status> {
  return def
}
