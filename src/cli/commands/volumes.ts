/**
 * `orc volume snapshot|restore|export` (docs/storage.md): through any node; the node holding the
 * volume's data does the work.
 */
import type { Command } from 'commander'
import { OrcError } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { authorFrom, examples } from '../format.ts'
import { outputOption } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

export interface VolumeCliIO {
  out(text: string): void
  err(text: string): void
  /** Raw bytes to stdout (the export's tar stream). */
  outBytes(data: Uint8Array): Promise<void>
  env: NodeJS.ProcessEnv
  isTTY: boolean
}

function volumeName(arg: string): string {
  const name = arg.replace(/^(volumes?|vol)\//, '')
  if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name)) throw new OrcError('invalid', `volume name ${JSON.stringify(arg)} is not one (volume/NAME or NAME)`)
  return name
}

export function registerVolumeCommands(program: Command, io: VolumeCliIO, client: (cmd: Command) => ApiCaller): void {
  const volume = program.command('volume').description('Snapshots, restores and exports of persistent Volumes (docs/storage.md)')
  const common = (c: Command) =>
    c
      .option('-n, --namespace <ns>', 'namespace (default: default)')
      .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
      .option('--reason <text>', 'why; recorded in the history')

  common(volume.command('snapshot'))
    .description(
      'Take a snapshot of a volume on the node holding it (an ext4 volume is frozen while it is copied; a directory volume only with no pod using it)',
    )
    .argument('<NAME>', 'the Volume (NAME or volume/NAME)')
    .option('--name <snapshot>', 'the snapshot name (default snap-<time>)')
    .addOption(outputOption(['table', 'json']))
    .addHelpText(
      'after',
      examples(`
  orc volume snapshot db
  orc volume snapshot db --name before-upgrade`),
    )
    .action(async (arg: string, opts, cmd: Command) => {
      const name = volumeName(arg)
      const r = await callRoute(
        client(cmd),
        'volumeSnapshot',
        { ns: opts.namespace || 'default', name },
        { body: { author: authorFrom(io.env, opts.author), ...(opts.reason ? { reason: opts.reason } : {}), ...(opts.name ? { name: opts.name } : {}) } },
      )
      if (opts.output === 'json') return io.out(`${JSON.stringify(r, null, 2)}\n`)
      io.out(
        `volume/${name}: snapshot ${r.snapshot.name} taken on node ${r.node} (${r.snapshot.bytes} bytes, ${r.snapshot.consistency === 'freeze' ? 'filesystem frozen while copied' : 'no pod was using it'})\n`,
      )
    })

  common(volume.command('restore'))
    .description(
      'Take back a deleted volume with its data (within the grace period, default 24 h), or put a snapshot back (--snapshot; no pod may be using the volume)',
    )
    .argument('<NAME>', 'the Volume (NAME or volume/NAME)')
    .option('--snapshot <snapshot>', 'restore this snapshot into the existing volume')
    .addHelpText(
      'after',
      examples(`
  orc delete volume/db && orc volume restore db
  orc volume restore db --snapshot before-upgrade`),
    )
    .action(async (arg: string, opts, cmd: Command) => {
      const name = volumeName(arg)
      const ns = opts.namespace || 'default'
      const body = { author: authorFrom(io.env, opts.author), ...(opts.reason ? { reason: opts.reason } : {}) }
      if (opts.snapshot !== undefined) {
        const r = await callRoute(client(cmd), 'volumeRestoreSnapshot', { ns, name }, { body: { ...body, snapshot: opts.snapshot } })
        return io.out(`volume/${name}: snapshot ${r.snapshot} restored on node ${r.node}\n`)
      }
      const r = await callRoute(client(cmd), 'volumeRestore', { ns, name }, { body })
      io.out(`volume/${name} restored from deleted volume ${r.fromUid}: node ${r.node} moves its data back (orc get volume/${name})\n`)
    })

  volume
    .command('export')
    .description('Write a tar of the volume to stdout, from any node (the node holding it takes a frozen copy and sends it)')
    .argument('<NAME>', 'the Volume (NAME or volume/NAME)')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .addHelpText(
      'after',
      examples(`
  orc volume export db > db.tar
  orc volume export db | tar -t`),
    )
    .action(async (arg: string, opts, cmd: Command) => {
      const name = volumeName(arg)
      if (io.isTTY) throw new OrcError('invalid', 'orc volume export writes a tar stream: redirect it to a file (orc volume export NAME > NAME.tar)')
      const c = client(cmd)
      let id: string | undefined
      let offset = 0
      for (;;) {
        const r = await callRoute(c, 'volumeExport', { ns: opts.namespace || 'default', name }, { query: { ...(id ? { id } : {}), offset: String(offset) } })
        if (id !== undefined && r.id !== id) throw new OrcError('internal', `export changed under us (${id} → ${r.id})`)
        id = r.id
        const data = Buffer.from(r.data, 'base64')
        await io.outBytes(data)
        offset += data.length
        if (r.done) break
        if (data.length === 0) throw new OrcError('internal', `export ${id} stopped at ${offset} of ${r.total} bytes`)
      }
    })
}
