import { readFileSync } from 'node:fs'

declare const __ORC_VERSION__: string | undefined

/** The version of this orc: set at build time in the bundle, read from package.json from source. */
export const ORC_VERSION: string = (() => {
  if (typeof __ORC_VERSION__ === 'string') return __ORC_VERSION__
  try {
    return JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version as string
  } catch {
    return 'unknown'
  }
})()

/** A host name made into a DNS label (`My_Host.local` → `my-host`). */
export function nodeNameFromHostname(h: string): string {
  const label = h
    .split('.')[0]!
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 63)
    .replace(/-+$/, '')
  return label || 'node'
}

/** Author of what the agent writes about its own node and cluster. */
export const NODE_CONTROLLER = 'controller:node'
