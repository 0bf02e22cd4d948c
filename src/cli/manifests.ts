/**
 * Reading manifests for `orc apply`: multi-document YAML (JSON is YAML too), from files,
 * directories or stdin. Every document remembers where it came from, so an error can say
 * `web.yaml document 2 (line 14): …`.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { LineCounter, parseAllDocuments } from 'yaml'
import { isPlainObject, OrcError } from '../model/index.ts'

export interface ManifestDoc {
  value: unknown
  /** File name, or `stdin`. */
  source: string
  /** 1-based document number within its source. */
  document: number
  /** 1-based line where the document's content starts. */
  line: number
}

export function describeDoc(d: Pick<ManifestDoc, 'source' | 'document' | 'line'>): string {
  return `${d.source} document ${d.document} (line ${d.line})`
}

/** Parse one text. Empty documents (a trailing `---`) are skipped; `kind: List` is flattened. */
export function parseManifests(text: string, source: string): ManifestDoc[] {
  const lc = new LineCounter()
  const docs = parseAllDocuments(text, { lineCounter: lc, prettyErrors: false, uniqueKeys: true })
  if (!Array.isArray(docs)) return [] // an empty stream
  const out: ManifestDoc[] = []
  docs.forEach((doc, i) => {
    const document = i + 1
    const err = doc.errors[0]
    if (err) {
      const pos = err.linePos?.[0] ?? lc.linePos(err.pos[0])
      const msg = err.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '')
      throw new OrcError('parse', `${source} document ${document}, line ${pos.line} column ${pos.col}: ${msg}`, {
        source,
        document,
        line: pos.line,
        column: pos.col,
      })
    }
    if (doc.contents === null) return
    const line = lc.linePos(doc.contents.range[0]).line
    let value: unknown
    try {
      value = doc.toJS({ maxAliasCount: 100 })
    } catch (e) {
      throw new OrcError('parse', `${source} document ${document} (line ${line}): ${(e as Error).message}`, { source, document, line }, e)
    }
    if (value === null || value === undefined) return
    if (isPlainObject(value) && value.kind === 'List' && Array.isArray(value.items)) {
      for (const item of value.items) out.push({ value: item, source, document, line })
      return
    }
    if (!isPlainObject(value)) {
      throw new OrcError(
        'invalid',
        `${source} document ${document} (line ${line}): expected a manifest (a mapping with apiVersion, kind, metadata), got ${Array.isArray(value) ? 'a list' : typeof value}`,
        { source, document, line },
      )
    }
    out.push({ value, source, document, line })
  })
  return out
}

function filesOf(path: string): string[] {
  let st
  try {
    st = statSync(path)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    throw new OrcError(
      code === 'ENOENT' ? 'not_found' : 'invalid',
      `read ${path}: ${code === 'ENOENT' ? 'no such file' : (err as Error).message}`,
      { path },
      err,
    )
  }
  if (!st.isDirectory()) return [path]
  return readdirSync(path)
    .filter((n) => /\.(ya?ml|json)$/.test(n))
    .sort()
    .map((n) => join(path, n))
}

/** Read every `-f` argument (`-` is stdin, a directory means its .yaml/.yml/.json files). */
export async function readManifests(paths: string[], stdin: () => Promise<string> = readStdin): Promise<ManifestDoc[]> {
  const out: ManifestDoc[] = []
  for (const p of paths) {
    if (p === '-') {
      out.push(...parseManifests(await stdin(), 'stdin'))
      continue
    }
    for (const f of filesOf(p)) {
      let text: string
      try {
        text = readFileSync(f, 'utf8')
      } catch (err) {
        throw new OrcError('invalid', `read ${f}: ${(err as Error).message}`, { path: f }, err)
      }
      out.push(...parseManifests(text, f))
    }
  }
  return out
}

export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const c of process.stdin) chunks.push(c as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}
