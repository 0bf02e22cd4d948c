/**
 * A VM's disks on its node (docs/runtimes.md, "Disks" and "cloud-init"): the `prepare-disks` unit
 * turns `spec.disks` and `spec.cloudInit` into the files qemu attaches, in `<vm dir>/disks/`:
 *
 *   NAME.raw     an emptyDisk: a sparse raw file, kept across guest and agent restarts
 *   NAME.qcow2   an image disk: a qcow2 overlay over the image (the image file is only read)
 *   cidata.img   the cloud-init NoCloud seed (vfat, label CIDATA, mode 0600), made afresh each boot
 *
 * and a Volume disk is the Volume's own ext4 image file, attached through the node's VolumeService
 * (unmounted from the host while the guest has it). The whole directory goes with the VM.
 */
import { chmodSync, mkdirSync, readdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { parse, stringify } from 'yaml'
import type { CommandRunner } from '../../effects/index.ts'
import { isCloudConfig, OrcError, parseQuantity, type VirtualMachine, type VirtualMachineSpec, VM_SEED_SERIAL } from '../../model/index.ts'
import { buildNoCloudSeed, diskImageFormat, ensureEmptyDisk, ensureImageOverlay, type VmDrive } from '../../runtime/index.ts'
import type { Keyring } from '../../secrets/index.ts'
import type { ObjectStore, Stored } from '../../store/index.ts'
import { openSecretValue } from '../pods/refs.ts'

/** The node's Volumes as VM disks (VolumeService). */
export interface VmVolumeHooks {
  /** Attach Volume `name` of the VM's namespace to the VM on this node; returns its image file. Throws why not (in use by a pod, on another node, …). */
  attachToVm(vm: Stored<VirtualMachine>, name: string): Promise<string>
  /** Let go of the Volumes the VM holds on this node, but those named in `keep`. */
  releaseFromVm(vm: { namespace: string; name: string }, keep?: readonly string[]): Promise<void>
}

export interface VmDiskComponents {
  run: CommandRunner
  /** An image of the node's stores by name (as the kernel's `image:`), as a host path; throws when it is not there. */
  resolveImage(image: string, what: string): string
  volumes?: VmVolumeHooks
  /** One value of a Secret of the namespace, opened with the node's keyring; throws why not. */
  secretValue?(namespace: string, name: string, key: string): Buffer
}

/** What status.disks (and `orc describe vm/NAME`) say of each drive. */
export interface VmDiskStatus {
  name: string
  /** The guest's device, in order: vda, vdb, … */
  device: string
  source: string
  readOnly?: boolean
}

export const SEED_FILE = `${VM_SEED_SERIAL}.img`

function deviceName(i: number): string {
  return `vd${String.fromCharCode(97 + i)}`
}

/** The public keys of a Secret value: one a line, blank lines and # comments dropped. */
export function authorizedKeyLines(value: string): string[] {
  return value
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
}

/**
 * The NoCloud files: `meta-data` (instance-id = the VM's uid, local-hostname) and `user-data`. A
 * `#cloud-config` user-data (or none) gets the keys appended to its `ssh_authorized_keys`; any other
 * user-data (a script, MIME, `#include`) is used as is (the schema refuses keys beside it).
 */
export function noCloudFiles(
  vm: { uid: string; name: string },
  ci: NonNullable<VirtualMachineSpec['cloudInit']>,
  keys: readonly string[],
  net?: GuestNet,
): NoCloudFiles {
  const metaData = stringify({ 'instance-id': vm.uid, 'local-hostname': ci.hostname ?? vm.name }, QUOTED)
  const networkConfig = net === undefined ? undefined : guestNetworkConfig(net)
  const withNet = (f: { metaData: string; userData: string }): NoCloudFiles => (networkConfig === undefined ? f : { ...f, networkConfig })
  const given = ci.userData
  if (given !== undefined && (!isCloudConfig(given) || keys.length === 0)) return withNet({ metaData, userData: given })
  let doc: unknown = {}
  if (given !== undefined) {
    try {
      doc = parse(given) ?? {}
    } catch (err) {
      throw new OrcError('invalid', `spec.cloudInit.userData is not YAML: ${(err as Error).message.split('\n')[0]}`)
    }
    if (typeof doc !== 'object' || Array.isArray(doc)) throw new OrcError('invalid', 'spec.cloudInit.userData: a #cloud-config must be a YAML mapping')
  }
  const d = doc as Record<string, unknown>
  if (keys.length > 0) {
    const had = d.ssh_authorized_keys
    if (had !== undefined && !Array.isArray(had)) throw new OrcError('invalid', 'spec.cloudInit.userData: ssh_authorized_keys must be a list')
    d.ssh_authorized_keys = [...((had as unknown[] | undefined) ?? []), ...keys]
  }
  return withNet({ metaData, userData: `#cloud-config\n${Object.keys(d).length > 0 ? stringify(d) : ''}` })
}

/** The guest's pod address, the node side of its link (fe80::1) and its NIC's MAC; its egress IPv4 and that link's node side (10.88.0.1). */
export interface GuestNet {
  ipv6: string
  gateway: string
  mac: string
  ipv4?: string
  gateway4?: string
}

export type NoCloudFiles = { metaData: string; userData: string; networkConfig?: string }

/**
 * network-config (version 2) for a guest with a pod address: its NIC (by MAC) gets `ADDR/128` and a
 * default route through the gateway, on-link, no DHCP or router advertisements; with an egress
 * IPv4, also `V4/32` and an IPv4 default route through 10.88.0.1, on-link (the node masquerades it) — what the kernel
 * command line's `orc.ipv6`/`orc.gateway` say to a kernel-booted guest, for a guest whose boot loader
 * orc does not control.
 */
export function guestNetworkConfig(net: GuestNet): string {
  const v4 = net.ipv4 !== undefined && net.gateway4 !== undefined
  return stringify(
    {
      version: 2,
      ethernets: {
        eth0: {
          match: { macaddress: net.mac },
          'set-name': 'eth0',
          dhcp4: false,
          dhcp6: false,
          'accept-ra': false,
          addresses: [`${net.ipv6}/128`, ...(v4 ? [`${net.ipv4}/32`] : [])],
          routes: [{ to: '::/0', via: net.gateway, 'on-link': true }, ...(v4 ? [{ to: '0.0.0.0/0', via: net.gateway4, 'on-link': true }] : [])],
        },
      },
    },
    QUOTED,
  )
}

/**
 * orc's own YAML values are written quoted: cloud-init reads YAML 1.1, where an unquoted MAC such as
 * 52:54:00:12:34:56 is a base-60 integer and an all-digit instance-id a number.
 */
const QUOTED = { defaultStringType: 'QUOTE_DOUBLE', defaultKeyType: 'PLAIN' } as const

/**
 * Make (or keep) the files of the VM's disks under `dir` and attach its Volumes; the drives in the
 * guest's order (spec.disks, then the seed). Files of disks no longer in the spec are removed.
 */
export async function prepareVmDisks(
  c: VmDiskComponents,
  vm: Stored<VirtualMachine>,
  dir: string,
  net?: GuestNet,
): Promise<{ drives: VmDrive[]; status: VmDiskStatus[] }> {
  const spec = vm.spec!
  const ns = vm.metadata.namespace ?? 'default'
  const disks = spec.disks ?? []
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  chmodSync(dir, 0o700)
  const keep = new Set<string>()
  const drives: VmDrive[] = []
  const status: VmDiskStatus[] = []
  for (const d of disks) {
    const what = `disk ${d.name}`
    let drive: VmDrive
    let source: string
    if (d.emptyDisk !== undefined) {
      const file = `${d.name}.raw`
      keep.add(file)
      ensureEmptyDisk(join(dir, file), Math.ceil(parseQuantity(d.emptyDisk.size) / 512) * 512)
      drive = { path: join(dir, file), format: 'raw', serial: d.name }
      source = `emptyDisk ${d.emptyDisk.size}`
    } else if (d.image !== undefined) {
      const image = c.resolveImage(d.image, what)
      const format = await diskImageFormat(c.run, image)
      const file = `${d.name}.qcow2`
      keep.add(file)
      await ensureImageOverlay(c.run, join(dir, file), image, format)
      drive = { path: join(dir, file), format: 'qcow2', serial: d.name }
      source = `image ${d.image} (${format}, copy-on-write)`
    } else if (d.volume !== undefined) {
      if (c.volumes === undefined) throw new OrcError('unavailable', `${what}: this node has no Volume service`)
      const path = await c.volumes.attachToVm(vm, d.volume.name)
      drive = { path, format: 'raw', serial: d.name }
      source = `volume ${d.volume.name}`
    } else throw new OrcError('invalid', `${what}: give emptyDisk, image or volume`)
    if (d.name === spec.bootDisk) {
      drive.boot = true
      source += ', boot disk'
    }
    status.push({ name: d.name, device: deviceName(drives.length), source })
    drives.push(drive)
  }
  // Volumes dropped from the spec are let go (a pod may mount them again).
  await c.volumes?.releaseFromVm(
    { namespace: ns, name: vm.metadata.name },
    disks.flatMap((d) => (d.volume ? [d.volume.name] : [])),
  )
  const ci = spec.cloudInit
  if (ci !== undefined) {
    let keys: string[] = []
    const ref = ci.sshAuthorizedKeys
    if (ref !== undefined) {
      if (c.secretValue === undefined) throw new OrcError('unavailable', 'cloudInit.sshAuthorizedKeys: this node cannot open Secrets')
      keys = authorizedKeyLines(c.secretValue(ns, ref.secret, ref.key).toString('utf8'))
      if (keys.length === 0) throw new OrcError('invalid', `secret/${ref.secret} key ${ref.key} holds no public key line`)
    }
    keep.add(SEED_FILE)
    await buildNoCloudSeed(c.run, join(dir, SEED_FILE), noCloudFiles({ uid: vm.metadata.uid, name: vm.metadata.name }, ci, keys, net))
    status.push({ name: VM_SEED_SERIAL, device: deviceName(drives.length), source: 'cloud-init NoCloud seed', readOnly: true })
    drives.push({ path: join(dir, SEED_FILE), format: 'raw', serial: VM_SEED_SERIAL, readOnly: true })
  }
  for (const f of readdirSync(dir)) if (!keep.has(f)) rmSync(join(dir, f), { recursive: true, force: true })
  return { drives, status }
}

/** One value of Secret `namespace/name` of the store, opened with the node's keyring (the path pods' secret volumes take). */
export function secretValueOf(store: ObjectStore, keyring: () => Keyring | undefined): (namespace: string, name: string, key: string) => Buffer {
  return (namespace, name, key) => {
    const s = store.get({ kind: 'Secret', namespace, name })
    if (s === undefined) throw new OrcError('not_found', `secret/${name} not found in namespace ${namespace}`)
    const v = s.spec?.sealed?.[key]
    if (v === undefined) throw new OrcError('not_found', `secret/${name} has no key ${key}`)
    return openSecretValue({ keyring }, namespace, name, key, v)
  }
}
