/**
 * The dashboard's browser assets when orc runs from its bundle: the bundler replaces this module
 * with the built files (scripts/dashboard-assets.mjs). From the sources it is undefined and
 * assets.ts builds them.
 */
export const EMBEDDED_ASSETS: Record<string, string> | undefined = undefined
