/**
 * Governance of a federation's membership (docs/federation.md, "Who admits and removes clusters"):
 * admitting or removing a cluster, and changing the quorum, is a proposal that takes effect once
 * enough distinct member clusters approved it.
 *
 * Everything here is derived from revision records — author, reason and time, which the
 * federation document binds to the cluster that wrote them (replica.ts) and which compaction keeps
 * — never from the objects' content, which a modified agent could change without a revision:
 *
 * - `propose <id>: <admit|remove> <cluster>; members <a,b,c>` or `propose <id>: quorum <n|default>; …`
 *   on the federation's `Federation` object, written by an admin of the proposing cluster. The
 *   proposal counts as that cluster's approval.
 * - `approve <id>` on the same object, by an admin of another member cluster.
 * - `withdraw <id>`, by an admin of the proposing cluster, while it is pending. A proposal not passed
 *   within PROPOSAL_TTL_MS lapses: later approvals do not count.
 * - `cluster <c> removed from the federation (proposal <id>)`: the deletion of `Cluster/<c>` once
 *   the removal passed. A cluster's own deletion of its object (leaving) needs nobody's approval.
 * - `propose <id>: share-namespace <ns>; …` / `unshare-namespace <ns>` share one more namespace or
 *   stop sharing one; `share namespace <ns> (proposal <id>)` (or `unshare …`) is the write of
 *   `spec.namespaces` once it passed. Which namespaces are shared is derived from the passed
 *   proposals (sharedNamespaces), never from that field.
 *
 * Every replica checks on receipt (checkMembershipChanges) that a removal names a passed proposal,
 * that a cluster's object coming (back) to life is backed by a passed admission, and that a change
 * of the shared namespaces names a passed share or unshare, and refuses the update otherwise,
 * before anything is stored.
 */
import { type Random, randomHex } from '../../effects/index.ts'
import { OrcError, refOfKey } from '../../model/index.ts'
import { BACKDATE_SLACK_MS, type ObjectStore, parseRevisionId, type Revision } from '../../store/index.ts'
import { clusterOfAuthor, isClusterName } from './membership.ts'

/** Every proposal action, in the order `orc federation propose` lists them. */
export const PROPOSAL_ACTIONS = ['admit', 'remove', 'quorum', 'share-namespace', 'unshare-namespace', 'set-writers'] as const

export type ProposalAction = (typeof PROPOSAL_ACTIONS)[number]

export function isProposalAction(a: unknown): a is ProposalAction {
  return (PROPOSAL_ACTIONS as readonly unknown[]).includes(a)
}

/** The actions whose target is a namespace (sharing one more, or no longer sharing one). */
export const NAMESPACE_ACTIONS: ReadonlySet<ProposalAction> = new Set(['share-namespace', 'unshare-namespace'])

/** Whether `a` shares or unshares a namespace (the proposals NAMESPACE_ACTIONS holds). */
export function isNamespaceAction(a: ProposalAction): a is 'share-namespace' | 'unshare-namespace' {
  return NAMESPACE_ACTIONS.has(a)
}

/** Whether `a`'s target is a namespace (a share, an unshare, or a change of a shared namespace's writers). */
export function targetsNamespace(a: ProposalAction): boolean {
  return NAMESPACE_ACTIONS.has(a) || a === 'set-writers'
}

/** The actions that name writers: a share may, a change of the writers must. */
function namesWriters(a: ProposalAction): boolean {
  return a === 'share-namespace' || a === 'set-writers'
}

export interface Approval {
  cluster: string
  author: string
  at: number
}

export interface Proposal {
  id: string
  action: ProposalAction
  /** The cluster admitted or removed; for `quorum`, the new setting (`default` or a number); the namespace shared or unshared. */
  target: string
  /** The member clusters as the proposer saw them. */
  members: string[]
  /**
   * A share-namespace's writers: only these clusters' users write in the namespace while this share
   * lasts (undefined: every member's); a set-writers' new writers (always given).
   */
  writers?: string[]
  /**
   * The membership state the proposer judged it against: the id of the newest join (the `create`
   * revision of a listed cluster's object) it held. Undefined in proposals of older agents.
   */
  seen?: string
  proposer: string
  author: string
  at: number
  /** Distinct member clusters that approved (the proposer first). */
  approvals: Approval[]
  /** Approvals it needs, as computed when it was made (see required). */
  required: number
  /** When the approval that completed it was written; undefined while pending. */
  passedAt?: number
  /** When an admin of the proposing cluster withdrew it (pending until then); no approval counts after. */
  withdrawnAt?: number
}

