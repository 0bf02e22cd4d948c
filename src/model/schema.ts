/**
 * A small schema language for manifests. It exists (instead of a general JSON-schema library) so
 * that errors read exactly like users expect: `spec.containers[0].image: required`, and so that a
 * kind's schema is a few readable lines in its own file.
 */
export interface Issue {
  path: string
  rule: string
}

export type Schema =
  | { t: 'string'; pattern?: RegExp; patternName?: string; maxLength?: number; enum?: readonly string[]; minLength?: number }
  | { t: 'int'; min?: number; max?: number }
  | { t: 'number'; min?: number; max?: number }
  | { t: 'bool' }
  | { t: 'array'; items: Schema; maxItems?: number; uniqueBy?: string }
  | { t: 'map'; values: Schema; keyPattern?: RegExp; keyPatternName?: string; maxEntries?: number }
  | { t: 'object'; fields: Record<string, Field>; open?: boolean }
  | { t: 'quantity' } // resource quantities: 500m, 1, 2.5, 128Mi, 1G
  | { t: 'any' }

export interface Field {
  schema: Schema
  required?: boolean
}

/**
 * A schema that also carries, for the type checker only, the TypeScript type of the values it
 * accepts: `Infer<typeof x>`. Each kind is written once, as a schema, and its type is derived from
 * it (docs/decisions.md: "Typed kinds from our own schema builder"). The property never exists at
 * run time; the builders below are the only way to make one.
 */
declare const TYPE: unique symbol
declare const REQUIRED: unique symbol
export type Typed<V> = Schema & { readonly [TYPE]: V }
/** A required object field of type V. */
export type Req<V> = Field & { readonly [TYPE]: V; readonly [REQUIRED]: true }
/** The type a typed schema (or field) accepts. */
export type Infer<S> = S extends { readonly [TYPE]: infer V } ? V : unknown

type Simplify<T> = { [K in keyof T]: T[K] } & {}
type FieldsOf = Record<string, Typed<unknown> | Req<unknown>>
/** `{ a: required(int) , b: string }` → `{ a: number; b?: string }`. */
export type ObjectType<F extends FieldsOf> = Simplify<
  { -readonly [K in keyof F as F[K] extends Req<unknown> ? K : never]: Infer<F[K]> } & {
    -readonly [K in keyof F as F[K] extends Req<unknown> ? never : K]?: Infer<F[K]>
  }
>

const typed = <V>(schema: Schema): Typed<V> => schema as Typed<V>

export const s = {
  string: (o: Omit<Extract<Schema, { t: 'string' }>, 't' | 'enum'> = {}): Typed<string> => typed({ t: 'string', ...o }),
  enum: <const V extends readonly string[]>(...values: V): Typed<V[number]> => typed({ t: 'string', enum: values }),
  int: (o: { min?: number; max?: number } = {}): Typed<number> => typed({ t: 'int', ...o }),
  number: (o: { min?: number; max?: number } = {}): Typed<number> => typed({ t: 'number', ...o }),
  bool: (): Typed<boolean> => typed({ t: 'bool' }),
  array: <V>(items: Typed<V>, o: { maxItems?: number; uniqueBy?: string } = {}): Typed<V[]> => typed({ t: 'array', items, ...o }),
  map: <V>(values: Typed<V>, o: { keyPattern?: RegExp; keyPatternName?: string; maxEntries?: number } = {}): Typed<Record<string, V>> =>
    typed({ t: 'map', values, ...o }),
  object: <F extends FieldsOf>(fields: F, o: { open?: boolean } = {}): Typed<ObjectType<F>> =>
    typed({
      t: 'object',
      fields: Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, 'schema' in v ? (v as Field) : { schema: v as Schema }])),
      ...o,
    }),
  /**
   * An object any field of which is accepted (`status`: written by controllers, not by users). Its
   * type is declared by the kind, next to the schema.
   */
  open: <V>(): Typed<V> => typed({ t: 'object', fields: {}, open: true }),
  /** Resource quantities: `500m`, `2`, `128Mi` (or a plain number). */
  quantity: (): Typed<string | number> => typed({ t: 'quantity' }),
  any: (): Typed<unknown> => typed({ t: 'any' }),
  required: <V>(schema: Typed<V>): Req<V> => ({ schema, required: true }) as unknown as Req<V>,
}

export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/
export const QUANTITY = /^([0-9]+(\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti)?$/

export function joinPath(base: string, key: string | number): string {
  if (typeof key === 'number') return `${base}[${key}]`
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) return `${base}[${JSON.stringify(key)}]`
  return base === '' ? key : `${base}.${key}`
}

