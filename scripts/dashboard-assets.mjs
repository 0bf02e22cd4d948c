// The dashboard's browser assets (src/cli/dashboard/ui/): the app with Preact and htm bundled into
// one ES module by esbuild, its stylesheet and its page. Used twice, so both serve the same bytes:
// - inside dist/orc.mjs and the install package: bundle-options.mjs's plugin puts them in the bundle
//   as strings (an installed orc has no esbuild and no node_modules to read them from);
// - from the TypeScript sources (a checkout whose bundle is stale): src/cli/dashboard/assets.ts
//   builds them once at the dashboard's start.
// No CDN at run time: everything the page loads comes from the dashboard server.
import { readFileSync } from 'node:fs'

/** The files the dashboard serves, by URL path. */
export async function buildDashboardAssets(esbuild, root) {
  const ui = `${root}/src/cli/dashboard/ui`
  const r = await esbuild.build({
    entryPoints: [`${ui}/app.js`],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2020',
    minify: true,
    write: false,
    legalComments: 'none',
    logLevel: 'error',
  })
  return {
    '/': readFileSync(`${ui}/index.html`, 'utf8'),
    '/app.js': r.outputFiles[0].text,
    '/style.css': readFileSync(`${ui}/style.css`, 'utf8'),
  }
}

/** esbuild plugin: replaces src/cli/dashboard/embedded.ts (which exports undefined) with the built assets. */
export function dashboardAssetsPlugin(root) {
  return {
    name: 'orc-dashboard-assets',
    setup(build) {
      build.onLoad({ filter: /[\\/]cli[\\/]dashboard[\\/]embedded\.ts$/ }, async () => {
        const assets = await buildDashboardAssets(build.esbuild, root)
        return { contents: `export const EMBEDDED_ASSETS = ${JSON.stringify(assets)}`, loader: 'js' }
      })
    },
  }
}