export interface Governance {
  /** The quorum setting in effect (undefined: the default rule). */
  quorum?: number
  proposals: Proposal[]
}

/** A revision record on the wire, as much of it as governance reads (store/codec.ts RevisionRecord). */
export interface WireRecord {
  i: string
  k: string
  o: string
  a: string
  r: string
  t: number
  /** The changes it made (paths and values), when the record carries them. */
  c?: ReadonlyArray<readonly [string, readonly string[], ...unknown[]]>
}

export interface GovRecord {
  id: string
  key: string
  op: string
  author: string
  reason: string
  time: number
}

const ACTIONS = PROPOSAL_ACTIONS.join('|')
const ID = `(?:${ACTIONS})-[a-z0-9-]{1,70}-[0-9a-f]{6}`
const REV = '[0-9a-f]{16}\\.[1-9][0-9]{0,14}'
const PROPOSE = new RegExp(
  `^propose (${ID}): (${ACTIONS}) ([a-z0-9-]{1,63}); members ([a-z0-9,-]{0,8000})(?:; seen (${REV}))?(?:; writers ([a-z0-9,-]{1,8000}))?$`,
)
/**
 * The writers state a user's write in a shared namespace was made under (appended to its reason by
 * the writing cluster's API, routed-store.ts): the passed share or set-writers in force there.
 */
const UNDER = new RegExp(`\\[writers (${ID})\\]$`)
const APPROVE = new RegExp(`^approve (${ID})$`)
const WITHDRAW = new RegExp(`^withdraw (${ID})$`)
const REMOVED = new RegExp(`^cluster ([a-z0-9-]{1,63}) removed from the federation \\(proposal (${ID})\\)$`)
/** The write of a passed share or unshare into `spec.namespaces` (a mirror: replicas read the proposals). */
const SHARED = new RegExp(`^(share|unshare) namespace ([a-z0-9-]{1,63}) \\(proposal (${ID})\\)$`)
export const PROPOSAL_ID = new RegExp(`^${ID}$`)
/**
 * A proposal not passed within this time lapses: approvals dated later do not count, and it no
 * longer blocks another proposal of the same change.
 */
export const PROPOSAL_TTL_MS = 7 * 24 * 3600_000

/** What a proposal is at `now`: passed, withdrawn, expired (lapsed unpassed) or pending. */
export function proposalState(p: Proposal, now: number): 'passed' | 'withdrawn' | 'expired' | 'pending' {
  if (p.passedAt !== undefined) return 'passed'
  if (p.withdrawnAt !== undefined) return 'withdrawn'
  return now > p.at + PROPOSAL_TTL_MS ? 'expired' : 'pending'
}

/** At most this many clusters are counted in a proposal's member list. */
const MAX_MEMBERS = 1000
/**
 * How far ahead of this replica's clock a governance record may be dated. Replay orders records by
 * time and an admission counts when it passed after the cluster last went: an approval dated in
 * the future would keep an admission open through every later removal.
 */
export const MAX_GOVERNANCE_CLOCK_SKEW_MS = 10 * 60_000

/**
 * A proposal may leave out a member whose join is newer than the state it names (`seen`) only when
 * that join is dated within this time of the proposal, before or after (checkMembershipChanges).
 */
export const JOIN_RACE_WINDOW_MS = 10 * 60_000

/**
 * Approvals a change needs with `n` member clusters: the setting (at most every member that may
 * approve), else any one for two clusters and a majority beyond. A removal cannot wait for the
 * cluster it removes.
 */
export function required(action: ProposalAction, n: number, setting?: number): number {
  const voters = Math.max(1, action === 'remove' ? n - 1 : n)
  const base = setting !== undefined && setting > 0 ? setting : n <= 2 ? 1 : Math.floor(n / 2) + 1
  return Math.max(1, Math.min(base, voters))
}

