// The registry client's side of the protocol that a real distribution registry does not exercise
// here: the bearer-token dance (a fake registry and token endpoint: a real token server needs JWT
// certificates), redirects to blob storage, timeouts, aborts, oversized and mismatching manifests.

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { ManualClock } from '../../../src/effects/index.ts'
import { parseChallenge, RegistryClient } from '../../../src/images/registry.ts'
import { isOrcError, type OrcError } from '../../../src/model/index.ts'

const sha = (b: Buffer | string) => `sha256:${createHash('sha256').update(b).digest('hex')}`
const MANIFEST = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: {}, layers: [] }))
const BLOB = Buffer.from('layer bytes\n'.repeat(100))

type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void
async function serve(handler: Handler, host = '127.0.0.1'): Promise<{ server: Server; host: string; close: () => Promise<void> }> {
  const server = createServer((req, res) => handler(req, res, new URL(req.url ?? '/', 'http://x')))
  await new Promise<void>((r) => server.listen(0, host, r))
  const port = (server.address() as AddressInfo).port
  return {
    server,
    host: `${host}:${port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections()
        server.close(() => r())
      }),
  }
}

async function rejects(p: Promise<unknown>, code: OrcError['code'], pattern: RegExp): Promise<OrcError> {
  try {
    await p
  } catch (err) {
    assert.ok(isOrcError(err, code), `expected OrcError ${code}, got ${(err as Error).name} ${(err as { code?: string }).code}: ${(err as Error).message}`)
    assert.match((err as Error).message, pattern)
    assert.doesNotMatch((err as Error).message, /\n/)
    return err as OrcError
  }
  assert.fail(`expected OrcError ${code}`)
}

async function drain(body: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of body) chunks.push(Buffer.from(c))
  return Buffer.concat(chunks)
}

describe('bearer token auth', () => {
  let reg: Awaited<ReturnType<typeof serve>>
  const tokenRequests: URLSearchParams[] = []
  const tokenAuth: (string | undefined)[] = []
  let unauthorized = 0
  const lifetime = 300
  let issued = 0
  before(async () => {
    reg = await serve((req, res, url) => {
      if (url.pathname === '/token') {
        tokenRequests.push(url.searchParams)
        tokenAuth.push(req.headers.authorization)
        if (req.headers.authorization !== undefined && req.headers.authorization !== `Basic ${Buffer.from('alice:s3cret').toString('base64')}`) {
          res.writeHead(401).end('{"details":"incorrect username or password"}')
          return
        }
        const delay = url.searchParams.get('scope')?.includes('slow/') ? 300 : 0
        setTimeout(() => {
          issued++
          // Docker Hub answers both fields; the spec allows either: the second token is only `access_token`.
          const body = issued % 2 === 1 ? { token: `tok-${issued}`, expires_in: lifetime } : { access_token: `tok-${issued}`, expires_in: lifetime }
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body))
        }, delay)
        return
      }
      const auth = req.headers.authorization ?? ''
      if (!/^Bearer tok-\d+$/.test(auth) || Number(auth.slice('Bearer tok-'.length)) !== issued) {
        unauthorized++
        const repo = url.pathname.split('/').slice(2, -2).join('/')
        res
          .writeHead(401, {
            'www-authenticate': `Bearer realm="http://${reg.host}/token",service="fake.registry",scope="repository:${repo}:pull"`,
            'content-type': 'application/json',
          })
          .end('{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}')
        return
      }
      if (url.pathname.startsWith('/v2/private/')) {
        // A valid token that does not cover the repository (what Docker Hub answers for a private or unknown one).
        res
          .writeHead(401, {
            'www-authenticate': `Bearer realm="http://${reg.host}/token",service="fake.registry",scope="repository:private/app:pull",error="insufficient_scope"`,
          })
          .end()
        return
      }
      if (url.pathname.endsWith('/manifests/1.0') || url.pathname.endsWith(`/manifests/${sha(MANIFEST)}`)) {
        res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json', 'docker-content-digest': sha(MANIFEST) })
        res.end(req.method === 'HEAD' ? undefined : MANIFEST)
        return
      }
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')
    })
  })
  after(() => reg.close())

  test('a token is asked for with the challenge scope and service, then reused until it expires', async () => {
    const clock = new ManualClock(1_000_000)
    const client = new RegistryClient(reg.host, {}, { clock })
    try {
      const d = await client.resolve('team/app', '1.0')
      assert.equal(d.digest, sha(MANIFEST))
      assert.equal(tokenRequests.length, 1)
      assert.equal(tokenRequests[0]!.get('service'), 'fake.registry')
      assert.equal(tokenRequests[0]!.get('scope'), 'repository:team/app:pull')
      assert.equal(tokenAuth[0], undefined, 'anonymous token request without credentials')
      assert.equal(unauthorized, 1)
      // Reused: no new token, no new 401.
      const m = await client.manifest('team/app', '1.0')
      assert.deepEqual(m.bytes, MANIFEST)
      assert.equal(tokenRequests.length, 1)
      assert.equal(unauthorized, 1)
      // Expired: not sent; the 401 brings a fresh token (the `access_token` form).
      await clock.advance(lifetime * 1000)
      await client.manifest('team/app', sha(MANIFEST))
      assert.equal(tokenRequests.length, 2)
      assert.equal(unauthorized, 2, 'the expired token is not sent: one 401, one new token')
      await client.manifest('team/app', '1.0')
      assert.equal(tokenRequests.length, 2)
    } finally {
      client.close()
    }
  })

  test('credentials go to the token endpoint; refused ones are forbidden without the password in the message', async () => {
    const good = new RegistryClient(reg.host, { username: 'alice', password: 's3cret' })
    const bad = new RegistryClient(reg.host, { username: 'alice', password: 'wr0ng-pass' })
    try {
      tokenAuth.length = 0
      await good.resolve('team/app', '1.0')
      assert.equal(tokenAuth.at(-1), `Basic ${Buffer.from('alice:s3cret').toString('base64')}`)
      const err = await rejects(
        bad.resolve('team/app', '1.0'),
        'forbidden',
        /registry 127\.0\.0\.1:\d+: unauthorized \(127\.0\.0\.1:\d+\/team\/app:1\.0.*refused/,
      )
      assert.doesNotMatch(JSON.stringify({ m: err.message, d: err.details }), /wr0ng-pass|d3IwbmctcGFzcw/)
    } finally {
      good.close()
      bad.close()
    }
  })

  test('concurrent requests share one token request; one caller giving up does not fail the others', async () => {
    const client = new RegistryClient(reg.host)
    try {
      const before = tokenRequests.length
      const ac = new AbortController()
      const first = client.resolve('slow/app', '1.0', ac.signal)
      const others = Promise.all([client.resolve('slow/app', '1.0'), client.manifest('slow/app', '1.0')])
      setTimeout(() => ac.abort(new Error('first caller gave up')), 50)
      await assert.rejects(first, /first caller gave up/)
      const [d, m] = await others
      assert.equal(d.digest, sha(MANIFEST))
      assert.equal(m.descriptor.digest, sha(MANIFEST))
      assert.equal(tokenRequests.length, before + 1)
    } finally {
      client.close()
    }
  })

  test('a token that does not cover the repository: forbidden, saying it may not exist', async () => {
    const anon = new RegistryClient(reg.host)
    const alice = new RegistryClient(reg.host, { username: 'alice', password: 's3cret' })
    try {
      await rejects(
        anon.resolve('private/app', '1.0'),
        'forbidden',
        /unauthorized \(127\.0\.0\.1:\d+\/private\/app:1\.0, or no such repository\): give credentials/,
      )
      await rejects(alice.resolve('private/app', '1.0'), 'forbidden', /user "alice" may not pull it, or there is no such repository$/)
    } finally {
      anon.close()
      alice.close()
    }
  })

  test('an unknown tag behind token auth is not_found, naming the reference', async () => {
    const client = new RegistryClient(reg.host)
    try {
      await rejects(client.manifest('team/app', 'nope'), 'not_found', /^manifest unknown: 127\.0\.0\.1:\d+\/team\/app:nope$/)
      await rejects(client.resolve('team/app', 'nope'), 'not_found', /^manifest unknown: 127\.0\.0\.1:\d+\/team\/app:nope$/)
    } finally {
      client.close()
    }
  })
})

describe('blob redirects', () => {
  let storage: Awaited<ReturnType<typeof serve>>
  let reg: Awaited<ReturnType<typeof serve>>
  const seenAuth: { where: string; auth: string | undefined }[] = []
  before(async () => {
    // Another host (localhost, not 127.0.0.1): the registry's credentials must not follow there.
    storage = await serve((req, res) => {
      seenAuth.push({ where: 'storage', auth: req.headers.authorization })
      res.writeHead(200, { 'content-length': BLOB.length }).end(BLOB)
    }, 'localhost')
    reg = await serve((req, res, url) => {
      seenAuth.push({ where: url.pathname, auth: req.headers.authorization })
      if (req.headers.authorization === undefined) {
        res.writeHead(401, { 'www-authenticate': 'Basic realm="fake"' }).end()
        return
      }
      if (url.pathname === `/v2/team/app/blobs/${sha(BLOB)}`) res.writeHead(307, { location: `/v2/team/app/moved/${sha(BLOB)}` }).end()
      else if (url.pathname.startsWith('/v2/team/app/moved/')) res.writeHead(302, { location: `http://${storage.host}/data?sig=1` }).end()
      else if (url.pathname.startsWith('/v2/team/app/blobs/')) res.writeHead(307, { location: url.pathname }).end()
      else res.writeHead(404).end()
    })
  })
  after(async () => {
    await reg.close()
    await storage.close()
  })

  test('a blob is followed through redirects; the Authorization header stays on the registry host', async () => {
    const client = new RegistryClient(reg.host, { username: 'bob', password: 'pw' })
    try {
      const { size, body } = await client.blob('team/app', sha(BLOB))
      assert.equal(size, BLOB.length)
      assert.equal(sha(await drain(body)), sha(BLOB))
      const moved = seenAuth.find((s) => s.where.startsWith('/v2/team/app/moved/'))
      assert.match(moved?.auth ?? '', /^Basic /, 'same-host redirect keeps the credentials')
      const st = seenAuth.find((s) => s.where === 'storage')
      assert.ok(st, 'the storage host was reached')
      assert.equal(st.auth, undefined, 'credentials are not sent to another host')
    } finally {
      client.close()
    }
  })

  test('a redirect loop stops after 5 hops', async () => {
    const client = new RegistryClient(reg.host, { username: 'bob', password: 'pw' })
    try {
      await rejects(
        client.blob('team/app', `sha256:${'0'.repeat(64)}`),
        'unavailable',
        /more than 5 redirects for blob 127\.0\.0\.1:\d+\/team\/app@sha256:0{64}/,
      )
    } finally {
      client.close()
    }
  })
})

