import assert from 'node:assert/strict'
import { test } from 'node:test'
import { gossipFastMsgId } from '../../../src/mesh/host.ts'

const msg = () => ({
  from: new Uint8Array([1, 2, 3]),
  seqno: new Uint8Array([0, 0, 0, 0, 0, 0, 0, 9]),
  topic: '/orc/x/store/cluster/1',
  data: new TextEncoder().encode('update'),
  signature: new Uint8Array(64).fill(7),
})

test('copies of one gossip message share an id; a copy with any signed field changed does not', () => {
  const id = gossipFastMsgId(msg())
  assert.equal(gossipFastMsgId(msg()), id)
  // A forged copy (same sender and seqno, other data or signature) must not be taken for the real
  // message, or a member could suppress another's update by sending a bad copy first.
  assert.notEqual(gossipFastMsgId({ ...msg(), data: new TextEncoder().encode('forged') }), id)
  assert.notEqual(gossipFastMsgId({ ...msg(), signature: new Uint8Array(64).fill(8) }), id)
  assert.notEqual(gossipFastMsgId({ ...msg(), seqno: new Uint8Array([0, 0, 0, 0, 0, 0, 0, 10]) }), id)
  assert.notEqual(gossipFastMsgId({ ...msg(), from: new Uint8Array([1, 2, 4]) }), id)
  assert.notEqual(gossipFastMsgId({ ...msg(), topic: '/orc/y/store/cluster/1' }), id)
  // Moving a byte from one field to the next is a different message.
  assert.notEqual(gossipFastMsgId({ ...msg(), from: new Uint8Array([1, 2]), seqno: new Uint8Array([3, 0, 0, 0, 0, 0, 0, 0, 9]) }), id)
  assert.notEqual(gossipFastMsgId({ ...msg(), signature: undefined }), id)
})