export function proposeReason(
  id: string,
  action: ProposalAction,
  target: string,
  members: readonly string[],
  writers?: readonly string[],
  seen?: string,
): string {
  const w = namesWriters(action) && writers !== undefined && writers.length > 0 ? `; writers ${[...new Set(writers)].sort().join(',')}` : ''
  return `propose ${id}: ${action} ${target}; members ${[...members].sort().join(',')}${seen !== undefined ? `; seen ${seen}` : ''}${w}`
}

/**
 * The mark a user's write in a shared namespace carries: the writers state (a passed proposal's id)
 * it was made under, after the user's reason (cut so that both fit the record's 1024 characters).
 */
export function writersMark(reason: string, proposal: string): string {
  const mark = `[writers ${proposal}]`
  const text = reason.slice(0, Math.max(0, 1024 - mark.length - 1))
  return `${text === '' ? '' : `${text} `}${mark}`
}

/** Does a reason end like the mark orc adds (writersMark)? A user's own reason may not. */
export function endsWithWritersMark(reason: string): boolean {
  return UNDER.test(reason)
}

export function approveReason(id: string): string {
  return `approve ${id}`
}

export function withdrawReason(id: string): string {
  return `withdraw ${id}`
}

export function removalReason(cluster: string, id: string): string {
  return `cluster ${cluster} removed from the federation (proposal ${id})`
}

/**
 * The passed proposal that sets who writes in namespace `ns` at time `t`: the last share or
 * set-writers of `ns` that passed by `t` with no unshare of it passed after (undefined: none, the
 * namespace is shared as at create, or not shared then). A set-writers after an unshare, before
 * the next share, sets nothing.
 */
export function writersProposal(gov: Governance, ns: string, t: number): Proposal | undefined {
  const passed = gov.proposals
    .filter((p) => targetsNamespace(p.action) && p.target === ns && p.passedAt !== undefined && p.passedAt <= t)
    .sort((a, b) => a.passedAt! - b.passedAt! || (a.id < b.id ? -1 : 1))
  let cur: Proposal | undefined
  let unshared = false
  for (const p of passed) {
    if (p.action === 'unshare-namespace') [cur, unshared] = [undefined, true]
    else if (p.action === 'share-namespace') [cur, unshared] = [p, false]
    else if (!unshared) cur = p
  }
  return cur
}

/**
 * The clusters whose users may write in namespace `ns` at time `t`: the writers of the share or
 * set-writers of `ns` in force then (writersProposal), undefined when every member's may (no
 * writers given, a namespace shared at create, or not shared by a proposal then).
 */
export function writersAt(gov: Governance, ns: string, t: number): readonly string[] | undefined {
  return writersProposal(gov, ns, t)?.writers
}

/** The reason of the write that mirrors a passed share or unshare in `spec.namespaces`. */
export function namespacesReason(action: 'share-namespace' | 'unshare-namespace', namespace: string, id: string): string {
  return `${action === 'share-namespace' ? 'share' : 'unshare'} namespace ${namespace} (proposal ${id})`
}

/**
 * The namespaces a federation shares: `base` (what this cluster learned when it created or joined
 * the federation) with every passed share and unshare applied in the order they passed. Only the
 * proposals' records decide: a namespace some proposal touched is shared exactly when the last one
 * that passed shared it, whatever `spec.namespaces` says.
 */
export function sharedNamespaces(base: readonly string[], gov: Governance): string[] {
  const out = new Set(base)
  const passed = gov.proposals.filter((p) => NAMESPACE_ACTIONS.has(p.action) && p.passedAt !== undefined)
  for (const p of passed.sort((a, b) => a.passedAt! - b.passedAt! || (a.id < b.id ? -1 : 1))) {
    if (p.action === 'share-namespace') out.add(p.target)
    else out.delete(p.target)
  }
  return [...out].sort()
}

/** A proposal's id: the action, the target and 3 random bytes from the injected source. */
export function newProposalId(action: ProposalAction, target: string, random: Random): string {
  return `${action}-${target}-${randomHex(random, 3)}`
}

const byTime = (a: GovRecord, b: GovRecord) => a.time - b.time || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/**
 * Replay the Federation object's records (any order) into proposals, approvals and the quorum in
 * effect. A proposal needs the quorum of its own member list; that the list left no member out is
 * checked when the proposal arrives (checkMembershipChanges), so every replica replays alike.
 * An approval counts once per cluster, only from a cluster in the proposal's member list, and not
 * from a cluster removed (by a passed removal) before it approved.
 */
