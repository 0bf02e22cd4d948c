/**
 * `orc create secret|config NAME --from-literal k=v --from-file [k=]path`: a Secret or Config from
 * values and files, applied like `orc apply` (a Secret's values are sealed by the agent before they
 * are stored: docs/secrets.md). No error here ever repeats a value: they name the flag and the key.
 */
import { isUtf8 } from 'node:buffer'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { basename, join } from 'node:path'
import type { Command } from 'commander'
import { API_VERSION, OrcError, type OrcObject } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { examples } from '../format.ts'
import type { ApiCaller } from '../remote.ts'

export interface SecretCliIO {
  out(text: string): void
  err(text: string): void
}

export interface DataSources {
  /** `KEY=VALUE` */
  literals: readonly string[]
  /** `PATH` (key: the file name; a directory: each file in it) or `KEY=PATH`. */
  files: readonly string[]
}

export interface FileReader {
  read(path: string): Buffer
  /** The regular files of a directory, or undefined when `path` is not one. */
  list(path: string): string[] | undefined
}

const fsReader: FileReader = {
  read: (path) => {
    try {
      return readFileSync(path)
    } catch (err) {
      const e = err as NodeJS.ErrnoException
      throw new OrcError('invalid', `--from-file ${path}: ${e.code === 'ENOENT' ? 'no such file' : e.code === 'EACCES' ? 'permission denied' : e.message}`)
    }
  },
  list: (path) => {
    try {
      if (!statSync(path).isDirectory()) return undefined
    } catch {
      return undefined
    }
    return readdirSync(path, { withFileTypes: true })
      .filter((d) => d.isFile())
      .map((d) => join(path, d.name))
      .sort()
  },
}

/**
 * The `data` (UTF-8 text) and `binaryData` (base64; anything that is not UTF-8) of the values the
 * flags name. Key names are checked by the agent (one line naming the key).
 */
export function dataFromSources(src: DataSources, fs: FileReader = fsReader): { data: Record<string, string>; binaryData: Record<string, string> } {
  const data: Record<string, string> = {}
  const binaryData: Record<string, string> = {}
  const add = (key: string, value: Buffer | string, from: string) => {
    if (key === '') throw new OrcError('invalid', `${from}: the key is empty`)
    if (key in data || key in binaryData) throw new OrcError('invalid', `${from}: key ${key} is given twice`)
    if (typeof value === 'string') data[key] = value
    else if (isUtf8(value)) data[key] = value.toString('utf8')
    else binaryData[key] = value.toString('base64')
  }
  for (const lit of src.literals) {
    const eq = lit.indexOf('=')
    // Not the text itself: it may be the secret value, typed without its key.
    if (eq < 0) throw new OrcError('invalid', '--from-literal: expected KEY=VALUE (one of the values has no =)')
    add(lit.slice(0, eq), lit.slice(eq + 1), `--from-literal ${lit.slice(0, eq)}`)
  }
  for (const f of src.files) {
    const eq = f.indexOf('=')
    if (eq > 0) {
      add(f.slice(0, eq), fs.read(f.slice(eq + 1)), `--from-file ${f}`)
      continue
    }
    const files = fs.list(f)
    if (files !== undefined) {
      for (const path of files) add(basename(path), fs.read(path), `--from-file ${path}`)
      continue
    }
    add(basename(f), fs.read(f), `--from-file ${f}`)
  }
  return { data, binaryData }
}

export interface CreateDataOptions extends DataSources {
  kind: 'Secret' | 'Config'
  name: string
  namespace?: string
  type?: string
  shareable?: boolean
  description?: string
}

/** The manifest `orc create secret|config` applies. */
export function dataManifest(o: CreateDataOptions, fs?: FileReader): OrcObject {
  const { data, binaryData } = dataFromSources(o, fs)
  const spec: Record<string, unknown> = {}
  if (Object.keys(data).length > 0) spec.data = data
  if (Object.keys(binaryData).length > 0) spec.binaryData = binaryData
  if (o.type !== undefined) spec.type = o.type
  if (o.shareable) spec.shareable = true
  if (o.description !== undefined) spec.description = o.description
  return { apiVersion: API_VERSION, kind: o.kind, metadata: { name: o.name, ...(o.namespace ? { namespace: o.namespace } : {}) }, spec }
}

function collect(v: string, prev: string[]): string[] {
  return [...prev, v]
}

export function registerSecretCommands(program: Command, io: SecretCliIO, client: (cmd: Command) => ApiCaller): void {
  const create = program.command('create').description('Create a Secret or a Config from values and files')

  const sub = (kind: 'Secret' | 'Config') => {
    const word = kind.toLowerCase()
    const cmd = create
      .command(word)
      .description(
        kind === 'Secret'
          ? 'Create a Secret: its values are sealed with the cluster data key before they are stored (orc get shows keys, sizes and hashes)'
          : 'Create a Config: configuration files and values pods read, stored in clear',
      )
      .argument('<NAME>', `name of the ${word}`)
      .option('-n, --namespace <ns>', 'namespace (default: default)')
      .option('--from-literal <KEY=VALUE>', 'a value; may repeat', collect, [] as string[])
      .option(
        '--from-file <[KEY=]PATH>',
        'a file (key: the file name, or KEY), or every file of a directory; may repeat. Not UTF-8: kept as binaryData',
        collect,
        [] as string[],
      )
      .option('--description <text>', 'what it is for, for people')
      .option('--reason <text>', 'why; recorded in the history')
    if (kind === 'Secret') {
      cmd
        .option('--type <type>', 'what it holds, for people (registry-auth, tls, …)')
        .option('--shareable', 'may replicate into a federation that shares its namespace (default: never)')
    }
    cmd.addHelpText(
      'after',
      kind === 'Secret'
        ? examples(`
  # A password and a TLS key pair
  orc create secret db --from-literal password=s3cret --from-file tls.crt --from-file tls.key=./key.pem

  # Keys, sizes and value hashes; the values only with a role that may reveal them
  orc get secret db -o yaml
  orc get secret db --show-secrets`)
        : examples(`
  # A configuration file and a value
  orc create config web --from-file nginx.conf --from-literal mode=production`),
    )
    cmd.action(async (name: string, opts, c: Command) => {
      const manifest = dataManifest({
        kind,
        name,
        namespace: opts.namespace,
        literals: opts.fromLiteral,
        files: opts.fromFile,
        type: opts.type,
        shareable: opts.shareable,
        description: opts.description,
      })
      const api = client(c)
      const ns = opts.namespace || 'default'
      // `create` does not overwrite: a changed value is an `orc apply`, so it is never done by accident.
      const exists = await callRoute(api, 'getObject', { kind, ns, name }).then(
        () => true,
        (err) => {
          if (err instanceof OrcError && err.code === 'not_found') return false
          throw err
        },
      )
      if (exists) {
        throw new OrcError(
          'conflict',
          `${word}/${name} exists in namespace ${ns}: change it with orc apply${kind === 'Secret' ? ` (orc get secret ${name} --show-secrets -o yaml gives its manifest)` : ''}, or delete it first`,
        )
      }
      const res = await callRoute(api, 'apply', {}, { body: { objects: [manifest], reason: opts.reason, namespace: opts.namespace } })
      for (const r of res.results) io.out(`${r.kind.toLowerCase()}/${r.name} ${r.outcome}\n`)
    })
  }
  sub('Secret')
  sub('Config')
}
