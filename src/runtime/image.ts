/**
 * Local images. An image is a rootfs directory, an OCI image layout directory, or an OCI layout
 * tar. Layouts are imported once (digests verified, layers unpacked in order with whiteouts) into
 * `<cacheDir>/<manifest digest>/rootfs`, next to the image config the runtimes take defaults from.
 * No registry is ever contacted.
 */
import { createHash } from 'node:crypto'
import {
  chmodSync,
  existsSync,
  lchownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs'
import { dirname, join, posix } from 'node:path'
import { gunzipSync, gzipSync } from 'node:zlib'
import { decompress as zstdDecompress } from 'fzstd'
import { isOrcError, OrcError, wrapError } from '../model/index.ts'
import { readTar, type TarEntry, writeTar } from './tar.ts'

export interface ImageConfig {
  entrypoint: string[]
  cmd: string[]
  env: Record<string, string>
  workingDir?: string
}

export interface ResolvedImage {
  rootfs: string
  config: ImageConfig
  /** `sha256:…` of the manifest for imported layouts; undefined for plain rootfs dirs. */
  digest?: string
}

/** Directories bubblewrap/runc mount over; a read-only root must already have them. */
export const MOUNTPOINTS = ['proc', 'dev', 'tmp', 'sys'] as const

const MT_MANIFEST = 'application/vnd.oci.image.manifest.v1+json'
const MT_INDEX = 'application/vnd.oci.image.index.v1+json'
const MT_CONFIG = 'application/vnd.oci.image.config.v1+json'
const MT_LAYER_GZ = 'application/vnd.oci.image.layer.v1.tar+gzip'

/** A content descriptor of an OCI layout or a registry (the fields unpacking reads). */
export interface ImageDescriptor {
  mediaType: string
  digest: string
  size: number
  platform?: { os?: string; architecture?: string; variant?: string }
}
type Descriptor = ImageDescriptor

/** The platform an image is unpacked for. */
export interface ImagePlatform {
  os: string
  architecture: string
  variant?: string
}

/** Read access to a layout, whether a directory or an in-memory tar. */
interface LayoutSource {
  read(path: string): Buffer
}

function sha256(buf: Buffer): string {
  return 'sha256:' + createHash('sha256').update(buf).digest('hex')
}

function blobPath(digest: string): string {
  const m = /^sha256:([a-f0-9]{64})$/.exec(digest)
  if (!m) throw new OrcError('invalid', `unsupported digest ${digest}`)
  return `blobs/sha256/${m[1]}`
}

function readBlob(src: LayoutSource, d: Descriptor): Buffer {
  const buf = src.read(blobPath(d.digest))
  if (sha256(buf) !== d.digest) throw new OrcError('corrupt', `blob ${d.digest} does not match its digest`)
  return buf
}

function parseJson<T>(buf: Buffer, what: string): T {
  try {
    return JSON.parse(buf.toString('utf8')) as T
  } catch (err) {
    throw wrapError(`parse ${what}`, err, 'parse')
  }
}

const GOARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' }
const MT_DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json'

/** This machine's platform as registries name it (linux, GOARCH, and the ARM variant where there is one). */
export function hostPlatform(): ImagePlatform {
  const architecture = GOARCH[process.arch] ?? process.arch
  if (process.arch === 'arm') {
    const v = (process.config.variables as { arm_version?: string }).arm_version
    return { os: 'linux', architecture, ...(v ? { variant: `v${v}` } : {}) }
  }
  return { os: 'linux', architecture }
}

/** Whether a descriptor is an index (OCI) or manifest list (Docker) rather than one image's manifest. */
export function isIndexMediaType(mediaType: string | undefined): boolean {
  return mediaType === MT_INDEX || mediaType === MT_DOCKER_LIST
}

/**
 * The entry of an index for `platform`: same os and architecture, the same variant when both name
 * one (else one naming none); an index whose entries name no platform gives its first. Throws
 * `not_found` when the index has images only for other platforms.
 */
export function choosePlatformManifest(list: readonly Descriptor[], platform: ImagePlatform = hostPlatform()): Descriptor {
  if (list.length === 0) throw new OrcError('invalid', 'image index lists no manifests')
  const same = list.filter((d) => d.platform?.architecture === platform.architecture && (d.platform.os ?? 'linux') === platform.os)
  const chosen =
    (platform.variant !== undefined ? same.find((d) => d.platform?.variant === platform.variant) : undefined) ??
    same.find((d) => d.platform?.variant === undefined) ??
    same[0] ??
    list.find((d) => d.platform === undefined)
  if (chosen) return chosen
  const offered = list.map((d) => [d.platform?.os, d.platform?.architecture, d.platform?.variant].filter(Boolean).join('/')).join(', ')
  const want = [platform.os, platform.architecture, platform.variant].filter(Boolean).join('/')
  throw new OrcError('not_found', `image has no ${want} variant (it has ${offered})`)
}

function pickManifest(src: LayoutSource, index: { manifests?: Descriptor[] }, depth = 0): Descriptor {
  const list = index.manifests ?? []
  // An OCI layout's index may list images of other platforms only (a layout built elsewhere): the
  // first is taken then, as before registries existed.
  let chosen: Descriptor
  try {
    chosen = choosePlatformManifest(list)
  } catch (err) {
    if (!isOrcError(err, 'not_found')) throw err
    chosen = list[0]!
  }
  if (isIndexMediaType(chosen.mediaType)) {
    if (depth > 4) throw new OrcError('invalid', 'OCI index nesting too deep')
    return pickManifest(src, parseJson(readBlob(src, chosen), 'nested index'), depth + 1)
  }
  return chosen
}

function envRecord(list: string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {}
  for (const kv of list ?? []) {
    const eq = kv.indexOf('=')
    if (eq > 0) out[kv.slice(0, eq)] = kv.slice(eq + 1)
  }
  return out
}

/** Normalize a layer path to a relative POSIX path; refuses `..` and empty names. */
export function cleanLayerPath(p: string): string {
  const norm = posix
    .normalize('/' + p)
    .slice(1)
    .replace(/\/$/, '')
  if (norm.split('/').includes('..')) throw new OrcError('invalid', `layer path escapes the root: ${p}`)
  return norm
}

/**
 * Resolve `rel` inside `root` following symlinks as if `root` were `/` (like chroot), so that no
 * link in the image can make extraction write outside it. The last component is not followed.
 */
export function resolveInRoot(root: string, rel: string, followLast = false): string {
  let parts = rel.split('/').filter((p) => p !== '' && p !== '.')
  const done: string[] = []
  let hops = 0
  while (parts.length > 0) {
    const part = parts.shift()!
    if (part === '..') {
      done.pop()
      continue
    }
    const cand = join(root, ...done, part)
    const isLast = parts.length === 0
    let st
    try {
      st = lstatSync(cand)
    } catch {
      done.push(part)
      continue
    }
    if (st.isSymbolicLink() && (!isLast || followLast)) {
      if (++hops > 40) throw new OrcError('invalid', `too many symlinks resolving ${rel}`)
      const target = readlinkSync(cand)
      const tparts = target.split('/').filter((p) => p !== '' && p !== '.')
      if (target.startsWith('/')) done.length = 0
      parts = [...tparts, ...parts]
      continue
    }
    done.push(part)
  }
  return join(root, ...done)
}

function removeTree(p: string): void {
  rmSync(p, { recursive: true, force: true })
}

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0

/** Unpack one layer onto `root`: whiteouts first (they hide lower layers only), then entries. */
export function applyLayer(root: string, entries: TarEntry[]): void {
  for (const e of entries) {
    const rel = cleanLayerPath(e.path)
    const base = posix.basename(rel)
    if (!base.startsWith('.wh.')) continue
    const dir = posix.dirname(rel) === '.' ? '' : posix.dirname(rel)
    const target = resolveInRoot(root, dir, true)
    if (base === '.wh..wh..opq') {
      try {
        for (const child of readdirSync(target)) removeTree(join(target, child))
      } catch {}
    } else {
      const name = base.slice(4)
      if (name === '' || name === '.' || name === '..') throw new OrcError('invalid', `bad whiteout ${e.path}`)
      removeTree(join(target, name))
    }
  }
  for (const e of entries) {
    const rel = cleanLayerPath(e.path)
    if (rel === '' || posix.basename(rel).startsWith('.wh.')) continue
    if (e.type === 'other') continue // devices and fifos: pods get no devices from images
    const dest = resolveInRoot(root, rel)
    mkdirSync(dirname(dest), { recursive: true })
    let existing
    try {
      existing = lstatSync(dest)
    } catch {}
    if (existing && !(e.type === 'dir' && existing.isDirectory())) {
      if (existing.isDirectory()) removeTree(dest)
      else unlinkSync(dest)
    }
    const mode = e.mode & 0o1777 // no setuid/setgid bits from images
    switch (e.type) {
      case 'dir':
        mkdirSync(dest, { recursive: true })
        chmodSync(dest, mode)
        break
      case 'file':
        writeFileSync(dest, e.data ?? Buffer.alloc(0), { mode })
        chmodSync(dest, mode)
        break
      case 'symlink':
        symlinkSync(e.linkname ?? '', dest)
        break
      case 'hardlink': {
        const src = resolveInRoot(root, cleanLayerPath(e.linkname ?? ''))
        linkSync(src, dest)
        break
      }
    }
    if (isRoot && e.type !== 'hardlink') {
      try {
        lchownSync(dest, e.uid, e.gid)
      } catch {}
    }
  }
}

/** Create the mount points the runtimes need, if the directory can be written. */
/**
 * Create the mount point `dest` (absolute, inside the container) in an image's rootfs when it is
 * missing, as runc does: component by component, refusing to follow a symlink of the image (which
 * could point out of the rootfs, onto the host).
 */
export function ensureMountPoint(rootfs: string, dest: string, file = false): void {
  let cur = rootfs
  const parts = dest.split('/').filter((x) => x !== '')
  for (const [i, part] of parts.entries()) {
    if (part === '.' || part === '..') throw new OrcError('invalid', `mount point ${dest}: no . or .. component`)
    cur = join(cur, part)
    if (file && i === parts.length - 1) {
      ensureFileMountPoint(rootfs, dest, cur)
      return
    }
    let st: ReturnType<typeof lstatSync> | undefined
    try {
      st = lstatSync(cur)
    } catch {
      st = undefined
    }
    if (st?.isSymbolicLink()) throw new OrcError('invalid', `mount point ${dest}: the image has a symlink on the way (${cur.slice(rootfs.length)})`)
    if (st && !st.isDirectory()) throw new OrcError('invalid', `mount point ${dest}: ${cur.slice(rootfs.length)} is a file in the image`)
    if (!st) {
      try {
        mkdirSync(cur, { mode: 0o755 })
      } catch (err) {
        throw wrapError(`create mount point ${dest} in ${rootfs}`, err, 'invalid')
      }
    }
  }
}

/** The last component of a file mount point: an existing regular file, or a new empty one. */
function ensureFileMountPoint(rootfs: string, dest: string, path: string): void {
  let st: ReturnType<typeof lstatSync> | undefined
  try {
    st = lstatSync(path)
  } catch {
    st = undefined
  }
  if (st?.isSymbolicLink()) throw new OrcError('invalid', `mount point ${dest}: the image has a symlink there (${path.slice(rootfs.length)})`)
  if (st && !st.isFile()) throw new OrcError('invalid', `mount point ${dest}: ${path.slice(rootfs.length)} is not a file in the image`)
  if (!st) {
    try {
      writeFileSync(path, '', { mode: 0o644, flag: 'wx' })
    } catch (err) {
      throw wrapError(`create mount point ${dest} in ${rootfs}`, err, 'invalid')
    }
  }
}

export function prepareRootfs(rootfs: string): void {
  for (const m of MOUNTPOINTS) {
    const p = join(rootfs, m)
    if (!existsSync(p)) {
      try {
        mkdirSync(p, { mode: 0o755 })
      } catch (err) {
        throw wrapError(`prepare rootfs ${rootfs}: create mount point /${m}`, err, 'invalid')
      }
    }
  }
}

/** Decompress a layer blob by its media type or, failing that, its magic bytes (gzip, zstd, plain tar). */
export function layerTar(layer: Descriptor, data: Buffer): Buffer {
  const mt = layer.mediaType
  if (mt.endsWith('gzip') || (data[0] === 0x1f && data[1] === 0x8b)) return gunzipSync(data)
  if (mt.endsWith('zstd') || (data[0] === 0x28 && data[1] === 0xb5 && data[2] === 0x2f && data[3] === 0xfd)) {
    try {
      const out = zstdDecompress(data)
      return Buffer.from(out.buffer, out.byteOffset, out.byteLength)
    } catch (err) {
      throw wrapError(`decompress zstd layer ${layer.digest}`, err, 'corrupt')
    }
  }
  return data
}

function importLayout(src: LayoutSource, cacheDir: string, what: string): ResolvedImage {
  const index = parseJson<{ manifests?: Descriptor[] }>(src.read('index.json'), `${what}/index.json`)
  const mdesc = pickManifest(src, index)
  return unpackManifest((d) => src.read(blobPath(d.digest)), mdesc, cacheDir)
}

/**
 * Unpack the image of one manifest into `<cacheDir>/<manifest digest>/rootfs` next to its
 * `config.json` (ImageConfig), once: an image already there is returned as is. `read` gives a
 * blob's bytes (an OCI layout's file, the node's blob store); each is checked against its digest.
 * The rootfs is built in a temporary directory and renamed into place: a failed unpack leaves nothing.
 */
export function unpackManifest(read: (d: Descriptor) => Buffer, mdesc: Descriptor, cacheDir: string): ResolvedImage {
  const dir = join(cacheDir, mdesc.digest.replace(':', '-'))
  const rootfs = join(dir, 'rootfs')
  if (existsSync(join(dir, 'config.json')) && existsSync(rootfs)) {
    return { rootfs, config: parseJson(readFileSync(join(dir, 'config.json')), 'image config'), digest: mdesc.digest }
  }
  const readVerified = (d: Descriptor): Buffer => {
    blobPath(d.digest)
    const buf = read(d)
    if (sha256(buf) !== d.digest) throw new OrcError('corrupt', `blob ${d.digest} does not match its digest`)
    return buf
  }
  const manifest = parseJson<{ config: Descriptor; layers: Descriptor[] }>(readVerified(mdesc), 'manifest')
  if (!manifest.config?.digest) throw new OrcError('invalid', `manifest ${mdesc.digest} names no image config`)
  const cfg = parseJson<{ config?: { Entrypoint?: string[]; Cmd?: string[]; Env?: string[]; WorkingDir?: string } }>(
    readVerified(manifest.config),
    'image config',
  )
  const tmp = `${dir}.tmp-${process.pid}`
  removeTree(tmp)
  try {
    mkdirSync(join(tmp, 'rootfs'), { recursive: true })
    for (const layer of manifest.layers ?? []) applyLayer(join(tmp, 'rootfs'), readTar(layerTar(layer, readVerified(layer))))
    prepareRootfs(join(tmp, 'rootfs'))
    chmodSync(join(tmp, 'rootfs'), 0o755)
    const config: ImageConfig = {
      entrypoint: cfg.config?.Entrypoint ?? [],
      cmd: cfg.config?.Cmd ?? [],
      env: envRecord(cfg.config?.Env),
      workingDir: cfg.config?.WorkingDir || undefined,
    }
    writeFileSync(join(tmp, 'config.json'), JSON.stringify(config))
    removeTree(dir)
    renameSync(tmp, dir)
    return { rootfs, config, digest: mdesc.digest }
  } catch (err) {
    removeTree(tmp)
    throw err
  }
}

/** Resolve an image path to an unpacked rootfs, importing an OCI layout (dir or tar) if needed. */
export function resolveImage(image: string, cacheDir: string): ResolvedImage {
  let st
  try {
    st = statSync(image)
  } catch (err) {
    throw new OrcError('not_found', `image ${image} not found`, { image }, err)
  }
  try {
    if (st.isDirectory()) {
      if (existsSync(join(image, 'oci-layout')) || existsSync(join(image, 'index.json'))) {
        return importLayout({ read: (p) => readFileSync(join(image, p)) }, cacheDir, image)
      }
      prepareRootfs(image)
      return { rootfs: image, config: { entrypoint: [], cmd: [], env: {} } }
    }
    let raw = readFileSync(image)
    if (raw[0] === 0x1f && raw[1] === 0x8b) raw = gunzipSync(raw)
    const files = new Map<string, Buffer>()
    for (const e of readTar(raw)) if (e.type === 'file') files.set(cleanLayerPath(e.path), e.data!)
    return importLayout(
      {
        read: (p) => {
          const b = files.get(p)
          if (!b) throw new OrcError('invalid', `layout tar has no ${p}`)
          return b
        },
      },
      cacheDir,
      image,
    )
  } catch (err) {
    throw wrapError(`import image ${image}`, err)
  }
}

// ---- writing layouts (tests, `orc image` tooling) ----

export interface LayoutImage {
  /** Layers bottom to top, each a list of tar entries (whiteouts as `.wh.<name>` entries). */
  layers: TarEntry[][]
  config?: Partial<{ Entrypoint: string[]; Cmd: string[]; Env: string[]; WorkingDir: string }>
  /** Reference name stored in the index annotation. */
  refName?: string
}

/** Write an OCI image layout directory (blobs/sha256, index.json, oci-layout) with gzip layers. */
export function writeOciLayout(dir: string, img: LayoutImage): { manifestDigest: string } {
  mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true })
  const put = (buf: Buffer, mediaType: string): Descriptor => {
    const digest = sha256(buf)
    writeFileSync(join(dir, blobPath(digest)), buf)
    return { mediaType, digest, size: buf.length }
  }
  const diffIds: string[] = []
  const layers = img.layers.map((entries) => {
    const tar = writeTar(entries)
    diffIds.push(sha256(tar))
    return put(gzipSync(tar, { level: 6 }), MT_LAYER_GZ)
  })
  const arch = GOARCH[process.arch] ?? process.arch
  const config = put(
    Buffer.from(JSON.stringify({ architecture: arch, os: 'linux', config: img.config ?? {}, rootfs: { type: 'layers', diff_ids: diffIds } })),
    MT_CONFIG,
  )
  const manifest = put(Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT_MANIFEST, config, layers })), MT_MANIFEST)
  const index = {
    schemaVersion: 2,
    mediaType: MT_INDEX,
    manifests: [
      {
        ...manifest,
        platform: { architecture: arch, os: 'linux' },
        annotations: img.refName ? { 'org.opencontainers.image.ref.name': img.refName } : undefined,
      },
    ],
  }
  writeFileSync(join(dir, 'index.json'), JSON.stringify(index))
  writeFileSync(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }))
  return { manifestDigest: manifest.digest }
}

/** Pack a layout directory into a tar file (the form `docker save`/skopeo oci-archive produce). */
export function packDirToTar(dir: string): Buffer {
  const entries: TarEntry[] = []
  const walk = (rel: string) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name
      const st = lstatSync(join(dir, r))
      if (st.isDirectory()) {
        entries.push({ path: r + '/', type: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 0 })
        walk(r)
      } else if (st.isFile()) {
        entries.push({ path: r, type: 'file', mode: 0o644, uid: 0, gid: 0, mtime: 0, data: readFileSync(join(dir, r)) })
      }
    }
  }
  walk('')
  return writeTar(entries)
}