export function replay(records: readonly GovRecord[]): Governance {
  const proposals = new Map<string, Proposal>()
  const removed = new Set<string>()
  let quorum: number | undefined
  const pass = (p: Proposal, at: number) => {
    if (p.passedAt !== undefined || p.approvals.length < p.required) return
    p.passedAt = at
    if (p.action === 'quorum') quorum = p.target === 'default' ? undefined : Number(p.target)
    else if (p.action === 'remove') removed.add(p.target)
    else if (p.action === 'admit') removed.delete(p.target)
  }
  for (const r of [...records].sort(byTime)) {
    const cluster = clusterOfAuthor(r.author)
    if (cluster === undefined) continue
    const pm = PROPOSE.exec(r.reason)
    if (pm !== null) {
      const [, id, action, target, list, seen, writerList] = pm as unknown as [
        string,
        string,
        ProposalAction,
        string,
        string,
        string | undefined,
        string | undefined,
      ]
      if (proposals.has(id!) || removed.has(cluster)) continue
      // A cluster's name and a namespace are both DNS labels.
      if (action === 'quorum' ? !(target === 'default' || /^[1-9][0-9]?$/.test(target)) : !isClusterName(target)) continue
      const members = [...new Set(list.split(',').filter(isClusterName))].slice(0, MAX_MEMBERS)
      if (!members.includes(cluster)) continue
      // Writers go with a share or a set-writers only (which must name them), and name member clusters.
      const writers = writerList === undefined ? undefined : [...new Set(writerList.split(','))].sort()
      if (writers !== undefined && (!namesWriters(action) || writers.some((w) => !members.includes(w)))) continue
      if (action === 'set-writers' && writers === undefined) continue
      const p: Proposal = {
        id,
        action,
        target,
        members,
        ...(writers !== undefined ? { writers } : {}),
        ...(seen !== undefined ? { seen } : {}),
        proposer: cluster,
        author: r.author,
        at: r.time,
        approvals: [{ cluster, author: r.author, at: r.time }],
        required: required(action, members.length, quorum),
      }
      proposals.set(id, p)
      pass(p, r.time)
      continue
    }
    const am = APPROVE.exec(r.reason)
    if (am !== null) {
      const p = proposals.get(am[1]!)
      if (p === undefined || p.passedAt !== undefined || p.withdrawnAt !== undefined || removed.has(cluster) || !p.members.includes(cluster)) continue
      if (r.time > p.at + PROPOSAL_TTL_MS) continue // lapsed
      if (p.approvals.some((a) => a.cluster === cluster)) continue
      p.approvals.push({ cluster, author: r.author, at: r.time })
      pass(p, r.time)
      continue
    }
    // Only the proposing cluster withdraws its proposal, and only while it is pending.
    const wm = WITHDRAW.exec(r.reason)
    if (wm !== null) {
      const p = proposals.get(wm[1]!)
      if (p === undefined || p.passedAt !== undefined || p.withdrawnAt !== undefined || p.proposer !== cluster) continue
      p.withdrawnAt = r.time
    }
  }
  return { ...(quorum !== undefined ? { quorum } : {}), proposals: [...proposals.values()] }
}

export function govRecordOfRevision(h: Revision): GovRecord {
  return { id: h.id, key: h.key, op: h.op, author: h.author, reason: h.reason, time: h.time }
}

function govRecordOfWire(r: WireRecord): GovRecord & { changes?: WireRecord['c'] } {
  return { id: r.i, key: r.k, op: r.o, author: r.a, reason: r.r, time: r.t, ...(r.c !== undefined ? { changes: r.c } : {}) }
}

/** Does a record's change list touch `spec.namespaces` (set or unset it, or anything above or below it)? */
function touchesNamespaces(changes: WireRecord['c']): boolean {
  if (!Array.isArray(changes)) return false
  return changes.some((c) => {
    const path = Array.isArray(c?.[1]) ? (c[1] as unknown[]) : []
    const want = ['spec', 'namespaces']
    return want.slice(0, Math.min(path.length, 2)).every((w, i) => path[i] === w)
  })
}

const federationKey = (name: string) => `Federation//${name}`
const clusterKey = (name: string) => `Cluster//${name}`

