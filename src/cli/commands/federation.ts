/**
 * `orc federation create|token|join|list|status|leave|remove|propose|approve|withdraw`: link clusters and
 * share namespaces between them, and govern who is in (docs/federation.md).
 */
import type { Command } from 'commander'
import type { FederationGovernanceView, FederationProposalView, FederationView } from '../../agent/index.ts'
import { OrcError } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { authorFrom, examples, formatTable } from '../format.ts'
import { outputOption } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

export interface FederationCliIO {
  out(text: string): void
  env: NodeJS.ProcessEnv
}

function parseTtl(v: string): number {
  const m = /^([0-9]+)(s|m|h|d)?$/.exec(v.trim())
  if (!m) throw new OrcError('invalid', `--ttl: expected a duration like 30m, 1h or 2d, got ${JSON.stringify(v)}`)
  return Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86400 }[(m[2] ?? 's') as 's']
}

function collect(v: string, prev: string[] = []): string[] {
  return [...prev, ...v.split(',').filter(Boolean)]
}

/** The text of `orc federation status`. */
export function formatFederation(f: FederationView): string {
  const lines = [
    `federation ${f.name} (${f.id})`,
    `  this cluster:  ${f.cluster}`,
    `  namespaces:    ${f.namespaces.map((ns) => (f.writers?.[ns] ? `${ns} (written by ${f.writers[ns]!.join(', ')})` : ns)).join(', ') || '<none>'}`,
    `  state:         ${f.state}`,
  ]
  if (f.creator) lines.push(`  created by:    ${f.creator}`)
  const g = f.governance
  if (g) lines.push(`  quorum:        ${quorumText(g)}`)
  if (f.peerId) lines.push(`  peer id:       ${f.peerId}`)
  if (f.addresses?.length) lines.push(`  addresses:     ${f.addresses.join(' ')}`)
  if (f.joinAddresses?.length) lines.push(`  joins at:      ${f.joinAddresses.join(' ')}`)
  if (f.objects !== undefined) lines.push(`  objects:       ${f.objects}`)
  if (f.clusters) {
    lines.push(
      '',
      formatTable(
        ['CLUSTER', 'ID', 'NODES', 'CONNECTED'],
        f.clusters.map((c) => [c.self ? `${c.name} (this)` : c.name, c.id, String(c.members), c.self ? '-' : String(c.connected)]),
      ).replace(/\n$/, ''),
    )
  } else lines.push('  (this node is not in it yet: it follows its cluster in shortly)')
  if (g && g.proposals.length > 0) lines.push('', formatProposals(g.proposals).replace(/\n$/, ''))
  return lines.join('\n') + '\n'
}

function quorumText(g: FederationGovernanceView): string {
  const setting = g.quorum === 'default' ? 'default (any one for two clusters, a majority beyond)' : String(g.quorum)
  return `${setting}: admitting needs ${g.admit}, removing ${g.remove} approval${g.remove === 1 ? '' : 's'}`
}

/** `orc describe federation/NAME`: the quorum and the proposals. */
export function governanceSection(g: FederationGovernanceView): string[] {
  const rows = g.proposals.length === 0 ? '  <none>' : formatProposals(g.proposals).replace(/\n$/, '').replace(/^/gm, '  ')
  return [`Quorum:      ${quorumText(g)}`, '', 'Proposals:', rows]
}

/** Proposals, newest last: who proposed and approved (cluster and author), and how many more are needed. */
export function formatProposals(proposals: readonly FederationProposalView[]): string {
  return formatTable(
    ['PROPOSAL', 'CHANGE', 'APPROVALS', 'APPROVED BY', 'STATE'],
    [...proposals]
      .sort((a, b) => a.at - b.at)
      .map((p) => [
        p.id,
        `${p.action} ${p.target}${p.writers ? ` --writers ${p.writers.join(',')}` : ''}`,
        `${p.approvals.length}/${p.required}`,
        p.approvals.map((a) => a.author).join(', '),
        p.state === 'passed'
          ? `passed ${new Date(p.passedAt ?? p.at).toISOString()}`
          : p.state === 'withdrawn'
            ? `withdrawn ${new Date(p.withdrawnAt ?? p.at).toISOString()}`
            : p.state,
      ]),
  )
}

