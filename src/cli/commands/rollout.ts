/**
 * `orc rollout status|set|promote|abort NAME`: drive a PinnedDeployment's rollout from `previous` to
 * `next`. Every change is an ordinary write of the deployment (author, reason, history, rollback).
 */
import type { Command } from 'commander'
import type { BodyOf, RolloutView } from '../../agent/index.ts'
import { OrcError } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { authorFrom, examples, formatTable } from '../format.ts'
import { createProgress } from '../progress.ts'
import { objectRef, outputOption, takesObjects } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

export interface RolloutCliIO {
  out(text: string): void
  err(text: string): void
  env: NodeJS.ProcessEnv
  now(): number
}

/** `web`, `pinneddeployment/web` (or pd/web), or `pinneddeployment web` → `web`. */
function deploymentName(target: string, name?: string): string {
  const ref = objectRef([target, name ?? ''], { implied: 'PinnedDeployment' })
  if (ref.kind !== 'PinnedDeployment') {
    throw new OrcError('invalid', `${[target, name].filter(Boolean).join(' ')}: rollouts are of PinnedDeployments (give NAME or pinneddeployment/NAME)`)
  }
  return ref.name
}

function params(ns: string | undefined, name: string): { ns: string; name: string } {
  return { ns: ns || 'default', name }
}

function splitText(v: RolloutView): string {
  const s = v.split
  const total = v.everyNode ? `one per node (${v.replicas} node${v.replicas === 1 ? '' : 's'})` : `${v.replicas} replica${v.replicas === 1 ? '' : 's'}`
  if (!v.next) return `${total}, no rollout in progress`
  const share = s.nextReplicas !== undefined ? `${s.nextReplicas}` : s.nextPercent !== undefined ? `${s.nextPercent}%` : '0'
  return `${total}, next on ${share} (${v.next.desired} pod${v.next.desired === 1 ? '' : 's'})`
}

/** The text of `orc rollout status`. */
export function formatRollout(v: RolloutView, withPods: boolean): string {
  const rows = [v.previous, ...(v.next ? [v.next] : [])].map((c, i) => [
    i === 0 ? 'previous' : 'next',
    c.template,
    String(c.desired),
    String(c.created),
    String(c.running),
    String(c.ready),
  ])
  const lines = [
    `pinneddeployment/${v.deployment} (revision ${v.revision ?? '?'}): ${splitText(v)}`,
    '',
    formatTable(['VERSION', 'TEMPLATE', 'DESIRED', 'CREATED', 'RUNNING', 'READY'], rows).replace(/\n$/, ''),
    '',
  ]
  const r = v.rollout
  if (r?.state === 'Aborted')
    lines.push(
      `Aborted at ${r.abortedAt ?? '?'}: next template ${r.template} ${r.reason ?? ''}`.trimEnd(),
      'Every replica runs previous. Give a new next template, or `orc rollout abort` to drop this one.',
      '',
    )
  if (v.done) lines.push(v.next ? 'Rollout step complete: every pod of both versions is ready.' : 'Complete: every pod is ready.')
  else {
    const waiting: string[] = []
    if (v.create.length > 0) waiting.push(`${v.create.length} pod(s) to create`)
    if (v.remove.length > 0) waiting.push(`${v.remove.length} old pod(s) to delete`)
    const notReady = v.pods.filter((p) => p.version !== 'old' && !p.ready).length
    if (notReady > 0) waiting.push(`${notReady} pod(s) not ready`)
    lines.push(`In progress: ${waiting.join(', ') || 'waiting for status'}.`)
  }
  if (withPods && v.pods.length > 0) {
    lines.push(
      '',
      formatTable(
        ['POD', 'VERSION', 'NODE', 'PHASE', 'READY'],
        v.pods.map((p) => [p.name, p.version, p.node ?? '<none>', p.phase, p.ready ? 'yes' : 'no']),
      ).replace(/\n$/, ''),
    )
  }
  return lines.join('\n') + '\n'
}

