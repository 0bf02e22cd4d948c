/**
 * What every command shares for naming objects and choosing an output, so they all take the same
 * forms (issue #22): `-o table|wide|json|yaml|name` (`text` is `table`), an object as `KIND/NAME`,
 * `KIND NAME` or a bare `NAME` where the command implies the kind, and "did you mean" for a kind or
 * a name that does not exist.
 */
import { type Command, InvalidArgumentError, Option } from 'commander'
import { objectParams } from '../agent/index.ts'
import { closestWords, didYouMeanOf, findKind, getKind, type ObjectRef, OrcError, parseRef, suggestKinds } from '../model/index.ts'
import { callRoute } from './call.ts'
import type { ApiCaller } from './remote.ts'

export type OutputFormat = 'table' | 'wide' | 'json' | 'yaml' | 'name'

/**
 * `-o, --output <format>` taking `formats` (and `text`, the same as `table`); the parsed value is
 * always one of `formats`. Every read command builds its `-o` with this.
 */
export function outputOption(formats: readonly OutputFormat[] = ['table', 'json', 'yaml'], dflt: OutputFormat = 'table', help = 'output format'): Option {
  const accepted = formats.includes('table') ? [...formats, 'text'] : [...formats]
  return new Option('-o, --output <format>', `${help}: ${formats.join(', ')}${formats.includes('table') ? ' (text = table)' : ''}`)
    .default(dflt)
    .argParser((v: string) => {
      const f = v.trim().toLowerCase()
      if (!accepted.includes(f)) throw new InvalidArgumentError(`choose one of ${accepted.join(', ')}`)
      return (f === 'text' ? 'table' : f) as OutputFormat
    })
}

/** How a command names its objects: the kind a bare NAME means (none: the kind must be given). */
export interface RefForms {
  namespace?: string
  implied?: string
}

/** Commands whose object argument implies a kind, for completion (`orc history <TAB>` lists pods). */
export const IMPLIED_KINDS = new WeakMap<Command, string>()

/** Marks `cmd` as taking objects, a bare NAME being of kind `implied` (completion and help). */
export function takesObjects<T extends Command>(cmd: T, implied?: string): T {
  IMPLIED_KINDS.set(cmd, implied ?? '')
  return cmd
}

function kindOf(text: string): string {
  return getKind(text).kind
}

/**
 * One object from a command's words: `pod/web`, `pod web`, or `web` when the command implies a kind.
 * `args` are the words the command gave for the object (one or two).
 */
export function objectRef(args: readonly string[], o: RefForms = {}): ObjectRef {
  const ns = o.namespace || undefined
  const [first, second, ...rest] = args.filter((a) => a !== undefined && a !== '')
  if (first === undefined) throw new OrcError('invalid', 'expected KIND/NAME (like pod/web) or KIND NAME')
  if (rest.length > 0) throw new OrcError('invalid', `expected one object, got ${args.join(' ')}`)
  if (first.includes('/')) {
    if (second !== undefined) throw new OrcError('invalid', `give either KIND/NAME or KIND NAME, not ${first} ${second}`)
    return parseRef(first, ns)
  }
  if (second !== undefined) return parseRef(`${kindOf(first)}/${second}`, ns)
  if (o.implied !== undefined && findKind(first) === undefined) return parseRef(`${o.implied}/${first}`, ns)
  // A lone word: a kind without a name, or (no kind implied) a name without its kind.
  if (findKind(first) !== undefined) throw new OrcError('invalid', `${first}: which one? give KIND/NAME (like ${first}/NAME) or KIND NAME`)
  if (suggestKinds(first).length > 0) kindOf(first) // a mistyped kind: the error says which kinds are near
  throw new OrcError('invalid', `${JSON.stringify(first)}: give its kind too, as KIND/NAME (like pod/${first}) or KIND NAME`)
}

/**
 * Several objects: `pod/web pod/db`, `pod web db`, or (implied kind) one bare `web`. Several words
 * whose first is not a kind are an unknown kind, not several bare names.
 */
export function objectRefs(args: readonly string[], o: RefForms = {}): ObjectRef[] {
  const ns = o.namespace || undefined
  if (args.length === 0) throw new OrcError('invalid', 'expected KIND/NAME or KIND NAME')
  if (args[0]!.includes('/')) return args.map((a) => parseRef(a, ns))
  if (args.length === 1) return [objectRef(args, o)]
  const kind = kindOf(args[0]!)
  return args.slice(1).map((name) => parseRef(`${kind}/${name}`, ns))
}

/** A ref as the CLI prints it: `pod/web`. */
export function refText(ref: { kind: string; name: string }): string {
  return `${ref.kind.toLowerCase()}/${ref.name}`
}

/** The object a not_found error is about, when it names one (getObject's details). */
function missingObject(err: unknown): ObjectRef | undefined {
  if (!(err instanceof OrcError) || err.code !== 'not_found') return undefined
  const d = err.details as Partial<ObjectRef>
  if (typeof d.kind !== 'string' || typeof d.name !== 'string' || findKind(d.kind) === undefined) return undefined
  return { kind: d.kind, namespace: typeof d.namespace === 'string' ? d.namespace : '', name: d.name }
}

/** The names of `kind` closest to `name` in its namespace (best first); [] when the agent cannot say. */
export async function closestNames(c: ApiCaller, ref: ObjectRef): Promise<string[]> {
  try {
    const r = await callRoute(c, 'listObjects', { kind: ref.kind }, { query: { namespace: ref.namespace || undefined } })
    return closestWords(
      ref.name,
      r.items.map((i) => i.metadata.name),
    )
  } catch {
    return []
  }
}

/**
 * A not_found error about an object, with the closest existing names of its kind added
 * (`pod/wbe in namespace default not found: did you mean web?`); any other error unchanged.
 */
export async function withNameHint(c: ApiCaller | undefined, err: unknown): Promise<unknown> {
  const ref = missingObject(err)
  if (ref === undefined || c === undefined || 'suggestions' in (err as OrcError).details) return err
  const names = await closestNames(c, ref)
  if (names.length === 0) return err
  const e = err as OrcError
  const suggestions = names.map((n) => refText({ kind: ref.kind, name: n }))
  return new OrcError(e.code, `${e.message}: ${didYouMeanOf(suggestions)}`, { ...e.details, suggestions }, e.cause)
}

/** getObject, with a "did you mean" when the name does not exist. */
export async function getObjectOf(c: ApiCaller, ref: ObjectRef) {
  try {
    return (await callRoute(c, 'getObject', objectParams(ref))).object
  } catch (err) {
    throw await withNameHint(c, err)
  }
}