describe('answers that are not what the API promises', () => {
  let reg: Awaited<ReturnType<typeof serve>>
  const big = Buffer.alloc(5 * 1024 * 1024, 0x20)
  before(async () => {
    reg = await serve((req, res, url) => {
      const p = url.pathname
      if (p.endsWith('/manifests/huge')) res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' }).end(big)
      else if (p.endsWith('/manifests/huge-chunked')) {
        // No Content-Length: the cap must hold while reading.
        res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json', 'transfer-encoding': 'chunked' })
        res.end(big)
      } else if (p.includes('/manifests/sha256:')) res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' }).end(MANIFEST)
      else if (p.endsWith('/manifests/nodigest')) {
        // HEAD without Docker-Content-Digest: the client GETs and hashes.
        res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' })
        res.end(req.method === 'HEAD' ? undefined : MANIFEST)
      } else if (p.endsWith('/manifests/broken')) res.writeHead(503).end('upstream down')
      else if (p.endsWith('/manifests/hang')) {
        // Never answers.
      } else if (p.endsWith(`/blobs/sha256:${'c'.repeat(64)}`)) {
        // The registry goes away mid-blob.
        res.writeHead(200, { 'content-length': BLOB.length })
        res.write(BLOB.subarray(0, 10), () => res.socket?.destroy())
      } else if (p.includes('/blobs/')) {
        res.writeHead(200, { 'content-length': BLOB.length })
        res.write(BLOB.subarray(0, 10)) // then stalls
      } else res.writeHead(404).end()
    })
  })
  after(() => reg.close())

  test('a manifest over 4 MiB is too_large, with or without Content-Length', async () => {
    const client = new RegistryClient(reg.host)
    try {
      await rejects(client.manifest('team/app', 'huge'), 'too_large', /manifest 127\.0\.0\.1:\d+\/team\/app:huge is larger than 4 MiB/)
      await rejects(client.manifest('team/app', 'huge-chunked'), 'too_large', /larger than 4 MiB/)
    } finally {
      client.close()
    }
  })

  test('a manifest asked for by digest whose bytes hash to another digest is corrupt', async () => {
    const client = new RegistryClient(reg.host)
    const wrong = `sha256:${'a'.repeat(64)}`
    try {
      await rejects(client.manifest('team/app', wrong), 'corrupt', new RegExp(`manifest 127\\.0\\.0\\.1:\\d+/team/app@${wrong}: .*${sha(MANIFEST)}`))
      const ok = await client.manifest('team/app', sha(MANIFEST))
      assert.equal(ok.descriptor.digest, sha(MANIFEST))
    } finally {
      client.close()
    }
  })

  test('without Docker-Content-Digest, resolve hashes the manifest', async () => {
    const client = new RegistryClient(reg.host)
    try {
      const d = await client.resolve('team/app', 'nodigest')
      assert.deepEqual(d, { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: sha(MANIFEST), size: MANIFEST.length })
    } finally {
      client.close()
    }
  })

  test('a 5xx is unavailable', async () => {
    const client = new RegistryClient(reg.host)
    try {
      await rejects(
        client.manifest('team/app', 'broken'),
        'unavailable',
        /registry 127\.0\.0\.1:\d+ unreachable: it answered HTTP 503 to manifest 127\.0\.0\.1:\d+\/team\/app:broken/,
      )
    } finally {
      client.close()
    }
  })

  test('no answer within timeoutMs is a timeout; a stalled blob body too', async () => {
    const client = new RegistryClient(reg.host, {}, { timeoutMs: 300 })
    try {
      await rejects(
        client.manifest('team/app', 'hang'),
        'timeout',
        /registry 127\.0\.0\.1:\d+ did not answer within 0\.3 s \(GET manifest 127\.0\.0\.1:\d+\/team\/app:hang\)/,
      )
      const { body } = await client.blob('team/app', sha(BLOB))
      await rejects(drain(body), 'timeout', /blob 127\.0\.0\.1:\d+\/team\/app@sha256:[a-f0-9]{64} stalled for 0\.3 s/)
    } finally {
      client.close()
    }
  })

  test('a connection cut mid-blob is unavailable, naming the blob', async () => {
    const client = new RegistryClient(reg.host)
    try {
      const { body } = await client.blob('team/app', `sha256:${'c'.repeat(64)}`)
      await rejects(drain(body), 'unavailable', /^registry 127\.0\.0\.1:\d+: connection lost while reading blob 127\.0\.0\.1:\d+\/team\/app@sha256:c{64}/)
    } finally {
      client.close()
    }
  })

  test('an abort stops a request and a body with the abort reason', async () => {
    const client = new RegistryClient(reg.host)
    try {
      const ac = new AbortController()
      const p = client.manifest('team/app', 'hang', ac.signal)
      setTimeout(() => ac.abort(new Error('pod deleted')), 50)
      await assert.rejects(p, /pod deleted/)
      const ac2 = new AbortController()
      const { body } = await client.blob('team/app', sha(BLOB), ac2.signal)
      const read = drain(body)
      ac2.abort(new Error('pull cancelled'))
      await assert.rejects(read, /pull cancelled/)
    } finally {
      client.close()
    }
  })
})

