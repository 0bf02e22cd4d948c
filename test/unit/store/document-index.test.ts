import assert from 'node:assert/strict'
import { test } from 'node:test'
import fc from 'fast-check'
import * as Y from 'yjs'
import { ObjectDocument, type Sys } from '../../../src/store/document.ts'

const sys = (n: number, deleted = false): Sys => ({
  uid: `u${n}`,
  seq: n,
  rev: `r${n}`,
  createdAt: 't',
  createdBy: 'user:a',
  updatedAt: 't',
  updatedBy: 'user:a',
  ...(deleted ? { deleted: true as const } : {}),
})
const KINDS = ['Pod', 'RoleBinding', 'Service', 'PodX']

// list(kind) answers from a per-kind index of keys the observer keeps; whatever arrives — local
// writes, deletes, a peer's update, an index built midway — it must list what a scan of every key
// would.
test('list(kind) by the kind index equals a scan of every key, through local writes and remote merges', () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.record({
          remote: fc.boolean(),
          kind: fc.constantFrom(...KINDS),
          ns: fc.constantFrom('default', 'x'),
          name: fc.constantFrom('a', 'b', 'c'),
          del: fc.boolean(),
          listNow: fc.boolean(),
        }),
        {
          maxLength: 40,
        },
      ),
      (ops) => {
        const local = new ObjectDocument(1)
        local.load(undefined, [])
        local.observe()
        const peer = new ObjectDocument(2)
        peer.load(undefined, [])
        peer.observe()
        let n = 0
        for (const op of ops) {
          n++
          const key = `${op.kind}/${op.ns}/${op.name}`
          const target = op.remote ? peer : local
          target.writeLocal(
            key,
            op.del
              ? { op: 'delete', sys: sys(n, true), changes: [] }
              : { op: 'create', sys: sys(n), content: { kind: op.kind, metadata: { name: op.name, namespace: op.ns } }, changes: [] },
          )
          if (op.remote) local.applyRemote(Y.encodeStateAsUpdate(peer.doc))
          if (op.listNow) local.list('Pod')
          for (const kind of KINDS)
            for (const ns of [undefined, 'default', 'x']) {
              const scanned = [...(local.doc.getMap('objects') as Y.Map<unknown>).keys()]
                .filter((k) => k.startsWith(ns === undefined ? `${kind}/` : `${kind}/${ns}/`))
                .map((k) => local.get(k))
                .filter((o) => o !== undefined)
                .map((o) => `${o!.metadata.namespace}/${o!.metadata.name}`)
                .sort()
              assert.deepEqual(
                local
                  .list(kind, ns)
                  .map((o) => `${o.metadata.namespace}/${o.metadata.name}`)
                  .sort(),
                scanned,
                `${kind} ${ns}`,
              )
            }
        }
      },
    ),
    { numRuns: 60, seed: 42 },
  )
})
