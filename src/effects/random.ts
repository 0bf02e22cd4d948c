/** Randomness, as every component is given it: seeded in tests and the simulator. */
import { randomBytes } from 'node:crypto'

/** `n` random bytes (identity seeds, keys, ids, nonces, sampling). */
export type Random = (n: number) => Uint8Array

export const systemRandom: Random = (n) => new Uint8Array(randomBytes(n))

/** `bytes` random bytes as lowercase hex (ids, temporary file names). */
export function randomHex(random: Random, bytes: number): string {
  return Buffer.from(random(bytes)).toString('hex')
}