test('names that would change the URL are refused before any request', async () => {
  const client = new RegistryClient('127.0.0.1:1')
  await rejects(
    client.blob('team/app', 'sha256:../../../v2/_catalog'),
    'invalid',
    /^registry 127\.0\.0\.1:1: digest "sha256:\.\.\/.*" is not valid for blob requests$/,
  )
  await rejects(client.manifest('team/../../x', '1.0'), 'invalid', /repository "team\/\.\.\/\.\.\/x"/)
  await rejects(client.resolve('team/app', '1.0?x=1'), 'invalid', /reference "1\.0\?x=1"/)
  await rejects(client.blob('team/app', '1.0'), 'invalid', /digest "1\.0"/)
})

test('a closed port is unavailable, naming the registry', async () => {
  const s = await serve(() => {})
  const host = s.host
  await s.close()
  const client = new RegistryClient(host)
  try {
    await rejects(client.resolve('team/app', '1.0'), 'unavailable', new RegExp(`^registry ${host.replace(/\./g, '\\.')} unreachable: .*ECONNREFUSED`))
  } finally {
    client.close()
  }
})

test('WWW-Authenticate challenges parse with quoted commas and bare values', () => {
  assert.deepEqual(parseChallenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull,push"'), {
    scheme: 'bearer',
    params: { realm: 'https://auth.docker.io/token', service: 'registry.docker.io', scope: 'repository:a/b:pull,push' },
  })
  assert.deepEqual(parseChallenge('Basic realm=lab'), { scheme: 'basic', params: { realm: 'lab' } })
  assert.deepEqual(parseChallenge('Bearer realm="x\\"y", error="insufficient_scope"'), {
    scheme: 'bearer',
    params: { realm: 'x"y', error: 'insufficient_scope' },
  })
})

test('TLS mode: loopback registries default to plain HTTP, others to verified HTTPS; docker.io maps to its API host', () => {
  assert.equal(new RegistryClient('127.0.0.1:5000').tls, 'plain')
  assert.equal(new RegistryClient('localhost:5000').tls, 'plain')
  assert.equal(new RegistryClient('[::1]:5000').tls, 'plain')
  assert.equal(new RegistryClient('registry.lab:5000').tls, 'verify')
  assert.equal(new RegistryClient('127.0.0.1:5000', { tls: 'verify' }).tls, 'verify')
  assert.equal(new RegistryClient('127.0.0.1:5000', { ca: '-----BEGIN CERTIFICATE-----' }).tls, 'verify', 'a CA means HTTPS')
  assert.equal(new RegistryClient('registry.lab:5000', { tls: 'insecure' }).endpoint, 'https://registry.lab:5000')
  assert.equal(new RegistryClient('docker.io').endpoint, 'https://registry-1.docker.io')
  assert.equal(new RegistryClient('registry.lab:5000', { tls: 'plain' }).endpoint, 'http://registry.lab:5000')
})
