// `orc create secret|config` builds its manifest from flags and files; `orc diff` shows a Secret's
// changed keys by value hash and size, never the ciphertext (and never a value).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { dataFromSources, dataManifest, type FileReader } from '../../../src/cli/commands/secrets.ts'
import { changeLines, objectTable } from '../../../src/cli/format.ts'
import { diffValues, getKind } from '../../../src/model/index.ts'

const files: Record<string, Buffer> = {
  '/etc/app.conf': Buffer.from('listen 80\n'),
  '/keys/tls.key': Buffer.from([0, 1, 2, 0xff, 0xfe]),
  '/dir/a.txt': Buffer.from('A'),
  '/dir/b.bin': Buffer.from([0xc3, 0x28]),
}
const fake: FileReader = {
  read: (p) => {
    const b = files[p]
    if (b === undefined) throw new Error(`no ${p}`)
    return b
  },
  list: (p) => (p === '/dir' ? ['/dir/a.txt', '/dir/b.bin'] : undefined),
}

test('--from-literal and --from-file: key = file name unless given; not UTF-8 goes to binaryData; a directory gives each file', () => {
  const d = dataFromSources({ literals: ['user=app', 'eq=a=b'], files: ['/etc/app.conf', 'key.pem=/keys/tls.key', '/dir'] }, fake)
  assert.deepEqual(d.data, { user: 'app', eq: 'a=b', 'app.conf': 'listen 80\n', 'a.txt': 'A' })
  assert.deepEqual(d.binaryData, { 'key.pem': Buffer.from([0, 1, 2, 0xff, 0xfe]).toString('base64'), 'b.bin': Buffer.from([0xc3, 0x28]).toString('base64') })
})

test('a literal without = is refused without repeating it (it may be the value); a key given twice is refused', () => {
  assert.throws(
    () => dataFromSources({ literals: ['hunter2'], files: [] }, fake),
    (e: Error) => !e.message.includes('hunter2') && /expected KEY=VALUE/.test(e.message),
  )
  assert.throws(() => dataFromSources({ literals: ['a=1', 'a=2'], files: [] }, fake), /key a is given twice/)
})

test('the manifest of orc create secret carries type, shareable and namespace', () => {
  const m = dataManifest({ kind: 'Secret', name: 'db', namespace: 'team', literals: ['p=x'], files: [], type: 'basic-auth', shareable: true }, fake)
  assert.deepEqual(m, {
    apiVersion: 'orc/v1',
    kind: 'Secret',
    metadata: { name: 'db', namespace: 'team' },
    spec: { data: { p: 'x' }, type: 'basic-auth', shareable: true },
  })
})

const sealed = (hash: string, size: number, c = 'AAAA') => ({ value: `orc:enc:v1:0123456789abcdef:${c}`, hash, size })

test('orc diff of a Secret: one line per key with hash and size, no ciphertext', () => {
  const a = { spec: { sealed: { password: sealed('1111111111111111', 6, 'old'), gone: sealed('2222222222222222', 3) } } }
  const b = { spec: { sealed: { password: sealed('3333333333333333', 8, 'new'), added: { ...sealed('4444444444444444', 2), binary: true } } } }
  const out = changeLines(diffValues(a, b))
  assert.equal(
    out,
    [
      '- spec.sealed.gone: removed (hash 2222222222222222, 3 bytes)',
      '~ spec.sealed.password: value changed (hash 1111111111111111 → 3333333333333333, 6 → 8 bytes)',
      '+ spec.sealed.added: added (hash 4444444444444444, 2 bytes, binary)',
      '',
    ].join('\n'),
  )
  assert.equal(out.includes('orc:enc'), false)
  // Sealed again under a new key (rotation): the value is the same.
  const rotated = changeLines(diffValues(a, { spec: { sealed: { ...a.spec.sealed, password: sealed('1111111111111111', 6, 'other') } } }))
  assert.equal(rotated, '~ spec.sealed.password: sealed again, value unchanged\n')
  // The whole map at once (a Secret that had none).
  assert.equal(
    changeLines(diffValues({ spec: {} }, { spec: { sealed: { k: sealed('5555555555555555', 1) } } })),
    '+ spec.sealed.k: added (hash 5555555555555555, 1 byte)\n',
  )
})

test('orc get secrets -o wide lists each key with its size, never a value', () => {
  const s = {
    apiVersion: 'orc/v1',
    kind: 'Secret',
    metadata: { name: 'db', namespace: 'default', createdAt: '2024-01-01T00:00:00Z' },
    spec: { sealed: { password: sealed('1111111111111111', 14), key: { ...sealed('2222222222222222', 3), binary: true } } },
  }
  assert.equal(
    objectTable(getKind('Secret'), [s as never], { wide: true, now: Date.parse('2024-01-01T00:01:00Z') }),
    'NAME   KEYS   SIZE   SHAREABLE   DATA                AGE\ndb     2      17     no          password:14,key:3   60s\n',
  )
})

test('orc get configs -o wide lists each key with its size', () => {
  const c = {
    apiVersion: 'orc/v1',
    kind: 'Config',
    metadata: { name: 'web', namespace: 'default', createdAt: '2024-01-01T00:00:00Z' },
    spec: { data: { 'nginx.conf': 'server {}\n', mode: 'prod' }, binaryData: { logo: Buffer.from([1, 2, 3]).toString('base64') } },
  }
  assert.match(
    objectTable(getKind('Config'), [c as never], { wide: true, now: Date.parse('2024-01-01T00:01:00Z') }),
    /\nweb +3 +17 +nginx\.conf:10,mode:4,logo:3 +60s\n$/,
  )
})
