/**
 * Debian's Chromium driven headless by puppeteer-core (no browser download), for the dashboard's
 * tests and benchmark. A missing browser is a failure, except where scripts/setup.sh could not
 * have installed it (not root, or no apt-get): then the test says "skipped: <reason>".
 */
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import puppeteer, { type Browser } from 'puppeteer-core'

export const CHROMIUM = process.env.ORC_CHROMIUM ?? '/usr/bin/chromium'

function hasCommand(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** Why the browser tests cannot run here, or undefined: they run (and fail loudly if Chromium does not start). */
export function browserSkipReason(): string | undefined {
  if (existsSync(CHROMIUM)) return undefined
  if (process.getuid?.() !== 0 || !hasCommand('apt-get')) {
    const reason = `${CHROMIUM} is missing and scripts/setup.sh could not install the Debian package chromium (it needs root and apt-get)`
    console.log(`skipped: ${reason}`)
    return reason
  }
  return undefined
}

/**
 * Headless Chromium. As root Chromium refuses to start without --no-sandbox: the tests accept that
 * (the pages are the dashboard's own, on 127.0.0.1); as another user its sandbox stays on.
 */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run scripts/setup.sh (it installs the Debian package chromium)`)
  const args = ['--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check', '--disable-extensions']
  if (process.getuid?.() === 0) args.push('--no-sandbox')
  try {
    return await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args, protocolTimeout: 60_000 })
  } catch (err) {
    throw new Error(`start ${CHROMIUM} headless: ${(err as Error).message}`)
  }
}

/** A PNG's width and height from its IHDR chunk; throws when the file is not a PNG. */
export function pngSize(file: string): { width: number; height: number; bytes: number } {
  const b = readFileSync(file)
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  if (b.length < 33 || !b.subarray(0, 8).equals(sig) || b.toString('latin1', 12, 16) !== 'IHDR') throw new Error(`${file} is not a PNG`)
  return { width: b.readUInt32BE(16), height: b.readUInt32BE(20), bytes: b.length }
}