function proposalLine(name: string, p: FederationProposalView): string {
  if (p.state === 'withdrawn') return `proposal ${p.id} (${p.action} ${p.target}) withdrawn: no approval counts any more\n`
  if (p.state === 'expired') return `proposal ${p.id} (${p.action} ${p.target}) lapsed unpassed: propose it again\n`
  if (p.state === 'passed') {
    const done =
      p.action === 'remove'
        ? `cluster ${p.target} removed`
        : p.action === 'admit'
          ? `cluster ${p.target} may join (orc federation token ${name})`
          : p.action === 'share-namespace'
            ? `namespace ${p.target} is shared by every member cluster${p.writers ? `, written by the users of ${p.writers.join(', ')} only` : ''}`
            : p.action === 'unshare-namespace'
              ? `namespace ${p.target} is no longer shared: each member cluster keeps copies of its objects`
              : p.action === 'set-writers'
                ? `namespace ${p.target} is written by the users of ${(p.writers ?? []).join(', ')} only`
                : `quorum is now ${p.target}`
    return `proposal ${p.id} passed (${p.approvals.length}/${p.required}): ${done}\n`
  }
  return `proposal ${p.id} (${p.action} ${p.target}): ${p.approvals.length} of ${p.required} approvals; on another member cluster: orc federation approve ${name} ${p.id}\n`
}

