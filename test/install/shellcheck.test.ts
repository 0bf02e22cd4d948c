// The install script runs as root on machines orc does not know yet: shellcheck (Debian) must find
// nothing in it, as served (placeholders filled in) and as kept in the sources.

import assert from 'node:assert/strict'
import { test } from 'node:test'
import { execa } from 'execa'
import { installScriptPath, renderInstallScript } from '../../src/agent/ops/package.ts'

test('shellcheck finds nothing in install.sh', async (t) => {
  const v = await execa('shellcheck', ['--version'], { reject: false })
  if (v.exitCode !== 0) return t.skip('skipped: shellcheck is not installed (apt install shellcheck)')
  const served = await renderInstallScript({
    server: 'https://192.0.2.1:7418',
    pin: 'sha256//47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=',
    version: '9.9.9',
    peer: '192.0.2.1:7419',
    sha256: 'ab'.repeat(32),
    nodeArch: 'x86_64',
    nodeVersion: '20.20.0',
    nodeSha256: 'cd'.repeat(32),
  })
  for (const [what, args, input] of [
    ['source', [installScriptPath()], undefined],
    ['served', ['-s', 'sh', '-'], served],
  ] as const) {
    const r = await execa('shellcheck', [...args], { reject: false, input, all: true })
    assert.equal(r.exitCode, 0, `${what}: ${r.all}`)
  }
})
