import { defineKind, type ObjectOfKind } from '../kind.ts'
import { parseQuantity } from '../quantity.ts'
import type { Issue } from '../schema.ts'
import { s } from '../schema.ts'
import { age, createdAt, dnsName, labelsSchema, text } from './common.ts'
import { nodeAffinitySchema, schedulingIssues, tolerationSchema } from './pod.ts'

/**
 * VirtualMachine: a guest with its own kernel, run by qemu on one node (docs/runtimes.md, "Virtual
 * machines"). It goes through the same lifecycle engine as a pod (units in `orc why vm/NAME`), gets
 * a pod network namespace with its own IPv6 address from the node's /64 (bridged to the guest's
 * NIC), and its serial console is its log (`orc logs vm/NAME`). Pinned by `spec.node`, or placed
 * by the pods' scheduler (docs/runtimes.md, "Placement and failover"): `status.node` and
 * `status.scheduling` are the binding (controller:scheduler); the rest of the status is written by
 * the node it is bound to (controller:vm).
 */

/** A kernel or initrd: a file of the node's image stores by name, or a host path under /boot or an image store. */
const bootFileFields = {
  /** A file name in the node's image stores (`<data-dir>/images`, ORC_IMAGE_STORES). */
  image: s.string({ minLength: 1, maxLength: 128, pattern: /^[A-Za-z0-9][A-Za-z0-9._-]*$/ }),
  /** An absolute host path, only under /boot or an image store (anything else would be readable by the guest). */
  path: s.string({ minLength: 2, maxLength: 1024, pattern: /^\// }),
}

/** Disk names: the virtio serial the guest sees (`/dev/disk/by-id/virtio-NAME`), at most 20 bytes (VIRTIO_BLK_ID_BYTES). */
export const VM_DISK_NAME = /^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$/
export const VM_MAX_DISKS = 16
/** The serial of the cloud-init seed drive (a disk may not take it). */
export const VM_SEED_SERIAL = 'cidata'
export const VM_MIN_DISK_BYTES = 2 ** 20
export const VM_MAX_DISK_BYTES = 64 * 2 ** 40
/** cloud-init user-data: at most 64 KiB (it is stored in the spec and replicated). */
export const VM_MAX_USER_DATA = 65536

const vmDisk = s.object({
  name: s.required(s.string({ pattern: VM_DISK_NAME, patternName: 'a disk name (lowercase letters, digits and -, at most 20)' })),
  /** A sparse raw file of this size owned by the VM: kept across guest and agent restarts, removed with the VM. */
  emptyDisk: s.object({ size: s.required(s.quantity()) }),
  /** A raw or qcow2 disk file of the node's image stores, used copy-on-write (a qcow2 overlay owned by the VM): the file is never written. */
  image: bootFileFields.image,
  /** A persistent Volume of the VM's namespace on the VM's node: its ext4 image file is the guest's disk (no pod may mount it meanwhile). */
  volume: s.object({ name: s.required(dnsName) }),
})

const vmCloudInit = s.object({
  /** `#cloud-config` YAML (merged with sshAuthorizedKeys), or any other user-data (a script, MIME), used as is. */
  userData: s.string({ maxLength: VM_MAX_USER_DATA }),
  /** Public keys (one a line) from a Secret of the VM's namespace: `ssh_authorized_keys` of the cloud-config. */
  sshAuthorizedKeys: s.object({ secret: s.required(dnsName), key: s.required(s.string({ minLength: 1, maxLength: 253 })) }),
  /** `local-hostname` of the meta-data (default: the VM's name). */
  hostname: dnsName,
})

export const VM_MIN_MEMORY_BYTES = 64 * 2 ** 20
export const VM_MAX_MEMORY_BYTES = 256 * 2 ** 30
export const VM_DEFAULT_MEMORY = '256Mi'
export const VM_DEFAULT_GRACE_SECONDS = 30

export type VirtualMachinePhase = 'Pending' | 'Starting' | 'Running' | 'Stopping' | 'Stopped' | 'Failed' | 'Fenced'

/** Written by controller:vm (src/agent/vms). */
export type VirtualMachineStatus = {
  phase?: VirtualMachinePhase
  /** The binding (controller:scheduler): the node that runs it. */
  node?: string
  /** How it was bound (controller:scheduler), as a pod's: node, at, by, reason, from. */
  scheduling?: { node?: string; at?: string; by?: string; reason?: string; from?: string }
  /** kvm, or tcg (emulation: no usable /dev/kvm) — and why. */
  accel?: string
  accelReason?: string
  pid?: number
  ipv6?: string
  runningRevision?: number
  targetRevision?: number
  reason?: string
  restarts?: number
  startedAt?: string
  /** How the last guest ended: `powerdown` (ACPI, the guest powered off), `killed` (after the grace), `exited`. */
  lastStop?: { at: string; how: string; detail?: string }
  workflow?: unknown
  [field: string]: unknown
}

const vmSpec = s.object({
  /** Pins it to this node; absent: the scheduler places it on a node with room (status.node). */
  node: s.string({ minLength: 1, maxLength: 63 }),
  /** Unpinned VMs, as pods: `ha` moves to another node haAfter its node is lost; `best-effort` (default) when it is forgotten or gone. */
  policy: s.enum('ha', 'best-effort'),
  /** `ha`: how long its node may be unreachable before it moves (default the cluster's haAfterSeconds, 30). */
  haAfterSeconds: s.int({ min: 1, max: 30 * 24 * 3600 }),
  /** Unpinned VMs: only nodes with these labels (as a pod's nodeSelector). */
  nodeSelector: labelsSchema,
  /** Unpinned VMs: node affinity as a pod's (`required` selectors, `preferred` weights); pod affinity does not apply. */
  affinity: s.object({ nodeAffinity: nodeAffinitySchema }),
  /** Node taints it accepts (as a pod's tolerations). */
  tolerations: s.array(tolerationSchema, { maxItems: 64 }),
  /** Virtual CPUs (default 1). */
  cpus: s.int({ min: 1, max: 64 }),
  /** Guest memory (default 256Mi), 64Mi … 256Gi. */
  memory: s.quantity(),
  /** Direct kernel boot (or bootDisk: one of the two). */
  kernel: s.object({
    ...bootFileFields,
    /** The kernel command line; orc appends `console=ttyS0` and the guest's addresses (`orc.ipv6=…`, `orc.ipv4=…`). */
    cmdline: s.string({ maxLength: 2048 }),
  }),
  initrd: s.object(bootFileFields),
  /** Disk boot: the firmware (SeaBIOS) boots this disk of spec.disks (its boot loader, its kernel) instead of a given kernel. */
  bootDisk: s.string({ pattern: VM_DISK_NAME, patternName: 'a disk name' }),
  /** pod (default): a tap in the VM's own network namespace, bridged to its pod address; none: no NIC. */
  network: s.enum('pod', 'none'),
  /** Always (default): keep it running, boot it again when it powers off; Halted: stopped, keeping its node. */
  runStrategy: s.enum('Always', 'Halted'),
  /** A console line that says the guest is up: the `wait-console-marker` unit waits for it. */
  readyMarker: s.string({ minLength: 1, maxLength: 256 }),
  /** ACPI power-down, then this long before qemu is killed (default 30). */
  terminationGracePeriodSeconds: s.int({ min: 0, max: 3600 }),
  /** virtio-blk drives in this order (/dev/vda, vdb, …), each with its name as serial. */
  disks: s.array(vmDisk, { maxItems: VM_MAX_DISKS, uniqueBy: 'name' }),
  /** A cloud-init NoCloud seed (a vfat drive labelled CIDATA, serial `cidata`) after the disks. */
  cloudInit: vmCloudInit,
})

type DiskLike = { name?: unknown; emptyDisk?: { size?: unknown }; image?: unknown; volume?: unknown }

function diskIssues(disks: readonly DiskLike[] | undefined): Issue[] {
  const issues: Issue[] = []
  for (const [i, d] of (disks ?? []).entries()) {
    const path = `spec.disks[${i}]`
    const n = (d.emptyDisk !== undefined ? 1 : 0) + (d.image !== undefined ? 1 : 0) + (d.volume !== undefined ? 1 : 0)
    if (n !== 1) issues.push({ path, rule: 'must give exactly one of emptyDisk ({size}), image (a disk file of the node image stores) or volume ({name})' })
    if (d.name === VM_SEED_SERIAL) issues.push({ path: `${path}.name`, rule: `${VM_SEED_SERIAL} is the cloud-init seed's serial` })
    if (d.emptyDisk?.size !== undefined) {
      let bytes: number | undefined
      try {
        bytes = parseQuantity(d.emptyDisk.size as string)
      } catch (err) {
        issues.push({ path: `${path}.emptyDisk.size`, rule: (err as Error).message })
      }
      if (bytes !== undefined && !(bytes >= VM_MIN_DISK_BYTES && bytes <= VM_MAX_DISK_BYTES))
        issues.push({ path: `${path}.emptyDisk.size`, rule: 'must be between 1Mi and 64Ti' })
    }
  }
  return issues
}

function bootFileIssues(f: { image?: unknown; path?: unknown } | undefined, path: string): Issue[] {
  if (f === undefined) return []
  const n = (f.image !== undefined ? 1 : 0) + (f.path !== undefined ? 1 : 0)
  if (n !== 1) return [{ path, rule: 'must give exactly one of image (a file of the node image store) or path (under /boot or an image store)' }]
  if (typeof f.path === 'string' && f.path.split('/').includes('..')) return [{ path: `${path}.path`, rule: 'must not contain ..' }]
  return []
}

/** Whether cloud-init user-data is a `#cloud-config` document (orc merges into it) rather than a script or MIME (used as is). */
export function isCloudConfig(userData: string): boolean {
  return /^#cloud-config[ \t]*\r?(\n|$)/.test(userData)
}

/** The guest memory in bytes (spec.memory or the default). */
export function vmMemoryBytes(spec: { memory?: string | number } | undefined): number {
  return parseQuantity(spec?.memory ?? VM_DEFAULT_MEMORY)
}

/**
 * Memory a VM holds on its node beyond its guest's: qemu itself (its binary, heap and, under TCG,
 * the translation cache). Measured here: an idle TCG guest of 256Mi held 100 MiB of RSS outside its
 * guest RAM (89 MiB PSS); 128Mi leaves headroom (docs/runtimes.md, "Capacity").
 */
export const VM_MEMORY_OVERHEAD_BYTES = 128 * 2 ** 20

/** The node that runs a VM: its pin (`spec.node`), else its binding (`status.node`), else none yet. */
export function vmNodeOf(v: { spec?: { node?: unknown }; status?: { node?: unknown } } | undefined): string | undefined {
  const pin = v?.spec?.node
  if (typeof pin === 'string' && pin !== '') return pin
  const bound = v?.status?.node
  return typeof bound === 'string' && bound !== '' ? bound : undefined
}

/** Whether its node wants the VM running (controller:vm): pinned or bound to a node and not `runStrategy: Halted`. */
export function vmWantsToRun(v: { spec?: { node?: unknown; runStrategy?: unknown }; status?: { node?: unknown } } | undefined): boolean {
  return vmNodeOf(v) !== undefined && v?.spec?.runStrategy !== 'Halted'
}

/**
 * What a VM holds of its node while it runs: its vCPUs as whole cores (millicores) and its guest
 * memory plus qemu's allowance (bytes). Throws on an unreadable memory quantity.
 */
export function vmNodeRequests(spec: { cpus?: unknown; memory?: string | number } | undefined): { cpu: number; memory: number } {
  const cpus = typeof spec?.cpus === 'number' && Number.isInteger(spec.cpus) && spec.cpus > 0 ? spec.cpus : 1
  return { cpu: cpus * 1000, memory: Math.ceil(vmMemoryBytes(spec)) + VM_MEMORY_OVERHEAD_BYTES }
}

export const virtualMachineKind = defineKind({
  kind: 'VirtualMachine',
  plural: 'virtualmachines',
  aliases: ['virtualmachine', 'vm', 'vms'],
  namespaced: true,
  spec: vmSpec,
  status: s.open<VirtualMachineStatus>(),
  owned: [
    { path: 'status', owner: 'controller:vm' },
    { path: 'status.node', owner: 'controller:scheduler' },
    { path: 'status.scheduling', owner: 'controller:scheduler' },
  ],
  columns: [
    { header: 'NAME', value: (o) => o.metadata.name },
    { header: 'PHASE', value: (o) => text(o.status?.phase, 'Pending') },
    { header: 'NODE', value: (o) => text(vmNodeOf(o)) },
    { header: 'IP', value: (o) => text(o.status?.ipv6) },
    { header: 'CPUS', value: (o) => String(o.spec?.cpus ?? 1), wide: true },
    { header: 'MEMORY', value: (o) => String(o.spec?.memory ?? VM_DEFAULT_MEMORY), wide: true },
    { header: 'ACCEL', value: (o) => text(o.status?.accel), wide: true },
    { header: 'REV', value: (o) => text(o.status?.runningRevision === undefined ? undefined : String(o.status.runningRevision)), wide: true },
    { header: 'POLICY', value: (o) => (o.spec?.node ? 'pinned' : text(o.spec?.policy, 'best-effort')), wide: true },
    { header: 'AGE', value: (o, now) => age(createdAt(o), now) },
  ],
  check(obj) {
    const issues: Issue[] = []
    const spec = obj.spec
    if (spec === undefined) return [{ path: 'spec', rule: 'is required (kernel or bootDisk)' }]
    if (spec.kernel === undefined && spec.bootDisk === undefined)
      issues.push({ path: 'spec.kernel', rule: 'is required (direct kernel boot), or give bootDisk (the firmware boots that disk)' })
    if (spec.kernel !== undefined && spec.bootDisk !== undefined)
      issues.push({ path: 'spec.bootDisk', rule: 'give kernel (direct kernel boot) or bootDisk (the firmware boots the disk), not both' })
    if (spec.initrd !== undefined && spec.kernel === undefined) issues.push({ path: 'spec.initrd', rule: 'needs kernel (a boot disk brings its own)' })
    if (spec.bootDisk !== undefined && !(spec.disks ?? []).some((d) => d.name === spec.bootDisk))
      issues.push({ path: 'spec.bootDisk', rule: `names no disk of spec.disks (${JSON.stringify(spec.bootDisk)})` })
    issues.push(...schedulingIssues(spec, 'spec'))
    issues.push(...bootFileIssues(spec.kernel, 'spec.kernel'), ...bootFileIssues(spec.initrd, 'spec.initrd'))
    if (spec.memory !== undefined) {
      let bytes: number | undefined
      try {
        bytes = parseQuantity(spec.memory)
      } catch (err) {
        issues.push({ path: 'spec.memory', rule: (err as Error).message })
      }
      if (bytes !== undefined && (bytes < VM_MIN_MEMORY_BYTES || bytes > VM_MAX_MEMORY_BYTES))
        issues.push({ path: 'spec.memory', rule: 'must be between 64Mi and 256Gi' })
    }
    if (typeof spec.kernel?.cmdline === 'string' && /[\n\0]/.test(spec.kernel.cmdline)) issues.push({ path: 'spec.kernel.cmdline', rule: 'must be one line' })
    issues.push(...diskIssues(spec.disks))
    const ci = spec.cloudInit
    if (ci?.sshAuthorizedKeys !== undefined && ci.userData !== undefined && !isCloudConfig(ci.userData))
      issues.push({
        path: 'spec.cloudInit.sshAuthorizedKeys',
        rule: 'needs userData that is #cloud-config (or none): the keys are merged into it; put them in your own user-data otherwise',
      })
    return issues
  },
})

// Interfaces (not aliases) so that type errors name them.
export interface VirtualMachine extends ObjectOfKind<typeof virtualMachineKind> {}
export type VirtualMachineSpec = NonNullable<VirtualMachine['spec']>
