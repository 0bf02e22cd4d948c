// Test helpers for in-process multi-node mesh tests: temp data dirs, seeded randomness, fast
// tunables, a small Replicable over a real Y.Doc, and polling with a deadline.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { publicKeyToProtobuf } from '@libp2p/crypto/keys'
import * as Y from 'yjs'
import { createCluster, joinMesh, type MemberTransition, Mesh, type MeshOptions, type MeshTunables } from '../../src/mesh/index.ts'
import { OrcError } from '../../src/model/index.ts'
import type { Replicable } from '../../src/store/types.ts'
import { pollDelay } from '../helpers/wait.ts'

export const SEED = Number(process.env.ORC_TEST_SEED ?? 1)

/** sfc32 seeded byte source; each node gets its own stream. */
export function seededRandom(seed: number): (n: number) => Uint8Array {
  let a = 0x9e3779b9 ^ seed,
    b = 0x243f6a88 + seed,
    c = 0xb7e15162 ^ (seed * 31),
    d = 1
  const next = () => {
    a >>>= 0
    b >>>= 0
    c >>>= 0
    d >>>= 0
    const t = (a + b + d) | 0
    d = (d + 1) | 0
    a = b ^ (b >>> 9)
    b = (c + (c << 3)) | 0
    c = (c << 21) | (c >>> 11)
    c = (c + t) | 0
    return t >>> 0
  }
  for (let i = 0; i < 16; i++) next()
  return (n) => {
    const out = new Uint8Array(n)
    for (let i = 0; i < n; i += 4) {
      const v = next()
      for (let j = 0; j < 4 && i + j < n; j++) out[i + j] = (v >>> (j * 8)) & 0xff
    }
    return out
  }
}

export const fastTunables: Partial<MeshTunables> = {
  dialTimeoutMs: 1500,
  inboundPerIpPerSecond: 1000, // every test node dials from 127.0.0.1
  maxProbationPerSource: 16, // …and so every joiner's trial connection comes from one address
  probationStartsPerSourcePerMinute: 10_000,
  joinTimeoutMs: 5000,
  probationMs: 3000,
  heartbeatIntervalMs: 150,
  suspectAfterMs: 900,
  deadAfterMs: 2000,
  maintainIntervalMs: 250,
  syncIntervalMs: 60_000,
  syncTimeoutMs: 10_000,
}

/** A Replicable over a real Y.Doc (test code only; the real store lives in src/store). */
export class DocReplica implements Replicable {
  readonly doc = new Y.Doc()
  readonly map = this.doc.getMap<unknown>('objects')
  private listeners = new Set<(u: Uint8Array) => void>()
  constructor() {
    this.doc.on('update', (u: Uint8Array, origin: unknown) => {
      if (origin !== 'remote') for (const fn of this.listeners) fn(u)
    })
  }
  encodeSyncState(): Uint8Array {
    return Y.encodeStateVector(this.doc)
  }
  async encodeMissing(remote: Uint8Array): Promise<Uint8Array> {
    try {
      return Y.encodeStateAsUpdate(this.doc, remote)
    } catch (err) {
      throw new OrcError('invalid', 'state vector is malformed', {}, err)
    }
  }
  async applyRemote(update: Uint8Array): Promise<{ revisions: number; incomplete: boolean }> {
    try {
      Y.decodeUpdate(update)
    } catch (err) {
      throw new OrcError('invalid', 'update is malformed', {}, err)
    }
    const before = this.map.size
    Y.applyUpdate(this.doc, update, 'remote')
    const incomplete = this.doc.store.pendingStructs !== null || this.doc.store.pendingDs !== null
    return { revisions: Math.max(0, this.map.size - before), incomplete }
  }
  onLocalUpdate(fn: (u: Uint8Array) => void): () => void {
    this.listeners.add(fn)
    return () => this.listeners.delete(fn)
  }
  set(k: string, v: unknown): void {
    this.map.set(k, v)
  }
  get(k: string): unknown {
    return this.map.get(k)
  }
}

export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const t0 = Date.now()
    if (await cond()) return
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for: ${what} (seed ${SEED})`)
    await new Promise((r) => setTimeout(r, pollDelay(Date.now() - t0, 25)))
  }
}

export class Fixture {
  private dirs: string[] = []
  private meshes: Mesh[] = []
  private n = 0

  async dir(): Promise<string> {
    const d = await mkdtemp(join(tmpdir(), 'orc-mesh-'))
    this.dirs.push(d)
    return d
  }

  base(name: string, extra: Partial<MeshOptions> = {}): Promise<MeshOptions> {
    return this.dir().then((dataDir) => ({
      dataDir,
      name,
      listen: ['/ip4/127.0.0.1/tcp/0'],
      random: seededRandom(SEED * 1000 + ++this.n),
      tunables: { ...fastTunables, ...(extra.tunables ?? {}) },
      ...extra,
      ...(extra.tunables ? { tunables: { ...fastTunables, ...extra.tunables } } : {}),
    }))
  }

  track(m: Mesh): Mesh {
    this.meshes.push(m)
    return m
  }

  async create(name: string, extra: Partial<MeshOptions> = {}) {
    const r = await createCluster(await this.base(name, extra))
    this.track(r.mesh)
    return r
  }

  async join(name: string, via: Mesh, extra: Partial<MeshOptions> & { onProgress?: any } = {}) {
    const { token } = await via.createToken({ ttlMs: 60_000, uses: 1 })
    return this.track(await joinMesh({ ...(await this.base(name, extra)), token, onProgress: extra.onProgress }))
  }

  async close(): Promise<void> {
    await Promise.all(this.meshes.map((m) => m.stop().catch(() => undefined)))
    await Promise.all(this.dirs.map((d) => rm(d, { recursive: true, force: true })))
  }
}

/**
 * A node that was never admitted but that `a`'s gater lets onto its mesh port: its key is one of
 * `a`'s credential keys (`keys`, what `a` was created with as `credentialKeys`) — as the remote CLI's.
 * It holds the PSK. What it may do there is up to each protocol: members only, for most.
 */
export async function credentialPeer(fx: Fixture, a: Mesh, keys: string[]): Promise<Mesh> {
  const s = fx.track(await Mesh.create(await fx.base('credential-peer'), { clusterId: a.clusterId, createdAt: 0, adminKeys: [], psk: a.cluster.psk }, a.peerId))
  keys.push(Buffer.from(publicKeyToProtobuf(s.privateKey.publicKey)).toString('base64url'))
  await s.libp2p.start()
  return s
}

export function stateOf(m: Mesh, peerId: string): string | undefined {
  return m.members().find((x) => x.peerId === peerId)?.state
}

/** Every transition `m` reports about `peerId`, as a list of the states it went to. */
export function transitionsOf(m: Mesh, peerId: string): string[] {
  const out: string[] = []
  m.on('member:state', (tr: MemberTransition) => tr.peerId === peerId && out.push(tr.to))
  return out
}
