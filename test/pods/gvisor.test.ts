/**
 * Pods under gVisor (issue #26): a real agent, real runsc sandboxes, through the CLI a user types —
 * the same lifecycle as the other runtimes (logs, `orc why`, exec, in-place update, delete), and a
 * SecurityPolicy that requires gVisor for a namespace, refused at apply and enforced on the node.
 */

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, test } from 'node:test'
import { detectRunscPlatform, shmDirOf } from '../../src/runtime/index.ts'
import { type CliResult, podManifest, skipReason, startTestAgent, type TestAgent, waitFor } from './helpers.ts'

async function gvisorSkip(): Promise<string | undefined> {
  const base = skipReason()
  if (base) return base
  if (process.getuid?.() !== 0) return 'runsc needs root'
  try {
    execFileSync('sh', ['-c', 'command -v runsc'], { stdio: 'ignore' })
  } catch {
    return 'runsc not installed (apt-get install runsc)'
  }
  const p = await detectRunscPlatform()
  return p.platform ? undefined : `gVisor runs on no platform here: ${p.detail}`
}

const skip = await gvisorSkip()
if (skip) console.log(`# gvisor pods: skipped: ${skip}`)
let a: TestAgent
let tester: (args: string[], input?: string) => Promise<CliResult>

before(async () => {
  if (skip) return
  a = await startTestAgent()
  tester = await a.asUser('tester', 'edit')
})
after(async () => {
  if (!a) return
  for (const p of ['gv', 'plain', 'untrusted', 'boxed']) await a.orc(['delete', `pod/${p}`])
  await a.orc(['delete', 'securitypolicy/only-gvisor'])
  await waitFor('sandboxes gone', () => sentries().length === 0, 30_000).catch(() => {})
  await a.stop()
  a.remove()
})

/** Host pids of this agent's gVisor sandboxes (the Sentry: argv[0] `runsc-sandbox`, with this agent's runsc state dir). */
function sentries(): number[] {
  const out: number[] = []
  for (const d of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(d)) continue
    try {
      const argv = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0')
      if (argv[0] === 'runsc-sandbox' && argv.includes(`--root=${shmDirOf('orc-gvisor-state', join(a.dataDir, 'runtime'))}`)) out.push(Number(d))
    } catch {}
  }
  return out
}

async function logs(name: string): Promise<string[]> {
  const r = await a.orc(['logs', `pod/${name}`])
  assert.equal(r.exitCode, 0, r.stderr)
  return r.stdout.split('\n').filter((l) => l !== '')
}

async function running(name: string, pred: (p: Record<string, any>) => boolean = () => true): Promise<Record<string, any>> {
  return waitFor(
    `pod/${name} running`,
    async () => {
      const p = await a.pod(name)
      return p?.status?.phase === 'Running' && pred(p) ? p : undefined
    },
    60_000,
  )
}

const PROBE =
  'echo uid=$(id -u); if touch /bin/x 2>/dev/null; then echo rootfs=rw; else echo rootfs=ro; fi; echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\\n" " "); echo kernel=$(dmesg 2>/dev/null | head -1 | cut -c1-40); echo done'

