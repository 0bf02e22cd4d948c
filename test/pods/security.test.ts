/**
 * Trust at the pod boundary (issue #17, deliverables 7–9): two real parties for unsafe features,
 * images that are images, and safe default limits — with a real agent and real sandboxes, through
 * the CLI a user would type. `user:tester` (role edit, over the remote CLI) writes the pods; the
 * operator's grants are written by `user:admin` (the agent's local socket).
 */

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { constants, mkdirSync, openSync, readFileSync, symlinkSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, test } from 'node:test'
import { type CliResult, pidsRunning, podManifest, skipReason, startTestAgent, type TestAgent, waitFor } from './helpers.ts'

const skip = skipReason()
let a: TestAgent
/** The developer: `user:tester`, role edit, through `orc --node --credential`. */
let tester: (args: string[], input?: string) => Promise<CliResult>
const PODS = ['solo', 'took', 'sneaky', 'rooty', 'root-img', 'etc-img', 'fifo-img', 'link-img', 'granted-img', 'forky']

before(async () => {
  if (skip) return
  a = await startTestAgent()
  tester = await a.asUser('tester', 'edit')
})
after(async () => {
  if (!a) return
  for (const p of PODS) await a.orc(['delete', `pod/${p}`])
  for (const p of ['builders', 'solo-grant', 'rooty-grant', 'host-images']) await a.orc(['delete', `securitypolicy/${p}`])
  const markers = ['4801', '4804', '4810']
  await waitFor('pods stopped', () => markers.every((m) => pidsRunning(['sleep', m]).length === 0), 15_000).catch(() => {})
  await a.stop()
  a.remove()
})

const policy = (name: string, allow: string[], selector: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ apiVersion: 'orc/v1', kind: 'SecurityPolicy', metadata: { name }, spec: { allow, selector, ...extra } })
const rootPod = (name: string, script: string, labels?: Record<string, string>) =>
  podManifest(name, 'busybox', script, { security: { unsafe: ['root'] } }, labels)

/** The operator writes grants on the local socket, as `user:admin`. */
async function applyAsAdmin(manifest: string) {
  return a.orc(['apply', '-f', '-'], manifest)
}

/** The developer writes pods. */
async function applyAsTester(manifest: string) {
  return tester(['apply', '-f', '-'], manifest)
}

async function phaseOf(name: string, phase: string, pred: (p: Record<string, any>) => boolean = () => true): Promise<Record<string, any>> {
  return waitFor(`pod/${name} ${phase}`, async () => {
    const p = await a.pod(name)
    return p?.status?.phase === phase && pred(p) ? p : undefined
  })
}

async function firstLog(name: string, timeoutMs?: number): Promise<string> {
  return waitFor(
    `pod/${name} logs`,
    async () => {
      const r = await a.orc(['logs', `pod/${name}`])
      return r.stdout.trim() !== '' ? r.stdout.trim() : undefined
    },
    timeoutMs,
  )
}

/** Has anything opened this FIFO for reading? (O_NONBLOCK write-open fails with ENXIO while no reader.) */
function fifoHasReader(path: string): boolean {
  try {
    openSync(path, constants.O_WRONLY | constants.O_NONBLOCK)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENXIO') return false
    throw err
  }
}