export function registerRolloutCommands(program: Command, io: RolloutCliIO, client: (cmd: Command) => ApiCaller): void {
  const rollout = program
    .command('rollout')
    .description('Roll a PinnedDeployment from its previous template to its next one: status, set the split, promote, abort')
    .addHelpText(
      'after',
      examples(`
  # Where is the rollout of web?
  orc rollout status web

  # Canary: 20 % of the replicas run spec.next
  orc rollout set web --next-percent 20

  # Exactly 3 replicas on next
  orc rollout set web --next-replicas 3

  # Done: next becomes previous for every replica
  orc rollout promote web --reason "1.4 is good"

  # Back out: every replica runs previous again
  orc rollout abort web`),
    )

  const write = (action: 'set' | 'promote' | 'abort') => async (target: string, nameArg: string | undefined, opts: Record<string, unknown>, cmd: Command) => {
    const name = deploymentName(target, nameArg)
    const body: BodyOf<'rolloutAction'> = { author: authorFrom(io.env, opts.author as string | undefined), reason: opts.reason as string | undefined }
    if (action === 'set') {
      const num = (v: unknown, flag: string): number => {
        const n = Number(v)
        if (typeof v !== 'string' || !/^[0-9]+$/.test(v.trim()) || !Number.isSafeInteger(n))
          throw new OrcError('invalid', `${flag}: must be a whole number, got ${JSON.stringify(v)}`)
        return n
      }
      if ((opts.nextReplicas === undefined) === (opts.nextPercent === undefined))
        throw new OrcError('invalid', 'rollout set needs exactly one of --next-replicas N and --next-percent P')
      if (opts.nextReplicas !== undefined) body.nextReplicas = num(opts.nextReplicas, '--next-replicas')
      else body.nextPercent = num(String(opts.nextPercent).replace(/%$/, ''), '--next-percent')
    }
    const r = await callRoute(client(cmd), 'rolloutAction', { ...params(opts.namespace as string | undefined, name), action }, { body })
    if (opts.output === 'json') return io.out(JSON.stringify(r, null, 2) + '\n')
    io.out(r.changed ? `pinneddeployment/${name}: ${r.summary} (revision ${r.revision})\n` : `pinneddeployment/${name} unchanged: ${r.summary} already\n`)
  }
  const common = (c: Command) =>
    c
      .option('-n, --namespace <ns>', 'namespace (default: default)')
      .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
      .option('--reason <text>', 'why; recorded in the history')
      .addOption(outputOption(['table', 'json']))

  takesObjects(rollout.command('status'), 'PinnedDeployment')
    .description('Show the split and, per version, how many pods are desired, created, running and ready')
    .argument('<NAME>', 'PinnedDeployment name (or pinneddeployment/NAME)')
    .argument('[NAME]', 'the name, when the kind is given first')
    .option('-n, --namespace <ns>', 'namespace (default: default)')
    .option('--pods', 'also list the pods with their version, node and phase')
    .option('-w, --wait', 'wait until the rollout step is complete (every wanted pod ready, no old pod left)')
    .option('--timeout <seconds>', 'with --wait: give up after this many seconds (exit 1)', '300')
    .addOption(outputOption(['table', 'json']))
    .addHelpText(
      'after',
      examples(`
  orc rollout status web
  orc rollout status web --pods
  orc rollout status web --wait --timeout 120
  orc rollout status web -o json`),
    )
    .action(async (target: string, nameArg: string | undefined, opts, cmd: Command) => {
      const name = deploymentName(target, nameArg)
      const c = client(cmd)
      const timeoutMs = Number(opts.timeout) * 1000
      if (!Number.isFinite(timeoutMs) || timeoutMs < 0)
        throw new OrcError('invalid', `--timeout: must be a number of seconds, got ${JSON.stringify(opts.timeout)}`)
      const deadline = io.now() + timeoutMs
      let v = await callRoute(c, 'rollout', params(opts.namespace, name))
      // Progress on stderr (a spinner on a terminal, a line per change otherwise); stdout keeps
      // only the final status, so `-o json` stays parseable.
      const progress = opts.wait && !v.done ? createProgress({ write: (t) => io.err(t), isTTY: Boolean(process.stderr.isTTY) }) : undefined
      const step = (x: RolloutView) =>
        `pinneddeployment/${name}: ${
          formatRollout(x, false)
            .split('\n')
            .find((l) => l.startsWith('In progress:')) ?? 'waiting for status'
        }`
      while (opts.wait && !v.done) {
        progress?.update(step(v))
        if (io.now() > deadline) {
          progress?.done()
          io.out(opts.output === 'json' ? JSON.stringify(v, null, 2) + '\n' : formatRollout(v, true))
          throw new OrcError('timeout', `pinneddeployment/${name}: rollout not complete after ${opts.timeout}s`)
        }
        await new Promise((r) => setTimeout(r, 500))
        v = await callRoute(c, 'rollout', params(opts.namespace, name))
      }
      progress?.done(`pinneddeployment/${name}: rollout step complete`)
      io.out(opts.output === 'json' ? JSON.stringify(v, null, 2) + '\n' : formatRollout(v, Boolean(opts.pods)))
    })

  common(
    takesObjects(rollout.command('set'), 'PinnedDeployment')
      .description('Set how many replicas run spec.next (a count or a share); the rest run spec.previous')
      .argument('<NAME>', 'PinnedDeployment name')
      .argument('[NAME]', 'the name, when the kind is given first')
      .option('--next-replicas <n>', 'exactly this many replicas (or nodes, for every-node deployments) run next')
      .option('--next-percent <p>', 'this share of the replicas runs next, rounded up (10% of 3 is 1)'),
  )
    .addHelpText(
      'after',
      examples(`
  orc rollout set web --next-percent 20
  orc rollout set web --next-replicas 1 --reason "canary for #123"`),
    )
    .action(write('set'))

  common(
    takesObjects(rollout.command('promote'), 'PinnedDeployment')
      .description('Make spec.next the new spec.previous: every replica runs it')
      .argument('<NAME>', 'PinnedDeployment name')
      .argument('[NAME]', 'the name, when the kind is given first'),
  )
    .addHelpText(
      'after',
      examples(`
  orc rollout promote web`),
    )
    .action(write('promote'))

  common(
    takesObjects(rollout.command('abort'), 'PinnedDeployment')
      .description('Drop spec.next: every replica runs spec.previous (the next template stays in the history)')
      .argument('<NAME>', 'PinnedDeployment name')
      .argument('[NAME]', 'the name, when the kind is given first'),
  )
    .addHelpText(
      'after',
      examples(`
  orc rollout abort web --reason "error rate up"`),
    )
    .action(write('abort'))
}
