/**
 * The files the dashboard serves: from the bundle when orc runs from dist/orc.mjs or an installed
 * package, else built from src/cli/dashboard/ui/ with esbuild (a checkout has it) by the same
 * function the bundler uses (scripts/dashboard-assets.mjs).
 */
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { OrcError } from '../../model/index.ts'
import { EMBEDDED_ASSETS } from './embedded.ts'

export interface Asset {
  body: string
  type: string
}

const TYPES: Record<string, string> = {
  '/': 'text/html; charset=utf-8',
  '/app.js': 'text/javascript; charset=utf-8',
  '/style.css': 'text/css; charset=utf-8',
}

interface AssetsModule {
  buildDashboardAssets(esbuild: unknown, root: string): Promise<Record<string, string>>
}

export async function loadDashboardAssets(): Promise<Map<string, Asset>> {
  let files = EMBEDDED_ASSETS
  if (files === undefined) {
    const root = new URL('../../..', import.meta.url).pathname
    try {
      const esbuild = await import('esbuild')
      const mod = (await import(pathToFileURL(join(root, 'scripts', 'dashboard-assets.mjs')).href)) as AssetsModule
      files = await mod.buildDashboardAssets(esbuild, root)
    } catch (err) {
      throw new OrcError('internal', `build the dashboard's page from ${root}src/cli/dashboard/ui: ${(err as Error).message}`, {}, err)
    }
  }
  const out = new Map<string, Asset>()
  for (const [path, body] of Object.entries(files)) out.set(path, { body, type: TYPES[path] ?? 'application/octet-stream' })
  return out
}