test("two parties: one author applying a grant and a root pod together is refused, and so is the grant's author editing or rolling back the pod", {
  skip,
}, async () => {
  const together = `${policy('solo-grant', ['root'], { names: ['solo'] })}\n---\n${rootPod('solo', 'exec sleep 4801')}`
  const refused = await applyAsAdmin(together)
  assert.equal(refused.exitCode, 1)
  assert.match(
    refused.stderr,
    /pod\/solo asks for root, but no SecurityPolicy in namespace default allows it \(SecurityPolicy\/solo-grant was written by user:admin, also an author of the pod: a grant needs a second party/,
  )
  assert.equal(await a.pod('solo'), undefined, 'nothing was stored')
  assert.equal((await a.orc(['get', 'securitypolicy/solo-grant'])).exitCode, 1, 'nor the grant')

  // Two different authors: the operator grants, the developer's pod runs as root inside.
  assert.equal((await applyAsAdmin(policy('solo-grant', ['root'], { names: ['solo'] }))).exitCode, 0)
  const ok = await applyAsTester(rootPod('solo', 'echo uid=$(id -u); exec sleep 4801'))
  assert.equal(ok.exitCode, 0, ok.stderr)
  const v1 = await phaseOf('solo', 'Running')
  assert.equal(await firstLog('solo'), 'uid=0')
  const hist = JSON.parse((await a.orc(['history', 'pod/solo', '-o', 'json'])).stdout)
  assert.equal(hist[0].author, 'user:tester', 'the pod is the developer’s')

  // The grant's author edits the pod: the API refuses, since the grant would then be their own.
  const adminEdit = await applyAsAdmin(rootPod('solo', 'echo uid=$(id -u); exec sleep 4804'))
  assert.equal(adminEdit.exitCode, 1)
  assert.match(adminEdit.stderr, /pod\/solo asks for root, .*SecurityPolicy\/solo-grant was written by user:admin, also an author of the pod/)
  // A rollback is admitted like an apply: the admin rolling the developer's edit back would become
  // an author of the pod, and the grant would be their own — refused, the pod keeps running v2.
  assert.equal((await applyAsTester(rootPod('solo', 'echo uid=$(id -u); exec sleep 4804'))).exitCode, 0)
  await phaseOf('solo', 'Running', (p) => p.status.runningRevision > v1.status.runningRevision)
  await waitFor('solo v2 process', () => pidsRunning(['sleep', '4804']).length === 1)
  const rb = await a.orc(['rollback', 'pod/solo', '--reason', 'back to v1'])
  assert.equal(rb.exitCode, 1)
  assert.match(rb.stderr, /pod\/solo asks for root, .*SecurityPolicy\/solo-grant was written by user:admin, also an author of the pod/)
  assert.equal((await a.pod('solo'))?.spec?.containers?.[0]?.command?.join(' ').includes('4804'), true, 'the rollback wrote nothing')
  assert.equal((await a.orc(['delete', 'pod/solo'])).exitCode, 0)
  await waitFor('solo processes stopped', () => pidsRunning(['sleep', '4801']).length + pidsRunning(['sleep', '4804']).length === 0)
})

test("two parties: relabelling a pod into a grant's labels does not admit it; labels alone select nothing", { skip }, async () => {
  const alone = await applyAsAdmin(policy('builders', ['root'], { matchLabels: { app: 'builder' } }))
  assert.equal(alone.exitCode, 1)
  assert.match(
    alone.stderr,
    /SecurityPolicy\/builders: selector\.matchLabels alone would let a pod's author label a pod into the grant; list the pods in selector\.names/,
  )
  assert.equal((await applyAsAdmin(policy('builders', ['root'], { names: ['builder'], matchLabels: { app: 'builder' } }))).exitCode, 0)
  const other = await applyAsTester(rootPod('sneaky', 'exec sleep 4802', { app: 'other' }))
  assert.equal(other.exitCode, 1)
  const relabelled = await applyAsTester(rootPod('sneaky', 'exec sleep 4802', { app: 'builder' }))
  assert.equal(relabelled.exitCode, 1, 'the label matches, the name does not: refused')
  assert.match(relabelled.stderr, /pod\/sneaky asks for root, but no SecurityPolicy in namespace default allows it/)
  assert.equal(await a.pod('sneaky'), undefined)
})

test('two parties: deleting the grant stops the running pod through its lifecycle; orc why and the history say why', { skip }, async () => {
  assert.equal((await applyAsAdmin(policy('rooty-grant', ['root'], { names: ['rooty'] }))).exitCode, 0)
  assert.equal((await applyAsTester(rootPod('rooty', 'exec sleep 4803'))).exitCode, 0)
  await phaseOf('rooty', 'Running')
  await waitFor('rooty process', () => pidsRunning(['sleep', '4803']).length === 1)
  const del = await a.orc(['delete', 'securitypolicy/rooty-grant', '--reason', 'no more root'])
  assert.equal(del.exitCode, 0, del.stderr)
  await waitFor('rooty process stopped', () => pidsRunning(['sleep', '4803']).length === 0)
  const p = await phaseOf('rooty', 'Pending')
  assert.match(p.status.reason, /pod\/rooty asks for root, but no SecurityPolicy in namespace default allows it/)
  // The first Pending write says "grant revoked"; the run that follows has check-security record
  // the refusal a moment later (orc why may first show that run in progress).
  await waitFor('orc why shows check-security refusing', async () => {
    const w = await a.orc(['why', 'pod/rooty'])
    return /check-security\s+failed/.test(w.stdout) && /no SecurityPolicy in namespace default allows it/.test(w.stdout) ? w : undefined
  })
  const hist = await a.orc(['history', 'pod/rooty', '-o', 'json'])
  assert.match(hist.stdout, /grant revoked: pod\/rooty asks for root/, 'the stop is recorded as a revision of the pod')
})

test('images are images: a host path needs a hostPath grant, and a host file a pod names is never opened by the agent as root', { skip }, async () => {
  for (const [name, image] of [
    ['root-img', '/'],
    ['etc-img', '/etc'],
  ] as const) {
    const r = await applyAsTester(podManifest(name, image, 'true'))
    assert.equal(r.exitCode, 1, `image ${image} refused`)
    assert.match(
      r.stderr,
      new RegExp(
        `pod/${name} image ${image}, a host path and not an image of the node's image store \\(.*/images\\), needs hostPath, but no SecurityPolicy in namespace default allows it`,
      ),
    )
    assert.equal(await a.pod(name), undefined)
  }
  // A root-only file outside the image store (a FIFO, so that any open for reading shows).
  const host = join(a.dataDir, 'host')
  mkdirSync(host)
  const fifo = join(host, 'shadow')
  execFileSync('mkfifo', ['-m', '0600', fifo])
  const direct = await applyAsTester(podManifest('fifo-img', fifo, 'true'))
  assert.equal(direct.exitCode, 1)
  assert.match(direct.stderr, /needs hostPath/)
  // A link in the image store that leads out of it: admitted by name, refused by the node.
  symlinkSync(fifo, join(a.dataDir, 'images', 'sneaky.tar'))
  assert.equal((await applyAsTester(podManifest('link-img', 'sneaky.tar', 'true', { restartPolicy: 'Never' }))).exitCode, 0)
  const link = await waitFor('link-img refused', async () => {
    const p = await a.pod('link-img')
    return /leads to .*host\/shadow, a host path/.test(JSON.stringify(p?.status ?? {})) ? p : undefined
  })
  assert.match(JSON.stringify(link.status), /needs a SecurityPolicy granting hostPath/)
  // Granted by an operator, a host file is read with nobody's rights only: this one stays unread.
  assert.equal((await applyAsAdmin(policy('host-images', ['hostPath'], { names: ['granted-img'] }))).exitCode, 0)
  assert.equal((await applyAsTester(podManifest('granted-img', fifo, 'true', { restartPolicy: 'Never' }))).exitCode, 0)
  await waitFor('granted-img failed to read its image', async () => {
    const p = await a.pod('granted-img')
    return /Permission denied/.test(JSON.stringify(p?.status ?? {})) ? p : undefined
  })
  assert.equal(fifoHasReader(fifo), false, 'the agent never opened the host file')
})

test('safe defaults: a pod that sets no limits gets 1,024 processes and 1 GiB; forking beyond stops at the limit', { skip }, async () => {
  const script = '(i=0; while [ $i -lt 1100 ]; do sleep 4810 & i=$((i+1)); done) 2>/dev/null; set -- /proc/[0-9]*; echo procs=$#; exec sleep 4811'
  assert.equal((await applyAsTester(podManifest('forky', 'busybox', script, { restartPolicy: 'Never' }))).exitCode, 0)
  // A thousand forks on a loaded machine take a while.
  const line = await firstLog('forky', 90_000)
  const procs = Number(/^procs=([0-9]+)$/.exec(line)?.[1])
  assert.ok(procs <= 1024 && procs > 900, `the pod stopped at its pid limit: ${line}`)
  assert.ok(pidsRunning(['sleep', '4810']).length < 1024, 'on the host too')
  const [pid] = await waitFor('forky main process', () => pidsRunning(['sleep', '4811']).length === 1 && pidsRunning(['sleep', '4811']))
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')
  const v1 = lines.find((l) => /^[0-9]+:memory:/.test(l))
  const limit = v1
    ? readFileSync(`/sys/fs/cgroup/memory${v1.slice(v1.indexOf(':memory:') + 8)}/memory.limit_in_bytes`, 'utf8').trim()
    : readFileSync(`/sys/fs/cgroup${lines.find((l) => l.startsWith('0::'))!.slice(3)}/memory.max`, 'utf8').trim()
  assert.equal(limit, String(1024 ** 3), 'the default memory limit')
})
