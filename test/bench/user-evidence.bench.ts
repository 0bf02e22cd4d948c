// What a user's signature costs per write (docs/security.md, "Users' signatures on their writes"):
// N pod applies on a signed store with and without the user's signed request, and a second replica
// receiving each write (signature, key, request and content checks). Prints one figure per line.
//   node --import tsx test/bench/user-evidence.bench.ts [N]
import '../../src/polyfill.ts'
import { generateKeyPair, publicKeyToProtobuf } from '@libp2p/crypto/keys'
import { MemoryLevel } from 'memory-level'
import { b64url } from '../../src/mesh/cluster.ts'
import { apiSigningDigest, verifySignedRequest } from '../../src/mesh/rpc.ts'
import type { SignedRequest } from '../../src/model/index.ts'
import { openStore } from '../../src/store/store.ts'
import { pod } from '../helpers/store.ts'
import { testNode, verifierOf } from '../unit/store/trust-helpers.ts'

const N = Number(process.argv[2] ?? 2000)
const a = testNode('a')
const c = testNode('c')
const open = (n: typeof a) =>
  openStore({
    dir: `mem-${n.name}`,
    db: new MemoryLevel({ keyEncoding: 'utf8', valueEncoding: 'view' }) as never,
    sync: false,
    signer: n.signer,
    verifier: verifierOf([a, c]),
    userEvidence: { verify: verifySignedRequest },
  })
const alice = await generateKeyPair('Ed25519')
const key = b64url(publicKeyToProtobuf(alice.publicKey))

async function run(signed: boolean): Promise<void> {
  const A = await open(a)
  const C = await open(c)
  const out: Uint8Array[] = []
  A.onLocalUpdate((u) => out.push(u))
  await A.apply({ apiVersion: 'orc/v1', kind: 'User', metadata: { name: 'alice' }, spec: { publicKey: key } }, { author: 'user:admin', now: 1 })
  const reqs: (SignedRequest | undefined)[] = []
  for (let i = 0; i < N; i++) {
    if (!signed) {
      reqs.push(undefined)
      continue
    }
    const nonce = new Uint8Array(32)
    new DataView(nonce.buffer).setUint32(0, i)
    const req = { method: 'POST', path: '/v1/apply', query: {}, body: { objects: [pod(`p${i}`)] } }
    const sig = await alice.sign(apiSigningDigest(nonce, a.id, req, 1000 + i))
    reqs.push({ ...req, nonce: b64url(nonce), peer: a.id, at: 1000 + i, key, sig: b64url(sig) })
  }
  let t = performance.now()
  for (let i = 0; i < N; i++) await A.apply(pod(`p${i}`), { author: 'user:alice', now: 1000 + i, ...(reqs[i] ? { evidence: reqs[i] } : {}) })
  const write = (performance.now() - t) / N
  t = performance.now()
  for (const m of out) await C.applyRemote(m)
  const receive = (performance.now() - t) / out.length
  const bytes = out.slice(1).reduce((n, m) => n + m.byteLength, 0) / N
  console.log(
    `${signed ? 'with' : 'without'} the user's signed request: write ${(write * 1000).toFixed(0)} µs, receive ${(receive * 1000).toFixed(0)} µs, ${bytes.toFixed(0)} bytes per message`,
  )
  await A.close()
  await C.close()
}
await run(false)
await run(true)
await run(false)
await run(true)
