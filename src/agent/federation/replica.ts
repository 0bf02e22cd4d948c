/**
 * The federation document as the federation mesh sees it: the store, with every revision a peer
 * sends checked against the cluster of the replica that made it before anything is stored, and
 * no Secret that is not marked shareable let in (secrets.ts), and no membership change without
 * the approvals of the federation's governance, and no user's write in a namespace its share
 * reserves for other clusters' users (governance.ts).
 */
import { OrcError } from '../../model/index.ts'
import { decodeUpdateMessage, type ObjectStore, parseRevisionId, type Replicable } from '../../store/index.ts'
import { checkMembershipChanges, checkNamespaceWriters } from './governance.ts'
import { clusterOfAuthor, replicaOfPeer } from './membership.ts'
import { checkFederatedSecrets } from './secrets.ts'

export interface AuthorshipCheck {
  /** The cluster a replica id belongs to, if known. */
  clusterOfReplica(replica: string): string | undefined
}

/**
 * Refuse (before the store sees it) an update holding a revision whose author does not carry the
 * cluster of the replica that made it: a cluster cannot forge another's authorship. A revision of
 * a replica not known yet (its admission has not reached us) makes the update wait: the error is
 * not the sender's fault, and anti-entropy brings it again.
 */
export function checkAuthorship(update: Uint8Array, members: AuthorshipCheck): void {
  checkRecordsAuthorship(decodeUpdateMessage(update).records, members)
}

function checkRecordsAuthorship(records: ReturnType<typeof decodeUpdateMessage>['records'], members: AuthorshipCheck): void {
  for (const r of records) {
    const replica = parseRevisionId(r.i)?.replica
    const bound = replica === undefined ? undefined : members.clusterOfReplica(replica)
    if (bound === undefined) {
      throw new OrcError('unavailable', `federation update: revision ${r.i} comes from a replica not (yet) admitted here`, { revision: r.i })
    }
    // The revision's id names its signer's own replica (derived from the signer's peer id): a
    // member cannot sign a revision in another node's name, of its cluster or another's.
    if (r.n !== undefined && replicaOfPeer(r.n) !== replica) {
      throw new OrcError(
        'forbidden',
        `federation update: revision ${r.i} of ${r.k} is signed by ${r.n}, whose revisions are not numbered under replica ${replica}`,
        {
          revision: r.i,
          refused: 'unauthorized',
        },
      )
    }
    const claimed = clusterOfAuthor(r.a)
    if (claimed !== bound) {
      throw new OrcError('forbidden', `federation update: revision ${r.i} of ${r.k} claims author ${r.a} but was made by cluster ${bound}`, {
        revision: r.i,
        author: r.a,
        cluster: bound,
      })
    }
  }
}

/**
 * `membership`: the document as stored here, to check that membership changes carry the approvals
 * the federation's governance asks for (governance.ts), with `now` this node's clock.
 */
export function verifiedReplica(
  store: Replicable,
  members: AuthorshipCheck,
  membership?: { store: Pick<ObjectStore, 'list' | 'history'>; now: () => number },
): Replicable {
  return {
    encodeSyncState: () => store.encodeSyncState(),
    encodeMissing: (remote) => store.encodeMissing(remote),
    onLocalUpdate: (fn) => store.onLocalUpdate(fn),
    async applyRemote(update, opts) {
      const { records } = decodeUpdateMessage(update)
      checkRecordsAuthorship(records, members)
      checkFederatedSecrets(records)
      if (membership !== undefined) {
        await checkMembershipChanges(records, membership.store, membership.now())
        await checkNamespaceWriters(records, membership.store)
      }
      return store.applyRemote(update, opts)
    },
  }
}
