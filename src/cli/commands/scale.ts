/**
 * `orc scale pinneddeployment/NAME --replicas N`: an ordinary apply of the deployment with a new
 * `spec.replicas` (author, reason, history, rollback as for any write); the deployment controller
 * then creates or deletes pods.
 */
import type { Command } from 'commander'
import { OrcError, type OrcObject, type PinnedDeployment } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { authorFrom, examples } from '../format.ts'
import { getObjectOf, objectRef, outputOption, refText, takesObjects } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'
import { editableOf } from './edit.ts'

export interface ScaleCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
}

export function registerScaleCommand(program: Command, io: ScaleCliIO, client: (cmd: Command) => ApiCaller): void {
  takesObjects(
    program
      .command('scale')
      .description('Set the number of replicas of a PinnedDeployment (recorded as a revision, with a reason)')
      .argument('<KIND/NAME>', 'pinneddeployment/web, pinneddeployment web, or web')
      .argument('[NAME]', 'the name, when KIND is given alone')
      .requiredOption('--replicas <n>', 'the number of pods wanted')
      .option('-n, --namespace <ns>', 'namespace (default: default)')
      .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
      .option('--reason <text>', 'why; recorded in the history (default: "scale to N replicas")')
      .addOption(outputOption(['table', 'json']))
      .addHelpText(
        'after',
        examples(`
  # Five pods of web
  orc scale pinneddeployment/web --replicas 5

  # Down to one, saying why
  orc scale web --replicas 1 --reason "night traffic"`),
      ),
    'PinnedDeployment',
  ).action(async (target: string, name: string | undefined, opts, cmd: Command) => {
    authorFrom({}, opts.author)
    const ref = objectRef([target, name ?? ''], { namespace: opts.namespace, implied: 'PinnedDeployment' })
    if (ref.kind !== 'PinnedDeployment')
      throw new OrcError('invalid', `${refText(ref)}: only pinneddeployments scale (orc scale pinneddeployment/NAME --replicas N)`)
    const text = String(opts.replicas).trim()
    const replicas = Number(text)
    if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(replicas))
      throw new OrcError('invalid', `--replicas: must be a whole number, got ${JSON.stringify(opts.replicas)}`)
    const c = client(cmd)
    const d = (await getObjectOf(c, ref)) as unknown as PinnedDeployment
    if (d.spec?.placement?.everyNode === true)
      throw new OrcError('invalid', `${refText(ref)} runs one pod per node (spec.placement.everyNode): it has no replica count to scale`)
    const before = d.spec?.replicas
    const manifest = editableOf(d as unknown as OrcObject)
    manifest.spec = { ...manifest.spec, replicas }
    const reason = opts.reason ?? `scale to ${replicas} replica${replicas === 1 ? '' : 's'}`
    const res = await callRoute(c, 'apply', {}, { body: { objects: [manifest], reason, namespace: ref.namespace } })
    const r = res.results[0]!
    if (opts.output === 'json') return io.out(JSON.stringify({ ...r, replicas, previousReplicas: before ?? null }, null, 2) + '\n')
    if (r.outcome === 'unchanged') return io.out(`${refText(ref)} unchanged: already ${replicas} replica${replicas === 1 ? '' : 's'}\n`)
    io.out(`${refText(ref)} scaled from ${before ?? '?'} to ${replicas} replica${replicas === 1 ? '' : 's'} (revision ${r.revision})\n`)
  })
}
