import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { changeLines, formatTable, historyTable, objectTable, parseLabels, parseSince } from '../../../src/cli/format.ts'
import { getKind } from '../../../src/model/index.ts'
import type { Revision } from '../../../src/store/types.ts'

describe('CLI formatting', () => {
  it('aligns table columns like kubectl, without trailing spaces', () => {
    assert.equal(
      formatTable(
        ['NAME', 'AGE'],
        [
          ['a', '5s'],
          ['longer', ''],
        ],
      ),
      'NAME     AGE\na        5s\nlonger\n',
    )
  })

  it("shows a kind's columns, wide columns only with -o wide, and NAMESPACE with -A", () => {
    const now = Date.parse('2024-01-01T00:10:00Z')
    const pod = {
      apiVersion: 'orc/v1',
      kind: 'Pod',
      metadata: { name: 'web', namespace: 'prod', createdAt: '2024-01-01T00:00:00Z', revision: 4 },
      spec: { policy: 'ha' },
      status: {
        phase: 'Running',
        node: 'n1',
        targetRevision: 4,
        images: [{ name: 'main', image: 'reg.lab/app:1', digest: `sha256:${'ab'.repeat(32)}`, revision: 4 }],
      },
    }
    assert.equal(
      objectTable(getKind('pods'), [pod], { now }),
      'NAME   READY   STATUS    NODE   REV   RESTARTS   AGE\nweb    0/0     Running   n1     4     0          10m\n',
    )
    assert.equal(
      objectTable(getKind('pods'), [pod], { now, wide: true, withNamespace: true }),
      'NAMESPACE   NAME   READY   STATUS    NODE   IP       POLICY   IMAGE DIGEST          REV   RESTARTS   AGE\nprod        web    0/0     Running   n1     <none>   ha       sha256:abababababab   4     0          10m\n',
    )
    // REV is the revision whose spec runs, not the object revision status writes advance;
    // RESTARTS adds up the containers' restarts.
    const running = {
      ...pod,
      metadata: { ...pod.metadata, revision: 17 },
      status: { phase: 'Running', node: 'n1', runningRevision: 3, containers: [{ name: 'a', restarts: 2 }, { name: 'b', restarts: 5 }, { name: 'c' }] },
    }
    assert.equal(
      objectTable(getKind('pods'), [running], { now }),
      'NAME   READY   STATUS    NODE   REV   RESTARTS   AGE\nweb    0/3     Running   n1     3     7          10m\n',
    )
    const unbound = { ...pod, status: undefined }
    assert.equal(
      objectTable(getKind('pods'), [unbound], { now }),
      'NAME   READY   STATUS    NODE     REV   RESTARTS   AGE\nweb    0/0     Pending   <none>   4     0          10m\n',
    )
  })

  it('lists history with rollback targets as revision numbers, and diffs as +/-/~ lines', () => {
    const base = { key: 'Pod/default/web', ref: { kind: 'Pod', namespace: 'default', name: 'web' }, compacted: false, reason: '' }
    const revs: Revision[] = [
      { ...base, id: 'r.1', number: 1, op: 'create', author: 'user:a', time: Date.parse('2024-01-01T00:00:00Z') },
      {
        ...base,
        id: 'r.2',
        number: 2,
        op: 'rollback',
        author: 'user:b',
        time: Date.parse('2024-01-01T00:01:00Z'),
        reason: 'oops',
        rollbackTo: 'r.1',
        changes: [{ op: 'set', path: ['spec', 'policy'], value: 'ha', old: 'best-effort' }],
      },
    ]
    assert.equal(
      historyTable(revs),
      'REV   TIME                   AUTHOR   OP              REASON   CHANGES\n1     2024-01-01T00:00:00Z   user:a   create\n2     2024-01-01T00:01:00Z   user:b   rollback to 1   oops     spec.policy\n',
    )
    assert.equal(
      changeLines([
        { op: 'set', path: ['metadata', 'labels', 'app'], value: 'web' },
        { op: 'unset', path: ['spec', 'policy'], old: 'ha' },
        { op: 'set', path: ['spec', 'runtime'], value: 'oci', old: 'sandbox' },
      ]),
      '+ metadata.labels.app: web\n- spec.policy: ha\n~ spec.runtime: sandbox → oci\n',
    )
    assert.equal(changeLines([]), 'no differences\n')
  })

  it('parses --since as a duration or a time, and --labels', () => {
    const now = Date.parse('2024-01-02T00:00:00Z')
    assert.equal(parseSince('2h', now), now - 2 * 3600e3)
    assert.equal(parseSince('2024-01-01T00:00:00Z', now), Date.parse('2024-01-01T00:00:00Z'))
    assert.throws(() => parseSince('soon', now), /expected a duration like 30m/)
    assert.deepEqual(parseLabels('zone=lab, disk=ssd'), { zone: 'lab', disk: 'ssd' })
    assert.throws(() => parseLabels('zone'), /expected key=value/)
  })
})
