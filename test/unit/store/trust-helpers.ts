import { generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto'
import { MemoryLevel } from 'memory-level'
import type { StoreOptions } from '../../../src/store/options.ts'
import { openStore, type Store } from '../../../src/store/store.ts'
import type { RecordSigner, RecordVerifier, UserMay } from '../../../src/store/trust.ts'
import { seededBytes } from '../../helpers/random.ts'

export interface TestNode {
  id: string
  name: string
  key: KeyObject
  pub: KeyObject
  signer: RecordSigner
}

export function testNode(name: string): TestNode {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519')
  const id = `peer-${name}`
  return { id, name, key: privateKey, pub: publicKey, signer: { id, sign: (d) => sign(null, d, privateKey) } }
}

/**
 * A verifier that knows `members` (peer id → key and node name). `batched`: it can also check many
 * signatures at once (verifyMany), counting those calls in `batched.calls`.
 */
export function verifierOf(members: readonly TestNode[], batched?: { calls: number }): RecordVerifier {
  const by = new Map(members.map((m) => [m.id, m]))
  const one = (id: string, data: Uint8Array, sig: Uint8Array) => by.has(id) && verify(null, data, by.get(id)!.pub, sig)
  return {
    member: (id) => (by.has(id) ? { node: by.get(id)!.name } : undefined),
    verify: one,
    ...(batched
      ? {
          verifyMany: async (checks) => {
            batched.calls++
            await new Promise((r) => setImmediate(r))
            return checks.map((c) => one(c.id, c.data, c.signature))
          },
        }
      : {}),
  }
}

export async function memStore(
  node: TestNode,
  members: readonly TestNode[],
  opts: { userMay?: UserMay; seed?: number; batched?: { calls: number }; userEvidence?: StoreOptions['userEvidence'] } = {},
): Promise<Store> {
  return openStore({
    dir: `mem-${node.name}`,
    db: new MemoryLevel({ keyEncoding: 'utf8', valueEncoding: 'view' }) as never,
    randomBytes: opts.seed === undefined ? undefined : seededBytes(opts.seed),
    sync: false,
    signer: node.signer,
    verifier: verifierOf(members, opts.batched),
    userMay: opts.userMay,
    ...(opts.userEvidence !== undefined ? { userEvidence: opts.userEvidence } : {}),
  })
}

export function nodeObject(name: string): any {
  return { apiVersion: 'orc/v1', kind: 'Node', metadata: { name }, spec: {} }
}

/** Collects a store's outgoing replication messages. */
export function outbox(store: Store): Uint8Array[] {
  const out: Uint8Array[] = []
  store.onLocalUpdate((u) => out.push(u))
  return out
}

/** A seeded random source for the store fuzz tests. */
export class Rng {
  private readonly bytes: (n: number) => Uint8Array
  constructor(seed: number) {
    this.bytes = seededBytes(seed)
  }
  int(n: number): number {
    const x = this.bytes(4)
    return (((x[0]! << 24) | (x[1]! << 16) | (x[2]! << 8) | x[3]!) >>> 0) % n
  }
  chance(p: number): boolean {
    return this.int(1_000_000) < p * 1_000_000
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!
  }
  raw(n: number): Uint8Array {
    return this.bytes(n)
  }
}
