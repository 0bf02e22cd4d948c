// Jobs and CronJobs on three real agents (separate processes, real mesh, real sandboxes): a Job with
// completions 3 and parallelism 2 ends with exactly 3 successes although a node running one of its
// pods is killed (the pod is run again elsewhere, not counted twice, also once the node is back);
// a CronJob ticking every 5 seconds makes one Job per tick across the three agents.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { type NodeProcess, newNode, orc, tokenFrom, Workspace, waitFor } from '../cluster/helpers.ts'
import { TEST_TUNABLES as POD_TUNABLES, pidsRunning, skipReason } from '../pods/helpers.ts'
import { podOn, sharedBusybox } from './helpers.ts'

const skip = skipReason()

async function apply(node: NodeProcess, obj: unknown): Promise<void> {
  const r = await orc(node.socket, ['apply', '-f', '-'], {}, JSON.stringify(obj))
  assert.equal(r.exitCode, 0, r.stderr)
}

async function list(node: NodeProcess, kind: string): Promise<Record<string, any>[]> {
  const r = (await node.client.call('GET', `/v1/objects/${kind}?namespace=default`)) as { items: Record<string, any>[] }
  return r.items
}

test('Jobs and CronJobs on three real agents', { skip, timeout: 300_000 }, async (t) => {
  const ws = new Workspace()
  const script = 'sleep 6; echo done 4711301'
  const cronScript = 'echo tick 4711302'
  t.after(async () => {
    await ws.close()
    for (const pid of [...pidsRunning(['sh', '-c', script]), ...pidsRunning(['sh', '-c', cronScript])])
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
  })
  const image = await sharedBusybox(ws)
  const nodes = [await newNode(ws, 'a'), await newNode(ws, 'b'), await newNode(ws, 'c')]
  const [a, b, c] = nodes as [NodeProcess, NodeProcess, NodeProcess]
  for (const n of nodes) n.env = { ORC_POD_TUNABLES: JSON.stringify(POD_TUNABLES), ORC_SOCKET_USER: 'admin' }
  await a.up().ready()
  await b.join(a.addr, await tokenFrom(a)).ready()
  await c.join(a.addr, await tokenFrom(a)).ready()
  for (const n of nodes)
    await waitFor(
      `${n.name} to see three alive members`,
      async () => JSON.parse((await n.cli(['status', '-o', 'json'])).stdout).mesh.members.alive === 3,
      30_000,
    )
  const byName = new Map(nodes.map((n) => [n.name, n]))

  await t.test('a Job completes with exactly 3 successes while a node running one of its pods is killed', async () => {
    await apply(b, {
      apiVersion: 'orc/v1',
      kind: 'Job',
      metadata: { name: 'batch' },
      spec: {
        completions: 3,
        parallelism: 2,
        template: {
          spec: { haAfterSeconds: 2, terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sh', '-c', script] }] },
        },
      },
    })
    // Kill the node running the first pod (whichever it is; if it is a, the writer changes too).
    const victim = await waitFor(
      'batch-0 to run',
      async () => {
        const p = await podOn(c, 'batch-0')
        return p?.status?.phase === 'Running' ? (p.status.node as string) : undefined
      },
      40_000,
    )
    await byName.get(victim)!.kill('SIGKILL')
    const survivor = nodes.find((n) => n.name !== victim)!
    let last = ''
    const job = await waitFor(
      'the Job to complete',
      async () => {
        const j = (await list(survivor, 'Job')).find((x) => x.metadata.name === 'batch')
        last = JSON.stringify(j?.status)
        return j?.status?.conditions?.some((x: any) => x.type === 'Complete') ? j : undefined
      },
      120_000,
    ).catch((err) => assert.fail(`${err.message}; last status ${last}`))
    assert.equal(job.status.succeeded, 3)
    const pods = (await list(survivor, 'Pod')).filter((p) => p.metadata.labels?.['orc/job'] === 'batch')
    assert.deepEqual(
      pods.map((p) => [p.metadata.name, p.status?.phase]).sort(),
      [
        ['batch-0', 'Succeeded'],
        ['batch-1', 'Succeeded'],
        ['batch-2', 'Succeeded'],
      ],
      'three pods, each succeeded once',
    )
    const moved = pods.find((p) => p.metadata.name === 'batch-0')!
    assert.notEqual(moved.status.node, victim, 'the lost pod ran again on a live node')
    assert.equal(moved.status.scheduling?.from, victim)
    const table = await survivor.cli(['get', 'jobs'])
    assert.match(table.stdout, /^NAME\s+STATUS\s+COMPLETIONS\s+DURATION\s+AGE/m)
    assert.match(table.stdout, /^batch\s+Complete\s+3\/3\s+\d+s/m)
    // orc logs job/NAME: the newest pod's output, saying which pod it is.
    const logs = await survivor.cli(['logs', 'job/batch'])
    assert.equal(logs.exitCode, 0, logs.stderr)
    assert.equal(logs.stdout, 'done 4711301\n')
    assert.equal(logs.stderr, 'job/batch has 3 pods; showing the newest, pod/batch-2\n')
    assert.match((await survivor.cli(['logs', 'job/nothing'])).stderr, /^error: job\/nothing has no pods in namespace default/)
    // The killed node comes back with its stale view: still exactly 3 successes, no new pod.
    await byName.get(victim)!.up().ready()
    await waitFor(
      `${victim} to see three alive members`,
      async () => JSON.parse((await byName.get(victim)!.cli(['status', '-o', 'json'])).stdout).mesh.members.alive === 3,
      40_000,
    )
    await waitFor(
      `${victim} to have the Job complete`,
      async () => {
        const j = (await list(byName.get(victim)!, 'Job')).find((x) => x.metadata.name === 'batch')
        return j?.status?.conditions?.some((x: any) => x.type === 'Complete') ? true : undefined
      },
      40_000,
    )
    for (const n of nodes) {
      const j = (await list(n, 'Job')).find((x) => x.metadata.name === 'batch')!
      assert.equal(j.status.succeeded, 3, `${n.name} counts 3`)
      assert.equal((await list(n, 'Pod')).filter((p) => p.metadata.labels?.['orc/job'] === 'batch').length, 3)
    }
    assert.equal((await a.cli(['delete', 'job/batch'])).exitCode, 0)
  })

  await t.test('a failed pod is replaced only after the back-off, and the Job fails past backoffLimit', async () => {
    await apply(a, {
      apiVersion: 'orc/v1',
      kind: 'Job',
      metadata: { name: 'flaky' },
      spec: {
        backoffLimit: 1,
        template: { spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sh', '-c', 'exit 3'] }] } },
      },
    })
    const job = await waitFor(
      'flaky to fail',
      async () => {
        const j = (await list(a, 'Job')).find((x) => x.metadata.name === 'flaky')
        return j?.status?.conditions?.some((x: any) => x.reason === 'BackoffLimitExceeded') ? j : undefined
      },
      90_000,
    )
    assert.equal(job.status.failed, 2)
    const pods = (await list(a, 'Pod')).filter((p) => p.metadata.labels?.['orc/job'] === 'flaky')
    const first = pods.find((p) => p.metadata.name === 'flaky-0')!
    const second = pods.find((p) => p.metadata.name === 'flaky-1')!
    const failedAt = Date.parse(first.status.containers[0].finishedAt)
    const replacedAt = Date.parse(second.metadata.createdAt)
    assert.ok(replacedAt - failedAt >= 10_000, `flaky-1 was created ${replacedAt - failedAt} ms after flaky-0 failed (back-off 10 s)`)
    const hist = JSON.parse((await a.cli(['history', 'pod/flaky-1', '-o', 'json'])).stdout)
    assert.match(hist[0].reason, /^job\/flaky: pod 1 \(after 1 failed, 10s back-off\)$/)
    assert.equal((await a.cli(['delete', 'job/flaky'])).exitCode, 0)
  })

  await t.test('a suspended Job stops its pod and shows Suspended; resumed, it runs to completion', async () => {
    const manifest = (suspend: boolean) => ({
      apiVersion: 'orc/v1',
      kind: 'Job',
      metadata: { name: 'pausable' },
      spec: {
        suspend,
        template: { spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sh', '-c', 'sleep 4; echo ok'] }] } },
      },
    })
    await apply(b, manifest(false))
    await waitFor('pausable-0 to run', async () => ((await podOn(b, 'pausable-0'))?.status?.phase === 'Running' ? true : undefined), 40_000)
    await apply(b, manifest(true))
    await waitFor(
      'the suspended Job to stop its pod',
      async () => {
        const j = (await list(c, 'Job')).find((x) => x.metadata.name === 'pausable')
        const pods = (await list(c, 'Pod')).filter((p) => p.metadata.labels?.['orc/job'] === 'pausable')
        return j?.status?.conditions?.some((x: any) => x.type === 'Suspended' && x.status === 'True') && pods.length === 0 ? true : undefined
      },
      40_000,
    )
    assert.match((await c.cli(['get', 'jobs'])).stdout, /^pausable\s+Suspended\s+0\/1/m)
    await apply(b, manifest(false))
    const done = await waitFor(
      'the resumed Job to complete',
      async () => {
        const j = (await list(a, 'Job')).find((x) => x.metadata.name === 'pausable')
        return j?.status?.conditions?.some((x: any) => x.type === 'Complete') ? j : undefined
      },
      60_000,
    )
    assert.deepEqual(
      done.status.conditions.map((x: any) => [x.type, x.status, x.reason]),
      [
        ['Suspended', 'False', 'JobResumed'],
        ['Complete', 'True', 'Completed'],
      ],
    )
    assert.equal((await a.cli(['delete', 'job/pausable'])).exitCode, 0)
  })

  await t.test('a CronJob every 5 seconds makes one Job per tick across the three agents', async () => {
    await apply(c, {
      apiVersion: 'orc/v1',
      kind: 'CronJob',
      metadata: { name: 'tick' },
      spec: {
        schedule: '*/5 * * * * *',
        successfulJobsHistoryLimit: 100,
        failedJobsHistoryLimit: 100,
        jobTemplate: {
          spec: { template: { spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sh', '-c', cronScript] }] } } },
        },
      },
    })
    const runs = await waitFor(
      'four runs',
      async () => {
        const js = (await list(a, 'Job')).filter((j) => j.metadata.labels?.['orc/cronjob'] === 'tick')
        return js.length >= 4 ? js : undefined
      },
      60_000,
    )
    await apply(c, {
      apiVersion: 'orc/v1',
      kind: 'CronJob',
      metadata: { name: 'tick' },
      spec: {
        schedule: '*/5 * * * * *',
        suspend: true,
        successfulJobsHistoryLimit: 100,
        failedJobsHistoryLimit: 100,
        jobTemplate: {
          spec: { template: { spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image, command: ['sh', '-c', cronScript] }] } } },
        },
      },
    })
    const times = runs.map((j) => Number(j.metadata.labels['orc/scheduled'])).sort((x, y) => x - y)
    for (const s of times) assert.equal(s % 5, 0, 'on the schedule')
    assert.equal(new Set(times).size, times.length, 'one Job per tick')
    for (const j of runs) {
      const h = (await b.client.call('GET', `/v1/objects/Job/default/${j.metadata.name}/history`)) as { revisions: { op: string; author: string }[] }
      const creates = h.revisions.filter((r) => r.op === 'create')
      assert.deepEqual(
        creates.map((r) => r.author),
        ['controller:cronjob'],
        `${j.metadata.name} created once`,
      )
    }
    // Each run ran its pod to success.
    await waitFor(
      'the runs to complete',
      async () => {
        const js = (await list(b, 'Job')).filter((j) => times.includes(Number(j.metadata.labels?.['orc/scheduled'])))
        return js.every((j) => j.status?.conditions?.some((x: any) => x.type === 'Complete')) ? true : undefined
      },
      60_000,
    )
    // Run it now, by hand: an ordinary Job from the template, not counted as one of the CronJob's runs.
    const made = await a.cli(['create', 'job', 'tick-now', '--from', 'cronjob/tick'])
    assert.equal(made.exitCode, 0, made.stderr)
    assert.equal(made.stdout, 'job/tick-now created\n')
    await waitFor(
      'tick-now to complete',
      async () => ((await list(c, 'Job')).find((j) => j.metadata.name === 'tick-now')?.status?.succeeded === 1 ? true : undefined),
      60_000,
    )
    const again = await a.cli(['create', 'job', 'tick-now', '--from', 'cronjob/tick'])
    assert.notEqual(again.exitCode, 0)
    assert.match(again.stderr, /job\/tick-now already exists/)
    const table = await b.cli(['get', 'cronjobs'])
    assert.match(table.stdout, /^NAME\s+SCHEDULE\s+SUSPEND\s+ACTIVE\s+LAST SCHEDULE\s+AGE/m)
    assert.match(table.stdout, /^tick\s+\*\/5 \* \* \* \* \*\s+true\s+\d+\s+\d+s/m)
  })
})
