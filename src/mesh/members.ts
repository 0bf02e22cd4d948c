/**
 * Who is admitted to the cluster. The mesh reads it synchronously in the connection gater; the agent
 * may supply its own directory (backed by the store) — the default is a JSON file in the data dir.
 */
import { join } from 'node:path'
import { OrcError } from '../model/index.ts'
import { readFileIfExists, writeFileAtomic } from './fsutil.ts'
import type { MemberInfo } from './membership.ts'

export interface MemberDirectory {
  /** Called once before the mesh starts. */
  load(): Promise<void>
  has(peerId: string): boolean
  get(peerId: string): MemberInfo | undefined
  list(): MemberInfo[]
  add(info: MemberInfo): Promise<void>
  remove(peerId: string): Promise<void>
}

export class MemoryMemberDirectory implements MemberDirectory {
  protected m = new Map<string, MemberInfo>()
  async load() {}
  has(peerId: string) {
    return this.m.has(peerId)
  }
  get(peerId: string) {
    return this.m.get(peerId)
  }
  list() {
    return [...this.m.values()].map((i) => ({ ...i, addresses: [...i.addresses] }))
  }
  async add(info: MemberInfo) {
    this.m.set(info.peerId, { ...info, addresses: [...info.addresses] })
  }
  async remove(peerId: string) {
    this.m.delete(peerId)
  }
}

export const MEMBERS_FILE = 'members.json'

export class JsonFileMemberDirectory extends MemoryMemberDirectory {
  private writing: Promise<void> = Promise.resolve()
  constructor(readonly path: string) {
    super()
  }
  static inDataDir(dataDir: string): JsonFileMemberDirectory {
    return new JsonFileMemberDirectory(join(dataDir, MEMBERS_FILE))
  }
  override async load() {
    const buf = await readFileIfExists(this.path)
    if (buf === undefined) return
    try {
      for (const i of JSON.parse(buf.toString('utf8')).members as MemberInfo[]) this.m.set(i.peerId, i)
    } catch (err) {
      throw new OrcError('corrupt', `read member list ${this.path}: ${(err as Error).message}`, { path: this.path }, err)
    }
  }
  override async add(info: MemberInfo) {
    const cur = this.m.get(info.peerId)
    if (cur !== undefined && cur.name === info.name && cur.addresses.join() === info.addresses.join()) return
    await super.add(info)
    await this.persist()
  }
  override async remove(peerId: string) {
    if (!this.m.has(peerId)) return
    await super.remove(peerId)
    await this.persist()
  }
  private persist(): Promise<void> {
    const run = this.writing.then(() => writeFileAtomic(this.path, JSON.stringify({ members: this.list() }, null, 2) + '\n', 0o600))
    this.writing = run.catch(() => undefined)
    return run
  }
}
