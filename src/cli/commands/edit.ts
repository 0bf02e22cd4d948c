/**
 * `orc edit KIND/NAME`: the object as YAML in $EDITOR, applied back when saved changed (an ordinary
 * apply: author, reason, history). A Secret opens in its sealed form, where new or changed values
 * go in clear under `spec.data` (sealed by the agent); `--show-secrets` opens its values instead.
 * A Secret is edited in a private file on tmpfs where there is one, removed afterwards.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Command } from 'commander'
import { OrcError, type OrcObject } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { examples, toYaml } from '../format.ts'
import { parseManifests } from '../manifests.ts'
import { getObjectOf, objectRef, takesObjects } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

export interface EditCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
}

/** What the user edits: the object without the fields the system sets. */
export function editableOf(obj: OrcObject): OrcObject {
  const { name, namespace, labels, annotations } = obj.metadata
  return {
    apiVersion: obj.apiVersion,
    kind: obj.kind,
    metadata: { name, ...(namespace ? { namespace } : {}), ...(labels ? { labels } : {}), ...(annotations ? { annotations } : {}) },
    ...(obj.spec !== undefined ? { spec: obj.spec } : {}),
  }
}

const SEALED_HINT = `# Values are sealed. To add or change one, give it in clear under spec.data (text) or
# spec.binaryData (base64); it is sealed when you save. Remove a key from spec.sealed to drop it.
# (orc edit secret/NAME --show-secrets opens the values instead.)
`

export function registerEditCommand(program: Command, io: EditCliIO, client: (cmd: Command) => ApiCaller): void {
  takesObjects(program.command('edit'))
    .description('Edit an object in $EDITOR and apply it when saved changed (a new revision, with --reason)')
    .argument('<KIND/NAME>', 'like config/web or secret/db, or KIND NAME')
    .argument('[NAME]', 'the name, when KIND is given alone')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--show-secrets', 'a Secret with its values opened (needs a role that grants Secret/reveal)')
    .option('--reason <text>', 'why; recorded in the history')
    .addHelpText(
      'after',
      examples(`
  # Change a configuration file
  orc edit config/web

  # Add a value to a Secret (given in clear under spec.data, sealed on save)
  orc edit secret/db

  # Change a Secret's values in place
  orc edit secret/db --show-secrets --reason "new password"

  # Any kind, kubectl style, saying why
  orc edit pinneddeployment web --reason "more memory"`),
    )
    .action(async (target: string, name: string | undefined, opts, cmd: Command) => {
      const ref = objectRef([target, name ?? ''], { namespace: opts.namespace })
      const api = client(cmd)
      const reveal = Boolean(opts.showSecrets)
      if (reveal && ref.kind !== 'Secret') throw new OrcError('invalid', '--show-secrets is for a Secret: orc edit secret/NAME --show-secrets')
      const obj = reveal ? (await callRoute(api, 'revealSecret', { ns: ref.namespace, name: ref.name })).object : await getObjectOf(api, ref)
      const text = (ref.kind === 'Secret' && !reveal ? SEALED_HINT : '') + toYaml(editableOf(obj))
      // A Secret's file (opened values, or new ones typed in clear) stays off the disk where a tmpfs
      // is at hand; the file is private either way, and its directory (editor swap files too) goes.
      const dir = mkdtempSync(join(ref.kind === 'Secret' && existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'orc-edit-'))
      const file = join(dir, `${ref.kind.toLowerCase()}-${ref.name}.yaml`)
      let edited: string
      try {
        writeFileSync(file, text, { mode: 0o600 })
        const editor = io.env.ORC_EDITOR || io.env.VISUAL || io.env.EDITOR || 'vi'
        const r = spawnSync('/bin/sh', ['-c', `${editor} "$1"`, 'orc-edit', file], { stdio: 'inherit', env: io.env })
        if (r.error !== undefined || r.status !== 0)
          throw new OrcError('invalid', `editor ${editor} failed (${r.error?.message ?? `exit ${r.status}`}); nothing applied`)
        edited = readFileSync(file, 'utf8')
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
      if (edited === text) return io.err('Edit cancelled, no changes made.\n')
      const docs = parseManifests(edited, file)
      const doc = docs[0]?.value as OrcObject | undefined
      if (docs.length !== 1 || doc?.kind !== ref.kind || doc.metadata?.name !== ref.name) {
        throw new OrcError('invalid', `the edited file must hold ${ref.kind.toLowerCase()}/${ref.name} alone (kind and name unchanged); nothing applied`)
      }
      const res = await callRoute(api, 'apply', {}, { body: { objects: [doc], reason: opts.reason, namespace: ref.namespace || undefined } })
      for (const r of res.results) io.out(`${r.kind.toLowerCase()}/${r.name} ${r.outcome === 'configured' ? 'edited' : r.outcome}\n`)
    })
}
