import assert from 'node:assert/strict'
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { closedAncestor } from '../../../src/agent/agent.ts'

// Pods run as an unprivileged uid and must pass through every directory above the data dir to
// reach its images; the agent warns at start when one of them is closed.
test('finds the closed directory above a data dir', () => {
  const base = mkdtempSync(join(tmpdir(), 'orc-dd-'))
  try {
    chmodSync(base, 0o755)
    const priv = join(base, 'private')
    mkdirSync(join(priv, 'orc'), { recursive: true })
    chmodSync(priv, 0o700)
    assert.equal(closedAncestor(join(priv, 'orc')), priv)
    chmodSync(priv, 0o711)
    assert.equal(closedAncestor(join(priv, 'orc')), undefined)
  } finally {
    rmSync(base, { recursive: true, force: true })
  }
})
