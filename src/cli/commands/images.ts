/**
 * `orc image pull|inspect|rm|prune` and the registry part of `orc image list` (docs/images.md):
 * the node's blob store of registry images, through the agent's API (local or `--node`).
 */
import type { Command } from 'commander'
import type { ImagePullView } from '../../agent/index.ts'
import { OrcError, parseQuantity } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import { examples, formatTable } from '../format.ts'
import { createProgress } from '../progress.ts'
import { outputOption } from '../refs.ts'
import type { ApiCaller } from '../remote.ts'

export interface ImageCliIO {
  out(text: string): void
  err(text: string): void
  now(): number
  sleep(ms: number): Promise<void>
  isTTY: boolean
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n}B`
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)}KiB`
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)}MiB`
  return `${(n / 1024 ** 3).toFixed(1)}GiB`
}

/** `[#####.....] 12.0MiB/48.3MiB 25%` */
function bar(v: ImagePullView): string {
  const total = v.totalBytes ?? 0
  if (total === 0) return `${v.phase} ${formatBytes(v.doneBytes)}`
  const frac = Math.min(1, v.doneBytes / total)
  const width = 30
  const full = Math.round(frac * width)
  return `[${'#'.repeat(full)}${'.'.repeat(width - full)}] ${formatBytes(v.doneBytes)}/${formatBytes(total)} ${Math.floor(frac * 100)}% ${v.phase}`
}

const short = (d: string) => d.replace(/^sha256:/, '').slice(0, 12)

export function registerImageCommands(image: Command, io: ImageCliIO, client: (cmd: Command) => ApiCaller): void {
  image
    .command('pull')
    .description("Pull a registry image into this node's blob store (from cluster members that have its blobs first), with progress")
    .argument('<IMAGE>', 'REGISTRY[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST]')
    .option('-n, --namespace <ns>', 'namespace of the credential Secrets (default: default)')
    .option('--secret <name...>', 'Secrets holding the registry credentials (username, password; server, ca.crt, tls optional)')
    .addOption(outputOption(['table', 'json']))
    .addHelpText(
      'after',
      examples(`
  orc image pull registry.lab:5000/team/app:1.2
  orc image pull ghcr.io/acme/api:2.0 --secret ghcr -n prod
  orc image pull --node b registry.lab:5000/team/app@sha256:4f…`),
    )
    .action(async (ref: string, opts, cmd: Command) => {
      const c = client(cmd)
      const ns = opts.namespace || 'default'
      const started = await callRoute(c, 'imagePull', { ns }, { body: { image: ref, ...(opts.secret ? { secrets: opts.secret as string[] } : {}) } })
      const progress = createProgress({ write: (t) => io.err(t), isTTY: io.isTTY })
      let view = started.pull
      for (;;) {
        const list = await callRoute(c, 'images')
        view = list.pulls.find((p) => p.image === ref && p.digest === started.digest && p.startedAt >= started.pull.startedAt) ?? view
        if (view.state !== 'pulling') break
        progress.update(`${ref} ${bar(view)}`)
        await io.sleep(300)
      }
      progress.done()
      if (view.state === 'failed') throw new OrcError('unavailable', `pull ${ref}: ${view.error ?? 'failed'}`)
      if (opts.output === 'json') return io.out(`${JSON.stringify({ image: ref, digest: started.digest, pull: view }, null, 2)}\n`)
      const b = view.bytes
      const from = b ? ` (registry ${formatBytes(b.registry)}, peers ${formatBytes(b.peers)}, already here ${formatBytes(b.cached)})` : ''
      io.out(`${ref}: ${started.digest}${from}\n`)
    })

  image
    .command('inspect')
    .description('Show a pulled image: digests, platform, entrypoint and environment, layers, the pods that use it')
    .argument('<IMAGE>', 'a reference this node pulled, or its digest')
    .addOption(outputOption(['table', 'json']))
    .action(async (ref: string, opts, cmd: Command) => {
      const v = await callRoute(client(cmd), 'imageInspect', {}, { query: { image: ref } })
      if (opts.output === 'json') return io.out(`${JSON.stringify(v, null, 2)}\n`)
      const lines = [
        `digest:     ${v.digest}`,
        `manifest:   ${v.manifestDigest}${v.unpacked ? ' (unpacked)' : ''}`,
        `references: ${v.refs.join(', ')}`,
        `platform:   ${[v.platform?.os, v.platform?.architecture, v.platform?.variant].filter(Boolean).join('/') || 'unknown'}`,
        `size:       ${formatBytes(v.bytes)} in ${v.layers.length} layers`,
        `entrypoint: ${JSON.stringify(v.config.entrypoint)}  cmd: ${JSON.stringify(v.config.cmd)}${v.config.workingDir ? `  workdir: ${v.config.workingDir}` : ''}`,
        `used by:    ${v.usedBy.length > 0 ? v.usedBy.join(', ') : 'no pod on this node'}`,
        'env:',
        ...v.config.env.map((e) => `  ${e}`),
        'layers:',
        ...v.layers.map((l) => `  ${l.digest}  ${formatBytes(l.size)}  ${l.mediaType}`),
      ]
      io.out(`${lines.join('\n')}\n`)
    })

  image
    .command('rm')
    .description('Remove a pulled image and the blobs no other image shares (refused while a pod of this node keeps it)')
    .argument('<IMAGE>', 'a reference this node pulled, or its digest')
    .action(async (ref: string, _opts, cmd: Command) => {
      const r = await callRoute(client(cmd), 'imageRemove', {}, { body: { image: ref } })
      io.out(`${ref} removed: ${r.removed.length} blobs, ${formatBytes(r.freedBytes)} freed\n`)
    })

  image
    .command('prune')
    .description('Remove pulled images no pod of this node keeps (with --budget: only until the blob store fits it, least recently used first)')
    .option('--budget <size>', 'keep up to this much (e.g. 5Gi); default: remove every unused image')
    .action(async (opts, cmd: Command) => {
      const budgetBytes = opts.budget === undefined ? 0 : Math.floor(parseQuantity(String(opts.budget)))
      const r = await callRoute(client(cmd), 'imagePrune', {}, { body: { budgetBytes } })
      io.out(`pruned ${r.images.length} images, ${r.removed.length} blobs, ${formatBytes(r.freedBytes)} freed\n`)
    })
}

/** The registry images of `orc image list` (the node's blob store), or undefined when no agent answers. */
export async function registryImageTable(c: ApiCaller): Promise<string | undefined> {
  const r = await callRoute(c, 'images').catch(() => undefined)
  if (r === undefined) return undefined
  const rows = r.images.map((i) => [i.refs.join(','), short(i.digest), formatBytes(i.bytes), i.usedBy.length > 0 ? i.usedBy.join(',') : '-'])
  for (const p of r.pulls.filter((x) => x.state === 'pulling')) rows.push([p.image, p.digest ? short(p.digest) : '-', `${bar(p)}`, '(pulling)'])
  if (rows.length === 0) return `No registry images on node ${r.node} (orc image pull IMAGE).\n`
  return formatTable(['IMAGE', 'DIGEST', 'SIZE', 'USED BY'], rows)
}