function typeName(v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'array'
  return typeof v
}

export function validate(value: unknown, schema: Schema, path = '', out: Issue[] = []): Issue[] {
  const here = path === '' ? '(root)' : path
  switch (schema.t) {
    case 'any':
      return out
    case 'string': {
      if (typeof value !== 'string') {
        out.push({ path: here, rule: `must be a string, got ${typeName(value)}` })
        return out
      }
      if (schema.enum && !schema.enum.includes(value)) {
        out.push({ path: here, rule: `must be one of ${schema.enum.join(', ')}; got ${JSON.stringify(value)}` })
      }
      if (schema.minLength !== undefined && value.length < schema.minLength) {
        out.push({ path: here, rule: value.length === 0 ? 'must not be empty' : `must be at least ${schema.minLength} characters` })
      }
      if (schema.maxLength !== undefined && value.length > schema.maxLength) {
        out.push({ path: here, rule: `must be at most ${schema.maxLength} characters` })
      }
      if (schema.pattern && !schema.pattern.test(value)) {
        out.push({ path: here, rule: `must be ${schema.patternName ?? `matching ${schema.pattern}`}; got ${JSON.stringify(value)}` })
      }
      return out
    }
    case 'int':
    case 'number': {
      if (typeof value !== 'number' || !Number.isFinite(value) || (schema.t === 'int' && !Number.isInteger(value))) {
        out.push({
          path: here,
          rule: `must be ${schema.t === 'int' ? 'an integer' : 'a number'}, got ${typeName(value) === 'number' ? value : typeName(value)}`,
        })
        return out
      }
      if (schema.min !== undefined && value < schema.min) out.push({ path: here, rule: `must be >= ${schema.min}` })
      if (schema.max !== undefined && value > schema.max) out.push({ path: here, rule: `must be <= ${schema.max}` })
      return out
    }
    case 'bool':
      if (typeof value !== 'boolean') out.push({ path: here, rule: `must be true or false, got ${typeName(value)}` })
      return out
    case 'quantity':
      if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return out
      if (typeof value !== 'string' || !QUANTITY.test(value)) {
        out.push({ path: here, rule: `must be a quantity like 500m, 2, 128Mi or 1Gi; got ${JSON.stringify(value)}` })
      }
      return out
    case 'array': {
      if (!Array.isArray(value)) {
        out.push({ path: here, rule: `must be a list, got ${typeName(value)}` })
        return out
      }
      if (schema.maxItems !== undefined && value.length > schema.maxItems) {
        out.push({ path: here, rule: `must have at most ${schema.maxItems} items` })
      }
      const seen = new Set<unknown>()
      value.forEach((item, i) => {
        validate(item, schema.items, joinPath(path, i), out)
        if (schema.uniqueBy && item && typeof item === 'object') {
          const k = (item as Record<string, unknown>)[schema.uniqueBy]
          if (k !== undefined) {
            if (seen.has(k)) out.push({ path: joinPath(joinPath(path, i), schema.uniqueBy), rule: `duplicate value ${JSON.stringify(k)}` })
            seen.add(k)
          }
        }
      })
      return out
    }
    case 'map': {
      if (!isPlainObject(value)) {
        out.push({ path: here, rule: `must be a map, got ${typeName(value)}` })
        return out
      }
      const entries = Object.entries(value)
      if (schema.maxEntries !== undefined && entries.length > schema.maxEntries) {
        out.push({ path: here, rule: `must have at most ${schema.maxEntries} entries` })
      }
      for (const [k, v] of entries) {
        if (schema.keyPattern && !schema.keyPattern.test(k)) {
          out.push({ path: joinPath(path, k), rule: `key must be ${schema.keyPatternName ?? `matching ${schema.keyPattern}`}` })
        }
        validate(v, schema.values, joinPath(path, k), out)
      }
      return out
    }
    case 'object': {
      if (!isPlainObject(value)) {
        out.push({ path: here, rule: `must be an object, got ${typeName(value)}` })
        return out
      }
      for (const [k, f] of Object.entries(schema.fields)) {
        const v = (value as Record<string, unknown>)[k]
        if (v === undefined || v === null) {
          if (f.required) out.push({ path: joinPath(path, k), rule: 'required' })
          continue
        }
        validate(v, f.schema, joinPath(path, k), out)
      }
      if (!schema.open) {
        for (const k of Object.keys(value)) {
          if (!(k in schema.fields)) out.push({ path: joinPath(path, k), rule: 'unknown field' })
        }
      }
      return out
    }
  }
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array)
}
