/**
 * `orc create job NAME --from cronjob/NAME`: run a CronJob's job template now, as an ordinary Job
 * written by the user (kubectl's `create job --from`). The CronJob's controller does not count it
 * as one of its runs (it carries no `orc/cronjob` label).
 */
import type { Command } from 'commander'
import { API_VERSION, type CronJob, findKind, OrcError, type OrcObject } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { authorFrom, examples } from '../format.ts'
import type { ApiCaller } from '../remote.ts'

export interface JobsCliIO {
  out(text: string): void
  env: NodeJS.ProcessEnv
}

/** The Job `name` a CronJob's template makes, in the CronJob's namespace. */
export function jobFromCronJob(cj: CronJob, name: string): OrcObject {
  const tpl = cj.spec?.jobTemplate
  if (tpl === undefined) throw new OrcError('invalid', `cronjob/${cj.metadata.name} has no spec.jobTemplate`)
  return {
    apiVersion: API_VERSION,
    kind: 'Job',
    metadata: {
      name,
      namespace: cj.metadata.namespace ?? 'default',
      ...(tpl.metadata?.labels && Object.keys(tpl.metadata.labels).length > 0 ? { labels: { ...tpl.metadata.labels } } : {}),
    },
    spec: structuredClone(tpl.spec) as Record<string, unknown>,
  }
}

/** `cronjob/NAME` (or cj/NAME, cronjobs/NAME) → NAME. */
export function cronJobSource(from: string): string {
  const slash = from.indexOf('/')
  if (slash < 0 || findKind(from.slice(0, slash))?.kind !== 'CronJob' || slash === from.length - 1)
    throw new OrcError('invalid', `--from ${from}: give cronjob/NAME (a job is made from a CronJob's template)`)
  return from.slice(slash + 1)
}

export function registerJobCommands(program: Command, io: JobsCliIO, client: (cmd: Command) => ApiCaller): void {
  // `orc create` also makes Secrets and Configs (secrets.ts): add to it.
  const create = program.commands.find((c) => c.name() === 'create') ?? program.command('create')
  create.description(`${create.description() || 'Create objects'}; or a Job from a CronJob`)
  create
    .command('job')
    .description("Create a Job from a CronJob's job template (run it now)")
    .argument('<NAME>', 'name of the new Job')
    .requiredOption('--from <cronjob/NAME>', 'the CronJob whose template to use')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .option('--reason <text>', 'why; recorded in the history')
    .addHelpText(
      'after',
      examples(`
  # Run the nightly backup now
  orc create job backup-now --from cronjob/nightly-backup`),
    )
    .action(async (name: string, opts, cmd: Command) => {
      const author = authorFrom(io.env, opts.author)
      const source = cronJobSource(opts.from as string)
      const c = client(cmd)
      const ns = (opts.namespace as string | undefined) || 'default'
      const r = await callRoute(c, 'getObject', { kind: 'CronJob', ns, name: source })
      const job = jobFromCronJob(r.object as unknown as CronJob, name)
      const exists = await callRoute(c, 'getObject', { kind: 'Job', ns, name }).then(
        () => true,
        (err) => {
          if (err instanceof OrcError && err.code === 'not_found') return false
          throw err
        },
      )
      if (exists) throw new OrcError('conflict', `job/${name} already exists in namespace ${ns}`)
      const reason = (opts.reason as string | undefined) ?? `created from cronjob/${source}`
      await callRoute(c, 'apply', {}, { body: { objects: [job], author, reason, namespace: ns } })
      io.out(`job/${name} created\n`)
    })
}
