// The esbuild options of orc's one bundle, shared by `scripts/build.mjs` (dist/orc.mjs of a checkout)
// and the install package a node serves (src/agent/ops/package.ts), so both run the same code.
//
// Every pure-JS npm package goes inside: Node then loads a few files instead of ~700 ES modules, which
// takes a CLI call from ~1.3 s to ~0.4 s and an idle agent's RSS down by ~5 MB (docs/benchmarks.md,
// docs/decisions.md "One bundle"). The output is split at dynamic imports (dist/orc.mjs and
// dist/chunks/): a CLI call does not parse the agent it never starts (~0.25 s instead of ~0.5 s of
// CPU a call). Kept out:
// - NATIVE: packages that load native code from their own directory (travel with the install package);
// - esbuild: only a checkout uses it (to build the install package), and it runs its own binary.
// The dashboard's browser assets go inside as strings (scripts/dashboard-assets.mjs).
// Whitespace and syntax are minified, identifiers are not: stack traces keep readable names.

import { dashboardAssetsPlugin } from './dashboard-assets.mjs'

/** npm packages kept out of the bundle because they load native code from their own directory. */
export const NATIVE_PACKAGES = ['classic-level']

/** esbuild options for a bundle of `root`'s sources: `outdir`/orc.mjs and its chunks under `outdir`/chunks. */
export function bundleOptions({ root, outdir, version }) {
  return {
    entryPoints: { orc: `${root}/src/cli/entry.ts` },
    outdir,
    outExtension: { '.js': '.mjs' },
    splitting: true,
    chunkNames: 'chunks/[name]-[hash]',
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: [...NATIVE_PACKAGES, 'esbuild'],
    minifyWhitespace: true,
    minifySyntax: true,
    // Bundled CommonJS dependencies call require() for Node's built-ins.
    banner: { js: "import { createRequire as __orcRequire } from 'node:module'; const require = __orcRequire(import.meta.url);" },
    define: { __ORC_VERSION__: JSON.stringify(version) },
    plugins: [dashboardAssetsPlugin(root)],
    logLevel: 'error',
  }
}
