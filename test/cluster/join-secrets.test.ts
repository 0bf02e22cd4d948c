// `orc join` takes its token from a file, stdin or ORC_TOKEN, and never from its arguments: while
// it runs, no process's /proc/PID/cmdline (what `ps` shows every user) holds the token. A token
// given as an argument is refused with a line naming the other ways.

import assert from 'node:assert/strict'
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { execa } from 'execa'
import { NODE_ENV, NODE_FLAGS } from '../../src/agent/ops/node-flags.ts'
import { ApiClient } from '../../src/cli/client.ts'
import { watchCmdlines } from '../helpers/cmdline.ts'
import { BIN, freePort, newNode, nodeNames, ROOT, TEST_TUNABLES, tokenFrom, Workspace, waitFor } from './helpers.ts'

test('orc join: the token never shows in any process command line', async (t) => {
  const ws = new Workspace()
  t.after(() => ws.close())
  const a = await newNode(ws, 'a')
  await a.up().ready()

  const ways: Array<[string, (token: string, dir: string) => { args: string[]; env?: Record<string, string>; input?: string }]> = [
    [
      '--token-file',
      (token, dir) => {
        const file = `${dir}.token`
        writeFileSync(file, `${token}\n`, { mode: 0o600 })
        return { args: ['--token-file', file] }
      },
    ],
    ['--token - (stdin)', (token) => ({ args: ['--token', '-'], input: `${token}\n` })],
    ['ORC_TOKEN', (token) => ({ args: [], env: { ORC_TOKEN: token } })],
  ]
  let n = 0
  for (const [way, how] of ways) {
    await t.test(way, async () => {
      const name = `b${n++}`
      const token = await tokenFrom(a)
      const dir = ws.dir(name)
      const port = await freePort()
      const h = how(token, dir)
      const watch = watchCmdlines(token, new RegExp(`join .*--data-dir ${dir}`))
      const proc = execa(
        process.execPath,
        [...NODE_FLAGS, BIN, 'join', a.addr, ...h.args, '--data-dir', dir, '--name', name, '--listen', `127.0.0.1:${port}`, '--http-listen', 'off'],
        {
          cwd: ROOT,
          reject: false,
          input: h.input ?? '',
          env: { ...NODE_ENV, ORC_LOG_LEVEL: 'warn', USER: 'tester', ORC_MESH_TUNABLES: TEST_TUNABLES, ORC_TOKEN: '', ...h.env },
        },
      )
      try {
        await waitFor(
          `${name} to join`,
          async () => {
            if (proc.exitCode !== null && proc.exitCode !== undefined) throw new Error(`join exited ${proc.exitCode}: ${(await proc).stderr}`)
            await new ApiClient(join(dir, 'orc.sock')).call('GET', '/v1/status')
            return true
          },
          30_000,
        )
        await waitFor(`a to list ${name}`, async () => (await nodeNames(a)).includes(name))
      } finally {
        proc.kill('SIGTERM')
        await proc
      }
      const { leaks, seen } = await watch.stop()
      assert.ok(seen.length > 0, 'the watch saw the orc join process')
      assert.deepEqual(leaks, [], 'no command line holds the token')
    })
  }

  await t.test('a token as an argument is refused, naming the other ways, and nothing is created', async () => {
    const token = await tokenFrom(a)
    const dir = ws.dir('x')
    const r = await execa(process.execPath, [...NODE_FLAGS, BIN, 'join', a.addr, '--token', token, '--data-dir', dir], {
      cwd: ROOT,
      reject: false,
      env: { USER: 'tester', ORC_TOKEN: '' },
    })
    assert.equal(r.exitCode, 1, r.stderr)
    assert.match(
      String(r.stderr),
      /^error: a join token on the command line is visible to every user of this machine .*--token-file FILE, --token - \(stdin\) or the ORC_TOKEN environment variable/m,
    )
    assert.equal(existsSync(dir), false)
  })

  await t.test('no token at all names the ways to give one', async () => {
    const r = await execa(process.execPath, [...NODE_FLAGS, BIN, 'join', a.addr, '--data-dir', ws.dir('y')], {
      cwd: ROOT,
      reject: false,
      env: { USER: 'tester', ORC_TOKEN: '' },
    })
    assert.equal(r.exitCode, 1)
    assert.match(String(r.stderr), /^error: a join token is required: pass it with --token-file FILE/m)
  })
})
