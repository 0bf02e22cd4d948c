// Three real agents and one real registry (Debian's docker-registry, behind a counting proxy that
// the test can take away): one image started on all three nodes at once is pulled from the registry
// once; an ha pod that fails over runs the digest its revision pinned although the tag has moved;
// with the registry gone a node gets an image from a member, and rollback restores the previous
// digest.

import assert from 'node:assert/strict'
import { chmodSync, readFileSync } from 'node:fs'
import { test } from 'node:test'
import type { TarEntry } from '../../src/runtime/index.ts'
import { type NodeProcess, newNode, orc, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { busyboxLayerEntries } from '../fixtures/busybox-image.ts'
import { countingProxy, pushImage, registryBlobPath, registryMissing, startRegistry } from '../helpers/registry.ts'
import { pidsRunning, skipReason } from '../pods/helpers.ts'
import { podOn } from '../sched/helpers.ts'

const skip = skipReason() ?? registryMissing()
const MARKER = '4719301'

const versionLayer = (v: string): TarEntry[] => [{ path: 'etc/version', type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, data: Buffer.from(`${v}\n`) }]
const image = (v: string) => ({ layers: [busyboxLayerEntries(), versionLayer(v)] })

function pod(name: string, img: string, spec: Record<string, unknown> = {}): string {
  return JSON.stringify({
    apiVersion: 'orc/v1',
    kind: 'Pod',
    metadata: { name },
    spec: {
      terminationGracePeriodSeconds: 1,
      containers: [{ name: 'main', image: img, command: ['/bin/sh', '-c', `echo "version $(cat /etc/version)"; exec sleep ${MARKER}`] }],
      ...spec,
    },
  })
}

test('one image on three nodes: pulled once, a failover keeps its digest, peers serve it when the registry is gone, rollback restores the digest', {
  skip,
  timeout: 240_000,
}, async (t) => {
  const reg = await startRegistry({ listen: '127.0.0.1' })
  const proxy = await countingProxy(reg)
  const ws = new Workspace()
  // Pod sandboxes run as nobody and must pass through the workspace to each node's unpacked images.
  chmodSync(ws.root, 0o711)
  t.after(async () => {
    await ws.close()
    await proxy.close().catch(() => {})
    await reg.stop()
    for (const pid of pidsRunning(['sleep', MARKER]))
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
  })
  const d1 = await pushImage(reg, 'team/app:1', image('one'))
  const d2 = await pushImage(reg, 'team/app:2', image('two'))
  const app = (tag: string) => `${proxy.host}/team/app:${tag}`
  const manifest1 = JSON.parse(readFileSync(registryBlobPath(reg, d1), 'utf8')) as { config: { digest: string }; layers: { digest: string }[] }
  const blobs1 = [manifest1.config.digest, ...manifest1.layers.map((l) => l.digest)]

  const nodes = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')] as [NodeProcess, NodeProcess, NodeProcess]
  const [a] = nodes
  await a.up().ready()
  for (const n of nodes.slice(1)) await n.join(a.addr, await tokenFrom(a)).ready()
  for (const n of nodes) {
    await waitFor(
      `${n.name} to see three alive members`,
      async () => JSON.parse((await n.cli(['status', '-o', 'json'])).stdout).mesh.members.alive === 3,
      30_000,
    )
  }
  const byName = new Map(nodes.map((n) => [n.name, n]))
  // What the agents refused of each other (a refusal scored as garbage disconnects a member).
  t.after(() => {
    for (const n of nodes)
      for (const line of n.stderr.split('\n')) if (/peer sent garbage|message refused|"level":50/.test(line)) t.diagnostic(`${n.name}: ${line.slice(0, 600)}`)
  })
  const killed = new Set<NodeProcess>()
  const apply = async (via: NodeProcess, text: string) => {
    const r = await orc(via.socket, ['apply', '-f', '-'], {}, text)
    assert.equal(r.exitCode, 0, r.stderr)
  }
  const runs = async (via: NodeProcess, name: string, line: string) => {
    try {
      return await waitFor(
        `pod/${name} to print "${line}"`,
        async () => {
          const p = await podOn(via, name)
          if (p?.status?.phase !== 'Running') return undefined
          const logs = await via.cli(['logs', `pod/${name}`])
          return logs.stdout.includes(line) ? (p as Record<string, any>) : undefined
        },
        90_000,
      )
    } catch (err) {
      const why = await via.cli(['why', `pod/${name}`])
      const logs = await via.cli(['logs', `pod/${name}`])
      // An agent that died unasked for says why in its last lines.
      const dead = nodes
        .filter((n) => n.exited && !killed.has(n))
        .map((n) => `\nagent ${n.name} exited (${n.exitCode}):\n${n.stderr.split('\n').slice(-30).join('\n')}`)
      // A live agent that others see as unreachable: does it answer its own socket, and how busy is it?
      for (const n of nodes.filter((x) => !x.exited)) {
        const st = await n.cli(['status', '-o', 'json']).catch((e: Error) => ({ stdout: '', stderr: e.message, exitCode: -1 }))
        let members = ''
        try {
          members = JSON.stringify(JSON.parse(st.stdout).mesh.members)
        } catch {
          members = `${st.stderr}`.slice(0, 300)
        }
        let cpu = ''
        try {
          cpu = readFileSync(`/proc/${n.proc?.pid}/stat`, 'utf8').split(' ').slice(13, 15).join(' ')
        } catch {}
        dead.push(`\nagent ${n.name} (running, utime stime ${cpu}): members ${members}\n${n.stderr.split('\n').slice(-15).join('\n')}`)
      }
      throw new Error(`${(err as Error).message}\norc why:\n${why.stdout}${why.stderr}\nlogs:\n${logs.stdout}${logs.stderr}${dead.join('')}`)
    }
  }

  await t.test('started on all three at once, each blob comes from the registry once', async () => {
    await apply(a, nodes.map((n) => pod(`p-${n.name}`, app('1'), { placement: { node: n.name } })).join('\n---\n'))
    for (const n of nodes) {
      const p = await runs(a, `p-${n.name}`, 'version one')
      assert.equal(p.status.images[0].digest, d1)
    }
    for (const d of blobs1) assert.equal(proxy.blobGets.get(d), 1, `blob ${d} taken from the registry ${proxy.blobGets.get(d)} times`)
    // The bytes each node took from members (pulls' own accounting, as `orc image pull` shows it).
    let fromPeers = 0
    for (const n of nodes) {
      const r = (await n.client.call('GET', '/v1/images')) as { pulls: { bytes?: { peers: number } }[] }
      fromPeers += r.pulls.reduce((s, p) => s + (p.bytes?.peers ?? 0), 0)
    }
    assert.ok(fromPeers > 0, 'members served blobs')
  })

  let survivors: NodeProcess[] = []
  await t.test('an ha pod fails over to the digest its revision pinned, not what the moved tag names', async () => {
    await apply(a, pod('web', app('1'), { policy: 'ha', haAfterSeconds: 4 }))
    const first = await runs(a, 'web', 'version one')
    assert.equal(first.status.images[0].digest, d1)
    const d1b = await pushImage(reg, 'team/app:1', image('one-b'))
    assert.notEqual(d1b, d1)
    const victim = byName.get(first.status.node as string)!
    assert.ok(victim, `web runs on a node of the cluster (${first.status.node})`)
    survivors = nodes.filter((n) => n !== victim)
    killed.add(victim)
    await victim.kill('SIGKILL')
    const moved = await waitFor(
      'web to run on another node',
      async () => {
        const p = await podOn(survivors[0]!, 'web')
        return p?.status?.phase === 'Running' && p.status.node !== victim.name ? p : undefined
      },
      90_000,
    )
    assert.equal(moved.status.images[0].digest, d1, 'the same digest for the same revision on another node')
    const logs = await survivors[0]!.cli(['logs', 'pod/web'])
    assert.match(logs.stdout, /version one\n/)
    assert.doesNotMatch(logs.stdout, /one-b/)
  })

  await t.test('with the registry gone, a node gets an image from the member that has it; rollback restores the previous digest', async () => {
    const [s0, s1] = survivors as [NodeProcess, NodeProcess]
    // s0 runs tag 2 (registry still there), then the registry goes away.
    await apply(s0, pod(`p-${s0.name}`, app('2'), { placement: { node: s0.name } }))
    const two = await runs(s0, `p-${s0.name}`, 'version two')
    assert.equal(two.status.images[0].digest, d2)
    await proxy.close()
    // s1 never pulled tag 2: by digest, from s0.
    await apply(s0, pod('late', `${app('2')}@${d2}`, { placement: { node: s1.name } }))
    await runs(s0, 'late', 'version two')
    // s1 never pulled tag 2: the tag cannot be resolved there now; the pod says so and waits.
    await apply(s0, pod('by-tag', app('2'), { placement: { node: s1.name } }))
    const why = await waitFor(
      'orc why to say the registry is unreachable',
      async () => {
        const r = await s0.cli(['why', 'pod/by-tag'])
        return /unreachable/.test(r.stdout) ? r.stdout : undefined
      },
      60_000,
    )
    assert.match(why, /pull-image/)
    // s0 pulled tag 2 itself: a new pod there resolves it to the digest it last pulled.
    await apply(s0, pod('again', app('2'), { placement: { node: s0.name } }))
    const again = await runs(s0, 'again', 'version two')
    assert.equal(again.status.images[0].digest, d2)
    // Rollback of s0's pod: revision 1 ran d1 (the tag now names other bytes).
    const rb = await s0.cli(['rollback', `pod/p-${s0.name}`])
    assert.equal(rb.exitCode, 0, rb.stderr)
    const back = await waitFor(
      'the rollback to run d1',
      async () => {
        const p = await podOn(s0, `p-${s0.name}`)
        return p?.status?.phase === 'Running' && p.status.images?.[0]?.digest === d1 ? p : undefined
      },
      60_000,
    )
    assert.equal(back.spec.containers[0].image, `${app('1')}@${d1}`)
  })
})
