/** Tagged frames shared by the stream protocols: one tag byte, then JSON or raw bytes. */
import { OrcError, type OrcErrorCode } from '../model/index.ts'
import type { FrameChannel } from './framing.ts'

export const Tag = {
  hello: 1,
  state: 2,
  chunk: 3,
  end: 4,
  error: 5,
  json: 6,
} as const
export type TagName = keyof typeof Tag

/** An error caused by what the remote peer sent: it is scored down and disconnected. */
export function peerFault(message: string, cause?: unknown): OrcError {
  return new OrcError('invalid', message, { peerFault: true }, cause)
}

export function isPeerFault(err: unknown): boolean {
  return err instanceof OrcError && err.details.peerFault === true
}

export function tagged(tag: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(1 + body.length)
  out[0] = tag
  out.set(body, 1)
  return out
}

export async function writeJson(ch: FrameChannel, tag: number, value: unknown): Promise<void> {
  await ch.write(tagged(tag, new TextEncoder().encode(JSON.stringify(value))))
}

export async function writeBytes(ch: FrameChannel, tag: number, bytes: Uint8Array): Promise<void> {
  await ch.write(tagged(tag, bytes))
}

export async function writeError(ch: FrameChannel, err: { code: string; message: string }): Promise<void> {
  await writeJson(ch, Tag.error, { code: err.code, message: err.message })
}

/** Read one frame and require the given tag; an `error` frame from the remote becomes an OrcError. */
export async function readTagged(ch: FrameChannel, tag: number, what: string): Promise<Uint8Array> {
  let f: Uint8Array | null
  try {
    f = await ch.read()
  } catch (err) {
    if (err instanceof OrcError && err.code === 'too_large') throw peerFault(err.message, err)
    throw err
  }
  if (f === null) throw new OrcError('unavailable', `peer closed the stream before ${what}`)
  if (f.length === 0) throw peerFault(`peer sent an empty frame instead of ${what}`)
  if (f[0] === Tag.error && tag !== Tag.error) throw remoteError(f.subarray(1), what)
  if (f[0] !== tag) throw peerFault(`peer sent frame type ${f[0]} instead of ${what}`)
  return f.subarray(1)
}

const CODES = new Set(['invalid', 'parse', 'not_found', 'conflict', 'forbidden', 'too_large', 'locked', 'corrupt', 'unavailable', 'internal'])

/** The OrcError a remote sent us in an `error` frame (its one-line message, its code). */
export function remoteError(body: Uint8Array, what: string): OrcError {
  const e = parseJson(body, what) as { code?: unknown; message?: unknown }
  const code = typeof e.code === 'string' && CODES.has(e.code) ? e.code : 'internal'
  const message = typeof e.message === 'string' ? e.message.slice(0, 500) : 'peer refused'
  return new OrcError(code as OrcErrorCode, message, { remote: true })
}

export async function readJson(ch: FrameChannel, tag: number, what: string): Promise<unknown> {
  return parseJson(await readTagged(ch, tag, what), what)
}

function parseJson(b: Uint8Array, what: string): unknown {
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(b))
  } catch (err) {
    throw peerFault(`peer sent undecodable ${what}`, err)
  }
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}
