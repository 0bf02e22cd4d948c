/**
 * `orc volume snapshot|restore|export` (docs/storage.md). Snapshots and exports are taken by the
 * node holding the volume's data: another node forwards the request there (cluster.ts). Restoring a
 * deleted Volume writes the Volume again from its last content in history, pinned to the node that
 * kept its data, with `spec.restoreFrom` naming the old uid: that node moves the data back.
 */
import { closeSync, openSync, readSync, rmSync, statSync } from 'node:fs'
import { isPlainObject, OrcError, type Principal, type Volume, type VolumeStatus } from '../../model/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import type { RouteHandlers } from '../router.ts'
import type { VolumeService } from './service.ts'

const AUTHOR = /^(user|controller):[A-Za-z0-9][-A-Za-z0-9_.@]{0,127}$/
/** Bytes per export chunk (base64 in JSON, under the member API's 64 MiB). */
export const EXPORT_CHUNK_BYTES = 8 * 1024 * 1024
/** An export not read to the end is dropped after this long. */
const EXPORT_IDLE_MS = 10 * 60_000

export interface VolumeApiComponents {
  store: ObjectStore
  nodeName: string
  now(): number
  volumes(): VolumeService
}

function authorOf(body: unknown): { author: string; reason?: string; b: Record<string, unknown> } {
  const b = isPlainObject(body) ? body : {}
  const author = typeof b.author === 'string' && AUTHOR.test(b.author) ? b.author : undefined
  if (author === undefined) throw new OrcError('invalid', 'author: must be user:<name> or controller:<name>')
  return { author, ...(typeof b.reason === 'string' && b.reason !== '' ? { reason: b.reason.slice(0, 1024) } : {}), b }
}

/** The newest deleted incarnation of Volume NS/NAME in history: its last content before the delete. */
export async function lastDeleted(store: Pick<ObjectStore, 'history' | 'at'>, ns: string, name: string): Promise<Stored<Volume> | undefined> {
  const ref = { kind: 'Volume', namespace: ns, name }
  const hist = await store.history(ref).catch(() => [])
  const del = [...hist].reverse().find((r) => r.op === 'delete')
  if (del === undefined) return undefined
  const before = [...hist].reverse().find((r) => r.number < del.number && r.op !== 'delete' && !r.compacted)
  if (before === undefined) return undefined
  return (await store.at(ref, before.number).catch(() => undefined)) as Stored<Volume> | undefined
}

export function volumeRoutes(c: VolumeApiComponents) {
  const exports = new Map<string, { file: string; total: number; touched: number }>()
  const dropIdle = () => {
    for (const [id, e] of exports)
      if (c.now() - e.touched > EXPORT_IDLE_MS) {
        rmSync(e.file, { force: true })
        exports.delete(id)
      }
  }
  /** A replica's side of replication (a node outside a cluster keeps no replicas). */
  const replication = () => {
    const repl = c.volumes().replication
    if (repl === undefined) throw new OrcError('unavailable', 'this node is not in a cluster: it keeps no replicas')
    return repl
  }
  /** The member that sends a copy (its peer id), checked against the volume's primary. */
  const senderOf = (req: { principal?: Principal }) => (req.principal?.kind === 'node' ? req.principal.peerId : undefined)
  return {
    volumeSnapshot: async ({ params: { ns, name }, body }) => {
      const { b } = authorOf(body)
      const snap = typeof b.name === 'string' && b.name !== '' ? b.name : undefined
      return { node: c.nodeName, snapshot: await c.volumes().snapshot(ns, name, snap) }
    },
    volumeRestoreSnapshot: async ({ params: { ns, name }, body }) => {
      const { b } = authorOf(body)
      if (typeof b.snapshot !== 'string' || b.snapshot === '') throw new OrcError('invalid', 'snapshot: name the snapshot to restore')
      await c.volumes().restoreSnapshot(ns, name, b.snapshot)
      return { node: c.nodeName, snapshot: b.snapshot }
    },
    volumeRestore: async ({ params: { ns, name }, body }) => {
      const { author, reason } = authorOf(body)
      if (c.store.get({ kind: 'Volume', namespace: ns, name }) !== undefined)
        throw new OrcError('conflict', `volume/${name} exists: restore takes back a deleted volume (orc volume restore NAME --snapshot S restores a snapshot)`)
      const old = await lastDeleted(c.store, ns, name)
      if (old === undefined) throw new OrcError('not_found', `volume/${name} was never deleted in namespace ${ns} (or its history is compacted)`)
      const node = (old.status as VolumeStatus | undefined)?.node
      if (node === undefined) throw new OrcError('not_found', `volume/${name} was deleted before any pod used it: it had no data to keep`)
      const spec = { ...(old.spec as Record<string, unknown>), node, restoreFrom: old.metadata.uid }
      const manifest = {
        apiVersion: 'orc/v1',
        kind: 'Volume',
        metadata: { name, namespace: ns, ...(old.metadata.labels ? { labels: old.metadata.labels } : {}) },
        spec,
      }
      const res = await c.store.apply(manifest as Volume, {
        author,
        reason: reason ?? `restore deleted volume ${old.metadata.uid} (its data is on node ${node})`,
        now: c.now(),
      })
      return { node, fromUid: old.metadata.uid, revision: res.revision?.number }
    },
    volumeReplicaManifest: async ({ params: { ns, name }, query, req }) => replication().manifest(ns, name, query.uid, senderOf(req)),
    volumeReplicaSync: async ({ params: { ns, name }, body, req }) => replication().receive(ns, name, isPlainObject(body) ? body : {}, senderOf(req)),
    volumeReplicaBlock: async ({ params: { ns, name }, query, req }) => replication().blockBase(ns, name, query.uid, senderOf(req)),
    volumeReplicaBlockSync: async ({ params: { ns, name }, body, req }) =>
      replication().receiveBlocks(ns, name, isPlainObject(body) ? body : {}, senderOf(req)),
    volumeExport: async ({ params: { ns, name }, query }) => {
      dropIdle()
      const id0 = typeof query.id === 'string' ? query.id : undefined
      let id = id0
      let e = id !== undefined ? exports.get(id) : undefined
      if (id0 !== undefined && e === undefined) throw new OrcError('not_found', `export ${id0} is gone (idle over 10 minutes, or finished): start again`)
      if (e === undefined) {
        const file = await c.volumes().exportTar(ns, name)
        id = file
          .split('/')
          .pop()!
          .replace(/\.tar$/, '')
        e = { file, total: statSync(file).size, touched: c.now() }
        exports.set(id, e)
      }
      e.touched = c.now()
      const offset = Number(query.offset ?? 0)
      if (!Number.isInteger(offset) || offset < 0 || offset > e.total)
        throw new OrcError('invalid', `offset ${query.offset} is outside the export (0..${e.total})`)
      const len = Math.min(EXPORT_CHUNK_BYTES, e.total - offset)
      const buf = Buffer.alloc(len)
      const fd = openSync(e.file, 'r')
      try {
        readSync(fd, buf, 0, len, offset)
      } finally {
        closeSync(fd)
      }
      const done = offset + len >= e.total
      if (done) {
        rmSync(e.file, { force: true })
        exports.delete(id!)
      }
      return { id: id!, node: c.nodeName, offset, total: e.total, data: buf.toString('base64'), done }
    },
  } satisfies RouteHandlers
}
