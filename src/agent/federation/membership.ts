/**
 * Who belongs to which cluster inside a federation, and what that allows.
 *
 * A federation member's mesh name is `<node>@<cluster>`. Each node's federation replica id is
 * derived from its federation peer id (which Noise authenticates), so every revision record names,
 * through its id, the peer that made it, and through that peer the cluster. A record whose author
 * claims another cluster is a forgery and is refused.
 */
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { JsonFileMemberDirectory, type MemberDirectory, type MemberInfo, writeFileAtomic } from '../../mesh/index.ts'
import { DNS_LABEL, OrcError } from '../../model/index.ts'

/** `web-1@home` → `home`; undefined when the name carries no (valid) cluster. */
export function clusterOfMemberName(name: string): string | undefined {
  const at = name.lastIndexOf('@')
  if (at <= 0) return undefined
  const c = name.slice(at + 1)
  return DNS_LABEL.test(c) ? c : undefined
}

export function isClusterName(c: string): boolean {
  return DNS_LABEL.test(c)
}

/** The federation store replica id of a federation peer: 8 bytes of a hash of its peer id. */
export function replicaBytesOfPeer(peerId: string): Uint8Array {
  return new Uint8Array(createHash('sha256').update(`orc/federation/replica/${peerId}`).digest().subarray(0, 8))
}

export function replicaOfPeer(peerId: string): string {
  return Buffer.from(replicaBytesOfPeer(peerId)).toString('hex')
}