/** The one Federation object's name in a federation document (undefined before the document arrived). */
function federationName(store: Pick<ObjectStore, 'list'>): string | undefined {
  return store.list('Federation')[0]?.metadata.name
}

/** The governance of a federation document as this replica holds it. */
export async function governanceOf(store: Pick<ObjectStore, 'list' | 'history'>): Promise<Governance> {
  const name = federationName(store)
  if (name === undefined) return { proposals: [] }
  const hist = await store.history({ kind: 'Federation', namespace: '', name }).catch(() => [] as Revision[])
  return replay(hist.map(govRecordOfRevision))
}

/**
 * Refuse (before the store sees it) an update that changes the federation's membership without
 * the approvals the governance asks for:
 *
 * - deleting `Cluster/<c>` by a cluster other than `c` must name a removal of `c` that passed;
 * - creating `Cluster/<c>` while absent here needs an admission of `c` that passed after `c` last
 *   went, unless `c` created the federation and never went;
 * - a proposal must list every member cluster this replica knows at that point (apart from one
 *   that goes later in the same update): a proposer cannot lower the quorum by leaving clusters out;
 * - a write of `spec.namespaces` (after create) must be the mirror of a passed share or unshare
 *   proposal naming that namespace (`share namespace <ns> (proposal <id>)`);
 * - no proposal, approval, admission or removal may be dated more than
 *   MAX_GOVERNANCE_CLOCK_SKEW_MS after `now` (this replica's clock).
 *
 * Records are taken in time order from this replica's membership (a joiner, whose store is empty,
 * receives the whole document in one update and replays it). The update's own records count with
 * this replica's history. Short approvals may be in flight (records arrive by gossip in any order):
 * the error says `unavailable` and anti-entropy brings the update again; a removal that names no
 * proposal at all is a forgery (`forbidden`: the sender is scored down).
 */