export function registerFederationCommands(program: Command, io: FederationCliIO, client: (cmd: Command) => ApiCaller): void {
  const fed = program
    .command('federation')
    .alias('fed')
    .description('Link clusters and share namespaces between them: create, token, join, list, status, leave, remove, propose, approve, withdraw')
    .addHelpText(
      'after',
      examples(`
  # On cluster "home": share the namespace "shared" in a federation "lab"
  orc federation create lab --namespace shared
  orc federation token lab

  # On a node of cluster "cloud": join with that token (every node of "cloud" follows)
  orc federation join 192.0.2.10:7946 --token orcfed2.…

  # Then, on either cluster: objects in "shared" are replicated to both
  orc apply -n shared -f web.yaml
  orc history -n shared pod/web        # authors read user:alice@home, user:bob@cloud
  orc federation status lab
  orc federation leave lab             # stop replicating; local copies stay`),
    )

  const output = () => outputOption(['table', 'json'])
  const showProposal = (name: string, format: string, p: FederationProposalView) =>
    io.out(format === 'json' ? JSON.stringify(p, null, 2) + '\n' : proposalLine(name, p))

  fed
    .command('create')
    .description('Create a federation with this cluster as its first member, sharing the given namespaces')
    .argument('<NAME>', 'federation name')
    .requiredOption('--namespace <ns>', 'a namespace to share (repeat or comma-separate for several)', collect)
    .option('--as <cluster>', "this cluster's name in the federation (default: the cluster's own name)")
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .addOption(output())
    .addHelpText(
      'after',
      examples(`
  orc federation create lab --namespace shared
  orc federation create lab --namespace web,db --as home`),
    )
    .action(async (name: string, opts, cmd: Command) => {
      const r = await callRoute(
        client(cmd),
        'createFederation',
        {},
        {
          body: { name, namespaces: opts.namespace, as: opts.as, author: authorFrom(io.env, opts.author) },
        },
      )
      if (opts.output === 'json') return io.out(JSON.stringify(r.federation, null, 2) + '\n')
      io.out(`federation/${name} created (id ${r.federation.id}); cluster ${r.federation.cluster} shares ${r.federation.namespaces.join(', ')}\n`)
      io.out(`Invite another cluster:  orc federation token ${name}\n`)
    })

  fed
    .command('token')
    .description(
      'Create a single-use token for one other cluster (all of its nodes); it joins if its admission passed, or when this cluster alone is the quorum (two clusters, by default)',
    )
    .argument('<NAME>', 'federation name')
    .option('--ttl <duration>', 'how long the token is valid (s, m, h, d)', '1h')
    .option('--readmit <cluster>', 'first propose admitting this removed cluster again (passes at once when this cluster alone is the quorum)')
    .addOption(output())
    .addHelpText(
      'after',
      examples(`
  orc federation token lab
  orc federation token lab --ttl 15m
  # A cluster removed earlier may join again
  orc federation token lab --readmit cloud`),
    )
    .action(async (name: string, opts, cmd: Command) => {
      const r = await callRoute(
        client(cmd),
        'federationToken',
        { name },
        {
          body: {
            ttlSeconds: parseTtl(opts.ttl),
            ...(opts.readmit !== undefined ? { readmit: opts.readmit } : {}),
          },
        },
      )
      if (opts.output === 'json') return io.out(JSON.stringify(r, null, 2) + '\n')
      io.out(`${r.token}\n`)
      io.out(
        `\n# valid until ${new Date(r.expiresAt).toISOString()}, for one cluster. On a node of the other cluster:\n#   orc federation join ${r.addresses[0] ?? '<this node>'} --token <token>\n`,
      )
    })

  fed
    .command('join')
    .description("Join this cluster to another cluster's federation; every node of this cluster follows")
    .argument('[PEER]', "the other cluster's federation address (host:port or multiaddr); default: the addresses in the token")
    .requiredOption('--token <token>', 'federation token from `orc federation token` on the other cluster')
    .option('--as <cluster>', "this cluster's name in the federation (default: the cluster's own name)")
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .addOption(output())
    .addHelpText(
      'after',
      examples(`
  orc federation join 192.0.2.10:7946 --token orcfed2.…
  orc federation join --token orcfed2.… --as cloud`),
    )
    .action(async (peer: string | undefined, opts, cmd: Command) => {
      const r = await callRoute(
        client(cmd),
        'joinFederation',
        {},
        {
          body: { token: opts.token, peer, as: opts.as, author: authorFrom(io.env, opts.author) },
        },
      )
      if (opts.output === 'json') return io.out(JSON.stringify(r.federation, null, 2) + '\n')
      io.out(`joined federation/${r.federation.name} as cluster ${r.federation.cluster}; shared namespaces: ${r.federation.namespaces.join(', ')}\n`)
    })

  fed
    .command('list')
    .alias('ls')
    .description('List the federations this cluster is in')
    .addOption(output())
    .action(async (opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'federations')
      if (opts.output === 'json') return io.out(JSON.stringify(r.federations, null, 2) + '\n')
      if (r.federations.length === 0) return io.out('No federations. Create one: orc federation create NAME --namespace NS\n')
      io.out(
        formatTable(
          ['NAME', 'AS', 'NAMESPACES', 'CLUSTERS', 'STATE'],
          r.federations.map((f) => [f.name, f.cluster, f.namespaces.join(','), f.clusters ? f.clusters.map((c) => c.name).join(',') : '-', f.state]),
        ),
      )
    })

  fed
    .command('status')
    .description('Show a federation: its clusters, how many of their nodes this node is connected to, its addresses')
    .argument('<NAME>', 'federation name')
    .addOption(output())
    .action(async (name: string, opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'federation', { name })
      if (opts.output === 'json') return io.out(JSON.stringify(r.federation, null, 2) + '\n')
      io.out(formatFederation(r.federation))
    })

  fed
    .command('leave')
    .description('Leave a federation: replication stops both ways, the other clusters drop this one, local copies stay')
    .argument('<NAME>', 'federation name')
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .action(async (name: string, opts, cmd: Command) => {
      await callRoute(client(cmd), 'leaveFederation', { name }, { body: { author: authorFrom(io.env, opts.author) } })
      io.out(`left federation/${name}; its namespaces stay here as this cluster's own objects\n`)
    })

  fed
    .command('propose')
    .description(
      'Propose admitting or removing a cluster, a new quorum, sharing one more namespace or no longer sharing one, or changing who writes in a shared namespace; it takes effect once admins of enough member clusters approved (this cluster counts as one)',
    )
    .argument('<NAME>', 'federation name')
    .argument('<ACTION>', 'admit, remove, quorum, share-namespace, unshare-namespace or set-writers')
    .argument(
      '<TARGET>',
      'the cluster to admit or remove; for quorum, a number of approvals (1-99) or default; the namespace to share, unshare or set the writers of',
    )
    .option(
      '--writers <clusters>',
      'share-namespace and set-writers (which needs it): the member clusters whose users may write in the namespace (the others read it)',
      collect,
    )
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .addOption(output())
    .addHelpText(
      'after',
      examples(`
  # Three clusters: removing one needs two of them (the default quorum is a majority beyond two)
  orc federation propose lab remove edge       # on home: prints the proposal id
  orc federation approve lab remove-edge-1a2b3c  # on cloud: the second approval removes edge
  orc federation propose lab admit edge        # let edge join again (then orc federation token lab)
  orc federation propose lab quorum 3          # every cluster must approve from then on
  orc federation propose lab quorum default
  orc federation propose lab share-namespace web    # share "web" too (the clusters' own objects in it go dormant)
  orc federation propose lab share-namespace docs --writers home   # only home's users write in "docs"; the others read it
  orc federation propose lab set-writers docs --writers home,cloud # cloud's users write in "docs" too, while it stays shared
  orc federation propose lab unshare-namespace web  # each cluster keeps copies of its objects, in its own scope`),
    )
    .action(async (name: string, action: string, target: string, opts, cmd: Command) => {
      const body = { action, target, ...(opts.writers ? { writers: opts.writers } : {}), author: authorFrom(io.env, opts.author) }
      showProposal(name, opts.output, (await callRoute(client(cmd), 'proposeFederationChange', { name }, { body })).proposal)
    })

  // approve and withdraw: a vote on a proposal by its id, answered with the proposal's line.
  const votes = [
    {
      verb: 'approve',
      route: 'approveFederationProposal',
      description:
        'Approve a pending proposal as this cluster (an admin of each member cluster approves at most once); the approval that reaches the quorum applies it',
      example: `
  orc federation status lab                    # PROPOSAL  CHANGE  APPROVALS …
  orc federation approve lab remove-edge-1a2b3c`,
    },
    {
      verb: 'withdraw',
      route: 'withdrawFederationProposal',
      description: 'Withdraw a pending proposal this cluster made (an admin of it): no approval counts after, and the same change may be proposed again',
      example: `
  orc federation withdraw lab remove-edge-1a2b3c   # on the cluster that proposed it`,
    },
  ] as const
  for (const v of votes)
    fed
      .command(v.verb)
      .description(v.description)
      .argument('<NAME>', 'federation name')
      .argument('<PROPOSAL>', 'the proposal id (orc federation status NAME)')
      .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
      .addOption(output())
      .addHelpText('after', examples(v.example))
      .action(async (name: string, id: string, opts, cmd: Command) => {
        const body = { author: authorFrom(io.env, opts.author) }
        showProposal(name, opts.output, (await callRoute(client(cmd), v.route, { name, id }, { body })).proposal)
      })

  fed
    .command('remove')
    .description(
      'Remove another cluster from a federation at once, when this cluster alone is the quorum (two clusters, by default); otherwise refused: use propose',
    )
    .argument('<NAME>', 'federation name')
    .argument('<CLUSTER>', 'the cluster to remove')
    .option('--author <author>', 'refused: the author is the user of your credential (orc whoami)')
    .action(async (name: string, cluster: string, opts, cmd: Command) => {
      await callRoute(client(cmd), 'removeFederationCluster', { name, cluster }, { body: { author: authorFrom(io.env, opts.author) } })
      io.out(`cluster ${cluster} removed from federation/${name}\n`)
    })
}
