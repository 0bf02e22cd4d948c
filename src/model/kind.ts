import type { Issue, Schema } from './schema.ts'
import type { Owner } from './ownership.ts'
import type { OrcObject } from './object.ts'

/** A column in `orc get` output. */
export interface Column {
  header: string
  value: (obj: OrcObject, now: number) => string
  wide?: boolean // only with -o wide
}

/**
 * Everything orc knows about a kind. Adding a kind is one file in `kinds/` exporting a KindDef and
 * one line in `registry.ts`.
 */
export interface KindDef {
  kind: string // `Pod`
  plural: string // `pods`
  aliases: string[] // `pod`, `po`
  namespaced: boolean
  spec: Schema
  status?: Schema
  /** Fields owned by controllers (see ownership.ts). */
  owned: { path: string; owner: Owner }[]
  columns: Column[]
  /** Cross-field rules the schema cannot say. */
  check?: (obj: OrcObject) => Issue[]
}
