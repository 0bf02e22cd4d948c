/**
 * A small tar reader/writer (ustar + pax + GNU long names), enough for OCI image layers. Kept in
 * process so that layer import can apply whiteouts and refuse paths that escape the rootfs.
 */
export type TarEntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'other'

export interface TarEntry {
  path: string
  type: TarEntryType
  mode: number
  uid: number
  gid: number
  mtime: number
  linkname?: string
  data?: Buffer
}

function readString(buf: Buffer, off: number, len: number): string {
  const slice = buf.subarray(off, off + len)
  const nul = slice.indexOf(0)
  return slice.subarray(0, nul < 0 ? len : nul).toString('utf8')
}

function readOctal(buf: Buffer, off: number, len: number): number {
  if (buf[off]! & 0x80) {
    // base-256 (GNU) for large values
    let v = 0
    for (let i = 1; i < len; i++) v = v * 256 + buf[off + i]!
    return v
  }
  const s = readString(buf, off, len).trim()
  return s === '' ? 0 : parseInt(s, 8)
}

function parsePax(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {}
  let i = 0
  while (i < data.length) {
    const sp = data.indexOf(0x20, i)
    if (sp < 0) break
    const len = Number(data.subarray(i, sp).toString())
    if (!Number.isFinite(len) || len <= 0) break
    const rec = data.subarray(sp + 1, i + len - 1).toString('utf8')
    const eq = rec.indexOf('=')
    if (eq > 0) out[rec.slice(0, eq)] = rec.slice(eq + 1)
    i += len
  }
  return out
}

/** Parse an uncompressed tar archive. Throws on a malformed header. */
export function readTar(buf: Buffer): TarEntry[] {
  const out: TarEntry[] = []
  let off = 0
  let pax: Record<string, string> = {}
  let longName: string | undefined
  let longLink: string | undefined
  while (off + 512 <= buf.length) {
    const h = buf.subarray(off, off + 512)
    if (h.every((b) => b === 0)) break
    let sum = 0
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : h[i]!
    if (sum !== readOctal(h, 148, 8)) throw new Error(`tar header checksum mismatch at offset ${off}`)
    const size = readOctal(h, 124, 12)
    const typeflag = String.fromCharCode(h[156]!)
    const dataStart = off + 512
    if (dataStart + size > buf.length) throw new Error(`tar entry at offset ${off} runs past the end`)
    const data = buf.subarray(dataStart, dataStart + size)
    off = dataStart + Math.ceil(size / 512) * 512
    if (typeflag === 'x') {
      pax = parsePax(data)
      continue
    }
    if (typeflag === 'g') continue
    if (typeflag === 'L') {
      longName = readString(data, 0, data.length)
      continue
    }
    if (typeflag === 'K') {
      longLink = readString(data, 0, data.length)
      continue
    }
    const prefix = h.subarray(257, 263).toString() === 'ustar\0' || h.subarray(257, 262).toString() === 'ustar' ? readString(h, 345, 155) : ''
    let path = readString(h, 0, 100)
    if (prefix) path = `${prefix}/${path}`
    path = pax.path ?? longName ?? path
    const linkname = pax.linkpath ?? longLink ?? readString(h, 157, 100)
    const type: TarEntryType =
      typeflag === '0' || typeflag === '\0' || typeflag === '7'
        ? 'file'
        : typeflag === '5'
          ? 'dir'
          : typeflag === '2'
            ? 'symlink'
            : typeflag === '1'
              ? 'hardlink'
              : 'other'
    out.push({
      path,
      type,
      mode: readOctal(h, 100, 8),
      uid: pax.uid !== undefined ? Number(pax.uid) : readOctal(h, 108, 8),
      gid: pax.gid !== undefined ? Number(pax.gid) : readOctal(h, 116, 8),
      mtime: readOctal(h, 136, 12),
      linkname: type === 'symlink' || type === 'hardlink' ? linkname : undefined,
      data: type === 'file' ? Buffer.from(data) : undefined,
    })
    pax = {}
    longName = undefined
    longLink = undefined
  }
  return out
}

function writeOctal(h: Buffer, off: number, len: number, v: number): void {
  h.write(v.toString(8).padStart(len - 1, '0') + '\0', off, len, 'ascii')
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`
  let len = Buffer.byteLength(body) + 1
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body)
  return `${len}${body}`
}

function header(name: string, typeflag: string, size: number, e: Partial<TarEntry>, linkname = ''): Buffer {
  const h = Buffer.alloc(512)
  h.write(name, 0, 100, 'utf8')
  writeOctal(h, 100, 8, (e.mode ?? 0o644) & 0o7777)
  writeOctal(h, 108, 8, e.uid ?? 0)
  writeOctal(h, 116, 8, e.gid ?? 0)
  writeOctal(h, 124, 12, size)
  writeOctal(h, 136, 12, e.mtime ?? 0)
  h.fill(32, 148, 156)
  h.write(typeflag, 156, 1, 'ascii')
  h.write(linkname, 157, 100, 'utf8')
  h.write('ustar\0', 257, 6, 'ascii')
  h.write('00', 263, 2, 'ascii')
  let sum = 0
  for (const b of h) sum += b
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'ascii')
  return h
}

function pad(data: Buffer): Buffer[] {
  const rem = data.length % 512
  return rem === 0 ? [data] : [data, Buffer.alloc(512 - rem)]
}

/** Write entries as a pax-extended ustar archive (deterministic: same entries, same bytes). */
export function writeTar(entries: TarEntry[]): Buffer {
  const parts: Buffer[] = []
  for (const e of entries) {
    const data = e.type === 'file' ? (e.data ?? Buffer.alloc(0)) : Buffer.alloc(0)
    const link = e.linkname ?? ''
    const records: string[] = []
    if (Buffer.byteLength(e.path) > 99) records.push(paxRecord('path', e.path))
    if (Buffer.byteLength(link) > 99) records.push(paxRecord('linkpath', link))
    if (records.length > 0) {
      const body = Buffer.from(records.join(''))
      parts.push(header('PaxHeader', 'x', body.length, {}), ...pad(body))
    }
    const flag = { file: '0', dir: '5', symlink: '2', hardlink: '1', other: '0' }[e.type]
    parts.push(header(e.path.slice(0, 99), flag, data.length, e, link.slice(0, 99)), ...pad(data))
  }
  parts.push(Buffer.alloc(1024))
  return Buffer.concat(parts)
}
