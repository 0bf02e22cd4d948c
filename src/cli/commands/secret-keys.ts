/**
 * `orc secret rotate-key` (agent/secret-keys.ts): a new cluster data key, every Secret re-sealed
 * under it, keys no Secret uses any more retired, the new keyring handed to the members.
 */
import type { Command } from 'commander'
import { callRoute } from '../call.ts'
import { examples, toYaml } from '../format.ts'
import { outputOption } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

export interface SecretKeyCliIO {
  out(text: string): void
  err(text: string): void
}

/** The `secret` command group, shared with the other `orc secret …` commands whichever registers first. */
function secretGroup(program: Command): Command {
  return (
    program.commands.find((c) => c.name() === 'secret') ??
    program.command('secret').description('Secrets: values sealed with the cluster data key (docs/secrets.md)')
  )
}

export function registerSecretKeyCommands(program: Command, io: SecretKeyCliIO, client: (cmd: Command) => ApiCaller): void {
  secretGroup(program)
    .command('rotate-key')
    .description('Make a new cluster data key and re-seal every Secret with it (admin only); members receive the new key')
    .option('--reason <text>', 'why; recorded in the history of each re-sealed Secret')
    .addOption(outputOption(['table', 'json', 'yaml']))
    .addHelpText('after', examples(`\n  orc secret rotate-key --reason 'yearly rotation'`))
    .action(async (opts: { reason?: string; output: string }, cmd: Command) => {
      const r = await callRoute(client(cmd), 'rotateSecretKey', {}, { body: { ...(opts.reason ? { reason: opts.reason } : {}) } })
      if (opts.output === 'json') return io.out(JSON.stringify(r, null, 2) + '\n')
      if (opts.output === 'yaml') return io.out(toYaml(r))
      io.out(`data key ${r.key} is current: ${r.resealed.length} secrets re-sealed\n`)
      if (r.retired.length > 0) io.out(`retired keys no Secret uses: ${r.retired.join(', ')}\n`)
      io.out(`new keyring handed to ${r.members.reached} of ${r.members.offered} members (the others fetch it when they next see a Secret sealed with it)\n`)
      for (const f of r.failed) io.err(`secret ${f.secret} not re-sealed: ${f.error}\n`)
      if (r.failed.length > 0) process.exitCode = 1
    })
}