/** `user:alice@home` → `home`. */
export function clusterOfAuthor(author: string): string | undefined {
  const m = /@([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$/.exec(author)
  return m?.[1]
}

/** `user:alice@home` → `user:alice`; an untagged author as it is. */
export function untaggedAuthor(author: string): string {
  const c = clusterOfAuthor(author)
  return c === undefined ? author : author.slice(0, -c.length - 1)
}

/** `user:alice` → `user:alice@home` (an author already tagged keeps its tag, checked by the caller). */
export function tagAuthor(author: string, cluster: string): string {
  return clusterOfAuthor(author) !== undefined ? author : `${author}@${cluster}`
}

interface Persisted {
  /** replica id → cluster, for every member ever admitted (so old revisions stay verifiable). */
  replicas: Record<string, string>
  /** Clusters removed from the federation: their members are refused from then on. */
  removed: string[]
  /**
   * The cluster that created the federation: the only one that admits other clusters and removes
   * them. Learned once (at create, or from the document at join) and never changed afterwards, so
   * a member cannot take it over by editing the shared Federation object.
   */
  creator?: string
  /** Removed clusters the creator re-admitted: a node of theirs may be introduced as new again (isReadmitted). */
  readmitted?: string[]
}

/**
 * The federation mesh's member directory: members of removed clusters are refused, and every
 * admitted member's replica is bound to its cluster (kept on disk in `bindings.json`).
 */
export class FederationDirectory implements MemberDirectory {
  private readonly inner: MemberDirectory
  private state: Persisted = { replicas: {}, removed: [] }
  private readonly file: string

  /**
   * Set by the manager: has an admission of cluster `c` passed since it last went (governance.ts)?
   * Then any member may introduce its first node. Unset (tests of the directory alone): only the
   * creating cluster introduces a new cluster.
   */
  admitsNew: ((c: string) => boolean) | undefined
  /**
   * Introductions refused only because the cluster's admission had not reached this member yet
   * (the proposal travels by gossip like the introduction): retried when the governance changes
   * (retryDeferred). At most 64, the latest kept.
   */
  private deferred: Array<{ info: MemberInfo; via: string }> = []

  constructor(readonly dir: string) {
    this.inner = JsonFileMemberDirectory.inDataDir(dir)
    this.file = join(dir, 'bindings.json')
  }

  async load(): Promise<void> {
    await this.inner.load()
    try {
      const raw = JSON.parse(await readFile(this.file, 'utf8')) as Persisted
      this.state = {
        replicas: { ...(raw.replicas ?? {}) },
        removed: [...(raw.removed ?? [])],
        ...(typeof raw.creator === 'string' ? { creator: raw.creator } : {}),
        ...(Array.isArray(raw.readmitted) ? { readmitted: raw.readmitted.filter((c) => typeof c === 'string') } : {}),
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new OrcError('corrupt', `read ${this.file}: ${(err as Error).message}`, {}, err)
    }
    for (const m of this.inner.list()) this.bind(m)
  }

  private async save(): Promise<void> {
    await writeFileAtomic(this.file, JSON.stringify(this.state))
  }

  private bind(m: MemberInfo): boolean {
    const c = clusterOfMemberName(m.name)
    if (c === undefined) return false
    const r = replicaOfPeer(m.peerId)
    if (this.state.replicas[r] !== undefined && this.state.replicas[r] !== c) return false
    const fresh = this.state.replicas[r] === undefined
    this.state.replicas[r] = c
    return fresh
  }

  /** The deferred introductions that may be admitted now (each is handed out once). */
  retryDeferred(): MemberInfo[] {
    const all = this.deferred
    this.deferred = []
    return all.filter((d) => this.vetAdmission(d.info, d.via)).map((d) => d.info)
  }

  /** The cluster that created the federation, once known (see Persisted.creator). */
  creator(): string | undefined {
    return this.state.creator
  }

  /** Record the creating cluster; the first value stays. */
  async setCreator(c: string): Promise<void> {
    if (this.state.creator !== undefined || !isClusterName(c)) return
    this.state.creator = c
    await this.save()
  }

  /** Clusters removed from the federation. */
  removedClusters(): Set<string> {
    return new Set(this.state.removed)
  }

  isRemovedCluster(c: string): boolean {
    return this.state.removed.includes(c)
  }

  /** The cluster a member belongs to (undefined: not a member, or a removed cluster's). */
  clusterOf(peerId: string): string | undefined {
    const m = this.inner.get(peerId)
    const c = m === undefined ? undefined : clusterOfMemberName(m.name)
    return c === undefined || this.isRemovedCluster(c) ? undefined : c
  }

  /** Every replica binding this member knows (a joiner asks its issuer for them: importBindings). */
  bindings(): Record<string, string> {
    return { ...this.state.replicas }
  }

  /**
   * Bindings of replicas this member never saw (members that left or were removed before it
   * joined: their revisions are in the document's history and must verify here too), as the node
   * that admitted it knows them. A binding already known is never changed; at most `max` are read.
   */
  async importBindings(given: unknown, max = 100_000): Promise<number> {
    if (typeof given !== 'object' || given === null || Array.isArray(given)) return 0
    let n = 0
    let read = 0
    for (const [replica, cluster] of Object.entries(given)) {
      if (++read > max) break
      if (!/^[0-9a-f]{16}$/.test(replica) || typeof cluster !== 'string' || !isClusterName(cluster)) continue
      if (this.state.replicas[replica] !== undefined) continue
      this.state.replicas[replica] = cluster
      n++
    }
    if (n > 0) await this.save()
    return n
  }

  /** The cluster a replica id is bound to, if any member ever admitted had it. */
  clusterOfReplica(replica: string): string | undefined {
    return this.state.replicas[replica]
  }

  /** Clusters with at least one member bound (removed ones included). */
  knownClusters(): Set<string> {
    return new Set(Object.values(this.state.replicas))
  }

  /** Members of one cluster (current ones). */
  membersOf(cluster: string): MemberInfo[] {
    return this.inner.list().filter((m) => clusterOfMemberName(m.name) === cluster)
  }

  /**
   * Lift a cluster's removal (the creator re-admitted it): its nodes are no longer refused, and
   * until one of them is a member again the cluster counts as new (a token admits it).
   */
  async readmit(c: string): Promise<void> {
    if (!this.state.removed.includes(c)) return
    this.state.removed = this.state.removed.filter((x) => x !== c)
    this.state.readmitted = [...new Set([...(this.state.readmitted ?? []), c])]
    await this.save()
  }

  /** A re-admitted cluster none of whose nodes is a member yet: it joins like a new one. */
  isReadmitted(c: string): boolean {
    return (this.state.readmitted ?? []).includes(c) && this.membersOf(c).length === 0
  }

  /** Mark a cluster removed; returns its members so the mesh can drop them. */
  async removeCluster(c: string): Promise<MemberInfo[]> {
    if (!this.state.removed.includes(c)) {
      this.state.removed.push(c)
      this.state.readmitted = (this.state.readmitted ?? []).filter((x) => x !== c)
      await this.save()
    }
    return this.membersOf(c)
  }

  has(peerId: string): boolean {
    return this.clusterOf(peerId) !== undefined
  }

  get(peerId: string): MemberInfo | undefined {
    return this.has(peerId) ? this.inner.get(peerId) : undefined
  }

  list(): MemberInfo[] {
    return this.inner.list().filter((m) => this.has(m.peerId))
  }

  async add(info: MemberInfo): Promise<void> {
    const c = clusterOfMemberName(info.name)
    if (c === undefined || this.isRemovedCluster(c)) return
    const r = replicaOfPeer(info.peerId)
    if (this.state.replicas[r] !== undefined && this.state.replicas[r] !== c) return
    if (this.bind(info)) await this.save()
    await this.inner.add(info)
  }

  remove(peerId: string): Promise<void> {
    return this.inner.remove(peerId)
  }

  /**
   * May `via` (a member) introduce `info`? A cluster introduces its own nodes; a cluster none of
   * whose nodes is a member, by any member once its admission passed (admitsNew; without that
   * hook, only a member of the creating cluster, or any while the creator is not known); nobody
   * may introduce a node into another cluster that has members, nor into a removed one.
   */
  vetAdmission(info: MemberInfo, via: string): boolean {
    const c = clusterOfMemberName(info.name)
    if (c === undefined || this.isRemovedCluster(c)) return false
    const bound = this.state.replicas[replicaOfPeer(info.peerId)]
    if (bound !== undefined && bound !== c) return false
    const viaCluster = this.clusterOf(via)
    if (viaCluster === undefined) return false
    if (viaCluster === c) return true
    if (this.admitsNew !== undefined) {
      if (this.membersOf(c).length > 0) return false
      if (this.admitsNew(c)) return true
      this.deferred = [...this.deferred.filter((d) => d.info.peerId !== info.peerId), { info, via }].slice(-64)
      return false
    }
    if (this.knownClusters().has(c) && !this.isReadmitted(c)) return false
    return this.state.creator === undefined || viaCluster === this.state.creator
  }
}