export async function checkMembershipChanges(update: readonly WireRecord[], store: Pick<ObjectStore, 'list' | 'history'>, now: number): Promise<void> {
  const incoming = update.map(govRecordOfWire)
  const membership = incoming.filter((r) => r.key.startsWith('Cluster//'))
  const proposals = incoming.filter((r) => r.key.startsWith('Federation//') && PROPOSE.test(r.reason))
  const dated = [
    ...membership.filter((r) => r.op === 'create' || r.op === 'delete'),
    ...incoming.filter((r) => r.key.startsWith('Federation//') && (PROPOSE.test(r.reason) || APPROVE.test(r.reason) || WITHDRAW.test(r.reason))),
  ]
  const ahead = dated.find((r) => r.time > now + MAX_GOVERNANCE_CLOCK_SKEW_MS)
  if (ahead !== undefined)
    throw new OrcError(
      'invalid',
      `federation update: revision ${ahead.id} of ${ahead.key} by ${ahead.author} is dated ${new Date(ahead.time).toISOString()}, more than ${MAX_GOVERNANCE_CLOCK_SKEW_MS / 60_000} min ahead of this node's clock: refused`,
      { revision: ahead.id, time: ahead.time },
    )
  // Writes of the shared namespaces (spec.namespaces) after create: each must mirror a passed share or unshare.
  const namespaceWrites = incoming.filter(
    (r) => r.key.startsWith('Federation//') && r.op !== 'create' && (SHARED.test(r.reason) || touchesNamespaces(r.changes)),
  )
  if (membership.length === 0 && proposals.length === 0 && namespaceWrites.length === 0) return
  const live = new Set(store.list('Cluster').map((o) => o.metadata.name))
  // Only a record that deletes another cluster's object or creates one matters (an update of an
  // object deleted here meanwhile, e.g. a node summary written concurrently with a removal, does not).
  const matters = (r: GovRecord, state: Set<string>) => {
    const c = refOfKey(r.key).name
    return r.op === 'delete' ? state.has(c) && clusterOfAuthor(r.author) !== c : r.op === 'create' && !state.has(c)
  }
  if (proposals.length === 0 && namespaceWrites.length === 0 && !membership.some((r) => matters(r, live))) return
  const localName = federationName(store)
  const fedName = localName ?? refOfKey(incoming.find((r) => r.key.startsWith('Federation//'))?.key ?? '').name
  if (fedName === '') throw new OrcError('unavailable', 'federation update: membership changes arrived before the Federation object')
  const fedLocal =
    localName === undefined
      ? []
      : (await store.history({ kind: 'Federation', namespace: '', name: fedName }).catch(() => [] as Revision[])).map(govRecordOfRevision)
  const known = new Set(fedLocal.map((r) => r.id))
  const fedIncoming = incoming.filter((r) => r.key === federationKey(fedName) && !known.has(r.id))
  const fedRecords = [...fedLocal, ...fedIncoming]
  const gov = replay(fedRecords)
  for (const r of namespaceWrites) {
    const m = SHARED.exec(r.reason)
    if (m === null)
      throw new OrcError(
        'forbidden',
        `federation update: ${r.author} changes the shared namespaces (spec.namespaces of ${r.key}) without a passed share-namespace or unshare-namespace proposal (revision ${r.id})`,
        { revision: r.id, author: r.author },
      )
    const [, verb, ns, id] = m as unknown as [string, string, string, string]
    const action: ProposalAction = verb === 'share' ? 'share-namespace' : 'unshare-namespace'
    const p = gov.proposals.find((x) => x.id === id)
    if (p !== undefined && (p.action !== action || p.target !== ns))
      throw new OrcError('forbidden', `federation update: ${r.author} writes "${r.reason}", but proposal ${id} is ${p.action} ${p.target} (revision ${r.id})`, {
        revision: r.id,
        proposal: id,
      })
    if (p === undefined || p.passedAt === undefined)
      throw new OrcError(
        'unavailable',
        `federation update: ${verb === 'share' ? 'sharing' : 'unsharing'} namespace ${ns} by ${r.author} names proposal ${id}, which ${p === undefined ? 'is not known here' : `has ${p.approvals.length} of ${p.required} approvals`}`,
        { namespace: ns, proposal: id },
      )
  }
  const creator = clusterOfAuthor(fedRecords.filter((r) => r.op === 'create').sort(byTime)[0]?.author ?? '')
  // Cluster c's object records: this replica's history and the update's.
  const clusterRecords = new Map<string, GovRecord[]>()
  const recordsOf = async (c: string): Promise<GovRecord[]> => {
    let all = clusterRecords.get(c)
    if (all === undefined) {
      const hist = (await store.history({ kind: 'Cluster', namespace: '', name: c }).catch(() => [] as Revision[])).map(govRecordOfRevision)
      const ids = new Set(hist.map((h) => h.id))
      all = [...hist, ...membership.filter((r) => r.key === clusterKey(c) && !ids.has(r.id))].sort(byTime)
      clusterRecords.set(c, all)
    }
    return all
  }
  // When cluster c last went before `t` (this replica's history and the update's deletions).
  const wentBefore = async (c: string, t: number): Promise<number> =>
    Math.max(Number.NEGATIVE_INFINITY, ...(await recordsOf(c)).filter((h) => h.op === 'delete' && h.time < t).map((h) => h.time))
  /**
   * A member the proposal leaves out is excused when the proposal was judged against a state
   * without it: the join that made it a member (its object's last create) is newer than the join
   * the proposal names as the newest it saw, and dated within JOIN_RACE_WINDOW_MS of the proposal,
   * before or after. The proposer had not heard of it yet, or a modified agent pretends so: it can
   * then only pick a state that was current within that window of the proposal's date, and not
   * date the proposal back (backdated): its node must not have written, under a lower sequence
   * number, a revision of its cluster's object or of the Federation object timed later (beyond
   * BACKDATE_SLACK_MS), the same bound as the store's for unsigned users' records.
   */
  const excused = async (c: string, r: GovRecord, seen: GovRecord | undefined): Promise<boolean> => {
    if (seen === undefined) return false
    const join = (await recordsOf(c)).filter((h) => h.op === 'create').at(-1)
    return join !== undefined && byTime(join, seen) > 0 && Math.abs(join.time - r.time) <= JOIN_RACE_WINDOW_MS
  }
  const backdated = async (r: GovRecord): Promise<GovRecord | undefined> => {
    const me = parseRevisionId(r.id)
    const cluster = clusterOfAuthor(r.author)
    if (me === undefined || cluster === undefined) return undefined
    return [...(await recordsOf(cluster)), ...fedRecords].find((h) => {
      const it = parseRevisionId(h.id)
      return it?.replica === me.replica && it.seq < me.seq && h.time - r.time > BACKDATE_SLACK_MS
    })
  }
  const state = new Set(live)
  const events = [...membership, ...fedIncoming.filter((r) => PROPOSE.test(r.reason))].sort(byTime)
  for (const [i, r] of events.entries()) {
    if (r.key.startsWith('Federation//')) {
      const m = PROPOSE.exec(r.reason)!
      const listed = new Set(m[4]!.split(','))
      const goesLater = new Set(
        events
          .slice(i + 1)
          .filter((x) => x.op === 'delete' && x.key.startsWith('Cluster//'))
          .map((x) => refOfKey(x.key).name),
      )
      const seenId = m[5]
      let seen: GovRecord | undefined
      if (seenId !== undefined) {
        for (const c of listed) seen ??= (await recordsOf(c)).find((h) => h.id === seenId && h.op === 'create')
        if (seen === undefined)
          throw new OrcError(
            'unavailable',
            `federation update: proposal ${m[1]} by ${r.author} was judged against the join ${seenId}, which is not the creation of a listed cluster's object here`,
            { proposal: m[1], seen: seenId },
          )
      }
      const left: string[] = []
      let pardoned = false
      for (const c of [...state].filter((c) => !listed.has(c) && !goesLater.has(c)).sort()) {
        if (await excused(c, r, seen)) pardoned = true
        else left.push(c)
      }
      const before = pardoned ? await backdated(r) : undefined
      if (before !== undefined)
        throw new OrcError(
          'forbidden',
          `federation update: proposal ${m[1]} by ${r.author} is timed ${new Date(r.time).toISOString()}, but its node had already written revision ${before.id} timed ${new Date(before.time).toISOString()}: a backdated proposal cannot leave out a member`,
          { proposal: m[1], revision: r.id },
        )
      if (left.length > 0)
        throw new OrcError(
          'unavailable',
          `federation update: proposal ${m[1]} by ${r.author} lists members ${m[4]} but leaves out ${left.join(', ')}, which ${left.length === 1 ? 'is a member' : 'are members'} here${seen === undefined ? '' : ` (joined before the newest join it names, ${seen.id}, or more than ${JOIN_RACE_WINDOW_MS / 60_000} min from its date)`}`,
          { proposal: m[1], missing: left },
        )
      continue
    }
    const c = refOfKey(r.key).name
    if (!matters(r, state)) {
      if (r.op === 'delete') state.delete(c)
      else if (r.op === 'create') state.add(c)
      continue
    }
    if (r.op === 'delete') {
      const m = REMOVED.exec(r.reason)
      if (m === null || m[1] !== c)
        throw new OrcError('forbidden', `federation update: cluster ${c} deleted by ${r.author} without a removal proposal (revision ${r.id})`, {
          cluster: c,
          author: r.author,
        })
      const p = gov.proposals.find((x) => x.id === m[2])
      if (p === undefined || p.action !== 'remove' || p.target !== c || p.passedAt === undefined)
        throw new OrcError(
          'unavailable',
          `federation update: removal of cluster ${c} by ${r.author} names proposal ${m[2]}, which ${p === undefined ? 'is not known here' : `has ${p.approvals.length} of ${p.required} approvals`}`,
          { cluster: c, proposal: m[2] },
        )
      state.delete(c)
      continue
    }
    const went = await wentBefore(c, r.time)
    const first = went === Number.NEGATIVE_INFINITY
    const admitted = gov.proposals.some((p) => p.action === 'admit' && p.target === c && p.passedAt !== undefined && p.passedAt > went)
    if (!admitted && !(first && c === creator))
      throw new OrcError(
        'unavailable',
        `federation update: cluster ${c} (${r.author}) is not admitted: no admission of it passed${first ? '' : ' since it went'}`,
        { cluster: c },
      )
    state.add(c)
  }
}

