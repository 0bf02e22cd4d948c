import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { describeDoc, parseManifests } from '../../../src/cli/manifests.ts'
import { isOrcError } from '../../../src/model/index.ts'

describe('parseManifests', () => {
  it("reads multi-document YAML with each document's number and first line, skipping empty documents", () => {
    const docs = parseManifests('# lead comment\nkind: Pod\nmetadata: {name: a}\n---\n---\n\nkind: Pod\nmetadata: {name: b}\n---\n', 'x.yaml')
    assert.deepEqual(
      docs.map((d) => [(d.value as { metadata: { name: string } }).metadata.name, d.document, d.line]),
      [
        ['a', 1, 2],
        ['b', 3, 7],
      ],
    )
    assert.equal(describeDoc(docs[1]!), 'x.yaml document 3 (line 7)')
  })

  it('reads JSON and flattens a List', () => {
    const docs = parseManifests('{"kind": "List", "items": [{"kind": "Pod"}, {"kind": "Node"}]}', 'stdin')
    assert.deepEqual(
      docs.map((d) => (d.value as { kind: string }).kind),
      ['Pod', 'Node'],
    )
  })

  it('says which document and line is malformed, in one line', () => {
    const err = (() => {
      try {
        parseManifests('a: 1\n---\nb: 2\nc: [1,\n', 'f.yaml')
      } catch (e) {
        return e
      }
    })()
    assert.ok(isOrcError(err, 'parse'))
    assert.match(err.message, /^f\.yaml document 2, line \d+ column \d+: \S/)
    assert.ok(!err.message.includes('\n'))
  })

  it('refuses duplicate keys and documents that are not mappings', () => {
    assert.throws(() => parseManifests('a: 1\na: 2\n', 's'), /document 1, line 2 column 1: Map keys must be unique/)
    assert.throws(() => parseManifests('- a\n- b\n', 's'), /s document 1 \(line 1\): expected a manifest .* got a list/)
  })
})
