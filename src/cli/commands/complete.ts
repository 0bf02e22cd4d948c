/**
 * `orc __complete -- WORDS…` (hidden): what the shell completion scripts ask when the word under
 * the cursor is an object argument — object names from the agent (`orc history <TAB>`
 * lists pods, `orc get pods <TAB>` and `orc describe pod/<TAB>` the pods' names). The last word is
 * the one being completed. It prints one candidate per line and is silent on any error: a shell
 * completing must never see a stack trace, and an agent that does not answer quickly gives no names.
 */
import type { Command, Option } from 'commander'
import { resolveSocketPath } from '../../agent/index.ts'
import { findKind } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { ApiClient } from '../client.ts'
import { IMPLIED_KINDS } from '../refs.ts'
import { type ApiCaller, RemoteApiClient, readCredential } from '../remote.ts'

export interface CompleteCliIO {
  out(text: string): void
  env: NodeJS.ProcessEnv
}

/** How long completion waits for the agent's names. */
const COMPLETE_TIMEOUT_MS = 1500

/** What a command line asks to complete: the command, its positional words before the cursor, the flags given. */
export interface CompletionContext {
  command: Command
  positionals: string[]
  current: string
  flags: Map<string, string>
}

function optionOf(cmds: readonly Command[], word: string): Option | undefined {
  const name = word.split('=')[0]!
  for (const c of cmds) {
    const o = c.options.find((x) => x.long === name || x.short === name)
    if (o) return o
  }
  return undefined
}

/** Walks the words as commander would: subcommands, flags (and the values they take), positionals. */
export function completionContext(program: Command, words: readonly string[]): CompletionContext {
  const current = words.at(-1) ?? ''
  const chain: Command[] = [program]
  const positionals: string[] = []
  const flags = new Map<string, string>()
  const before = words.slice(0, -1)
  for (let i = 0; i < before.length; i++) {
    const w = before[i]!
    if (w.startsWith('-') && w !== '-') {
      const o = optionOf(chain, w)
      const takesValue = o !== undefined && (o.required || o.optional)
      const key = o?.long ?? w.split('=')[0]!
      if (w.includes('=')) flags.set(key, w.slice(w.indexOf('=') + 1))
      else if (takesValue && i + 1 < before.length) flags.set(key, before[++i]!)
      else flags.set(key, '')
      continue
    }
    const here = chain.at(-1)!
    const sub = positionals.length === 0 ? here.commands.find((c) => c.name() === w || c.aliases().includes(w)) : undefined
    if (sub) chain.push(sub)
    else positionals.push(w)
  }
  return { command: chain.at(-1)!, positionals, current, flags }
}

/** Whether a command's first argument is a KIND (`orc get`), and the kind a bare NAME means, if any. */
function objectArgs(cmd: Command): { takes: boolean; implied?: string; several: boolean } {
  const args = (cmd as unknown as { registeredArguments?: Array<{ name(): string; variadic: boolean }> }).registeredArguments ?? []
  const implied = IMPLIED_KINDS.get(cmd)
  const kindFirst = args.length > 0 && /KIND/.test(args[0]!.name())
  return { takes: implied !== undefined || kindFirst, implied: implied || undefined, several: args[0]?.variadic === true }
}

/** The candidates for the last word, names asked of the agent through `names`. */
export async function completionsOf(
  program: Command,
  words: readonly string[],
  names: (kind: string, ns: string | undefined) => Promise<string[]>,
): Promise<string[]> {
  const ctx = completionContext(program, words)
  const { takes, implied, several } = objectArgs(ctx.command)
  if (!takes || ctx.current.startsWith('-')) return []
  const ns = ctx.flags.get('--namespace') || undefined
  const slash = ctx.current.indexOf('/')
  if (slash > 0) {
    const def = findKind(ctx.current.slice(0, slash))
    if (def === undefined) return []
    const prefix = ctx.current.slice(0, slash)
    return (await names(def.kind, ns)).map((n) => `${prefix}/${n}`)
  }
  // The first word: kinds come from the static script (it offers them without an agent), names from here.
  if (ctx.positionals.length === 0) return implied ? names(implied, ns) : []
  const def = findKind(ctx.positionals[0]!)
  if (def === undefined || (ctx.positionals.length > 1 && !several)) return []
  return names(def.kind, ns)
}

function callerOf(flags: Map<string, string>, env: NodeJS.ProcessEnv): ApiCaller {
  const node = flags.get('--node') || env.ORC_NODE || undefined
  if (node !== undefined) return new RemoteApiClient(node, readCredential(flags.get('--credential') || undefined, env))
  return new ApiClient(resolveSocketPath(flags.get('--socket') || undefined, env))
}

export function registerCompleteCommand(program: Command, io: CompleteCliIO, _client: (cmd: Command) => ApiCaller): void {
  program
    .command('__complete', { hidden: true })
    .description('Candidates for shell completion of an object argument (used by the completion scripts)')
    .argument('[WORDS...]', 'the command line after orc, the last word being completed')
    .allowUnknownOption()
    .action(async (words: string[]) => {
      try {
        const flags = completionContext(program, words).flags
        const names = async (kind: string, ns: string | undefined): Promise<string[]> => {
          const c = callerOf(flags, io.env)
          const list = callRoute(c, 'listObjects', { kind }, { query: { namespace: ns } }).then((r) => r.items.map((i) => i.metadata.name))
          let timer: NodeJS.Timeout | undefined
          const timeout = new Promise<string[]>((resolve) => {
            timer = setTimeout(() => resolve([]), COMPLETE_TIMEOUT_MS)
          })
          try {
            return await Promise.race([list.catch(() => []), timeout])
          } finally {
            clearTimeout(timer)
          }
        }
        const out = await completionsOf(program, words, names)
        if (out.length > 0) io.out(`${[...new Set(out)].join('\n')}\n`)
      } catch {
        // silent: completion offers nothing rather than an error
      }
    })
}
