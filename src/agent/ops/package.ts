/**
 * The package a node serves to new machines (`/install/orc-VERSION.tar.gz`): the orc it runs, as
 * a self-contained bundle (dist/orc.mjs and its chunks, every pure-JS dependency inside), the few npm
 * packages that carry native code (classic-level and what it requires), a launcher and the install
 * script. About 4 MB compressed; no registry is involved.
 *
 * From a checkout the bundle is built with esbuild from the sources this process runs; an installed
 * node (its root holds `.orc-package`) serves its own installation tree as it is.
 */

import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { cpSync, createReadStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { OrcError, wrapError } from '../../model/index.ts'

const run = promisify(execFile)

/** scripts/bundle-options.mjs (plain JS, so that scripts/build.mjs runs without tsx). */
export interface BundleOptionsModule {
  NATIVE_PACKAGES: string[]
  bundleOptions(o: { root: string; outdir: string; version: string }): import('esbuild').BuildOptions
}

/** Marker file at the root of an installed package (holds the package's sha256). */
export const PACKAGE_MARKER = '.orc-package'

export interface OrcPackage {
  version: string
  /** File name users see: orc-VERSION.tar.gz */
  name: string
  path: string
  sha256: string
  bytes: number
}

/** The directory holding orc's package.json (a checkout, or an installed package). */
export function orcRoot(from: string = fileURLToPath(import.meta.url)): string {
  let dir = dirname(from)
  for (;;) {
    const pj = join(dir, 'package.json')
    if (existsSync(pj)) {
      try {
        if (JSON.parse(readFileSync(pj, 'utf8')).name === 'orc') return dir
      } catch {
        // not ours; keep looking
      }
    }
    const up = dirname(dir)
    if (up === dir) throw new OrcError('not_found', `cannot find orc's package.json above ${from}`)
    dir = up
  }
}

/** Where the install script lives: in the sources of a checkout, or at the root of a package. */
export function installScriptPath(root: string = orcRoot()): string {
  for (const p of [join(root, 'src/agent/ops/install.sh'), join(root, 'install.sh')]) if (existsSync(p)) return p
  throw new OrcError('not_found', `install.sh is missing from ${root}`)
}

/** `name` and every package it requires, transitively, as found under `root/node_modules`. */
export function packageClosure(root: string, names: string[]): string[] {
  const seen = new Set<string>()
  const queue = [...names]
  while (queue.length > 0) {
    const n = queue.pop()!
    if (seen.has(n)) continue
    seen.add(n)
    const pj = join(root, 'node_modules', n, 'package.json')
    if (!existsSync(pj)) throw new OrcError('not_found', `package ${n} is not installed under ${root}/node_modules`)
    const deps = JSON.parse(readFileSync(pj, 'utf8')).dependencies ?? {}
    queue.push(...Object.keys(deps))
  }
  return [...seen].sort()
}

const LAUNCHER = `#!/usr/bin/env node
// orc launcher of an installed package: \`orc get pods | head\` closing the pipe is not an error.
for (const s of [process.stdout, process.stderr]) {
  s.on('error', (err) => {
    if (err.code === 'EPIPE') process.exit(0)
    throw err
  })
}
await import('./dist/orc.mjs')
`

/** Build the package tree of this checkout in `stage` (self-contained bundle + native packages). */
async function stageFromCheckout(root: string, stage: string, version: string): Promise<void> {
  let esbuild: typeof import('esbuild')
  try {
    esbuild = await import('esbuild')
  } catch (err) {
    throw wrapError('load esbuild to bundle orc for the install package', err)
  }
  // The same options as the checkout's dist/orc.mjs (scripts/build.mjs), so the package runs that code.
  const { bundleOptions, NATIVE_PACKAGES } = (await import(pathToFileURL(join(root, 'scripts', 'bundle-options.mjs')).href)) as BundleOptionsModule
  await esbuild.build(bundleOptions({ root, outdir: join(stage, 'dist'), version }))
  for (const p of packageClosure(root, NATIVE_PACKAGES)) {
    cpSync(join(root, 'node_modules', p), join(stage, 'node_modules', p), { recursive: true, dereference: true })
  }
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
  writeFileSync(
    join(stage, 'package.json'),
    JSON.stringify({ name: 'orc', version, type: 'module', license: pkg.license, engines: pkg.engines }, null, 2) + '\n',
  )
  writeFileSync(join(stage, 'orc.mjs'), LAUNCHER, { mode: 0o755 })
  cpSync(installScriptPath(root), join(stage, 'install.sh'))
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256')
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer)
  return h.digest('hex')
}

/**
 * Build (once per call site; callers memoise) the package of the orc this process runs, into
 * `outDir`. An installed node packs its own tree; a checkout is bundled first.
 */
export async function buildPackage(opts: { version: string; outDir: string; root?: string }): Promise<OrcPackage> {
  const root = opts.root ?? orcRoot()
  const name = `orc-${opts.version}.tar.gz`
  mkdirSync(opts.outDir, { recursive: true, mode: 0o700 })
  const path = join(opts.outDir, name)
  const installed = existsSync(join(root, PACKAGE_MARKER))
  let stage = root
  let tmp: string | undefined
  try {
    if (!installed) {
      tmp = mkdtempSync(join(opts.outDir, 'stage-'))
      stage = tmp
      await stageFromCheckout(root, stage, opts.version)
    }
    const entries = ['package.json', 'orc.mjs', 'install.sh', 'dist', 'node_modules'].filter((e) => existsSync(join(stage, e)))
    // Fixed owner and mtime, sorted names: the same tree gives the same bytes.
    await run('tar', ['--sort=name', '--owner=0', '--group=0', '--numeric-owner', '--mtime=@0', '-czf', `${path}.new`, '-C', stage, ...entries], {
      env: { ...process.env, GZIP: '-n' },
    })
    await run('mv', ['-f', `${path}.new`, path])
  } catch (err) {
    throw wrapError(`build the install package ${name}`, err)
  } finally {
    if (tmp !== undefined) rmSync(tmp, { recursive: true, force: true })
  }
  return { version: opts.version, name, path, sha256: await sha256File(path), bytes: statSync(path).size }
}

/** The install script with what this node knows filled in. Holds nothing secret. */
export async function renderInstallScript(v: {
  server: string
  /** `sha256//…` of the server certificate's public key: the script fetches everything pinned to it. */
  pin: string
  version: string
  peer: string
  sha256: string
  nodeArch: string
  nodeVersion: string
  /** sha256 of the Node.js binary at /install/node ('' when none is served). */
  nodeSha256: string
  scriptPath?: string
}): Promise<string> {
  const text = await readFile(v.scriptPath ?? installScriptPath(), 'utf8')
  const safe = (s: string) => s.replace(/[^-A-Za-z0-9_.:/[\]@+=]/g, '')
  return text
    .replace('@@SERVER@@', safe(v.server))
    .replace('@@PIN@@', safe(v.pin))
    .replace('@@NODE_SHA256@@', safe(v.nodeSha256))
    .replace('@@VERSION@@', safe(v.version))
    .replace('@@PEER@@', safe(v.peer))
    .replace('@@SHA256@@', safe(v.sha256))
    .replace('@@NODE_ARCH@@', safe(v.nodeArch))
    .replace('@@NODE_VERSION@@', safe(v.nodeVersion))
}

/** `uname -m` spelling of Node's `process.arch`. */
export function unameArch(arch: string = process.arch): string {
  return { x64: 'x86_64', arm64: 'aarch64', arm: 'armv7l' }[arch] ?? arch
}