/**
 * Refuse (before the store sees it) an update holding a user's (any non-controller's) write in a
 * namespace whose writers are named, by a user of a cluster not among them. A write is judged
 * against the writers state it names (`[writers <proposal>]` at the end of its reason, which the
 * writing cluster's API adds: the share or set-writers in force there, routed-store.ts): that
 * proposal must be a passed share or set-writers of the namespace that was in force, passed before
 * the write (give or take MAX_GOVERNANCE_CLOCK_SKEW_MS), and name the author's cluster — so a
 * write made under the writers its cluster knew stays valid after they changed (a cluster cut off
 * meanwhile). A write naming none is judged by its date (writersAt), except in a namespace no share
 * or unshare had touched by then (shared at create: the state before any proposal, which is what
 * such a writer knew). The writer's own API refuses a write it may not make first; a replica that
 * receives one anyway was sent it by a modified agent (`forbidden`); a named proposal not here or
 * short of approvals here makes the update wait (`unavailable`). Controllers' writes are not
 * judged: every member cluster's run, bind and report the namespace's pods.
 */
export async function checkNamespaceWriters(update: readonly WireRecord[], store: Pick<ObjectStore, 'list' | 'history'>): Promise<void> {
  // Every author but the clusters' controllers: users, and anything a modified agent might call itself.
  const writes = update.filter((r) => !r.a.startsWith('controller:') && refOfKey(r.k).namespace !== '')
  if (writes.length === 0) return
  const incoming = update.map(govRecordOfWire)
  const localName = federationName(store)
  const name = localName ?? refOfKey(incoming.find((r) => r.key.startsWith('Federation//'))?.key ?? '').name
  if (name === '') return
  const local =
    localName === undefined ? [] : (await store.history({ kind: 'Federation', namespace: '', name }).catch(() => [] as Revision[])).map(govRecordOfRevision)
  const known = new Set(local.map((r) => r.id))
  const gov = replay([...local, ...incoming.filter((r) => r.key === federationKey(name) && !known.has(r.id))])
  if (!gov.proposals.some((p) => p.writers !== undefined) && !writes.some((r) => UNDER.test(r.r))) return
  const refuse = (r: WireRecord, ns: string, writers: readonly string[], under: string) => {
    throw new OrcError(
      'forbidden',
      `federation update: ${r.a} wrote ${r.k} (revision ${r.i}), but namespace ${ns} is written by the users of ${writers.join(', ')} only (${under})`,
      { revision: r.i, author: r.a, namespace: ns, writers: [...writers] },
    )
  }
  for (const r of writes) {
    const ns = refOfKey(r.k).namespace
    const cluster = clusterOfAuthor(r.a)
    const mark = UNDER.exec(r.r)
    if (mark === null) {
      // No share or unshare of ns passed by then: the namespace as shared at create, before any proposal.
      const touched = gov.proposals.some((p) => isNamespaceAction(p.action) && p.target === ns && p.passedAt !== undefined && p.passedAt <= r.t)
      const writers = touched ? writersAt(gov, ns, r.t) : undefined
      if (writers !== undefined && (cluster === undefined || !writers.includes(cluster))) refuse(r, ns, writers, 'at its date')
      continue
    }
    const id = mark[1]!
    const p = gov.proposals.find((x) => x.id === id)
    if (p !== undefined && (p.target !== ns || !namesWriters(p.action)))
      throw new OrcError('forbidden', `federation update: ${r.a} wrote ${r.k} (revision ${r.i}) under proposal ${id}, which is ${p.action} ${p.target}`, {
        revision: r.i,
        proposal: id,
      })
    if (p === undefined || p.passedAt === undefined)
      throw new OrcError(
        'unavailable',
        `federation update: ${r.a} wrote ${r.k} (revision ${r.i}) under the writers of proposal ${id}, which ${p === undefined ? 'is not known here' : `has ${p.approvals.length} of ${p.required} approvals`}`,
        { revision: r.i, proposal: id },
      )
    if (p.passedAt > r.t + MAX_GOVERNANCE_CLOCK_SKEW_MS || writersProposal(gov, ns, p.passedAt) !== p)
      throw new OrcError(
        'forbidden',
        `federation update: ${r.a} wrote ${r.k} (revision ${r.i}) under the writers of proposal ${id}, which ${p.passedAt > r.t + MAX_GOVERNANCE_CLOCK_SKEW_MS ? 'passed after that write' : 'was never in force'}`,
        { revision: r.i, proposal: id },
      )
    if (p.writers !== undefined && (cluster === undefined || !p.writers.includes(cluster))) refuse(r, ns, p.writers, `under proposal ${id}`)
  }
}