test('a pod with runtime gvisor runs under runsc: confined, logs, orc why, exec, in-place update, delete', { skip }, async () => {
  const ap = await a.orc(['apply', '-f', '-'], podManifest('gv', a.image, `${PROBE}; echo version=1; exec sleep 4901`, { runtime: 'gvisor' }))
  assert.equal(ap.exitCode, 0, ap.stderr)
  const v1 = await running('gv')
  const lines = await waitFor('probe output', async () => {
    const l = await logs('gv')
    return l.includes('done') ? l : undefined
  })
  assert.ok(lines.includes('uid=65534'), lines.join('\n'))
  assert.ok(lines.includes('rootfs=ro'), lines.join('\n'))
  assert.match(lines.find((l) => l.startsWith('ifaces='))!, /^ifaces=lo\s*$/)
  // the kernel the pod talks to is gVisor's, not the host's
  assert.match(lines.find((l) => l.startsWith('kernel='))!, /gVisor/i, lines.join('\n'))
  assert.equal(sentries().length, 1, 'one gVisor sandbox on the host')
  assert.equal(execFileSync('stat', ['-c', '%u', `/proc/${sentries()[0]}`], { encoding: 'utf8' }).trim(), '65534', 'the Sentry runs as nobody')
  const why = await a.orc(['why', 'pod/gv'])
  assert.match(why.stdout, /target running reached/)
  assert.match(why.stdout, /check-security\s+done/)
  const ex = await a.orc(['exec', 'gv', '--', '/bin/sh', '-c', 'id -u; cat /proc/1/cmdline | tr "\\0" " "'])
  assert.equal(ex.exitCode, 0, ex.stderr)
  assert.match(ex.stdout, /^65534\nsleep 4901 $/)

  const up = await a.orc(['apply', '-f', '-'], podManifest('gv', a.image, 'echo version=2; exec sleep 4902', { runtime: 'gvisor' }))
  assert.equal(up.exitCode, 0, up.stderr)
  const v2 = await running('gv', (p) => p.status.runningRevision > v1.status.runningRevision)
  assert.equal(v2.status.node, 'n1', 'same node')
  await waitFor('version 2 logged', async () => ((await logs('gv')).includes('version=2') ? true : undefined))
  const ex2 = await a.orc(['exec', 'gv', '--', 'cat', '/proc/1/cmdline'])
  assert.equal(ex2.stdout.replace(/\0/g, ' '), 'sleep 4902 ')
  await waitFor('one sandbox after the update', () => sentries().length === 1)

  assert.equal((await a.orc(['delete', 'pod/gv'])).exitCode, 0)
  await waitFor('sandbox gone after delete', () => sentries().length === 0, 30_000)
})

const requireGvisor = JSON.stringify({
  apiVersion: 'orc/v1',
  kind: 'SecurityPolicy',
  metadata: { name: 'only-gvisor' },
  spec: { requireRuntime: ['gvisor'], description: 'untrusted code only under gVisor' },
})

test('a SecurityPolicy requiring gVisor: other runtimes refused at apply, and a running pod under another runtime stopped', { skip }, async () => {
  // before the policy: a sandbox pod runs
  assert.equal((await tester(['apply', '-f', '-'], podManifest('plain', a.image, 'exec sleep 4903'))).exitCode, 0)
  await running('plain')
  const pol = await a.orc(['apply', '-f', '-', '--reason', 'untrusted code only under gVisor'], requireGvisor)
  assert.equal(pol.exitCode, 0, pol.stderr)
  const get = await a.orc(['get', 'securitypolicies'])
  assert.match(get.stdout, /^only-gvisor\s+<none>\s+gvisor\s/m)

  // refused at apply, with the reason and what to do; nothing stored
  const refused = await tester(['apply', '-f', '-'], podManifest('untrusted', a.image, 'exec sleep 4904'))
  assert.notEqual(refused.exitCode, 0)
  assert.match(
    refused.stderr,
    /pod\/untrusted asks for runtime sandbox, but namespace default requires gvisor \(SecurityPolicy\/only-gvisor\) for it: set spec\.runtime accordingly/,
  )
  assert.equal(await a.pod('untrusted'), undefined, 'the refused pod was not stored')
  const oci = await tester(['apply', '-f', '-'], podManifest('untrusted', a.image, 'exec sleep 4904', { runtime: 'oci' }))
  assert.match(oci.stderr, /asks for runtime oci, but namespace default requires gvisor/)

  // under gVisor it is admitted and runs
  const ok = await tester(['apply', '-f', '-'], podManifest('boxed', a.image, 'echo boxed; exec sleep 4905', { runtime: 'gvisor' }))
  assert.equal(ok.exitCode, 0, ok.stderr)
  await running('boxed')

  // the sandbox pod that ran before the policy is stopped on its node, and orc why says why
  const p = await waitFor(
    'plain stopped',
    async () => {
      const x = await a.pod('plain')
      return x?.status?.phase === 'Pending' ? x : undefined
    },
    30_000,
  )
  assert.match(p.status.reason, /requires gvisor/)
  await waitFor('orc why shows check-security refusing', async () => {
    const w = await a.orc(['why', 'pod/plain'])
    return /check-security\s+failed/.test(w.stdout) && /asks for runtime sandbox, but namespace default requires gvisor/.test(w.stdout) ? w : undefined
  })
})
